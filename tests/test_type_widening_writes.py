"""Writing to tables that support type widening (``typeWidening`` / ``typeWidening-preview``).

Rows are appended, changed and compacted under the table's current (widened) types, and the
``delta.typeChanges`` metadata Delta recorded is kept through schema changes. With type widening
enabled, a write with ``merge_schema`` widens a column within its type's family, and ALTER
COLUMN ... TYPE to any wider type, each change recorded as Delta records it; files written before
are read cast. A type change where type widening is not enabled, or not to a wider type, is
refused, naming the column, before anything is written.
"""

from __future__ import annotations

import datetime
import decimal
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay import DeltaTable, write_table
from replay.cli.main import main as cli_main
from replay.maintenance.alter_columns import ColumnChangeError
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.schema import PrimitiveType
from replay.protocol.type_widening import is_automatic_widening, is_widening
from replay.txn.schema_merge import SchemaMismatchError
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
    with pytest.raises(UnsupportedTableFeatureError, match=r"column a: short -> integer of table") as caught:
        write_table(uri, wider, mode="append", merge_schema=True)
    assert caught.value.features == ["typeWidening"]
    assert DeltaTable(uri).version() == version
    assert sorted(p.name for p in Path(uri).glob("*.parquet")) == files
    plain = str(tmp_path / "plain")  # without type widening, Delta's integral widening applies
    write_table(plain, pa.table({"a": pa.array([1], pa.int16())}))
    write_table(plain, wider, mode="append", merge_schema=True)
    assert sorted(DeltaTable(plain).to_pyarrow_table().column("a").to_pylist()) == [1, 70_000]


def test_writes_and_alter_widen_columns_and_record_the_changes(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    first = pa.table(
        {
            "a": pa.array([1, 2], pa.int16()),
            "f": pa.array([0.5, 1.5], pa.float32()),
            "d": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(5, 2)),
            "day": pa.array([datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)]),
            "n": pa.array([10, 20], pa.int32()),
            "s": pa.array([{"x": 1}, {"x": 2}], pa.struct([("x", pa.int32())])),
            "xs": pa.array([[1], [2, 3]], pa.list_(pa.int32())),
        }
    )
    settings = {"delta.enableTypeWidening": "true", "delta.enableChangeDataFeed": "true"}
    write_table(uri, first, configuration=settings)
    assert "typeWidening" in (DeltaTable(uri).protocol().writer_features or [])
    wider = pa.table(
        {
            "a": pa.array([70_000], pa.int32()),
            "f": pa.array([1e300], pa.float64()),
            "d": pa.array([decimal.Decimal("12345.125")], pa.decimal128(8, 3)),
            "day": pa.array([datetime.datetime(2024, 1, 3, 12, 30)], pa.timestamp("us")),
            "n": pa.array([30], pa.int32()),
            "s": pa.array([{"x": 2**40}], pa.struct([("x", pa.int64())])),
            "xs": pa.array([[2**40]], pa.list_(pa.int64())),
        }
    )
    version = DeltaTable(uri).version()
    with pytest.raises(SchemaMismatchError):  # without merge_schema the schema stays as it is
        write_table(uri, wider, mode="append")
    assert DeltaTable(uri).version() == version
    write_table(uri, wider, mode="append", merge_schema=True)
    schema = DeltaTable(uri).snapshot.schema
    assert [f.type.name for f in schema.fields[:5]] == [
        "integer",
        "double",
        "decimal(8,3)",
        "timestamp_ntz",
        "integer",
    ]
    changes = type_changes(uri)
    assert changes["a"] == [{"toType": "integer", "fromType": "short"}]
    assert changes["d"] == [{"toType": "decimal(8,3)", "fromType": "decimal(5,2)"}]
    assert changes["day"] == [{"toType": "timestamp_ntz", "fromType": "date"}]
    assert changes["xs"] == [{"toType": "long", "fromType": "integer", "fieldPath": "element"}]
    nested = orjson.loads(DeltaTable(uri).snapshot.metadata.schema_string or "{}")["fields"][5]
    assert nested["type"]["fields"][0]["metadata"]["delta.typeChanges"] == [
        {"toType": "long", "fromType": "integer"}
    ]

    table = DeltaTable(uri)
    with pytest.raises(
        ColumnChangeError, match=r"^\[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP\].* n from integer to short"
    ):
        table.alter.change_column_type("n", "smallint")
    with pytest.raises(ColumnChangeError, match="Unknown type 'int128'"):
        table.alter.change_column_type("n", "int128")
    table.alter.change_column_type("n", "double")  # not by itself in a write: only by ALTER
    assert type_changes(uri)["n"] == [{"toType": "double", "fromType": "integer"}]
    assert DeltaTable(uri).history(1)[0]["operation"] == "CHANGE COLUMN"
    assert cli_main(["alter", uri, "--column-type", "a=bigint", "--json"]) == 0  # a second change adds
    DeltaTable(uri).alter.change_column_type("d", pa.decimal128(10, 3))  # a pyarrow type
    assert type_changes(uri)["d"][-1] == {"toType": "decimal(10,3)", "fromType": "decimal(8,3)"}
    assert [c["toType"] for c in type_changes(uri)["a"]] == ["integer", "long"]

    rows = DeltaTable(uri).to_pyarrow_table().sort_by("n")
    assert rows.column("a").to_pylist() == [1, 2, 70_000]
    assert rows.column("n").to_pylist() == [10.0, 20.0, 30.0]
    assert rows.column("day").to_pylist()[0] == datetime.datetime(2024, 1, 1)
    assert rows.column("d").to_pylist()[0] == decimal.Decimal("1.250")
    assert rows.column("xs").to_pylist() == [[1], [2, 3], [2**40]]
    assert DeltaTable(uri).delete("a = 2")["numDeletedRows"] == 1  # statistics of the narrower files
    assert sorted(DeltaTable(uri).to_pyarrow_table().column("a").to_pylist()) == [1, 70_000]
    changes_feed = DeltaTable(uri).load_cdf(starting_version=0)  # across the widening, read wide
    assert sorted(changes_feed.column("_change_type").to_pylist()) == ["delete", *["insert"] * 3]
    assert changes_feed.schema.field("a").type == pa.int64()

    plain = str(tmp_path / "plain")  # no type widening: ALTER refuses, naming how to turn it on
    write_table(plain, first.select(["n"]))
    with pytest.raises(ColumnChangeError, match=r"delta\.enableTypeWidening"):
        DeltaTable(plain).alter.change_column_type("n", "bigint")


