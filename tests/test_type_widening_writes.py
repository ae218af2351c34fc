"""Writing to tables that support type widening (``typeWidening`` / ``typeWidening-preview``).

Rows are appended, changed and compacted under the table's current (widened) types, and the
``delta.typeChanges`` metadata Delta recorded is kept through schema changes. A schema change
that would change a column's type is refused, naming the column, before anything is written:
Delta requires such a change to be recorded, which this writer does not do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from replay import DeltaTable, write_table
from replay.protocol.errors import UnsupportedTableFeatureError
from tests.paths import GOLDEN_ROOT


def type_changes(uri: str) -> dict[str, object]:
    fields = orjson.loads(DeltaTable(uri).snapshot.metadata.schema_string or "{}")["fields"]
    return {f["name"]: f["metadata"].get("delta.typeChanges") for f in fields if f["metadata"]}


def test_a_widened_table_takes_appends_changes_and_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(GOLDEN_ROOT / "delta-spark-golden/type-widening/delta", path)
    uri = str(path)
    before = DeltaTable(uri).to_pyarrow_table()
    recorded = type_changes(uri)
    assert recorded["byte_long"]  # what Delta recorded when it widened the column
    first = before.slice(0, 1)
    write_table(
        uri, first.append_column("extra", pa.array([7], pa.int64())), mode="append", merge_schema=True
    )
    assert type_changes(uri) == recorded  # kept through the schema change
    key = before.column("byte_long")[0].as_py()
    deleted = DeltaTable(uri).delete(f"byte_long = {key}")
    assert deleted["numDeletedRows"] == 1 + sum(v == key for v in before.column("byte_long").to_pylist())
    DeltaTable(uri).optimize.compact()
    after = DeltaTable(uri).to_pyarrow_table()
    assert after.schema.field("byte_long").type == pa.int64()  # the widened type, in every new file
    expected = [r for r in before.to_pylist() if r["byte_long"] != key]
    got = after.drop_columns(["extra"]).to_pylist()
    assert sorted(map(str, got)) == sorted(map(str, expected))


def test_a_type_change_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": pa.array([1], pa.int16()), "b": [1]}))
    DeltaTable(uri).alter.add_feature("typeWidening", allow_protocol_versions_increase=True)
    files = sorted(p.name for p in Path(uri).glob("*.parquet"))
    version = DeltaTable(uri).version()
    wider = pa.table({"a": pa.array([70_000], pa.int32())})
    with pytest.raises(
        UnsupportedTableFeatureError, match=r"column a of table .* from short to integer"
    ) as caught:
        write_table(uri, wider, mode="append", merge_schema=True)
    assert caught.value.features == ["typeWidening"]
    assert DeltaTable(uri).version() == version
    assert sorted(p.name for p in Path(uri).glob("*.parquet")) == files
    plain = str(tmp_path / "plain")  # without type widening, Delta's integral widening applies
    write_table(plain, pa.table({"a": pa.array([1], pa.int16())}))
    write_table(plain, wider, mode="append", merge_schema=True)
    assert sorted(DeltaTable(plain).to_pyarrow_table().column("a").to_pylist()) == [1, 70_000]
