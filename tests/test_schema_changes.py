"""Reads across schema changes: Delta's read-compatibility rules, the batch change feed's and the
streaming source's checks and errors (plain Python and through Spark)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.schema import Field, PrimitiveType

from replay.cdc import SCHEMA_MODE_KEY, DeltaSource, table_changes
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.protocol.errors import IncompatibleSchemaChangeError
from replay.protocol.filenames import delta_file
from replay.protocol.schema import parse_schema
from replay.protocol.schema_evolution import (
    has_no_column_mapping_schema_changes,
    is_read_compatible,
    tree_string,
)
from replay.spark import register

CDF_ON = {"delta.enableChangeDataFeed": "true"}


def schema(*fields: tuple[str, Any, bool] | tuple[str, Any, bool, dict[str, Any]]) -> str:
    """A schemaString from ``(name, type, nullable[, metadata])`` tuples."""
    return orjson.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": f[0], "type": f[1], "nullable": f[2], "metadata": f[3] if len(f) > 3 else {}}
                for f in fields
            ],
        }
    ).decode()


def mapped(name: str, physical: str, column_id: int, data_type: Any = "long") -> tuple[str, Any, bool, dict]:
    metadata = {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical}
    return (name, data_type, True, metadata)


# -- the rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("existing", "read", "forbid_tighten", "compatible"),
    [
        (schema(("a", "long", True)), schema(("a", "long", True), ("b", "string", True)), True, True),
        (schema(("a", "long", True), ("b", "string", True)), schema(("a", "long", True)), True, False),
        (schema(("a", "integer", True)), schema(("a", "long", True)), True, False),
        (schema(("a", "decimal(10,2)", True)), schema(("a", "decimal(12,2)", True)), True, False),
        (schema(("a", "long", True)), schema(("A", "long", True)), True, False),
        # nullable data read as non-nullable is refused when tightening is forbidden, and vice versa
        (schema(("a", "long", True)), schema(("a", "long", False)), True, False),
        (schema(("a", "long", False)), schema(("a", "long", True)), True, True),
        (schema(("a", "long", False)), schema(("a", "long", True)), False, False),
        (schema(("a", "long", True)), schema(("a", "long", False)), False, True),
        (
            schema(
                ("s", {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True}]}, True)
            ),
            schema(("s", {"type": "struct", "fields": []}, True)),
            True,
            False,
        ),
        (
            schema(("l", {"type": "array", "elementType": "long", "containsNull": True}, True)),
            schema(("l", {"type": "array", "elementType": "long", "containsNull": False}, True)),
            True,
            False,
        ),
        (
            schema(
                (
                    "m",
                    {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": False},
                    True,
                )
            ),
            schema(
                (
                    "m",
                    {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
                    True,
                )
            ),
            True,
            True,
        ),
    ],
)
def test_read_compatibility_is_deltas(
    existing: str, read: str, forbid_tighten: bool, compatible: bool
) -> None:
    assert (
        is_read_compatible(
            parse_schema(existing), parse_schema(read), forbid_tighten_nullability=forbid_tighten
        )
        is compatible
    )


def test_missing_columns_and_partitioning() -> None:
    wide, narrow = (
        parse_schema(schema(("a", "long", True), ("b", "long", True))),
        parse_schema(schema(("a", "long", True))),
    )
    assert is_read_compatible(wide, narrow, allow_missing_columns=True)
    assert not is_read_compatible(narrow, narrow, new_partition_columns=["a"], old_partition_columns=[])


def test_column_mapping_renames_and_drops() -> None:
    cm = {"delta.columnMapping.mode": "name"}
    base = Metadata(
        id="t", schema_string=schema(mapped("a", "col-1", 1), mapped("b", "col-2", 2)), configuration=cm
    )

    def with_schema(*fields: tuple[str, Any, bool, dict]) -> Metadata:
        return dataclasses.replace(base, schema_string=schema(*fields))

    added = with_schema(mapped("a", "col-1", 1), mapped("b", "col-2", 2), mapped("c", "col-3", 3))
    assert has_no_column_mapping_schema_changes(added, base)
    assert not has_no_column_mapping_schema_changes(base, added)  # the other way round it is a drop
    assert not has_no_column_mapping_schema_changes(
        with_schema(mapped("a", "col-1", 1), mapped("z", "col-2", 2)), base
    )
    readded = with_schema(mapped("a", "col-1", 1), mapped("b", "col-9", 9))  # drop b, add b again
    assert not has_no_column_mapping_schema_changes(readded, base)
    assert not has_no_column_mapping_schema_changes(dataclasses.replace(base, partition_columns=["a"]), base)
    plain = Metadata(id="t", schema_string=schema(("a", "long", True), ("b", "long", True)))
    upgraded = with_schema(mapped("a", "a", 1), mapped("b", "b", 2))
    assert has_no_column_mapping_schema_changes(upgraded, plain)  # enabling column mapping keeps names
    assert not has_no_column_mapping_schema_changes(
        with_schema(mapped("a", "a", 1), mapped("c", "b", 2)), plain
    )
    assert not has_no_column_mapping_schema_changes(plain, upgraded)  # reading across a downgrade
    assert has_no_column_mapping_schema_changes(plain, plain)


def test_tree_string_is_sparks() -> None:
    nested = {
        "type": "struct",
        "fields": [{"name": "x", "type": "decimal(10,2)", "nullable": False, "metadata": {}}],
    }
    text = schema(
        ("id", "long", False),
        ("s", nested, True),
        ("l", {"type": "array", "elementType": "integer", "containsNull": True}, True),
        ("m", {"type": "map", "keyType": "string", "valueType": nested, "valueContainsNull": False}, True),
    )
    assert tree_string(parse_schema(text)) == (
        "root\n"
        " |-- id: long (nullable = false)\n"
        " |-- s: struct (nullable = true)\n"
        " |    |-- x: decimal(10,2) (nullable = false)\n"
        " |-- l: array (nullable = true)\n"
        " |    |-- element: integer (containsNull = true)\n"
        " |-- m: map (nullable = true)\n"
        " |    |-- key: string\n"
        " |    |-- value: struct (valueContainsNull = false)\n"
        " |    |    |-- x: decimal(10,2) (nullable = false)\n"
    )


# -- tables ----------------------------------------------------------------------------------------
def commit(delta_log: DeltaLog, version: int, actions: list[Any]) -> None:
    delta_log.store.write(delta_file(delta_log.log_path, version), [action.json() for action in actions])


def new_table(path: Path) -> DeltaLog:
    """v0: ``id int, v string`` with rows 0-1 (change data feed on); v1: rows 2-3."""
    write_deltalake(
        str(path), pa.table({"id": pa.array([0, 1], pa.int32()), "v": ["v0", "v1"]}), configuration=CDF_ON
    )
    write_deltalake(
        str(path), pa.table({"id": pa.array([2, 3], pa.int32()), "v": ["v2", "v3"]}), mode="append"
    )
    return DeltaLog.for_table(str(path))


def change_schema(delta_log: DeltaLog, version: int, schema_string: str) -> None:
    """A commit that only replaces the schema (Delta's ``withMetadata``)."""
    metadata = delta_log.snapshot(version - 1).metadata
    commit(delta_log, version, [dataclasses.replace(metadata, schema_string=schema_string)])


def cm_table(path: Path) -> DeltaLog:
    """A column-mapping (name mode) table written by hand: v0 ``id``, ``v`` with rows 0-1."""
    path.mkdir()
    (path / "_delta_log").mkdir()
    delta_log = DeltaLog.for_table(str(path))
    pq.write_table(pa.table({"col-a": pa.array([0, 1]), "col-b": ["v0", "v1"]}), path / "f0.parquet")
    metadata = Metadata(
        id="cm-table",
        schema_string=schema(mapped("id", "col-a", 1), mapped("v", "col-b", 2, "string")),
        configuration={**CDF_ON, "delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"},
    )
    commit(delta_log, 0, [Protocol(2, 5), metadata, data_file(path, "f0.parquet")])
    return delta_log


def data_file(path: Path, name: str) -> AddFile:
    return AddFile(path=name, size=(path / name).stat().st_size, modification_time=1, data_change=True)


def cm_append(delta_log: DeltaLog, path: Path, version: int, rows: list[int]) -> None:
    name = f"f{version}.parquet"
    pq.write_table(pa.table({"col-a": pa.array(rows), "col-b": [f"v{i}" for i in rows]}), path / name)
    commit(delta_log, version, [data_file(path, name)])


def cm_rename(delta_log: DeltaLog, version: int, v_name: str) -> None:
    change_schema(delta_log, version, schema(mapped("id", "col-a", 1), mapped(v_name, "col-b", 2, "string")))


def ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


# -- batch change data feed ------------------------------------------------------------------------
def test_batch_changes_across_a_type_change_fail_before_reading_data(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t")
    change_schema(delta_log, 2, schema(("id", "long", True), ("v", "string", True)))  # v2: id int -> long
    write_deltalake(
        str(tmp_path / "t"), pa.table({"id": pa.array([4], pa.int64()), "v": ["v4"]}), mode="append"
    )
    for add in delta_log.snapshot(1).files():
        (tmp_path / "t" / add.path).unlink()  # reading any data of v0-v1 would fail differently
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        table_changes(delta_log, starting_version=0, ending_version=3)
    read = schema(("id", "long", True), ("v", "string", True))
    assert str(info.value) == (
        "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA] Retrieving table changes between version 0 and 3 "
        "failed because of an incompatible data schema.\n"
        f"Your read schema is {read} at version 3, but we found an incompatible data schema at version 0.\n"
        "If possible, please retrieve the table changes using the end version's schema by setting "
        f"{SCHEMA_MODE_KEY} to `endVersion`, or contact support. (table {delta_log.table_path})"
    )
    assert (info.value.version, info.value.read_version) == (0, 3)
    with pytest.raises(
        IncompatibleSchemaChangeError, match=r"(?s)between version 1 and 1 .* data schema at version 1"
    ):
        table_changes(delta_log, starting_version=1, ending_version=1)  # the latest schema reads old data
    assert ids(table_changes(delta_log, starting_version=2)) == [4]


def test_batch_changes_across_tightened_nullability_or_a_dropped_column_fail(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t")
    change_schema(delta_log, 2, schema(("id", "integer", False), ("v", "string", True)))  # id NOT NULL
    with pytest.raises(
        IncompatibleSchemaChangeError, match=r"^\[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA\]"
    ):
        table_changes(delta_log, starting_version=0)
    change_schema(delta_log, 3, schema(("id", "integer", False)))  # v dropped (no column mapping)
    with pytest.raises(
        IncompatibleSchemaChangeError,
        match="at version 3, but we found an incompatible data schema at version 2",
    ):
        table_changes(delta_log, starting_version=2)
    assert table_changes(delta_log, starting_version=3).column_names == [
        "id",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    ]


def test_additive_changes_keep_the_batch_change_feed_working(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path)
    DeltaTable(str(path)).alter.add_columns([Field("name", PrimitiveType("string"), nullable=True)])  # v2
    write_deltalake(
        str(path), pa.table({"id": pa.array([4], pa.int32()), "v": ["v4"], "name": ["n4"]}), mode="append"
    )
    changes = table_changes(delta_log, starting_version=0)
    assert ids(changes) == [0, 1, 2, 3, 4]
    assert changes["name"].to_pylist().count(None) == 4 and "n4" in changes["name"].to_pylist()


def test_column_mapping_reads_with_the_end_version_schema(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = cm_table(path)
    cm_append(delta_log, path, 1, [2])
    cm_rename(delta_log, 2, "value")  # RENAME COLUMN v TO value
    cm_append(delta_log, path, 3, [3])
    cm_rename(delta_log, 4, "v")  # and back
    cm_append(delta_log, path, 5, [4])
    # [0, 1] reads with v1's schema, before the rename
    assert table_changes(delta_log, starting_version=0, ending_version=1).column_names[:2] == ["id", "v"]
    # [2, 3] reads with v3's schema: the column is `value`
    changes = table_changes(delta_log, starting_version=2, ending_version=3)
    assert changes.column_names[:2] == ["id", "value"] and changes["value"].to_pylist() == ["v3"]
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        table_changes(delta_log, starting_version=1, ending_version=3)
    assert str(info.value).startswith(
        "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA] Retrieving table changes"
    )
    assert (info.value.version, info.value.read_version) == (1, 3)
    # v0 and v5 look alike, but v2 and v3 read `value` with a schema calling it `v`
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        table_changes(delta_log, starting_version=0, ending_version=5)
    assert str(info.value).startswith(
        "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE] Retrieving table changes between version 0 "
        "and 5 failed because of an incompatible schema change.\nYour read schema is "
    )
    assert str(info.value).endswith(
        "at version 5, but we found an incompatible schema change at version 2.\nIf possible, please query "
        "table changes separately from version 0 to 2 - 1, and from version 2 to 5. "
        f"(table {delta_log.table_path})"
    )
    # the `latest` schema mode reads [2, 3] with the latest schema, where the column is `v` again
    latest = DeltaLog.for_table(str(path), {SCHEMA_MODE_KEY: "latest"})
    with pytest.raises(
        IncompatibleSchemaChangeError,
        match="at version 5, but we found an incompatible data schema at version 2",
    ):
        table_changes(latest, starting_version=2, ending_version=3)


def test_dropped_column_under_column_mapping(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = cm_table(path)
    change_schema(delta_log, 1, schema(mapped("id", "col-a", 1)))  # DROP COLUMN v
    cm_append(delta_log, path, 2, [2])
    with pytest.raises(IncompatibleSchemaChangeError, match="incompatible data schema at version 0"):
        table_changes(delta_log, starting_version=0)
    assert ids(table_changes(delta_log, starting_version=1)) == [2]


# -- the streaming source --------------------------------------------------------------------------
def drain(source: DeltaSource, start: Any) -> tuple[list[pa.Table], Any]:
    """Every batch from ``start`` on (no admission limit); the batches and the last offset."""
    batches = []
    for _ in range(20):
        end = source.latest_offset(start, None)
        if end == start:
            return batches, start
        batches.append(source.read_batch(start, end))
        start = end
    raise AssertionError("the stream did not finish")


@pytest.mark.parametrize("change_feed", [True, False], ids=["change-feed", "plain"])
def test_stream_stops_at_a_rename_or_drop_under_column_mapping(tmp_path: Path, change_feed: bool) -> None:
    path = tmp_path / "t"
    delta_log = cm_table(path)
    cm_append(delta_log, path, 1, [2])
    source = DeltaSource(delta_log, read_change_feed=change_feed, starting_version=0)
    batches, offset = drain(source, source.initial_offset())
    assert sorted(i for b in batches for i in b["id"].to_pylist()) == [0, 1, 2]
    cm_rename(delta_log, 2, "value")
    cm_append(delta_log, path, 3, [3])
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        source.latest_offset(offset, None)
    before = schema(mapped("id", "col-a", 1), mapped("v", "col-b", 2, "string"))
    after = schema(mapped("id", "col-a", 1), mapped("value", "col-b", 2, "string"))
    assert str(info.value) == (
        "[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE] Streaming read is not supported on tables with "
        "read-incompatible schema changes (e.g. rename or drop or datatype changes).\n"
        "For further information and possible next steps to resolve this issue, please review the "
        "documentation at https://docs.delta.io/latest/versioning.html#column-mapping\n"
        f"Read schema: {before}. Incompatible data schema: {after}. (table {delta_log.table_path})"
    )
    assert (info.value.version, info.value.read_version) == (2, 1)
    # a source started after the rename (a restarted query) reads on with the new schema
    restarted = DeltaSource(delta_log, read_change_feed=change_feed, starting_version=0)
    batches, offset = drain(restarted, offset)
    assert [b.column_names[:2] for b in batches] == [["id", "value"]]
    change_schema(delta_log, 4, schema(mapped("id", "col-a", 1)))  # DROP COLUMN value
    with pytest.raises(
        IncompatibleSchemaChangeError, match=r"^\[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE\]"
    ):
        restarted.latest_offset(offset, None)


def test_stream_stops_at_a_type_change(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t")
    source = DeltaSource(delta_log)
    _, offset = drain(source, source.initial_offset())
    change_schema(delta_log, 2, schema(("id", "long", True), ("v", "string", True)))
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        source.latest_offset(offset, None)
    assert str(info.value).startswith(
        "[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE] Streaming read is not supported on tables with "
        "read-incompatible schema changes (e.g. rename or drop or datatype changes).\n"
    )
    assert '"type":"long"' in str(info.value) and info.value.version == 2


def test_stream_stops_when_a_column_becomes_non_nullable(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t")
    running = DeltaSource(delta_log, read_change_feed=False, starting_version=0)
    _, offset = drain(running, running.initial_offset())
    change_schema(delta_log, 2, schema(("id", "integer", False), ("v", "string", True)))  # id NOT NULL
    write_deltalake(
        str(tmp_path / "t"), pa.table({"id": pa.array([4], pa.int32()), "v": ["v4"]}), mode="append"
    )
    with pytest.raises(
        IncompatibleSchemaChangeError, match=r"^\[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE\]"
    ):
        drain(running, offset)
    # a stream started after the change cannot read the older, nullable data with its schema
    late = DeltaSource(delta_log, read_change_feed=False, starting_version=0)
    with pytest.raises(IncompatibleSchemaChangeError) as info:
        late.latest_offset(late.initial_offset(), None)
    message = str(info.value)
    assert message.startswith(
        "[DELTA_SCHEMA_CHANGED_WITH_STARTING_OPTIONS] Detected schema change in version 0:\n"
        "streaming source schema: root\n |-- id: integer (nullable = false)\n"
    )
    assert message.endswith(
        "query from scratch using a new checkpoint directory. If the issue persists after\n"
        "changing to a new checkpoint directory, you may need to change the existing\n"
        "'startingVersion' or 'startingTimestamp' option to start from a version newer than\n"
        f"0 with a new checkpoint directory. (table {delta_log.table_path})"
    )


@pytest.mark.parametrize("change_feed", [True, False])
def test_additive_change_keeps_the_stream_flowing(tmp_path: Path, change_feed: bool) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path)
    running = DeltaSource(delta_log, read_change_feed=change_feed)
    _, offset = drain(running, running.initial_offset())
    DeltaTable(str(path)).alter.add_columns([Field("name", PrimitiveType("string"), nullable=True)])  # v2
    write_deltalake(
        str(path), pa.table({"id": pa.array([4], pa.int32()), "v": ["v4"], "name": ["n4"]}), mode="append"
    )
    # the running stream goes on with the schema it started with (the new column is not in it)
    batches, _ = drain(running, offset)
    assert [b["id"].to_pylist() for b in batches] == [[4]]
    assert all("name" not in b.schema.names for b in batches)
    # a new stream reading the data written before the column existed gets nulls for it
    backfill = DeltaSource(delta_log, read_change_feed=change_feed, starting_version=0)
    rows = [
        row
        for b in drain(backfill, backfill.initial_offset())[0]
        for row in b.select(["id", "name"]).to_pylist()
    ]
    assert sorted(rows, key=lambda row: row["id"]) == [
        {"id": 0, "name": None},
        {"id": 1, "name": None},
        {"id": 2, "name": None},
        {"id": 3, "name": None},
        {"id": 4, "name": "n4"},
    ]


@pytest.mark.spark
def test_spark_stream_stops_at_a_rename_and_restarts_after_it(spark: Any, tmp_path: Path) -> None:
    register(spark)
    path = tmp_path / "t"
    delta_log = cm_table(path)
    seen: list[tuple[int, str]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.extend((row[0], row[1]) for row in frame.collect())

    def start() -> Any:
        return (
            spark.readStream.format("deltalog")
            .load(str(path))
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
        assert sorted(seen) == [(0, "v0"), (1, "v1")]
        cm_rename(delta_log, 1, "value")
        cm_append(delta_log, path, 2, [2])
        with pytest.raises(Exception, match="DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE"):
            query.processAllAvailable()
    finally:
        query.stop()
    assert "DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE" in str(query.exception())
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(seen) == [(0, "v0"), (1, "v1"), (2, "v2")]


@pytest.mark.spark
def test_spark_change_feed_reads_with_the_end_version_schema(spark: Any, tmp_path: Path) -> None:
    register(spark)
    path = tmp_path / "t"
    delta_log = cm_table(path)
    cm_rename(delta_log, 1, "value")
    cm_append(delta_log, path, 2, [2])
    cm_rename(delta_log, 3, "v")

    def read(start: int, end: int) -> Any:
        reader = spark.read.format("deltalog").option("readChangeFeed", "true")
        return reader.option("startingVersion", start).option("endingVersion", end).load(str(path))

    frame = read(1, 2)
    assert frame.columns[:2] == ["id", "value"]
    assert [tuple(row)[:3] for row in frame.collect()] == [(2, "v2", "insert")]
    with pytest.raises(Exception, match="DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA"):
        read(0, 2).collect()
