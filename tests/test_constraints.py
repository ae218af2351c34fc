"""Table constraints enforced on every written row: CHECK constraints, invariants, NOT NULL fields
(nested ones too) and generated columns, through ``write_table`` and the Spark writer.

Tables come from delta-rs (``alter.add_constraint``, ``DeltaTable.create`` with field metadata) and
from the golden tables; delta-rs, which enforces the same rules in ``write_deltalake``, is asked
to write the same rows: both must refuse the same ones and compute the same generated values.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.delta_log import DeltaLog
from replay.log.table_io import TableIO
from replay.protocol.actions import Metadata, Protocol
from replay.protocol.constraints import TableConstraints, table_constraints
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.schema import StructType
from replay.table import DeltaTable as ReplayTable
from replay.txn.constraint_checks import InvariantViolationError, compile_constraints
from replay.txn.write import write_table
from replay.txn.write_plan import WriteOptions, latest_snapshot, plan_write
from replay.txn.write_spec import FileWriteSpec

UTC = dt.UTC


def data_files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*.parquet"))


def rows(path: Path, *columns: str) -> list[tuple[Any, ...]]:
    table = DeltaTable(str(path)).to_pyarrow_table()
    return sorted((tuple(row[c] for c in columns) for row in table.to_pylist()), key=repr)


def refuses(write: Any) -> bool:
    try:
        write()
    except Exception:  # noqa: BLE001 - delta-rs raises its own error types
        return True
    return False


def constrained_table(path: Path, constraints: dict[str, str], data: pa.Table | None = None) -> None:
    """A table made by delta-rs, with CHECK constraints added by ``alter.add_constraint``."""
    write_deltalake(
        str(path), data if data is not None else pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]})
    )
    DeltaTable(str(path)).alter.add_constraint(constraints)


# -- CHECK constraints ------------------------------------------------------------------------
def test_check_constraint_refuses_false_and_null_rows_and_leaves_nothing(tmp_path: Path) -> None:
    table = tmp_path / "t"
    constrained_table(table, {"id_positive": "id > 0"})
    version = DeltaTable(str(table)).version()
    write_table(str(table), pa.table({"id": pa.array([5, 6], pa.int64()), "v": ["x", "y"]}))
    before = data_files(table)

    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(table), pa.table({"id": pa.array([7, -1, None], pa.int64()), "v": ["a", "b", "c"]}))
    error = caught.value
    first_line = str(error).splitlines()[0]
    assert first_line == (
        "[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint id_positive (id > 0) violated by row "
        f"with values (table {table.as_uri()}):"
    )
    assert str(error).splitlines()[1:] == [" - id : -1"]
    assert (error.error_class, error.constraint, error.expression) == (
        "DELTA_VIOLATE_CONSTRAINT_WITH_VALUES",
        "id_positive",
        "(id > 0)",
    )
    assert error.values == {"id": -1}
    assert error.table == table.as_uri()

    with pytest.raises(InvariantViolationError) as caught:  # NULL violates a CHECK constraint
        write_table(str(table), pa.table({"id": pa.array([None], pa.int64()), "v": ["c"]}))
    assert caught.value.values == {"id": None}
    assert str(caught.value).endswith("\n - id : null")
    with pytest.raises(InvariantViolationError):  # a missing column is written as null
        write_table(str(table), pa.table({"v": ["c"]}))

    assert DeltaTable(str(table)).version() == version + 1  # nothing committed
    assert data_files(table) == before  # and no data file left behind
    assert rows(table, "id") == [(1,), (5,), (6,)]


def test_check_constraints_on_overwrite_and_merge_schema(tmp_path: Path) -> None:
    table = tmp_path / "t"
    constrained_table(table, {"id_positive": "id > 0"})
    before = data_files(table)
    with pytest.raises(InvariantViolationError, match="id_positive"):
        write_table(str(table), pa.table({"id": pa.array([-3], pa.int64()), "v": ["x"]}), mode="overwrite")
    with pytest.raises(InvariantViolationError, match="id_positive"):
        write_table(str(table), pa.table({"id": pa.array([0], pa.int64()), "w": [1.5]}), merge_schema=True)
    assert data_files(table) == before
    assert DeltaTable(str(table)).schema().to_arrow().names == ["id", "v"]  # the schema did not evolve

    write_table(str(table), pa.table({"id": pa.array([3], pa.int64()), "w": [1.5]}), merge_schema=True)
    write_table(str(table), pa.table({"id": pa.array([9], pa.int64()), "v": ["z"]}), mode="overwrite")
    assert rows(table, "id", "v") == [(9, "z")]
    assert DeltaTable(str(table)).metadata().configuration["delta.constraints.id_positive"] == "id > 0"


def test_first_violating_row_decides_and_values_are_sorted_by_name(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = pa.table({"id": pa.array([1], pa.int64()), "b": pa.array([1], pa.int64()), "a": ["x"]})
    constrained_table(table, {"small": "id < 100", "ordered": "b <= id AND a <> 'bad'"}, data)
    batch = pa.table(
        {
            "id": pa.array([1, 5, 500], pa.int64()),
            "b": pa.array([1, 9, 1], pa.int64()),
            "a": ["x", "y", "bad"],
        }
    )
    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(table), batch)  # row 1 breaks "ordered", row 2 both: row 1 is reported
    assert caught.value.constraint == "ordered"
    stored = DeltaTable(str(table)).metadata().configuration["delta.constraints.ordered"]
    assert stored == "id >= b AND a != 'bad'"  # delta-rs stores the expression as it unparses it
    assert caught.value.expression == "((id >= b) AND (a != 'bad'))"
    assert str(caught.value).splitlines()[1:] == [" - a : y", " - b : 9", " - id : 5"]
    with pytest.raises(InvariantViolationError) as caught:  # one row breaks both
        write_table(str(table), batch.slice(2))
    metadata = DeltaLog(str(table)).snapshot().metadata
    order = [c.name for c in table_constraints(Protocol(1, 3), metadata).checks]
    assert caught.value.constraint == order[0]  # the first in the configuration, as Delta checks them
    assert caught.value.values["id"] == 500


def test_a_constraint_the_grammar_cannot_evaluate_refuses_the_write_before_any_file(tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_table(str(table), pa.table({"id": pa.array([1], pa.int64())}))
    log = DeltaLog(str(table))
    snapshot = log.snapshot()
    metadata = Metadata(
        id=snapshot.metadata.id,
        schema_string=snapshot.metadata.schema_string,
        configuration={"delta.constraints.odd": "sha2(CAST(id AS STRING), 256) <> ''"},
    )
    log.commit([Protocol(1, 3), metadata], "ADD CONSTRAINT")
    before = data_files(table)
    with pytest.raises(UnsupportedTableFeatureError) as caught:
        write_table(str(table), pa.table({"id": pa.array([2], pa.int64())}))
    assert caught.value.features == ["checkConstraints"]
    assert str(caught.value).startswith(
        f"Cannot write to table {table.as_uri()}: the CHECK constraint odd "
        "(sha2(CAST(id AS STRING), 256) <> '') cannot be enforced by this writer: "
    )
    assert "UNRESOLVED_ROUTINE" in str(caught.value)
    assert data_files(table) == before


def test_a_new_table_with_check_constraints_gets_writer_version_3_and_enforces_them(tmp_path: Path) -> None:
    table = tmp_path / "t"
    with pytest.raises(InvariantViolationError, match="positive"):  # the creating write too
        write_table(
            str(table),
            pa.table({"id": pa.array([1, -1], pa.int64())}),
            configuration={"delta.constraints.positive": "id > 0"},
        )
    assert not table.joinpath("_delta_log").exists() or not list(table.joinpath("_delta_log").glob("*.json"))
    assert data_files(table) == []
    write_table(
        str(table),
        pa.table({"id": pa.array([1], pa.int64())}),
        configuration={"delta.constraints.positive": "id > 0"},
    )
    protocol = DeltaTable(str(table)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 3)
    # delta-rs reads the constraint and enforces it on the table this library made
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(str(table), pa.table({"id": pa.array([-5], pa.int64())}), mode="append")


@pytest.mark.parametrize(
    "values",
    [[1, 2, 3], [1, -2], [0], [None], [3, None, 5], [99, 100], [2**40]],
)
def test_check_constraints_refuse_the_rows_delta_rs_refuses(tmp_path: Path, values: list[int | None]) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path in (ours, theirs):
        constrained_table(path, {"range": "id > 0 AND id < 100"})
    data = pa.table({"id": pa.array(values, pa.int64()), "v": ["x"] * len(values)})
    try:
        write_table(str(ours), data)
        ours_refused = False
    except InvariantViolationError:
        ours_refused = True
    theirs_refused = refuses(lambda: write_deltalake(str(theirs), data, mode="append"))
    assert ours_refused == theirs_refused
    assert rows(ours, "id") == rows(theirs, "id")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-50, 150)), max_size=40))
def test_the_first_violating_row_is_reported(values: list[int | None]) -> None:
    schema = pa.schema([pa.field("id", pa.int64())])
    metadata = Metadata(
        id="m",
        schema_string=StructType.from_arrow(schema).to_json(),
        configuration={"delta.constraints.r": "id >= 0 AND id <= 100"},
    )
    compiled = compile_constraints(table_constraints(Protocol(1, 3), metadata), schema, "file:///t")
    assert compiled is not None
    data = pa.table({"id": pa.array(values, pa.int64())})
    bad = [v for v in values if v is None or not 0 <= v <= 100]
    if not bad:
        assert compiled.enforce(data).equals(data)
        return
    with pytest.raises(InvariantViolationError) as caught:
        compiled.enforce(data)
    assert caught.value.values == {"id": bad[0]}


# -- invariants -------------------------------------------------------------------------------
def invariant(text: str) -> dict[str, str]:
    return {"delta.invariants": json.dumps({"expression": {"expression": text}})}


def test_invariants_top_level_and_nested_like_delta_rs(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("x", pa.int64(), metadata=invariant("x > 3")),
            pa.field("s", pa.struct([pa.field("a", pa.int64(), metadata=invariant("s.a < 10"))])),
        ]
    )
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path in (ours, theirs):
        DeltaTable.create(str(path), schema)
    cases = [
        ([4, 5], [1, 9]),
        ([2], [1]),
        ([4], [11]),
        ([None], [1]),
        ([4], [None]),
    ]
    for xs, as_ in cases:
        data = pa.table({"x": pa.array(xs, pa.int64()), "s": pa.array([{"a": a} for a in as_])})
        assert refuses(lambda d=data: write_table(str(ours), d)) == refuses(
            lambda d=data: write_deltalake(str(theirs), d, mode="append")
        ), (xs, as_)
    assert rows(ours, "x") == rows(theirs, "x") == [(4,), (5,)]

    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(ours), pa.table({"x": pa.array([4], pa.int64()), "s": pa.array([{"a": 12}])}))
    assert str(caught.value).splitlines() == [
        "[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint EXPRESSION(s.a < 10) (s.a < 10) violated "
        f"by row with values (table {ours.as_uri()}):",
        " - s.a : 12",
    ]


def test_an_unrecognized_invariant_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("x", pa.int64(), metadata={"delta.invariants": '{"other": 1}'})])
    metadata = Metadata(id="m", schema_string=StructType.from_arrow(schema).to_json())
    raw = json.loads(metadata.schema_string or "")
    raw["fields"][0]["metadata"] = {"delta.invariants": '{"other": 1}'}
    metadata = Metadata(id="m", schema_string=json.dumps(raw))
    with pytest.raises(
        ValueError, match=r"DELTA_UNRECOGNIZED_INVARIANT\] Unrecognized invariant on column x:"
    ):
        table_constraints(Protocol(1, 2), metadata)


# -- NOT NULL ---------------------------------------------------------------------------------
def test_nested_not_null_fields_are_enforced_as_delta_does(tmp_path: Path) -> None:
    inner = pa.struct([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string())])
    loose = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", inner)])
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path in (ours, theirs):
        DeltaTable.create(str(path), schema)

    def both(data: pa.Table) -> tuple[bool, bool]:
        return refuses(lambda: write_table(str(ours), data)), refuses(
            lambda: write_deltalake(str(theirs), data, mode="append")
        )

    assert both(pa.table({"id": [1], "s": pa.array([{"a": 1, "b": "x"}], loose)})) == (False, False)
    assert both(pa.table({"id": [2], "s": pa.array([{"a": None, "b": "x"}], loose)})) == (True, True)
    assert both(pa.table({"id": pa.array([None], pa.int64()), "s": pa.array([{"a": 1}], loose)})) == (
        True,
        True,
    )
    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(ours), pa.table({"id": [3], "s": pa.array([{"a": None, "b": "x"}], loose)}))
    assert str(caught.value).splitlines()[0] == (
        "[DELTA_NOT_NULL_CONSTRAINT_VIOLATED] NOT NULL constraint violated for column: s.a. "
        f"(table {ours.as_uri()})"
    )
    assert caught.value.error_class == "DELTA_NOT_NULL_CONSTRAINT_VIOLATED"
    # Delta (Spark) reads a null struct as null fields: a NOT NULL field in a null struct violates
    # (InvariantEnforcementSuite "reject non-nullable nested column"); delta-rs lets it through.
    with pytest.raises(InvariantViolationError, match=r"column: s\.a"):
        write_table(str(ours), pa.table({"id": [4], "s": pa.array([None], loose)}))
    with pytest.raises(InvariantViolationError, match=r"DELTA_MISSING_NOT_NULL_COLUMN_VALUE\] Column id"):
        write_table(str(ours), pa.table({"s": pa.array([{"a": 1}], loose)}))
    assert rows(ours, "id") == [(1,)]


def test_not_null_elements_and_values_inside_arrays_and_maps(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("l", pa.list_(pa.field("element", pa.int64(), nullable=False))),
            pa.field(
                "m",
                pa.map_(
                    pa.string(), pa.field("value", pa.struct([pa.field("z", pa.int64(), nullable=False)]))
                ),
            ),
        ]
    )
    table = tmp_path / "t"
    DeltaTable.create(str(table), schema)
    loose_map = pa.map_(pa.string(), pa.struct([pa.field("z", pa.int64())]))
    maps = pa.array([[("k", {"z": 1})], [("k", None)]], loose_map)  # a null value: its z is null
    write_table(str(table), pa.table({"l": [[1, 2], None], "m": maps}))
    with pytest.raises(InvariantViolationError, match=r"column: l\.element\. "):
        write_table(str(table), pa.table({"l": [[1], [2, None]]}))
    with pytest.raises(InvariantViolationError, match=r"column: m\.value\.z\. "):
        write_table(str(table), pa.table({"m": pa.array([[("k", {"z": None})]], loose_map)}))
    # (delta-rs cannot read back a null map value whose struct has a NOT NULL field: our reader)
    assert ReplayTable(str(table)).to_pyarrow_table().column("l").to_pylist() == [[1, 2], None]


# -- generated columns ------------------------------------------------------------------------
def generated(expression: str) -> dict[str, str]:
    return {"delta.generationExpression": expression}


GENERATED = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("id", pa.int64()),
        pa.field("day", pa.date32(), metadata=generated("CAST(ts AS DATE)")),
        pa.field("next", pa.int64(), metadata=generated("id + 1")),
        pa.field("label", pa.string(), metadata=generated("concat('id-', CAST(id AS STRING))")),
    ]
)


def timestamps(*values: dt.datetime | None) -> pa.Array:
    return pa.array(values, pa.timestamp("us", tz="UTC"))


def test_generated_columns_are_computed_like_delta_rs(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path in (ours, theirs):
        DeltaTable.create(str(path), GENERATED, partition_by=["day"])
    assert DeltaTable(str(ours)).protocol().min_writer_version == 4
    data = pa.table(
        {
            "ts": timestamps(
                dt.datetime(2024, 1, 2, 23, 59, tzinfo=UTC), None, dt.datetime(1999, 12, 31, tzinfo=UTC)
            ),
            "id": pa.array([1, 2, None], pa.int64()),
        }
    )
    write_table(str(ours), data)
    write_deltalake(str(theirs), data, mode="append")
    columns = ("id", "ts", "day", "next")
    assert rows(ours, *columns) == rows(theirs, *columns)
    # Spark's concat is null when an argument is (delta-rs's DataFusion skips the null: 'id-')
    assert rows(ours, "id", "label") == [(1, "id-1"), (2, "id-2"), (None, None)]
    assert (1, dt.date(2024, 1, 2), 2) in [(r[0], r[2], r[3]) for r in rows(ours, *columns)]

    def partitions(path: Path) -> list[str]:
        actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
        return sorted(map(str, actions.column("partition.day").to_pylist()))

    assert partitions(ours) == partitions(theirs) == ["1999-12-31", "2024-01-02", "None"]


def test_generated_columns_given_by_the_data_are_checked(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path in (ours, theirs):
        DeltaTable.create(str(path), GENERATED)
    good = pa.table(
        {
            "ts": timestamps(dt.datetime(2024, 5, 6, 7, 8, tzinfo=UTC)),
            "id": pa.array([7], pa.int64()),
            "DAY": pa.array([dt.date(2024, 5, 6)]),  # any case
        }
    )
    write_table(str(ours), good)
    write_deltalake(str(theirs), good.rename_columns(["ts", "id", "day"]), mode="append")
    bad = good.set_column(2, "day", pa.array([dt.date(2024, 5, 7)]))
    assert refuses(lambda: write_deltalake(str(theirs), bad, mode="append"))
    before = data_files(ours)
    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(ours), bad)
    assert str(caught.value).splitlines() == [
        "[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint Generated Column (day <=> CAST(ts AS DATE)) "
        f"violated by row with values (table {ours.as_uri()}):",
        " - day : 2024-05-07",
        " - ts : 2024-05-06 07:08:00",
    ]
    assert caught.value.constraint == "Generated Column"
    # a null where the expression is not null violates too (<=>)
    with pytest.raises(InvariantViolationError, match="Generated Column"):
        write_table(str(ours), good.set_column(2, "day", pa.array([None], pa.date32())))
    assert data_files(ours) == before
    assert rows(ours, "id", "day") == rows(theirs, "id", "day") == [(7, dt.date(2024, 5, 6))]


def test_a_generation_expression_the_grammar_cannot_evaluate_refuses_the_write(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("month", pa.string(), metadata=generated("date_format(ts, 'yyyy-MM')")),
        ]
    )
    table = tmp_path / "t"
    DeltaTable.create(str(table), schema)
    with pytest.raises(UnsupportedTableFeatureError, match="the generated column month") as caught:
        write_table(str(table), pa.table({"ts": timestamps(None)}))
    assert caught.value.features == ["generatedColumns"]
    assert data_files(table) == []


def test_a_generation_expression_without_the_feature_is_an_inert_annotation(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.int64())])
    raw = json.loads(StructType.from_arrow(schema).to_json())
    raw["fields"][1]["metadata"] = {"delta.generationExpression": "a + 1"}
    metadata = Metadata(id="m", schema_string=json.dumps(raw))
    assert table_constraints(Protocol(1, 3), metadata) == TableConstraints()
    assert [g.column for g in table_constraints(Protocol(1, 4), metadata).generated] == ["b"]
    features = Protocol(3, 7, [], ["generatedColumns"])
    assert [g.column for g in table_constraints(features, metadata).generated] == ["b"]
    table = tmp_path / "t"
    DeltaLog(str(table)).commit([Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1)
    write_table(str(table), pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([5], pa.int64())}))
    write_table(str(table), pa.table({"a": pa.array([2], pa.int64())}))
    assert rows(table, "a", "b") == [(1, 5), (2, None)]


# -- golden tables ----------------------------------------------------------------------------
def test_golden_check_constraints_table(tmp_path: Path, golden_root: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(golden_root / "dat" / "check_constraints" / "delta", table)
    day = pa.array([dt.date(2020, 1, 1)])
    write_table(str(table), pa.table({"letter": ["z"], "int": pa.array([5], pa.int64()), "date": day}))
    with pytest.raises(InvariantViolationError) as caught:
        write_table(str(table), pa.table({"letter": ["z"], "int": pa.array([0], pa.int64()), "date": day}))
    assert (
        str(caught.value)
        .splitlines()[0]
        .startswith("[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint const1 (int > 0) violated")
    )
    assert ReplayTable(str(table)).to_pyarrow_table().num_rows == 6  # deletion vectors: our reader


def test_golden_generated_columns_table(tmp_path: Path, golden_root: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(golden_root / "dat" / "generated_columns" / "delta", table)
    before = dt.datetime.now(UTC).date()
    write_table(str(table), pa.table({"letter": ["z"], "int": pa.array([5], pa.int64())}))
    after = dt.datetime.now(UTC).date()
    written = [r for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist() if r["letter"] == "z"]
    assert len(written) == 1 and before <= written[0]["creation"] <= after  # CAST(now() AS DATE)
    expected = r"Generated Column \(creation <=> CAST\(now\(\) AS DATE\)\)"
    with pytest.raises(InvariantViolationError, match=expected):
        write_table(
            str(table),
            pa.table(
                {
                    "letter": ["y"],
                    "int": pa.array([1], pa.int64()),
                    "creation": pa.array([dt.date(2024, 4, 2)]),
                }
            ),
        )


# -- the spec -----------------------------------------------------------------------------------
def test_the_spec_carries_constraint_texts_and_pickles(tmp_path: Path) -> None:
    table = tmp_path / "t"
    DeltaTable.create(str(table), GENERATED)
    DeltaTable(str(table)).alter.add_constraint({"recent": "id > 0"})
    io = TableIO.for_table(str(table))
    snapshot = latest_snapshot(io)
    data_schema = StructType.from_arrow(pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("id", pa.int64())]))
    plan = plan_write(io, snapshot, data_schema, WriteOptions())
    spec = plan.spec
    assert [c.name for c in spec.constraints.checks] == ["recent"]
    assert [g.column for g in spec.constraints.generated] == ["day", "next", "label"]
    restored = pickle.loads(pickle.dumps(plan))
    assert restored.spec == spec
    assert "BoundExpression" not in repr(pickle.dumps(spec))
    assert FileWriteSpec(str(table), GENERATED).compile_constraints() is None  # nothing to enforce


# -- Spark --------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_batch_and_streaming_writes_enforce_constraints(spark: Any, tmp_path: Path) -> None:
    from replay.spark import register

    register(spark)
    table = tmp_path / "t"
    DeltaTable.create(str(table), GENERATED)
    DeltaTable(str(table)).alter.add_constraint({"id_positive": "id > 0"})
    version = DeltaTable(str(table)).version()
    frame = spark.createDataFrame(
        [(dt.datetime(2024, 3, 4, 5, 6, tzinfo=UTC), 1), (None, -2)], "ts timestamp, id long"
    ).coalesce(1)
    with pytest.raises(
        Exception, match=r"DELTA_VIOLATE_CONSTRAINT_WITH_VALUES\] CHECK constraint id_positive"
    ):
        frame.write.format("deltalog").mode("append").save(str(table))
    assert DeltaTable(str(table)).version() == version
    assert data_files(table) == []

    frame.where("id > 0").write.format("deltalog").mode("append").save(str(table))  # generated: computed
    assert rows(table, "id", "day", "next", "label") == [(1, dt.date(2024, 3, 4), 2, "id-1")]

    source = tmp_path / "source"
    source.mkdir()
    source.joinpath("0.json").write_text('{"id": 5}\n{"id": 0}\n')
    query = (
        spark.readStream.schema("id long")
        .json(str(source))
        .writeStream.format("deltalog")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(table))
    )
    with pytest.raises(Exception, match=r"CHECK constraint id_positive \(id > 0\) violated"):
        query.awaitTermination(180)
    assert rows(table, "id") == [(1,)]
    assert len(data_files(table)) == 1


def _generated_table(path: str) -> None:
    """A table whose ``g`` is generated as ``v * 2`` (writer version 4)."""
    import dataclasses

    write_table(path, pa.table({"id": [1, 2, 3], "v": [10, 20, 30], "g": [20, 40, 60]}))
    log = DeltaLog(path)
    snapshot = log.update()
    schema = json.loads(snapshot.metadata.schema_string)
    schema["fields"][2]["metadata"] = {"delta.generationExpression": "v * 2"}
    metadata = dataclasses.replace(snapshot.metadata, schema_string=json.dumps(schema))
    log.commit([Protocol(1, 4), metadata], "SET TBLPROPERTIES", read_version=snapshot.version)


def test_update_and_merge_compute_generated_columns_as_delta_does(tmp_path: Path) -> None:
    """A generated column the clause does not set is computed from the row's new values when the
    clause sets a column it reads, or inserts the row; setting it to another value is refused."""
    path = str(tmp_path / "t")
    _generated_table(path)
    ReplayTable(path).update({"v": "v + 1"}, predicate="id = 1")
    source = pa.table({"id": [2, 9], "v": [5, 7]})  # no g: * clauses compute it
    merger = ReplayTable(path).merge(source, "target.id = source.id")
    merger.when_matched_update_all().when_not_matched_insert_all().execute()
    rows = sorted(ReplayTable(path).to_pyarrow_table().to_pylist(), key=lambda row: row["id"])
    assert [(r["id"], r["v"], r["g"]) for r in rows] == [(1, 11, 22), (2, 5, 10), (3, 30, 60), (9, 7, 14)]
    with pytest.raises(InvariantViolationError, match=r"Generated Column \(g <=> \(v \* 2\)\)"):
        ReplayTable(path).update({"g": "1"})
