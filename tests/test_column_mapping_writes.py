"""Writing to tables with column mapping (``delta.columnMapping.mode`` ``name`` and ``id``).

Every file written (appends, overwrites, DELETE, UPDATE, MERGE, OPTIMIZE, change data) must
name its columns by their physical names at every nesting level, carry Parquet field ids in
``id`` mode only, key its statistics and ``partitionValues`` by physical names and, when the
table is partitioned, sit in a random two-character prefix directory, as Delta writes them.
New columns get ids after ``delta.columnMapping.maxColumnId`` and fresh physical names. The
rows are checked against Arrow and against delta-rs's query engine (which maps columns;
delta-rs cannot read the change feed of a mapped table, so change rows are checked against
the expected ones).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay import DeltaLog, DeltaTable, write_table
from replay.protocol.actions import AddCDCFile, AddFile, parse_actions
from replay.protocol.column_mapping import assign_column_mapping, max_column_id
from replay.protocol.schema import (
    FIELD_ID_KEY,
    PHYSICAL_NAME_KEY,
    ArrayType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
)
from tests.dml_cases import CHANGE_COLUMNS, normalised, our_changes, our_rows, rust_rows
from tests.paths import GOLDEN_ROOT

MODES = ("name", "id")
MAP_TYPE = pa.map_(pa.string(), pa.struct([("v", pa.int64())]))
PREFIX = re.compile(r"^(_change_data/)?[A-Za-z0-9]{2}/[^/]+\.parquet$")


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return normalised(table, None)


def sample() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "a name": ["w", "x", "y", None],
            "part": ["p", "q", "p", "q"],
            "s": pa.array([{"q": 1, "r": "a"}, None, {"q": 3, "r": None}, {"q": 4, "r": "d"}]),
            "l": pa.array([[{"v": 1}], None, [], [{"v": 4}, None]]),
            "m": pa.array(
                [[("k", {"v": 1})], None, [], [("z", None)]],
                pa.map_(pa.string(), pa.struct([("v", pa.int64())])),
            ),
        }
    )


def mapped_table(tmp_path: Path, mode: str, **configuration: str) -> str:
    uri = str(tmp_path / f"mapped-{mode}")
    settings = {"delta.columnMapping.mode": mode, **configuration}
    write_table(uri, sample(), partition_by=["part"], configuration=settings)
    return uri


def new_actions(uri: str, version: int) -> list[AddFile | AddCDCFile]:
    """The data and change files ``version`` of the table at ``uri`` (a local path) added."""
    lines = Path(uri, "_delta_log", f"{version:020d}.json").read_bytes().splitlines()
    return [a for a in parse_actions(lines) if isinstance(a, AddFile | AddCDCFile)]


def physical_fields(data_type: Any, with_ids: bool) -> list[tuple[str, int | None]]:
    """(physical name, id) of every field of a Delta type, depth first (what a file must hold)."""
    out: list[tuple[str, int | None]] = []
    if isinstance(data_type, StructType):
        for f in data_type.fields:
            out.append((f.physical_name, f.field_id if with_ids else None))
            out += physical_fields(f.type, with_ids)
    elif isinstance(data_type, ArrayType):
        out += physical_fields(data_type.element_type, with_ids)
    elif isinstance(data_type, MapType):
        out += physical_fields(data_type.key_type, with_ids) + physical_fields(data_type.value_type, with_ids)
    return out


def file_fields(arrow_type: Any) -> list[tuple[str, int | None]]:
    """(name, Parquet field id) of every struct field of a file's Arrow schema, depth first."""
    out: list[tuple[str, int | None]] = []
    fields = list(arrow_type) if isinstance(arrow_type, pa.Schema) else None
    if fields is None:
        if pa.types.is_struct(arrow_type):
            fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
            return file_fields(arrow_type.value_type)
        elif pa.types.is_map(arrow_type):
            return file_fields(arrow_type.key_type) + file_fields(arrow_type.item_type)
        else:
            return out
    for f in fields:
        raw = (f.metadata or {}).get(b"PARQUET:field_id")
        out.append((f.name, int(raw) if raw is not None else None))
        out += file_fields(f.type)
    return out