def test_a_merge_with_schema_evolution_widens_what_its_star_clauses_assign(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    target = pa.table(
        {"id": pa.array([1, 2], pa.int32()), "n": pa.array([10, 20], pa.int16()), "keep": [1, 2]}
    )
    write_table(
        uri, target, configuration={"delta.enableTypeWidening": "true", "delta.enableRowTracking": "true"}
    )
    source = pa.table({"id": pa.array([2, 3], pa.int64()), "n": pa.array([70_000, 30], pa.int32())})
    version = DeltaTable(uri).version()
    with pytest.raises(ValueError, match="n"):  # without schema evolution: cast to the table's short
        DeltaTable(uri).merge(source, "t.id = s.id", "s", "t").when_matched_update_all().execute()
    assert DeltaTable(uri).version() == version
    merged = DeltaTable(uri).merge(source, "t.id = s.id", "s", "t", merge_schema=True)
    merged.when_matched_update_all().when_not_matched_insert_all().execute()
    changes = type_changes(uri)
    assert changes["n"] == [{"toType": "integer", "fromType": "short"}]
    assert changes["id"] == [{"toType": "long", "fromType": "integer"}]
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "n": 10, "keep": 1},
        {"id": 2, "n": 70_000, "keep": 2},
        {"id": 3, "n": 30, "keep": None},
    ]
    explicit = DeltaTable(uri).merge(
        pa.table({"id": [1], "n": [5]}), "t.id = s.id", "s", "t", merge_schema=True
    )
    explicit.when_matched_update({"keep": "s.n"}).execute()  # no star clause: no widening, keep stays long
    assert DeltaTable(uri).snapshot.schema.field("keep").type.name == "long"


# -- the rule, as a property ---------------------------------------------------------------------
_ORDERED = ["byte", "short", "integer", "long"]
_PRIMITIVES = [*_ORDERED, "float", "double", "date", "timestamp_ntz", "timestamp", "string", "boolean"]
_TYPES = st.one_of(
    st.sampled_from(_PRIMITIVES),
    st.builds(lambda p, s: f"decimal({p},{min(s, p)})", st.integers(1, 38), st.integers(0, 38)),
)


def _digits(name: str) -> tuple[int, int] | None:
    """(digits before the point, digits after) a type holds exactly, for integral and decimal types."""
    if name in _ORDERED:
        return ({"byte": 3, "short": 5, "integer": 10, "long": 20}[name], 0)
    if name.startswith("decimal("):
        precision, scale = (int(x) for x in name[8:-1].split(","))
        return (precision - scale, scale)
    return None


@given(_TYPES, _TYPES)
def test_widening_holds_every_value_of_the_narrower_type(before: str, after: str) -> None:
    widening = is_widening(PrimitiveType(before), PrimitiveType(after))
    expected = False
    if before != after:
        if before in _ORDERED and after in _ORDERED:
            expected = _ORDERED.index(before) < _ORDERED.index(after)
        elif (before, after) in {("float", "double"), ("date", "timestamp_ntz")}:
            expected = True
        elif after == "double":
            expected = before in ("byte", "short", "integer")
        elif after.startswith("decimal(") and (old := _digits(before)) is not None:
            new = _digits(after)
            assert new is not None
            # integral types widen only into decimals as wide as Parquet's INT32 / INT64 readers need
            whole = max(old[0], 10) if before in ("byte", "short", "integer") else old[0]
            expected = new[0] >= whole and new[1] >= old[1]
    assert widening == expected
    if is_automatic_widening(PrimitiveType(before), PrimitiveType(after)):
        assert widening and (before in _ORDERED) == (after in _ORDERED)
