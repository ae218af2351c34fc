"""Turning column mapping on, RENAME COLUMN and DROP COLUMNS (metadata-only, as Delta does them).

After each change the table reads the same through our reader and delta-rs's query engine, no
data file is touched, and later writes go on under the new names. What Delta refuses is refused
with its error class, and nothing is committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from replay import DeltaLog, DeltaTable, table_changes, write_table
from replay.cli.main import main as cli_main
from replay.maintenance.alter_columns import ColumnChangeError
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.schema import PrimitiveType, StructField, StructType
from tests.dml_cases import our_rows, rust_rows
from tests.test_column_mapping_writes import check_files

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "v": ["a", "b", "c"],
        "p": pa.array([1, 1, 2], pa.int64()),
        "s": pa.array([{"q": 1, "r": "x"}, {"q": 2, "r": "y"}, None]),
    }
)


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet")}


def plain_table(tmp_path: Path, **configuration: str) -> Path:
    path = tmp_path / "t"
    write_table(str(path), ROWS, partition_by=["p"], configuration=configuration or None)
    return path


def mapped(tmp_path: Path, **configuration: str) -> Path:
    path = plain_table(tmp_path, **configuration)
    DeltaTable(str(path)).alter.set_table_properties({"delta.columnMapping.mode": "name"})
    return path


def renamed(rows: list[dict[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    return [{(new if k == old else k): v for k, v in row.items()} for row in rows]


def test_turning_column_mapping_on_keeps_the_files_and_their_names(tmp_path: Path) -> None:
    path = plain_table(tmp_path)
    files = data_files(path)
    before = our_rows(str(path))
    DeltaTable(str(path)).alter.set_table_properties({"delta.columnMapping.mode": "name"})
    table = DeltaTable(str(path))
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (2, 5)
    fields = table.snapshot.schema.fields
    assert [f.physical_name for f in fields] == ["id", "v", "p", "s"]  # the names the files use
    assert [f.field_id for f in fields] == [1, 2, 3, 4]
    assert table.metadata().configuration["delta.columnMapping.maxColumnId"] == "6"  # s.q, s.r
    assert data_files(path) == files
    assert our_rows(str(path)) == rust_rows(str(path)) == before


def test_turning_it_on_adds_the_feature_to_a_table_features_protocol(tmp_path: Path) -> None:
    path = mapped(tmp_path, **{"delta.enableDeletionVectors": "true"})
    protocol = DeltaTable(str(path)).protocol()
    assert "columnMapping" in (protocol.reader_features or [])
    assert "columnMapping" in (protocol.writer_features or [])
    assert our_rows(str(path)) == rust_rows(str(path))


@pytest.mark.parametrize(
    ("start", "target"), [("none", "id"), ("name", "none"), ("name", "id"), ("id", "name")]
)
def test_other_mode_changes_are_refused(tmp_path: Path, start: str, target: str) -> None:
    path = str(tmp_path / "t")
    configuration = {"delta.columnMapping.mode": start} if start != "none" else None
    write_table(path, ROWS, configuration=configuration)
    with pytest.raises(
        UnsupportedTableFeatureError, match=r"^\[DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE\]"
    ):
        DeltaTable(path).alter.set_table_properties({"delta.columnMapping.mode": target})
    assert DeltaTable(path).version() == 0
    if start != "none":
        with pytest.raises(UnsupportedTableFeatureError, match=rf"from '{start}' to 'none'"):
            DeltaTable(path).alter.unset_table_properties(["delta.columnMapping.mode"])


def test_renames_are_metadata_only_and_later_writes_use_the_new_names(tmp_path: Path) -> None:
    path = mapped(tmp_path, **{"delta.enableChangeDataFeed": "true"})
    uri, files = str(path), data_files(path)
    before = our_rows(uri)
    table = DeltaTable(uri)
    table.alter.rename_column("v", "value")
    table.alter.rename_column("P", "part")  # case-insensitive; a partition column
    table.alter.rename_column("s.q", "qq")
    assert data_files(path) == files
    assert DeltaTable(uri).snapshot.partition_columns == ["part"]
    expected = renamed(renamed(before, "v", "value"), "p", "part")
    for row in expected:
        if row["s"] is not None:
            row["s"] = {"qq": row["s"]["q"], "r": row["s"]["r"]}
    assert our_rows(uri) == rust_rows(uri) == expected
    history = DeltaTable(uri).history(1)[0]
    assert history["operation"] == "RENAME COLUMN"
    assert history["operationParameters"] == {"oldColumnPath": "s.q", "newColumnPath": "s.qq"}
    write_table(uri, pa.table({"id": [4], "value": ["d"], "part": [2]}), mode="append")
    version = DeltaTable(uri).version()
    assert check_files(uri, version) == 1  # kept physical names: id, v, s (q, r)
    DeltaTable(uri).delete("part = 1 AND id = 1")  # prunes by the renamed partition column
    assert check_files(uri, version + 1) == 2  # the rewrite and its change data
    assert sorted(r["id"] for r in our_rows(uri)) == sorted(r["id"] for r in rust_rows(uri)) == [2, 3, 4]
    changes = table_changes(DeltaLog.for_table(uri), starting_version=version + 1).to_pylist()
    assert [(c["id"], c["value"], c["part"], c["_change_type"]) for c in changes] == [(1, "a", 1, "delete")]


def test_drops_are_metadata_only(tmp_path: Path) -> None:
    path = mapped(tmp_path)
    uri, files = str(path), data_files(path)
    before = our_rows(uri)
    DeltaTable(uri).alter.drop_columns(["v", "s.r"])
    assert data_files(path) == files
    expected = [{k: v for k, v in row.items() if k != "v"} for row in before]
    for row in expected:
        if row["s"] is not None:
            row["s"] = {"q": row["s"]["q"]}
    assert our_rows(uri) == rust_rows(uri) == expected
    history = DeltaTable(uri).history(1)[0]
    assert (history["operation"], history["operationParameters"]) == (
        "DROP COLUMNS",
        {"columns": '["v","s.r"]'},
    )
    version = DeltaTable(uri).version()
    DeltaTable(uri).alter.drop_columns("nope", raise_if_not_exists=False)
    assert DeltaTable(uri).version() == version  # IF EXISTS and nothing to drop: no commit
    DeltaTable(uri).alter.add_columns([pa.field("v", pa.string())])
    assert all(r["v"] is None for r in our_rows(uri))  # a new column: the old values stay dropped
    assert DeltaTable(uri).snapshot.schema.field("v").physical_name.startswith("col-")


def test_what_delta_refuses_is_refused_and_nothing_committed(tmp_path: Path) -> None:
    plain = plain_table(tmp_path / "plain")
    with pytest.raises(ColumnChangeError, match=r"^\[DELTA_UNSUPPORTED_RENAME_COLUMN\].*columnMapping.mode"):
        DeltaTable(str(plain)).alter.rename_column("v", "w")
    with pytest.raises(ColumnChangeError, match=r"^\[DELTA_UNSUPPORTED_DROP_COLUMN\]"):
        DeltaTable(str(plain)).alter.drop_columns("v")
    path = mapped(tmp_path / "mapped")
    uri = str(path)
    table = DeltaTable(uri)
    with pytest.raises(ColumnChangeError, match="every column left would be a partition column"):
        table.alter.drop_columns(["v", "id", "s"])
    with pytest.raises(ColumnChangeError, match="last column of its struct s"):
        table.alter.drop_columns(["s.q", "s.r"])
    table.alter.add_constraint({"positive": "id > 0 AND coalesce(s.q, 0) < 10"})
    version = DeltaTable(uri).version()
    cases = [
        (lambda: table.alter.drop_columns("p"), r"^\[DELTA_UNSUPPORTED_DROP_PARTITION_COLUMN\] .*\(p\)"),
        (lambda: table.alter.rename_column("v", "ID"), r"^\[FIELD_ALREADY_EXISTS\]"),
        (lambda: table.alter.rename_column("nope", "x"), r"^\[DELTA_COLUMN_NOT_FOUND\].*`nope`"),
        (
            lambda: table.alter.rename_column("id", "key"),
            r"(?s)^\[DELTA_CONSTRAINT_DEPENDENT_.*positive",
        ),
        (lambda: table.alter.drop_columns("s.q"), r"^\[DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE\]"),
        (lambda: table.alter.drop_columns("s"), r"^\[DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE\]"),
    ]
    for change, message in cases:
        with pytest.raises(ColumnChangeError, match=message):
            change()
    assert DeltaTable(uri).version() == version
    table.alter.rename_column("s.r", "rr")  # a field the constraint does not read


def test_generated_columns_guard_what_they_read(tmp_path: Path) -> None:
    path = str(tmp_path / "g")
    write_table(path, ROWS.select(["id", "v"]), configuration={"delta.columnMapping.mode": "name"})
    snapshot = DeltaTable(path).snapshot
    generated = StructField("doubled", PrimitiveType("long"), True, {"delta.generationExpression": "id * 2"})
    metadata = snapshot.metadata.with_schema(StructType([*snapshot.schema.fields, generated]))
    DeltaLog.for_table(path).commit([metadata], operation="CHANGE COLUMN")  # as Delta would have
    with pytest.raises(
        ColumnChangeError, match=r"(?s)^\[DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE\].*doubled"
    ):
        DeltaTable(path).alter.rename_column("id", "key")
    DeltaTable(path).alter.rename_column("v", "w")
    assert DeltaTable(path).snapshot.schema.field_names == ["id", "w", "doubled"]


def test_the_cli_renames_and_drops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(mapped(tmp_path))
    assert cli_main(["alter", uri, "--rename-column", "v=value", "--drop-column", "s", "--json"]) == 0
    assert DeltaTable(uri).snapshot.schema.field_names == ["id", "value", "p"]
    assert '"version": 3' in capsys.readouterr().out


def test_column_invariants_guard_what_they_read(tmp_path: Path) -> None:
    path = str(tmp_path / "i")
    write_table(path, ROWS.select(["id", "v"]), configuration={"delta.columnMapping.mode": "name"})
    snapshot = DeltaTable(path).snapshot
    invariant = orjson.dumps({"expression": {"expression": "id > 0"}}).decode()
    fields = [
        StructField(f.name, f.type, f.nullable, {**f.metadata, "delta.invariants": invariant})
        if f.name == "id"
        else f
        for f in snapshot.schema.fields
    ]
    metadata = snapshot.metadata.with_schema(StructType(fields))
    DeltaLog.for_table(path).commit([metadata], operation="CHANGE COLUMN")  # as Delta would have
    with pytest.raises(ColumnChangeError, match=r"(?s)^\[DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE\].*id > 0"):
        DeltaTable(path).alter.rename_column("id", "key")


def test_the_statistics_columns_follow_renames_and_drops(tmp_path: Path) -> None:
    """``delta.dataSkippingStatsColumns`` names columns: Delta renames and drops them there too."""
    path = str(tmp_path / "t")
    settings = {"delta.columnMapping.mode": "name", "delta.dataSkippingStatsColumns": "v,s.q,id"}
    write_table(path, ROWS, configuration=settings)
    DeltaTable(path).alter.rename_column("s", "the struct")
    DeltaTable(path).alter.rename_column("v", "value")
    DeltaTable(path).alter.drop_columns("id")
    listed = DeltaTable(path).metadata().configuration["delta.dataSkippingStatsColumns"]
    assert listed == "value,`the struct`.q"
    write_table(path, ROWS.drop_columns(["id"]).rename_columns(["value", "p", "the struct"]), mode="append")
    newest = max(DeltaTable(path).snapshot.files(), key=lambda f: f.modification_time)
    stats = orjson.loads(newest.stats or "{}")
    schema = DeltaTable(path).snapshot.schema
    struct = schema.field("the struct")
    q = struct.type.fields[0]  # type: ignore[union-attr]
    assert set(stats["nullCount"]) == {schema.field("value").physical_name, struct.physical_name}
    assert set(stats["nullCount"][struct.physical_name]) == {q.physical_name}


def test_a_column_named_twice_or_inside_another_is_dropped_once(tmp_path: Path) -> None:
    uri = str(mapped(tmp_path))
    DeltaTable(uri).alter.drop_columns(["s.q", "v", "s", "V"])
    assert DeltaTable(uri).snapshot.schema.field_names == ["id", "p"]
    assert DeltaTable(uri).history(1)[0]["operationParameters"] == {"columns": '["v","s"]'}
    assert our_rows(uri) == rust_rows(uri)


def test_a_rename_elsewhere_leaves_the_statistics_columns_as_written(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    settings = {"delta.columnMapping.mode": "name", "delta.dataSkippingStatsColumns": " v , `s`.q"}
    write_table(path, ROWS, configuration=settings)
    DeltaTable(path).alter.rename_column("id", "key")
    assert DeltaTable(path).metadata().configuration["delta.dataSkippingStatsColumns"] == " v , `s`.q"