def check_files(uri: str, version: int) -> int:
    """Check what ``version`` wrote against the table's column mapping; the files checked."""
    snapshot = DeltaTable(uri).snapshot
    schema, mode = snapshot.schema, snapshot.metadata.column_mapping_mode
    partitions = set(snapshot.partition_columns)
    data_type = StructType([f for f in schema.fields if f.name not in partitions])
    logical = {f.name for f in schema.fields} - {f.physical_name for f in schema.fields}
    expected = physical_fields(data_type, with_ids=mode == "id")
    keys = {schema.field(c).physical_name for c in partitions}
    checked = 0
    for action in new_actions(uri, version):
        file_schema = pq.read_schema(f"{uri}/{action.path}")
        found = [entry for entry in file_fields(file_schema) if entry[0] != "_change_type"]
        assert found == expected, action.path
        assert set(action.partition_values or {}) == keys
        if partitions:
            assert PREFIX.match(action.path), action.path
        stats = orjson.loads(action.stats) if isinstance(action, AddFile) and action.stats else {}
        for kind in ("minValues", "maxValues", "nullCount"):
            assert not set(stats.get(kind, {})) & logical, (kind, stats)
        checked += 1
    return checked


@pytest.mark.parametrize("mode", MODES)
def test_a_new_mapped_table_gives_every_field_an_id_and_a_physical_name(tmp_path: Path, mode: str) -> None:
    uri = mapped_table(tmp_path, mode)
    table = DeltaTable(uri)
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (2, 5)
    schema = table.snapshot.schema
    ids = [field_id for _, field_id in physical_fields(schema, with_ids=True)]
    assert sorted(ids) == list(range(1, len(ids) + 1))  # nested fields too, each once
    assert table.metadata().configuration["delta.columnMapping.maxColumnId"] == str(len(ids))
    assert all(re.fullmatch(r"col-[0-9a-f-]{36}", name) for name, _ in physical_fields(schema, True))
    assert check_files(uri, 0) == 2
    assert our_rows(uri) == rust_rows(uri) == rows_of(sample())


