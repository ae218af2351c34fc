"""Column names Delta refuses without column mapping (`` ,;{}()\\n\\t=``), refused by every writer.

Delta checks the names of every metadata it commits (``SchemaUtils.checkSchemaFieldNames`` for the
data columns and their nested fields, ``checkFieldNames`` for the partition columns); a table
created with such a name would trip Delta and other readers. These tests write through
``write_table`` and through Spark's ``df.write.format("deltalog")``, both of which plan their writes
with ``plan_write``; nothing may be committed or left behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay.delta_log import DeltaLog
from replay.protocol.actions import Metadata
from replay.protocol.column_names import (
    INVALID_CHARACTERS,
    InvalidColumnNameError,
    check_column_names,
    nested_field_names,
)
from replay.protocol.schema import ArrayType, MapType, PrimitiveType, StructField, StructType
from replay.spark import register
from replay.txn.write import write_table

DATA_MESSAGE = (
    "[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES] Found invalid character(s) among ' ,;{{}}()\\n\\t=' in the "
    "column names of your schema. Invalid column names: {names}. Please use other characters and try "
    "again. (table {table})"
)
PARTITION_MESSAGE = (
    '[DELTA_INVALID_PARTITION_COLUMN_NAME] Found partition columns having invalid character(s) among " '
    ',;{{}}()\\n\\t=". Please change the name to your partition columns. Invalid partition columns: '
    "{names}. (table {table})"
)


def refused(path: Path, data: pa.Table, **options: Any) -> str:
    """The message of the error ``write_table`` raises; nothing may have been written."""
    before = sorted(path.rglob("*")) if path.exists() else []
    with pytest.raises(InvalidColumnNameError) as caught:
        write_table(str(path), data, **options)
    assert (sorted(path.rglob("*")) if path.exists() else []) == before
    return str(caught.value)


def test_a_new_table_with_a_name_delta_refuses(tmp_path: Path) -> None:
    path = tmp_path / "t"
    message = refused(path, pa.table({"id": [1], "first name": ["a"], "x=y": [2]}))
    assert message == DATA_MESSAGE.format(names="first name, x=y", table=f"file://{path}")
    message = refused(path, pa.table({"id": [1], "a\tb": [1], "c\nd": [2]}))
    assert message.splitlines() == [DATA_MESSAGE.format(names="a\\tb, c\\nd", table=f"file://{path}")]


def test_a_partition_column_delta_refuses(tmp_path: Path) -> None:
    path = tmp_path / "t"
    message = refused(path, pa.table({"id": [1], "p q": ["a"]}), partition_by=["p q"])
    assert message == PARTITION_MESSAGE.format(names="p q", table=f"file://{path}")
    assert not DeltaLog.for_table(str(path)).table_exists()


def test_a_nested_field_delta_refuses(tmp_path: Path) -> None:
    path = tmp_path / "t"
    nested = pa.table({"id": [1], "s": [{"ok": 1, "not ok": 2}]})
    message = refused(path, nested)
    assert message == DATA_MESSAGE.format(names="s.not ok", table=f"file://{path}")
    in_a_list = pa.table(
        {"id": [1], "l": pa.array([[{"a(b)": 1}]], pa.list_(pa.struct([("a(b)", pa.int64())])))}
    )
    assert "Invalid column names: l.element.a(b)." in refused(path, in_a_list)


def test_schema_evolution_and_overwrite_refuse_such_names(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_table(str(path), pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    added = pa.table({"id": [2], "p": ["b"], "new;col": [3]})
    message = refused(path, added, merge_schema=True)
    assert message == DATA_MESSAGE.format(names="new;col", table=f"file://{path}")
    message = refused(
        path, pa.table({"id": [1], "p": ["a"], "{p}": [1]}), mode="overwrite", overwrite_schema=True
    )
    assert "Invalid column names: {p}." in message
    message = refused(
        path,
        pa.table({"id": [1], "q r": ["a"]}),
        mode="overwrite",
        overwrite_schema=True,
        partition_by=["q r"],
    )
    assert message.startswith("[DELTA_INVALID_PARTITION_COLUMN_NAME]")
    write_table(str(path), pa.table({"id": [4], "p": ["c"], "fine_name": [5]}), merge_schema=True)
    assert DeltaLog.for_table(str(path)).latest_version() == 1


def test_column_mapping_tables_allow_any_name() -> None:
    schema = StructType(
        [StructField("a b", PrimitiveType("long")), StructField("p(1)", PrimitiveType("string"))]
    )
    metadata = Metadata(schema_string=schema.to_json(), partition_columns=["p(1)"])
    with pytest.raises(InvalidColumnNameError, match=r"Invalid column names: a b\. "):
        check_column_names(metadata, "t")
    for mode in ("name", "id"):
        mapped = Metadata(
            schema_string=schema.to_json(),
            partition_columns=["p(1)"],
            configuration={"delta.columnMapping.mode": mode},
        )
        check_column_names(mapped, "t")


def test_nested_names_are_spelled_as_delta_spells_them() -> None:
    inner = StructType([StructField("x.y", PrimitiveType("long"))])
    schema = StructType(
        [
            StructField("s", inner),
            StructField("m", MapType(PrimitiveType("string"), inner)),
            StructField("a", ArrayType(ArrayType(inner))),
        ]
    )
    assert list(nested_field_names(schema)) == [
        "s",
        "s.`x.y`",
        "m",
        "m.value.`x.y`",
        "a",
        "a.element.element.`x.y`",
    ]


@given(st.text(min_size=1, max_size=12))
def test_a_name_is_refused_exactly_when_it_holds_a_reserved_character(name: str) -> None:
    schema = StructType([StructField("id", PrimitiveType("long")), StructField(name, PrimitiveType("long"))])
    metadata = Metadata(schema_string=schema.to_json())
    if INVALID_CHARACTERS.isdisjoint(name):
        check_column_names(metadata, "t")
    else:
        with pytest.raises(InvalidColumnNameError):
            check_column_names(metadata, "t")


@pytest.mark.spark
def test_spark_writes_refuse_such_names_and_userinfo_secrets(spark: Any, tmp_path: Path) -> None:
    register(spark)
    path = tmp_path / "t"
    frame = spark.createDataFrame([(1, "a")], "id long, `first name` string")
    with pytest.raises(Exception) as caught:
        frame.write.format("deltalog").mode("append").save(str(path))
    assert "[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES]" in str(caught.value)
    assert "Invalid column names: first name." in str(caught.value)
    assert not DeltaLog.for_table(str(path)).table_exists()
    partitioned = spark.createDataFrame([(1, "a")], "id long, `p q` string")
    with pytest.raises(Exception) as caught:
        partitioned.write.format("deltalog").mode("append").option("partitionBy", "p q").save(str(path))
    assert "[DELTA_INVALID_PARTITION_COLUMN_NAME]" in str(caught.value)
    uri = "memory://AKIDEXAMPLE:SeKrA1/SeKrB2+SeKrC3@SeKrD4@bucket/t"  # credentials in a URI: refused
    for attempt in (
        lambda: spark.createDataFrame([(1,)], "id long").write.format("deltalog").mode("append").save(uri),
        lambda: spark.read.format("deltalog").load(uri).collect(),
    ):
        with pytest.raises(Exception) as caught:
            attempt()
        assert "carries login details" in str(caught.value)
        assert "SeKr" not in str(caught.value)
