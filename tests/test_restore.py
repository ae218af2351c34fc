"""RESTORE: the files, metadata and protocol of an earlier version in one commit, Delta's metrics and
errors, the change feed of a restore, and delta-rs's answer on the same table."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable
from deltalake import QueryBuilder

from replay import ConcurrentModificationError, DeltaLog, DeltaTable, Metadata, Protocol, write_table
from replay.data.deletion_vector_writer import DeletionVectorWriter
from replay.maintenance.restore import RestoreError, restore
from replay.maintenance.vacuum import vacuum


def values(table: DeltaTable | RustTable, column: str = "a") -> list[object]:
    return sorted(table.to_pyarrow_table()[column].to_pylist())


def three_versions(uri: str) -> None:
    write_table(uri, pa.table({"a": [1, 2, 3], "p": [0, 1, 0]}), partition_by=["p"])
    write_table(uri, pa.table({"a": [4], "p": [1]}))
    write_table(uri, pa.table({"a": [5], "p": [2]}), mode="overwrite")


def test_restore_matches_delta_rs(tmp_path: Path) -> None:
    ours_path, theirs_path = tmp_path / "ours", tmp_path / "theirs"
    three_versions(str(ours_path))
    shutil.copytree(ours_path, theirs_path)
    ours, theirs = DeltaTable(str(ours_path)), RustTable(str(theirs_path))
    metrics = ours.restore(1)
    rust_metrics = theirs.restore(1)
    assert values(ours) == values(theirs) == [1, 2, 3, 4]
    assert (metrics["numRestoredFiles"], metrics["numRemovedFiles"]) == (3, 1)
    assert (metrics["numRestoredFile"], metrics["numRemovedFile"]) == (
        rust_metrics["numRestoredFile"],
        rust_metrics["numRemovedFile"],
    )
    assert metrics["numOfFilesAfterRestore"] == 3
    sizes = {f: os.path.getsize(ours_path / f) for f in ours.files()}
    assert metrics["tableSizeAfterRestore"] == metrics["restoredFilesSize"] == sum(sizes.values())
    assert metrics["removedFilesSize"] > 0
    assert ours.version() == 3
    entry = ours.history(1)[0]
    assert entry["operation"] == "RESTORE"
    assert entry["operationParameters"] == {"version": "1", "timestamp": None}
    assert entry["operationMetrics"] == {k: str(v) for k, v in metrics.items() if not k.endswith("File")}
    assert entry["isBlindAppend"] is False
    # delta-rs reads our restored table, and its own
    assert values(RustTable(str(ours_path))) == [1, 2, 3, 4]
    actions = DeltaLog.for_table(str(ours_path)).read_version(3)
    adds = [a for a in actions if type(a).__name__ == "AddFile"]
    removes = [a for a in actions if type(a).__name__ == "RemoveFile"]
    assert all(a.data_change for a in adds) and all(r.data_change for r in removes)
    assert any(isinstance(a, Metadata) for a in actions) and any(isinstance(a, Protocol) for a in actions)


def test_restore_to_a_time(tmp_path: Path) -> None:
    uri = str(tmp_path)
    three_versions(uri)
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for version in range(3):
        stamp = (base + dt.timedelta(minutes=version)).timestamp()
        os.utime(tmp_path / "_delta_log" / f"{version:020d}.json", (stamp, stamp))
    table = DeltaTable(uri)
    table.restore(base + dt.timedelta(minutes=1, seconds=30))
    assert values(table) == [1, 2, 3, 4]
    assert table.history(1)[0]["operationParameters"] == {
        "version": None,
        "timestamp": "2024-01-01 00:01:30+00:00",
    }
    table.restore("2024-01-01 00:00:10")
    assert values(table) == [1, 2, 3]
    with pytest.raises(
        RestoreError, match=r"^\[DELTA_CANNOT_RESTORE_TIMESTAMP_EARLIER\] Cannot restore table"
    ):
        table.restore("2023-12-31")
    with pytest.raises(RestoreError, match=r"^\[DELTA_CANNOT_RESTORE_TIMESTAMP_GREATER\]"):
        table.restore(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))


def test_versions_outside_the_history_are_refused(tmp_path: Path) -> None:
    uri = str(tmp_path)
    three_versions(uri)
    table = DeltaTable(uri)
    with pytest.raises(
        RestoreError,
        match=r"^\[DELTA_CANNOT_RESTORE_TABLE_VERSION\] .* version 7\. Available versions: \[0, 2\]",
    ):
        table.restore(7)
    with pytest.raises(RestoreError, match="should be less than the last available version"):
        table.restore(2)
    assert table.version() == 2 and len(DeltaTable(uri).history()) == 3


def test_metadata_comes_back_and_the_protocol_is_not_downgraded(tmp_path: Path) -> None:
    uri = str(tmp_path)
    write_table(uri, pa.table({"a": [1]}))
    log = DeltaLog.for_table(uri)
    metadata = log.update().metadata
    changed = Metadata(
        id=metadata.id,
        schema_string=metadata.schema_string,
        configuration={"delta.enableChangeDataFeed": "true"},
        created_time=metadata.created_time,
    )
    log.commit([Protocol(1, 4), changed], operation="SET TBLPROPERTIES")
    write_table(uri, pa.table({"a": [2]}))
    table = DeltaTable(uri)
    table.restore(0)
    assert table.metadata().configuration == {}
    assert table.protocol() == Protocol(1, 4)  # never downgraded
    table.restore(2, protocol_downgrade_allowed=True)  # back to the CDF version: config returns
    assert table.metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    table.restore(0, protocol_downgrade_allowed=True)
    assert table.protocol() == Protocol(1, 2)


def test_missing_files_are_an_error_unless_ignored(tmp_path: Path) -> None:
    uri = str(tmp_path)
    three_versions(uri)
    log = DeltaLog.for_table(uri)
    gone = vacuum(
        log.io, log.update(), retention_hours=0, dry_run=False, enforce_retention_duration=False
    ).files
    assert len(gone) == 3
    table = DeltaTable(uri)
    with pytest.raises(RestoreError) as caught:
        table.restore(1)
    message = str(caught.value)
    assert message.startswith(
        f"Cannot restore table file://{tmp_path}: not all files from version 1 are available"
    )
    assert all(name in message for name in gone)
    assert "spark.sql.files.ignoreMissingFiles" in message
    assert table.version() == 4  # VACUUM START/END only
    table.restore(1, ignore_missing_files=True)
    assert sorted(table.files()) == sorted(DeltaLog.for_table(uri).snapshot(1).file_paths())
    conf = {"spark.sql.files.ignoreMissingFiles": "true"}
    DeltaTable(uri, conf=conf).restore(0)


def test_a_concurrent_commit_fails_the_restore(tmp_path: Path) -> None:
    uri = str(tmp_path)
    three_versions(uri)
    log = DeltaLog.for_table(uri)
    stale = log.update()
    write_table(uri, pa.table({"a": [6], "p": [2]}))
    with pytest.raises(ConcurrentModificationError):
        restore(log.io, stale, 1)
    assert log.latest_version() == 3


# -- the change feed --------------------------------------------------------------------------------
def test_the_change_feed_shows_a_restore_as_inserts_and_deletes(tmp_path: Path) -> None:
    uri = str(tmp_path)
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_table(uri, pa.table({"a": [1, 2, 3], "p": [0, 1, 0]}), partition_by=["p"], configuration=cdf)
    write_table(uri, pa.table({"a": [4], "p": [1]}), configuration=cdf)
    write_table(uri, pa.table({"a": [5], "p": [2]}), mode="overwrite", configuration=cdf)
    table = DeltaTable(uri)
    table.restore(1)
    changes = table.load_cdf(3)
    rows = sorted(zip(changes["a"].to_pylist(), changes["_change_type"].to_pylist(), strict=True))
    assert rows == [(1, "insert"), (2, "insert"), (3, "insert"), (4, "insert"), (5, "delete")]
    assert set(changes["_commit_version"].to_pylist()) == {3}


def test_restoring_a_deletion_vector_brings_its_rows_back(tmp_path: Path) -> None:
    """The file's DV changed since the target: it is removed and re-added without it; the change
    feed reads the pair as the rows the DV had deleted, inserted."""
    uri = str(tmp_path)
    configuration = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
    write_table(uri, pa.table({"id": list(range(10))}), configuration=configuration)
    log = DeltaLog.for_table(uri)
    snapshot = log.update()
    (file,) = snapshot.files()
    with DeletionVectorWriter.for_table(uri, snapshot.metadata.configuration) as writer:
        actions = writer.update(file, [1, 3, 5]).actions(0)
    log.commit(actions, operation="DELETE", read_version=0)
    assert sorted(DeltaTable(uri).to_pyarrow_table()["id"].to_pylist()) == [0, 2, 4, 6, 7, 8, 9]
    table = DeltaTable(uri)
    metrics = table.restore(0)
    assert (metrics["numRestoredFiles"], metrics["numRemovedFiles"]) == (1, 1)
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(10))
    changes = table.load_cdf(2)
    rows = sorted(zip(changes["id"].to_pylist(), changes["_change_type"].to_pylist(), strict=True))
    assert rows == [(1, "insert"), (3, "insert"), (5, "insert")]
    assert table.protocol().reader_features == ["deletionVectors"]
    reader = QueryBuilder().register("t", RustTable(uri)).execute("select id from t")
    assert sorted(pa.table(reader.read_all())["id"].to_pylist()) == list(range(10))