@pytest.mark.parametrize("mode", MODES)
def test_row_changes_and_compaction_write_physical_columns(tmp_path: Path, mode: str) -> None:
    uri = mapped_table(tmp_path, mode, **{"delta.enableChangeDataFeed": "true"})
    table = DeltaTable(uri)
    table.delete("id = 1")
    assert check_files(uri, 1) >= 1
    table.update({"a name": "'changed'"}, predicate="s.q = 3")
    assert check_files(uri, 2) >= 2  # the rewrite and its change data
    source = sample().slice(1, 1).set_column(0, "id", pa.array([9], pa.int64()))
    source = pa.concat_tables([sample().slice(3, 1), source])
    (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"a name": "'merged'"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert check_files(uri, 3) >= 2
    expected = sample().slice(1).to_pylist()
    expected[1]["a name"] = "changed"
    expected[2]["a name"] = "merged"
    expected.append({**sample().slice(1, 1).to_pylist()[0], "id": 9})
    wanted = rows_of(pa.Table.from_pylist(expected, schema=sample().schema))
    assert our_rows(uri) == rust_rows(uri) == wanted
    changes = [(r["id"], r["_change_type"]) for r in our_changes(uri, 1, ["id"])]
    assert sorted(changes) == sorted(
        [
            (1, "delete"),
            (3, "update_preimage"),
            (3, "update_postimage"),
            (4, "update_preimage"),
            (4, "update_postimage"),
            (9, "insert"),
        ]
    )
    metrics = DeltaTable(uri).optimize.compact()
    assert (metrics["numFilesAdded"], metrics["numFilesRemoved"]) == (1, 2)  # q's update and insert
    assert check_files(uri, 4) == 1
    DeltaTable(uri).optimize.z_order(["id"])
    assert our_rows(uri) == rust_rows(uri) == wanted


@pytest.mark.parametrize("mode", MODES)
def test_deletion_vectors_on_a_mapped_table(tmp_path: Path, mode: str) -> None:
    uri = mapped_table(tmp_path, mode, **{"delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri)
    metrics = table.update({"id": "id + 100"}, predicate="id = 2")
    assert metrics["numDeletionVectorsAdded"] == 1 and metrics["numCopiedRows"] == 0
    assert check_files(uri, 1) == 2  # the file with its DV, and the updated row's new file
    expected = sample().to_pylist()
    expected[1]["id"] = 102
    assert our_rows(uri) == rust_rows(uri) == rows_of(pa.Table.from_pylist(expected, schema=sample().schema))


@pytest.mark.parametrize("mode", MODES)
def test_new_columns_get_ids_after_the_largest(tmp_path: Path, mode: str) -> None:
    uri = mapped_table(tmp_path, mode)
    before = DeltaTable(uri).snapshot.schema
    last = max_column_id(before, DeltaTable(uri).metadata().configuration)
    extra = sample().slice(0, 1).append_column("extra", pa.array([1.5]))
    extra = extra.set_column(3, "s", pa.array([{"q": 7, "r": "b", "t": True}]))
    write_table(uri, extra, mode="append", merge_schema=True)
    assert check_files(uri, 1) == 1
    DeltaTable(uri).alter.add_columns([StructField("later", PrimitiveType("long"))])
    after = DeltaTable(uri).snapshot.schema
    old = {name: field_id for name, field_id in physical_fields(before, True)}
    new = [(name, field_id) for name, field_id in physical_fields(after, True) if name not in old]
    assert len(new) == 3  # extra, s.t and later
    assert sorted(field_id for _, field_id in new) == [last + 1, last + 2, last + 3]
    assert all(old[name] == field_id for name, field_id in physical_fields(after, True) if name in old)
    assert DeltaTable(uri).metadata().configuration["delta.columnMapping.maxColumnId"] == str(last + 3)
    rows = our_rows(uri)
    assert rows == rust_rows(uri)
    assert [r["extra"] for r in rows if r["extra"] is not None] == [1.5]


def test_overwrites_by_partition_on_a_mapped_table(tmp_path: Path) -> None:
    uri = mapped_table(tmp_path, "name")
    replacement = sample().slice(0, 1).set_column(0, "id", pa.array([10], pa.int64()))
    write_table(uri, replacement, mode="overwrite", replace_where="part = 'p'")
    assert check_files(uri, 1) == 1
    kept = [row for row in sample().to_pylist() if row["part"] == "q"]
    wanted = rows_of(pa.Table.from_pylist([*kept, replacement.to_pylist()[0]], schema=sample().schema))
    assert our_rows(uri) == rust_rows(uri) == wanted
    write_table(uri, sample().slice(1, 1), mode="overwrite", partition_overwrite_mode="dynamic")
    assert sorted(r["id"] for r in our_rows(uri)) == [2, 10]


def test_a_spark_written_mapped_table_takes_appends_and_changes(tmp_path: Path) -> None:
    """Delta's own mapped table (nested types, ``id`` mode) keeps its ids through our writes."""
    path = tmp_path / "spark"
    shutil.copytree(GOLDEN_ROOT / "delta-spark-golden/table-with-columnmapping-mode-id/delta", path)
    uri = str(path)
    before = DeltaTable(uri).to_pyarrow_table()
    write_table(uri, before.slice(0, 2), mode="append")
    version = DeltaTable(uri).version()
    assert check_files(uri, version) == 1
    DeltaTable(uri).delete("IntegerType = 0")
    assert check_files(uri, version + 1) >= 1
    rows = our_rows(uri)
    assert rows == rust_rows(uri)
    assert len(rows) == before.num_rows + 2 - 2 * sum(
        v == 0 for v in before.column("IntegerType").to_pylist()
    )


def test_assigning_column_mapping_keeps_existing_ids_and_names() -> None:
    kept = StructField("a", PrimitiveType("long"), metadata={FIELD_ID_KEY: 5, PHYSICAL_NAME_KEY: "col-a"})
    schema = StructType([kept, StructField("b", StructType([StructField("c", PrimitiveType("string"))]))])
    assigned, last = assign_column_mapping(schema, 5)
    assert last == 7
    assert assigned.fields[0] == kept
    b = assigned.fields[1]
    assert b.field_id == 6 and b.type.fields[0].field_id == 7  # type: ignore[union-attr]
    assert b.physical_name != "b" and b.physical_name.startswith("col-")


def test_change_columns_stay_logical_in_the_feed(tmp_path: Path) -> None:
    uri = mapped_table(tmp_path, "id", **{"delta.enableChangeDataFeed": "true"})
    DeltaTable(uri).delete("part = 'q' and id = 2")
    changes = our_changes(uri, 1)
    assert [(r["id"], r["a name"], r["_change_type"]) for r in changes] == [(2, "x", "delete")]
    assert set(CHANGE_COLUMNS) <= set(changes[0])


@pytest.mark.parametrize("mode", MODES)
def test_merge_schema_evolution_maps_the_new_columns(tmp_path: Path, mode: str) -> None:
    uri = mapped_table(tmp_path, mode)
    last = int(DeltaTable(uri).metadata().configuration["delta.columnMapping.maxColumnId"])
    source = sample().slice(0, 2).append_column("added", pa.array(["n1", "n2"]))
    source = source.set_column(0, "id", pa.array([1, 20], pa.int64()))
    merged = DeltaTable(uri).merge(
        source, "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True
    )
    merged.when_matched_update_all().when_not_matched_insert_all().execute()
    added = DeltaTable(uri).snapshot.schema.field("added")
    assert added.field_id == last + 1 and added.physical_name.startswith("col-")
    assert check_files(uri, 1) >= 2  # the updated file and the inserted rows, "added" by its physical name
    rows = {r["id"]: r["added"] for r in our_rows(uri)}
    assert rows == {1: "n1", 2: None, 3: None, 4: None, 20: "n2"}
    assert our_rows(uri) == rust_rows(uri)


def test_a_conflict_names_the_partition_by_its_column(tmp_path: Path) -> None:
    """Conflict checks read the physical partition values; the error shows the logical names."""
    from replay import ConcurrentAppendException
    from replay.protocol.sql_predicate import parse_predicate
    from replay.txn.transaction import Transaction

    uri = mapped_table(tmp_path, "name")
    log = DeltaLog.for_table(uri)
    key = DeltaTable(uri).snapshot.metadata.partition_value_keys["part"]

    def delete_partition(value: str) -> Transaction:
        """A DELETE of partition ``value``: it read that partition and removes its file."""
        snapshot = log.update()
        txn = Transaction(log.io, snapshot, operation="DELETE")
        txn.read_predicate(parse_predicate(f"part = '{value}'").tree)
        gone = [f for f in snapshot.files() if (f.partition_values or {}).get(key) == value]
        txn.read_files(gone)
        txn.add_actions(f.remove_with_timestamp(0) for f in gone)
        return txn

    txn = delete_partition("p")
    write_table(uri, sample().slice(0, 1), mode="append")  # a concurrent append to part p
    with pytest.raises(ConcurrentAppendException, match=r"partition \[part=p\]"):
        txn.commit()
    other = delete_partition("q")
    write_table(uri, sample().slice(0, 1), mode="append")  # to part p only: no conflict
    other.commit()


def test_a_field_brought_from_elsewhere_gets_fresh_mapping(tmp_path: Path) -> None:
    """A new column carrying another table's id and physical name (a copied StructField) must not
    reuse them: ids and physical names stay unique in the table."""
    uri = mapped_table(tmp_path, "id")
    schema = DeltaTable(uri).snapshot.schema
    taken = schema.field("id")
    foreign = StructField(
        "copied",
        PrimitiveType("long"),
        metadata={FIELD_ID_KEY: taken.field_id, PHYSICAL_NAME_KEY: "col-other"},
    )
    DeltaTable(uri).alter.add_columns([foreign])
    added = DeltaTable(uri).snapshot.schema.field("copied")
    last = max(field_id for _, field_id in physical_fields(schema, True) if field_id is not None)
    assert added.field_id == last + 1 and added.physical_name not in ("col-other", taken.physical_name)
    kept, _ = assign_column_mapping(schema, last, known=frozenset({taken.physical_name}))
    assert kept.field("id") == taken  # a field the table knows keeps its id and name
