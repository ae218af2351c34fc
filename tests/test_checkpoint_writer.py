"""``replay.checkpoint_writer``: classic single- and multi-part checkpoints and ``_last_checkpoint``."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from replay.delta_log import DeltaLog
from replay.log.last_checkpoint import last_checkpoint_checksum, read_last_checkpoint
from replay.protocol.actions import (
    AddFile,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.arrow_actions import CHECKPOINT_SCHEMA
from replay.txn.checkpoint_writer import checkpoint_table, split_parts, write_checkpoint
from replay.txn.transaction import commit_actions as commit
from replay.txn.write import write_table

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def new_log(
    uri: str, configuration: dict[str, str] | None = None, protocol: Protocol | None = None
) -> DeltaLog:
    log = DeltaLog.for_table(uri)
    metadata = Metadata(id="table-id", schema_string=SCHEMA, configuration=configuration or {})
    commit(log.io, [protocol or Protocol(1, 2), metadata], read_version=-1)
    return log


def add(path: str, **fields: object) -> AddFile:
    return AddFile(path=path, size=10, modification_time=5, data_change=True, **fields)  # type: ignore[arg-type]


def remove_json_commits(table: Path, up_to: int) -> None:
    for commit_file in (table / "_delta_log").glob("*.json"):
        if int(commit_file.name.split(".")[0]) <= up_to:
            commit_file.unlink()


def test_schema_matches_delta() -> None:
    assert CHECKPOINT_SCHEMA.names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    remove_fields = [field.name for field in CHECKPOINT_SCHEMA.field("remove").type]
    assert remove_fields == [
        "path",
        "deletionTimestamp",
        "dataChange",
        "extendedFileMetadata",
        "partitionValues",
        "size",
        "deletionVector",
        "baseRowId",
        "defaultRowCommitVersion",
    ]
    add_fields = [field.name for field in CHECKPOINT_SCHEMA.field("add").type]
    assert add_fields[-1] == "stats"
    assert "tags" in add_fields and "clusteringProvider" in add_fields


@pytest.mark.parametrize(
    ("file_actions", "part_size", "parts"),
    [
        (2, 10, 1),
        (11, 10, 2),
        (20, 10, 2),
        (31, 10, 4),
        (100, 100, 1),
        (101, 100, 2),
        (0, 10, 1),
        (7, None, 1),
    ],
)
def test_number_of_parts(file_actions: int, part_size: int | None, parts: int) -> None:
    header = checkpoint_table([Protocol(1, 2), Metadata(id="m", schema_string=SCHEMA)])
    rows = checkpoint_table([add(f"f{i:03d}") for i in range(file_actions)])
    result = split_parts(header, rows, part_size)
    assert len(result) == parts
    assert sum(part.num_rows for part in result) == file_actions + 2
    assert result[0].column("protocol").null_count == result[0].num_rows - 1


def test_split_parts_rejects_non_positive_threshold() -> None:
    with pytest.raises(ValueError, match="parts_threshold must be positive, got 0"):
        split_parts(checkpoint_table([]), checkpoint_table([]), 0)


def test_checkpoint_table_refuses_commit_only_actions() -> None:
    from replay.protocol.actions import CommitInfo

    with pytest.raises(TypeError, match="CommitInfo actions do not belong in a classic checkpoint"):
        checkpoint_table([CommitInfo({})])


def test_single_part_checkpoint_round_trip(tmp_path: Path) -> None:
    table = tmp_path / "t"
    log = new_log(str(table), {"delta.deletedFileRetentionDuration": "interval 1 hour"})
    now = int(time.time() * 1000)
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 4, 40, 6)
    commit(
        log.io,
        [add("a", stats='{"numRecords":1}'), add("b", partition_values={}), add("c", deletion_vector=dv)],
    )
    commit(
        log.io,
        [
            RemoveFile(path="b", deletion_timestamp=now, data_change=True),
            RemoveFile(path="old", deletion_timestamp=1000, data_change=True),
            SetTransaction("app", 3, now),
            DomainMetadata("d1", '{"k":1}', False),
            DomainMetadata("gone", "{}", True),
        ],
    )
    before = log.snapshot()
    result = write_checkpoint(log.io, before)
    assert result.version == 2
    assert [Path(p).name for p in result.paths] == [f"{2:020d}.checkpoint.parquet"]

    raw = orjson.loads((table / "_delta_log" / "_last_checkpoint").read_bytes())
    assert list(raw) == ["version", "size", "sizeInBytes", "numOfAddFiles", "checksum"]
    assert raw["version"] == 2
    assert raw["size"] == 7  # protocol, metadata, domain, txn, 2 adds, 1 tombstone
    assert raw["numOfAddFiles"] == 2
    assert raw["sizeInBytes"] == (table / "_delta_log" / f"{2:020d}.checkpoint.parquet").stat().st_size
    assert raw["checksum"] == last_checkpoint_checksum(raw)
    assert read_last_checkpoint(log.io).version == 2

    rows = pq.read_table(table / "_delta_log" / f"{2:020d}.checkpoint.parquet").to_pylist()
    kinds = [next(k for k, v in row.items() if v is not None) for row in rows]
    assert kinds[:4] == ["protocol", "metaData", "domainMetadata", "txn"]
    file_rows = {(row["add"] or row["remove"])["path"]: row for row in rows[4:]}
    assert sorted(file_rows) == ["a", "b", "c"]
    assert [kind for kind in ("add", "remove") if file_rows["b"][kind]] == ["remove"]
    assert all((row["add"] or row["remove"])["dataChange"] is False for row in file_rows.values())
    assert file_rows["a"]["add"]["stats"] == '{"numRecords":1}'
    assert file_rows["c"]["add"]["deletionVector"] == {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 4,
        "sizeInBytes": 40,
        "cardinality": 6,
    }
    assert rows[3]["txn"] == {"appId": "app", "version": 3, "lastUpdated": now}
    assert rows[2]["domainMetadata"] == {"domain": "d1", "configuration": '{"k":1}', "removed": False}

    remove_json_commits(table, 1)  # the snapshot must now come from the checkpoint
    after = DeltaLog.for_table(str(table)).snapshot()
    assert after.log_segment.checkpoint_version == 2
    assert sorted(a.unique_key for a in after.files()) == sorted(a.unique_key for a in before.files())
    assert [f.deletion_vector for f in after.files() if f.path == "c"] == [dv]
    assert [t.path for t in after.tombstones()] == ["b"]
    assert after.set_transactions == {"app": 3}
    assert list(after.domain_metadata) == ["d1"]
    assert (after.protocol, after.metadata) == (before.protocol, before.metadata)


def test_multi_part_checkpoint_read_by_us_and_deltars(tmp_path: Path) -> None:
    table = tmp_path / "t"
    path = str(table)
    for index in range(5):
        write_table(path, pa.table({"id": [index]}))
    log = DeltaLog.for_table(path)
    delete = log.snapshot().files()[0]
    commit(
        log.io, [RemoveFile(path=delete.path, deletion_timestamp=int(time.time() * 1000), data_change=True)]
    )
    expected = sorted(add.path for add in log.snapshot().files())
    result = log.snapshot()
    written = write_checkpoint(log.io, result, parts_threshold=2)
    assert [Path(p).name for p in written.paths] == [
        f"{5:020d}.checkpoint.{i:010d}.{3:010d}.parquet" for i in (1, 2, 3)
    ]
    info = read_last_checkpoint(log.io)
    assert (info.version, info.parts, info.size, info.num_of_add_files) == (5, 3, 7, 4)
    remove_json_commits(table, 4)
    assert sorted(add.path for add in DeltaLog.for_table(path).snapshot().files()) == expected
    theirs = DeltaTable(path)
    assert theirs.version() == 5
    assert sorted(Path(uri).name for uri in theirs.file_uris()) == sorted(Path(p).name for p in expected)


def test_part_size_from_conf(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    new_log(uri)
    log = DeltaLog.for_table(uri, {"spark.databricks.delta.checkpoint.partSize": "1"})
    commit(log.io, [add("a"), add("b")])
    assert len(log.checkpoint().paths) == 2


def test_checkpoint_on_memory_store() -> None:
    uri = f"memory://checkpoint-{uuid.uuid4().hex}/t"
    log = new_log(uri)
    commit(log.io, [add("a")])
    result = log.checkpoint()
    assert result.paths == [f"{uri}/_delta_log/{1:020d}.checkpoint.parquet"]
    log.store.delete(f"{uri}/_delta_log/{0:020d}.json")
    assert [f.path for f in DeltaLog.for_table(uri).snapshot().files()] == ["a"]


def test_checkpoint_through_a_rename_store_leaves_no_temp_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    new_log(uri)
    log = DeltaLog.for_table(uri, {"spark.delta.logStore.class": "hdfs"})
    assert log.store.is_partial_write_visible(log.log_path)
    commit(log.io, [add("a")])
    log.checkpoint()
    log.checkpoint()  # written again over the same files: replaced whole
    names = sorted(p.name for p in (tmp_path / "t" / "_delta_log").iterdir())
    assert names == [f"{0:020d}.json", f"{1:020d}.checkpoint.parquet", f"{1:020d}.json", "_last_checkpoint"]


def test_v2_checkpoint_tables_get_v2_checkpoints_read_by_us_and_deltars(tmp_path: Path) -> None:
    """A V2 checkpoint under the classic name: one file (whatever the part size), a
    ``checkpointMetadata`` row of its own, every file inline; delta-rs reads the table from it."""
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1, 2]}), configuration={"delta.checkpointPolicy": "v2"})
    assert DeltaTable(uri).protocol().writer_features is not None
    for value in range(3, 6):
        write_table(uri, pa.table({"a": [value]}), mode="append")
    log = DeltaLog.for_table(uri, {"spark.databricks.delta.checkpoint.partSize": "1"})
    result = log.checkpoint()
    assert len(result.paths) == 1 and result.paths[0].endswith(f"{3:020d}.checkpoint.parquet")
    table = pq.read_table(result.paths[0].removeprefix("file://"))
    assert table.column_names == [*CHECKPOINT_SCHEMA.names, "checkpointMetadata"]
    markers = [row for row in table.column("checkpointMetadata").to_pylist() if row is not None]
    assert markers == [{"version": 3, "tags": None}]
    assert table.num_rows == result.size == 2 + 4 + 1  # protocol, metadata, four adds, the marker
    assert read_last_checkpoint(log.io).version == 3  # type: ignore[union-attr]
    remove_json_commits(tmp_path / "t", 2)  # only the checkpoint can give the state now
    fresh = DeltaLog.for_table(uri).update()
    assert sorted(fresh.to_arrow().column("a").to_pylist()) == [1, 2, 3, 4, 5]
    rust = QueryBuilder().register("t", DeltaTable(uri)).execute("select a from t").read_all()
    assert sorted(pa.table(rust).column("a").to_pylist()) == [1, 2, 3, 4, 5]
