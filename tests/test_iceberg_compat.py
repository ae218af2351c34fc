"""Writing to tables with Iceberg compatibility (``icebergCompatV1`` / ``icebergCompatV2``, the
tables Delta's UniForm publishes as Iceberg).

Every file any operation writes (appends, overwrites, DELETE, UPDATE, MERGE, OPTIMIZE, Spark)
must carry Parquet field ids, the ids of arrays' and maps' implicit fields under V2 as the
schema's ``parquet.field.nested.ids`` record them, and the partition columns after the data
columns; every ``add`` must count its records. Rows are compared with delta-rs's query engine.
Tables that break the rules are refused with Delta's errors and nothing is committed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import deltalake
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import DeltaTable, IcebergCompatError, write_table
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.protocol.column_mapping import (
    MAX_COLUMN_ID_KEY,
    NESTED_IDS_KEY,
    assign_column_mapping,
    data_file_schema,
)
from replay.protocol.iceberg_compat import check_table
from replay.protocol.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from tests.dml_cases import normalised, our_rows, rust_rows
from tests.paths import GOLDEN_ROOT

V1_TABLE = GOLDEN_ROOT / "dat" / "iceberg_compat_v1" / "delta"
V2_KEY = "delta.enableIcebergCompatV2"
V2 = {V2_KEY: "true", "delta.universalFormat.enabledFormats": "iceberg"}
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "p": ["a", "b", "a", "c"],
        "tags": [[1, 2], [3], [], None],
        "attrs": pa.array(
            [[("k", [1])], [], [("x", [2, 3])], None], pa.map_(pa.string(), pa.list_(pa.int32()))
        ),
    }
)


def field_ids(parquet_type: Any) -> dict[str, int]:
    """Every field id of an Arrow type's fields by dotted path (``element``, ``key``, ``value``)."""
    found: dict[str, int] = {}

    def walk(data_type: pa.DataType, path: str) -> None:
        children: list[pa.Field] = []
        if pa.types.is_struct(data_type):
            children = list(data_type)
        elif pa.types.is_map(data_type):
            children = [data_type.key_field, data_type.item_field]
        elif pa.types.is_list(data_type):
            children = [data_type.value_field]
        for child in children:
            name = {"key": "key", "value": "value"}.get(child.name, child.name)
            record(child, f"{path}.{name}")

    def record(field: pa.Field, path: str) -> None:
        raw = (field.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            found[path] = int(raw)
        walk(field.type, path)

    for field in parquet_type:
        record(field, field.name)
    return found


def check_files(uri: str) -> list[str]:
    """Check every data file of the latest version as IcebergCompat requires; its paths."""
    table = DeltaTable(uri)
    metadata = table.snapshot.metadata
    schema = metadata.schema
    partitions = list(metadata.partition_columns)
    expected = field_ids(data_file_schema(schema, metadata.configuration))
    physical = {f.name: f.physical_name for f in schema.fields}
    data = [physical[f.name] for f in schema.fields if f.name not in partitions]
    paths = []
    tags = {"ICEBERG_COMPAT_VERSION": "2"} if metadata.configuration.get(V2_KEY) == "true" else None
    for file in table.snapshot.files():
        assert file.num_records is not None, file.path
        assert file.tags == tags, file.path  # as Delta tags the files it writes under V2
        stored = pq.read_schema(Path(uri) / file.path)
        values = [physical[c] for c in partitions]
        columns = stored.names[: len(stored.names) - len(values)]
        assert stored.names[len(columns) :] == values, file.path  # the partition values, last
        assert columns == [name for name in data if name in columns], file.path  # older files: fewer
        written = field_ids(stored)
        present = {k: v for k, v in expected.items() if k.split(".")[0] in stored.names}
        assert {k: v for k, v in written.items() if k in expected} == present, file.path
        paths.append(file.path)
    return paths


def test_every_operation_on_a_table_delta_made_keeps_its_rules(tmp_path: Path) -> None:
    uri = str(shutil.copytree(V1_TABLE, tmp_path / "t"))
    new = pa.table(
        {
            "letter": ["z", "y"],
            "int": pa.array([7, 8], pa.int64()),
            "date": pa.array([None, None], pa.date32()),
        }
    )
    write_table(uri, new, mode="append")
    table = DeltaTable(uri)
    assert table.delete("int = 7")["numDeletedRows"] == 1
    assert table.update({"int": "int + 1"}, predicate="letter = 'a'")["numUpdatedRows"] > 0
    source = pa.table(
        {
            "letter": ["b", "q"],
            "int": pa.array([1000, 9], pa.int64()),
            "date": pa.array([None, None], pa.date32()),
        }
    )
    merged = (
        table.merge(source, "t.letter = s.letter", source_alias="s", target_alias="t")
        .when_matched_update({"int": "s.int"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert merged["numTargetRowsInserted"] == 1
    table.optimize.compact()
    assert len(check_files(uri)) == 1
    assert our_rows(uri) == rust_rows(uri)
    assert {"letter": "q", "int": 9, "date": None} in our_rows(uri)


def test_a_new_v2_table_holds_partition_values_and_nested_ids_in_every_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["p"], configuration=V2)
    table = DeltaTable(uri)
    metadata = table.snapshot.metadata
    assert metadata.configuration["delta.columnMapping.mode"] == "name"  # set for a new table, as Delta
    protocol = table.snapshot.protocol
    assert {"columnMapping", "icebergCompatV2"} <= set(protocol.writer_features or ())
    fields = {f.name: f for f in metadata.schema.fields}
    tags, attrs = fields["tags"], fields["attrs"]
    assert set(tags.metadata[NESTED_IDS_KEY]) == {f"{tags.physical_name}.element"}
    assert set(attrs.metadata[NESTED_IDS_KEY]) == {
        f"{attrs.physical_name}.key",
        f"{attrs.physical_name}.value",
        f"{attrs.physical_name}.value.element",
    }
    column_ids = {f.field_id for f in metadata.schema.fields}
    nested = [*tags.metadata[NESTED_IDS_KEY].values(), *attrs.metadata[NESTED_IDS_KEY].values()]
    assert len(set(nested)) == len(nested) and not set(nested) & column_ids
    assert int(metadata.configuration[MAX_COLUMN_ID_KEY]) == max([*column_ids, *nested])
    check_files(uri)
    # rows move partition, are deleted, merged, compacted: every file still follows the rules
    table.update({"p": "'b'"}, predicate="id = 1")
    table.delete("id = 4")
    source = pa.table({"id": pa.array([2, 9], pa.int64()), "p": ["z", "a"]})
    (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"p": "s.p"})
        .when_not_matched_insert({"id": "s.id", "p": "s.p"})
        .execute()
    )
    table.optimize.compact()
    check_files(uri)
    expected = {1: "b", 2: "z", 3: "a", 9: "a"}
    assert {row["id"]: row["p"] for row in our_rows(uri)} == expected
    assert our_rows(uri) == rust_rows(uri)


def test_delta_rs_refuses_to_write_what_this_library_writes(tmp_path: Path) -> None:
    """The README's comparison: delta-rs does not write to these tables (it reads them)."""
    uri = str(tmp_path / "t")
    write_table(uri, ROWS.select(["id", "p"]), partition_by=["p"], configuration=V2)
    with pytest.raises(deltalake.exceptions.CommitFailedError, match="IcebergCompatV2"):
        deltalake.write_deltalake(uri, ROWS.select(["id", "p"]), mode="append")
    assert DeltaTable(uri).version() == 0
    assert our_rows(uri) == rust_rows(uri)


def test_new_columns_get_nested_ids_after_the_last_id(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS.select(["id", "tags"]), configuration=V2)
    before = DeltaTable(uri).snapshot.metadata
    last = int(before.configuration[MAX_COLUMN_ID_KEY])
    grown = ROWS.select(["id", "tags", "attrs"])
    write_table(uri, grown, mode="append", merge_schema=True)
    after = DeltaTable(uri).snapshot.metadata
    fields = {f.name: f for f in after.schema.fields}
    assert fields["tags"].metadata == {f.name: f for f in before.schema.fields}["tags"].metadata
    assert sorted(fields["attrs"].metadata[NESTED_IDS_KEY].values()) == [last + 2, last + 3, last + 4]
    assert fields["attrs"].field_id == last + 1
    assert int(after.configuration[MAX_COLUMN_ID_KEY]) == last + 4
    check_files(uri)
    assert our_rows(uri) == rust_rows(uri)


def _refused(uri: str, change: Any, rule: str) -> None:
    version = DeltaTable(uri).version() if (Path(uri) / "_delta_log").exists() else None
    with pytest.raises(IcebergCompatError, match="^" + re.escape(f"[{rule}]")) as raised:
        change()
    assert raised.value.error_class == rule
    if version is None:
        assert not (Path(uri) / "_delta_log").exists() or not list((Path(uri) / "_delta_log").glob("*.json"))
    else:
        assert DeltaTable(uri).version() == version


@pytest.mark.parametrize(
    ("configuration", "rule"),
    [
        (
            {**V2, "delta.enableIcebergCompatV1": "true"},
            "DELTA_ICEBERG_COMPAT_VIOLATION.VERSION_MUTUAL_EXCLUSIVE",
        ),
        (
            {**V2, "delta.columnMapping.mode": "none"},
            "DELTA_ICEBERG_COMPAT_VIOLATION.WRONG_REQUIRED_TABLE_PROPERTY",
        ),
        (
            {**V2, "delta.enableDeletionVectors": "true"},
            "DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_SHOULD_BE_DISABLED",
        ),
        ({"delta.enableIcebergCompatV1": "true"}, "DELTA_ICEBERG_COMPAT_VIOLATION.UNSUPPORTED_DATA_TYPE"),
        ({"delta.universalFormat.enabledFormats": "iceberg"}, "DELTA_UNIVERSAL_FORMAT_VIOLATION"),
    ],
)
def test_a_table_breaking_the_rules_is_not_created(
    tmp_path: Path, configuration: dict[str, str], rule: str
) -> None:
    uri = str(tmp_path / "t")
    _refused(uri, lambda: write_table(uri, ROWS, configuration=configuration), rule)


def test_rules_that_follow_from_the_previous_version(tmp_path: Path) -> None:
    plain = str(tmp_path / "plain")
    write_table(plain, ROWS, configuration={"delta.columnMapping.mode": "name"})
    enable_v2 = {"delta.enableIcebergCompatV2": "true"}
    _refused(
        plain,
        lambda: DeltaTable(plain).alter.set_table_properties(enable_v2),
        "DELTA_ICEBERG_COMPAT_VIOLATION.CHANGE_VERSION_NEED_REWRITE",
    )
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["p"], configuration=V2)
    _refused(
        uri,
        lambda: DeltaTable(uri).alter.set_table_properties({"delta.enableDeletionVectors": "true"}),
        "DELTA_ICEBERG_COMPAT_VIOLATION.DELETION_VECTORS_SHOULD_BE_DISABLED",
    )
    _refused(
        uri,
        lambda: write_table(uri, ROWS, mode="overwrite", partition_by=["id"], overwrite_schema=True),
        "DELTA_ICEBERG_COMPAT_VIOLATION.REPLACE_TABLE_CHANGE_PARTITION_NAMES",
    )


