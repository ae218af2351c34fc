"""VACUUM: which files go (Delta's rules), what stays, the commits it makes, the retention check,
delta-rs's answer on the same tables, and safety while writers run."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as RustTable

from replay import ConcurrentModificationError, DeltaLog, DeltaTable, write_table
from replay.data.deletion_vectors import dv_file_path
from replay.log.table_io import TableIO
from replay.maintenance import vacuum_listing
from replay.maintenance.vacuum import (
    VacuumRetentionError,
    plan_vacuum,
    retention_ms,
    vacuum,
    vacuum_logged,
)
from replay.maintenance.vacuum_listing import is_hidden, stat_local
from replay.txn.data_writer import DataFileWriter
from replay.txn.write_plan import WriteOptions, latest_snapshot, plan_write

DAY_S = 86_400
NO_CHECK = {"enforce_retention_duration": False}


def age(path: Path, seconds: float) -> None:
    """Make every file under ``path`` (outside ``_delta_log``) ``seconds`` older."""
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            full = os.path.join(root, name)
            stat = os.stat(full)
            os.utime(full, (stat.st_atime - seconds, stat.st_mtime - seconds))


def data_files(path: Path) -> set[str]:
    """Files under ``path`` outside ``_delta_log``, relative, ``/``-separated."""
    found = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            found.add(os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/"))
    return found


def test_hidden_names_follow_delta() -> None:
    partition = ["p", "_under"]
    for name in ("_delta_log", ".part-0.crc", "_SUCCESS", "_tmp", ".hidden"):
        assert is_hidden(name, partition)
    for name in ("_change_data", "_delta_index", "p=1", "_under=2", "part-0.parquet", "metadata", "x=1"):
        assert not is_hidden(name, partition)
    assert is_hidden("metadata", partition, iceberg_metadata_hidden=True)
    assert is_hidden("_p=1", ["p"])


@pytest.mark.parametrize("cached_stat_ns", [0, 10**12], ids=["on-threads", "inline"])
def test_local_sizes_and_times_are_read_alike_inline_or_on_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached_stat_ns: int
) -> None:
    """Whether the first ``stat`` s look cached or not, every file still there is read once, with
    its size and time, in order; a file gone meanwhile is left out."""
    monkeypatch.setattr(vacuum_listing, "STAT_BATCH", 3)
    monkeypatch.setattr(vacuum_listing, "CACHED_STAT_NS", cached_stat_ns)
    paths = [f"d{i % 2}/f{i}" for i in range(11)]
    for i, path in enumerate(paths):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_bytes(b"x" * i)
        os.utime(tmp_path / path, ns=(10**18, (1_600_000_000 + i) * 10**9))
    listed = stat_local(str(tmp_path), [*paths[:5], "d0/gone", *paths[5:]])
    assert listed.column("path").to_pylist() == paths
    assert listed.column("size").to_pylist() == list(range(11))
    assert listed.column("modification_time").to_pylist() == [(1_600_000_000 + i) * 1000 for i in range(11)]
    assert stat_local(str(tmp_path), []).num_rows == 0


def test_retention_is_rounded_to_hours_as_delta_does() -> None:
    assert retention_ms(None) is None
    assert retention_ms(0) == 0
    assert retention_ms(1.4) == 3_600_000
    assert retention_ms(1.5) == 7_200_000
    assert retention_ms(168) == 168 * 3_600_000


def test_a_short_retention_is_refused_with_delta_message(tmp_path: Path) -> None:
    write_table(str(tmp_path), pa.table({"a": [1]}))
    table = DeltaTable(str(tmp_path))
    with pytest.raises(VacuumRetentionError) as caught:
        table.vacuum(retention_hours=1)
    message = str(caught.value)
    assert message.startswith(
        "[DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT] Are you sure you would like to vacuum"
    )
    assert str(tmp_path) in message.splitlines()[0]
    assert "spark.databricks.delta.retentionDurationCheck.enabled = false" in message
    assert 'please use a value not less than "168 hours"' in message
    with pytest.raises(VacuumRetentionError, match="can't be less than 0"):
        table.vacuum(retention_hours=-1, **NO_CHECK)
    # the session setting turns the check off, as does the argument
    conf = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}
    assert DeltaTable(str(tmp_path), conf=conf).vacuum(retention_hours=0) == []
    assert table.vacuum(retention_hours=0, **NO_CHECK) == []
    # a table retention of 90 minutes asks for at least 2 hours, rounded up as Delta does
    write_table(
        str(tmp_path / "t2"),
        pa.table({"a": [1]}),
        configuration={"delta.deletedFileRetentionDuration": "interval 90 minutes"},
    )
    with pytest.raises(VacuumRetentionError, match='not less than "2 hours"'):
        DeltaTable(str(tmp_path / "t2")).vacuum(retention_hours=1)
    assert DeltaTable(str(tmp_path / "t2")).vacuum(retention_hours=2) == []


def test_what_goes_and_what_stays(tmp_path: Path) -> None:
    """Removed files, orphans, old change data and uncommitted files go once older than the
    retention; active files, hidden names and young files stay; empty directories go."""
    path = tmp_path / "t"
    uri = str(path)
    write_table(uri, pa.table({"a": [1, 2], "p": ["x", "y"]}), partition_by=["p"])
    write_table(uri, pa.table({"a": [3], "p": ["z"]}), mode="overwrite")  # removes p=x, p=y files
    removed = {f for f in data_files(path) if not f.startswith("p=z")}
    (path / "orphan.parquet").write_bytes(b"x")
    (path / "_change_data").mkdir()
    (path / "_change_data" / "cdc-0.parquet").write_bytes(b"x")
    (path / "_hidden.txt").write_bytes(b"x")
    (path / ".hidden").mkdir()
    (path / ".hidden" / "f").write_bytes(b"x")
    (path / "p=x" / ".part.crc").write_bytes(b"x")
    (path / "empty" / "nested").mkdir(parents=True)
    active = {f for f in data_files(path) if f.startswith("p=z")}
    table = DeltaTable(uri)
    # with the default retention (7 days) nothing is old enough: the tombstones are recent too
    assert table.vacuum() == []
    # the files are 8 days old; 3 days from now the tombstones are still within the retention,
    # their files stay: only untracked files go
    io = TableIO.for_table(uri)
    later = int(time.time() * 1000) + 3 * DAY_S * 1000
    age(path, 8 * DAY_S)
    planned = set(plan_vacuum(io, DeltaLog.for_table(uri).update(), now_ms=later).paths)
    assert planned == {"orphan.parquet", "_change_data/cdc-0.parquet"}
    # with a zero retention the removed files go as well
    expected = {*removed, "orphan.parquet", "_change_data/cdc-0.parquet"}
    assert set(table.vacuum(retention_hours=0, **NO_CHECK)) == expected  # dry run: nothing deleted
    assert set(table.vacuum(retention_hours=0, dry_run=False, **NO_CHECK)) == expected
    assert data_files(path) == {*active, "_hidden.txt", ".hidden/f", "p=x/.part.crc"}
    assert not (path / "empty").exists()  # empty directories go (deepest first)
    assert (path / "p=y").exists()  # held old files: goes in the next run, as in Delta
    assert sorted(table.to_pyarrow_table()["a"].to_pylist()) == [3]
    table.vacuum(retention_hours=0, dry_run=False, **NO_CHECK)
    assert not (path / "p=y").exists() and (path / "p=x").exists()  # p=x holds a hidden file


def test_vacuum_commits_delta_start_and_end(tmp_path: Path) -> None:
    uri = str(tmp_path)
    write_table(uri, pa.table({"a": [1]}))
    write_table(uri, pa.table({"a": [2]}), mode="overwrite")
    table = DeltaTable(uri)
    gone = table.vacuum(retention_hours=0, dry_run=False, **NO_CHECK)
    assert len(gone) == 1
    end, start = table.history(2)
    assert table.version() == 3
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationParameters"] == {
        "retentionCheckEnabled": "false",
        "defaultRetentionMillis": "604800000",
        "specifiedRetentionMillis": "0",
    }
    size = os.path.getsize  # the deleted file's size is in the metrics
    assert start["operationMetrics"]["numFilesToDelete"] == "1"
    assert int(start["operationMetrics"]["sizeOfDataToDelete"]) > 0 and callable(size)
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"] == {"numDeletedFiles": "1", "numVacuumedDirectories": "1"}
    assert start["isolationLevel"] == "SnapshotIsolation" and start["isBlindAppend"] is True
    # a vacuum with nothing to delete still logs, as Delta does; a dry run never does
    table.vacuum(retention_hours=0, **NO_CHECK)
    assert table.version() == 3
    table.vacuum(dry_run=False)
    assert [h["operation"] for h in table.history(2)] == ["VACUUM END", "VACUUM START"]
    assert table.history(1)[0]["operationMetrics"]["numDeletedFiles"] == "0"


def test_vacuum_logging_follows_the_scheme_and_the_setting(tmp_path: Path) -> None:
    assert vacuum_logged(TableIO.for_table(str(tmp_path)))
    assert not vacuum_logged(TableIO.for_table("memory://bucket/t"))
    off = {"spark.databricks.delta.vacuum.logging.enabled": "false"}
    assert not vacuum_logged(TableIO.for_table(str(tmp_path), off))
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1]}))
    write_table(uri, pa.table({"a": [2]}), mode="overwrite")
    table = DeltaTable(uri, conf=off)
    assert len(table.vacuum(retention_hours=0, dry_run=False, **NO_CHECK)) == 1
    assert table.version() == 1  # deleted without a commit


def test_deletion_vector_files_are_kept_while_referenced(golden_root: Path, tmp_path: Path) -> None:
    """A DV file stays while an active file or a retained tombstone points at it."""
    path = tmp_path / "t"
    shutil.copytree(golden_root / "dat" / "deletion_vectors" / "delta", path)
    dv_file = next(f for f in data_files(path) if f.startswith("deletion_vector_"))
    (path / "deletion_vector_00000000-0000-0000-0000-000000000000.bin").write_bytes(b"orphan")
    age(path, 30 * DAY_S)
    table = DeltaTable(str(path))
    assert table.vacuum(retention_hours=0, **NO_CHECK) == [
        "deletion_vector_00000000-0000-0000-0000-000000000000.bin"
    ]
    # restore to the version without the DV: the DV file now hangs on a tombstone only
    table.restore(1)
    age(path, 30 * DAY_S)
    assert dv_file not in table.vacuum(**NO_CHECK)  # tombstone within the retention
    assert dv_file in table.vacuum(retention_hours=0, **NO_CHECK)  # expired with it
    table.vacuum(retention_hours=0, dry_run=False, **NO_CHECK)
    assert {f for f in data_files(path) if not f.startswith(".")} == set(table.files())  # .crc: hidden
    assert table.to_pyarrow_table().num_rows == 5  # the DV gone, every row of version 1 is back


def test_files_of_an_uncommitted_write_stay_until_older_than_the_retention(tmp_path: Path) -> None:
    uri = str(tmp_path)
    write_table(
        uri, pa.table({"a": [1]}), configuration={"delta.deletedFileRetentionDuration": "interval 1 hour"}
    )
    io = TableIO.for_table(uri)
    plan = plan_write(io, latest_snapshot(io), DeltaLog.for_table(uri).update().schema, WriteOptions())
    writer = DataFileWriter(plan.spec)
    writer.write(pa.table({"a": [2]}))
    pending = writer.close()[0].add.path  # written, never committed
    table = DeltaTable(uri)
    assert table.vacuum(dry_run=False) == []  # younger than the table's retention
    assert (tmp_path / pending).exists()
    age(tmp_path, 2 * 3600)
    assert table.vacuum(dry_run=False) == [pending]
    assert not (tmp_path / pending).exists()
    assert table.to_pyarrow_table()["a"].to_pylist() == [1]


# -- delta-rs ------------------------------------------------------------------------------------------
def test_same_files_as_delta_rs(tmp_path: Path) -> None:
    """deltalake lists the same files: its default (lite) vacuum on a table without untracked
    files, its full vacuum on one with orphans and change data files."""
    path = tmp_path / "t"
    uri = str(path)
    data = pa.table({"a": list(range(40)), "p": [i % 4 for i in range(40)]})
    write_table(uri, data, partition_by=["p"], max_rows_per_file=3)
    write_table(uri, data.filter(pc.equal(data["p"], 1)), mode="overwrite", replace_where="p = 1")
    write_table(uri, data.slice(10, 20), mode="overwrite", partition_overwrite_mode="dynamic")
    write_table(uri, data.slice(0, 5))
    ours = sorted(DeltaTable(uri).vacuum(retention_hours=0, **NO_CHECK))
    assert ours and ours == sorted(RustTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False))
    (path / "orphan.parquet").write_bytes(b"x")
    (path / "p=1" / "orphan.parquet").write_bytes(b"x")
    (path / "_change_data").mkdir()
    pq.write_table(pa.table({"a": [1]}), path / "_change_data" / "cdc-00000.snappy.parquet")
    age(path, 3600)
    ours = sorted(DeltaTable(uri).vacuum(retention_hours=0, **NO_CHECK))
    rust = RustTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, full=True)
    assert ours == sorted(rust) and "_change_data/cdc-00000.snappy.parquet" in ours
    assert sorted(DeltaTable(uri).vacuum(retention_hours=0, dry_run=False, **NO_CHECK)) == ours
    assert sorted(RustTable(uri).to_pyarrow_table()["a"].to_pylist()) == sorted(
        DeltaTable(uri).to_pyarrow_table()["a"].to_pylist()
    )


def test_lite_vacuum_deletes_what_delta_rs_lite_deletes(tmp_path: Path) -> None:
    """deltalake's default mode: only the old files of expired tombstones go (with the deletion
    vectors no version keeps); orphans, change data and directories stay for a full vacuum."""
    path = tmp_path / "t"
    uri = str(path)
    data = pa.table({"a": list(range(40)), "p": [i % 4 for i in range(40)]})
    write_table(uri, data, partition_by=["p"], max_rows_per_file=3)
    write_table(uri, data.filter(pc.equal(data["p"], 1)), mode="overwrite", replace_where="p = 1")
    (path / "orphan.parquet").write_bytes(b"x")
    (path / "_change_data").mkdir()
    pq.write_table(pa.table({"a": [1]}), path / "_change_data" / "cdc-00000.snappy.parquet")
    age(path, 3600)
    removed = {add.path for add in DeltaLog.for_table(uri).snapshot(0).files()} - set(DeltaTable(uri).files())
    lite = sorted(DeltaTable(uri).vacuum(retention_hours=0, full=False, **NO_CHECK))
    rust = RustTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, full=False)
    assert lite == sorted(rust) == sorted(removed)
    assert sorted(DeltaTable(uri).vacuum(retention_hours=0, dry_run=False, full=False, **NO_CHECK)) == lite
    assert {"orphan.parquet", "_change_data/cdc-00000.snappy.parquet"} <= data_files(path)
    assert (path / "p=1").is_dir()  # a lite vacuum removes no directory
    full = DeltaTable(uri).vacuum(retention_hours=0, **NO_CHECK)
    assert sorted(full) == ["_change_data/cdc-00000.snappy.parquet", "orphan.parquet"]


def test_lite_vacuum_finds_tombstones_older_than_the_retention(tmp_path: Path) -> None:
    """The snapshot's tombstones leave out those past the table's retention: a lite vacuum reads
    them from the log all the same (a month-old remove is its very candidate)."""
    path = tmp_path / "t"
    uri = str(path)
    write_table(uri, pa.table({"a": [1, 2]}))
    write_table(uri, pa.table({"a": [3]}), mode="overwrite")
    commit = path / "_delta_log" / "00000000000000000001.json"
    month_ago = int(time.time() * 1000) - 30 * DAY_S * 1000
    actions = [orjson.loads(line) for line in commit.read_bytes().splitlines()]
    for action in actions:
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = month_ago
    commit.write_bytes(b"\n".join(orjson.dumps(action) for action in actions))
    age(path, 30 * DAY_S)
    (removed,) = {add.path for add in DeltaLog.for_table(uri).snapshot(0).files()}
    assert DeltaTable(uri).snapshot.tombstones_table().num_rows == 0  # past the retention
    assert DeltaTable(uri).vacuum(full=False, dry_run=False) == [removed]
    assert data_files(path) == set(DeltaTable(uri).files())


def test_lite_vacuum_deletes_expired_deletion_vectors_only(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": list(range(10))}), configuration={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("a = 1")  # a deletion vector file
    DeltaTable(uri).delete("a = 2")  # a second one replaces it: the first is a tombstone's
    age(tmp_path / "t", 3600)
    (first,) = [a.deletion_vector for a in DeltaLog.for_table(uri).snapshot(1).files()]
    (second,) = [a.deletion_vector for a in DeltaTable(uri).snapshot.files()]
    assert first is not None and second is not None
    first_name, second_name = (str(dv_file_path(dv, uri)).rsplit("/", 1)[-1] for dv in (first, second))
    gone = DeltaTable(uri).vacuum(retention_hours=0, full=False, dry_run=False, **NO_CHECK)
    assert [name.rsplit("/", 1)[-1] for name in gone] == [first_name]  # the data file stays active
    assert second_name in {name.rsplit("/", 1)[-1] for name in data_files(tmp_path / "t")}
    assert sorted(DeltaTable(uri).to_pyarrow_table()["a"].to_pylist()) == [0, *range(3, 10)]


# -- writers running ----------------------------------------------------------------------------------
def test_versions_within_the_retention_stay_readable_while_writers_run(tmp_path: Path) -> None:
    """Writers append and overwrite partitions while VACUUM runs again and again with the table's
    short retention; afterwards every version within the retention of the last vacuum reads, and
    so does every version committed since (an uncommitted file deleted would break it)."""
    uri = str(tmp_path / "t")
    retention_s = 3.0
    configuration = {"delta.deletedFileRetentionDuration": f"interval {int(retention_s)} seconds"}
    write_table(uri, pa.table({"a": [0], "p": [0]}), partition_by=["p"], configuration=configuration)
    stop = threading.Event()
    errors: list[BaseException] = []
    vacuum_starts: list[float] = []
    deleted: list[str] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        value = 0
        try:
            while not stop.is_set():
                value += 1
                rows = pa.table({"a": [value] * 3, "p": [rng.randrange(6)] * 3})
                try:
                    if rng.random() < 0.6:
                        write_table(uri, rows)
                    else:  # replaces the partition's files, some of them older than the retention
                        write_table(uri, rows, mode="overwrite", partition_overwrite_mode="dynamic")
                except ConcurrentModificationError:
                    pass  # a conflict with the other writer: expected
                time.sleep(rng.uniform(0.05, 0.3))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def vacuumer() -> None:
        log = DeltaLog.for_table(uri)
        try:
            while not stop.is_set():
                vacuum_starts.append(time.time())
                result = vacuum(log.io, log.update(), dry_run=False)
                deleted.extend(result.files)
                time.sleep(0.2)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in (1, 2)]
    threads.append(threading.Thread(target=vacuumer))
    for thread in threads:
        thread.start()
    time.sleep(10)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert deleted, "the vacuums deleted nothing: the test proves nothing"
    log = DeltaLog.for_table(uri)
    margin_s = 1.0  # a writer's removes carry a time taken before its commit
    cutoff_ms = (vacuum_starts[-1] - retention_s + margin_s) * 1000
    checked = 0
    for record in log.commit_records():
        if record.timestamp >= cutoff_ms:
            log.snapshot(record.version).to_arrow()
            checked += 1
    assert checked >= 3
    assert log.update().to_arrow().num_rows > 0