def test_an_add_without_a_record_count_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS.select(["id"]), configuration=V2)
    table = DeltaTable(uri)
    file = table.snapshot.files()[0]
    stats = orjson.loads(file.stats or "{}")
    stats.pop("numRecords")
    copy = AddFile(
        path=file.path,
        partition_values={},
        size=file.size,
        modification_time=1,
        data_change=False,
        stats=orjson.dumps(stats).decode(),
    )
    transaction = table.transaction(operation="WRITE")
    transaction.add_actions([copy])
    with pytest.raises(IcebergCompatError, match="requires all AddFiles to contain the numRecords"):
        transaction.commit()
    assert DeltaTable(uri).version() == table.version()


LONG = PrimitiveType("long")


@pytest.mark.parametrize(
    ("version", "data_type", "refused"),
    [
        (1, ArrayType(PrimitiveType("long"), True), "array"),
        (
            1,
            StructType([StructField("m", MapType(PrimitiveType("string"), PrimitiveType("long"), True))]),
            "map",
        ),
        (1, PrimitiveType("void"), "void"),
        (1, PrimitiveType("decimal(38,2)"), None),
        (2, StructType([StructField("v", PrimitiveType("variant"))]), "variant"),
        (2, MapType(PrimitiveType("string"), PrimitiveType("void"), True), "void"),
        (2, ArrayType(PrimitiveType("timestamp_ntz"), True), None),
        (2, PrimitiveType("decimal(10,0)"), None),
    ],
)
def test_the_types_each_version_allows(version: int, data_type: DataType, refused: str | None) -> None:
    configuration = {f"delta.enableIcebergCompatV{version}": "true", "delta.columnMapping.mode": "name"}
    schema = StructType([StructField("id", PrimitiveType("long")), StructField("c", data_type)])
    metadata = Metadata(id="t", configuration=configuration).with_schema(schema)
    protocol = Protocol(2, 7, writer_features=["columnMapping", f"icebergCompatV{version}"])
    if refused is None:
        check_table(protocol, metadata, None, "t")
        return
    with pytest.raises(
        IcebergCompatError, match=rf"UNSUPPORTED_DATA_TYPE.*data type {refused} .*\(column c\)"
    ):
        check_table(protocol, metadata, None, "t")


# -- nested ids, for any schema ---------------------------------------------------------------------
_PRIMITIVES = st.sampled_from([PrimitiveType(name) for name in ("long", "string", "integer", "double")])


def _types(depth: int) -> st.SearchStrategy[DataType]:
    if depth == 0:
        return _PRIMITIVES
    inner = _types(depth - 1)
    return st.one_of(
        _PRIMITIVES,
        inner.map(lambda t: ArrayType(t, True)),
        st.tuples(_PRIMITIVES, inner).map(lambda kv: MapType(kv[0], kv[1], True)),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda ts: StructType([StructField(f"f{i}", t) for i, t in enumerate(ts)])
        ),
    )


_SCHEMAS = st.lists(_types(3), min_size=1, max_size=4).map(
    lambda ts: StructType([StructField(f"c{i}", t) for i, t in enumerate(ts)])
)


def _nested_ids(data_type: DataType) -> list[int]:
    ids: list[int] = []
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            ids += list(field.metadata.get(NESTED_IDS_KEY, {}).values()) + _nested_ids(field.type)
    elif isinstance(data_type, ArrayType):
        ids += _nested_ids(data_type.element_type)
    elif isinstance(data_type, MapType):
        ids += _nested_ids(data_type.key_type) + _nested_ids(data_type.value_type)
    return ids


def _arrays_and_maps(data_type: DataType) -> int:
    """How many implicit fields (``element``, ``key``, ``value``) ``data_type`` has."""
    if isinstance(data_type, StructType):
        return sum(_arrays_and_maps(f.type) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return 1 + _arrays_and_maps(data_type.element_type)
    if isinstance(data_type, MapType):
        return 2 + _arrays_and_maps(data_type.key_type) + _arrays_and_maps(data_type.value_type)
    return 0


@settings(max_examples=60, deadline=None)
@given(_SCHEMAS, st.integers(min_value=0, max_value=50))
def test_nested_ids_are_unique_after_the_column_ids_and_written_to_files(
    schema: StructType, last: int
) -> None:
    assigned, top = assign_column_mapping(schema, last, nested_ids=True)
    column_ids = [f.field_id for f in _struct_fields(assigned)]
    nested = _nested_ids(assigned)
    assert len(nested) == _arrays_and_maps(schema)  # every implicit field, once
    assert sorted(column_ids + nested) == list(range(last + 1, top + 1))  # one run on from last
    again, top_again = assign_column_mapping(assigned, top, nested_ids=True)
    assert (again, top_again) == (assigned, top)  # ids once given are kept
    configuration = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true"}
    written = field_ids(data_file_schema(assigned, configuration))
    assert sorted(written.values()) == sorted(column_ids + nested)


def _struct_fields(data_type: DataType) -> list[StructField]:
    found: list[StructField] = []
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            found += [field, *_struct_fields(field.type)]
    elif isinstance(data_type, ArrayType):
        found += _struct_fields(data_type.element_type)
    elif isinstance(data_type, MapType):
        found += _struct_fields(data_type.key_type) + _struct_fields(data_type.value_type)
    return found


# -- Spark ---------------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_writes_keep_the_rules(spark: Any, tmp_path: Path) -> None:
    from replay.spark import DeltaTable as SparkTable
    from replay.spark import register

    register(spark)
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["p"], configuration=V2)
    frame = spark.createDataFrame(
        [(5, "a", [7], {"s": [8]}), (6, "d", None, None)],
        "id long, p string, tags array<long>, attrs map<string, array<int>>",
    )
    frame.write.format("deltalog").mode("append").save(uri)
    check_files(uri)
    assert normalised(DeltaTable(uri).to_pyarrow_table(), ["id"]) == [{"id": i} for i in (1, 2, 3, 4, 5, 6)]
    source = spark.createDataFrame([(1, "d"), (7, "a")], "id long, p string")
    (  # Spark's MERGE rewrites on the executors: a row moves partition, another is inserted
        SparkTable.forPath(spark, uri)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"p": "s.p"})
        .whenNotMatchedInsert(values={"id": "s.id", "p": "s.p"})
        .execute()
    )
    check_files(uri)
    expected = {1: "d", 2: "b", 3: "a", 4: "c", 5: "a", 6: "d", 7: "a"}
    assert {row["id"]: row["p"] for row in our_rows(uri)} == expected
    assert our_rows(uri) == rust_rows(uri)
