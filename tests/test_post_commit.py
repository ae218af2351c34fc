"""Post-commit hooks: automatic checkpoints every ``delta.checkpointInterval`` commits, and expired
log cleanup (Delta's ``MetadataCleanup``) that never breaks time travel inside the retention."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile
from replay.protocol.errors import VersionNotFoundError
from replay.txn import post_commit
from replay.txn.log_cleanup import cutoff_time
from replay.txn.write import delete_files, write_table

DAY_MS = 86_400_000


def log_names(path: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir() if p.name.endswith(suffix))


def checkpoint_versions(path: Path) -> list[int]:
    return [int(name.split(".")[0]) for name in log_names(path, ".checkpoint.parquet")]


def test_checkpoints_every_interval_from_every_commit_path(tmp_path: Path) -> None:
    path = str(tmp_path)
    for value in range(20):
        write_table(path, pa.table({"id": [value]}))  # versions 0..19
    assert checkpoint_versions(tmp_path) == [10]
    files = DeltaLog.for_table(path).snapshot().files()
    assert delete_files(path, [files[0].path]) == 20  # delete_files runs the hooks too
    assert checkpoint_versions(tmp_path) == [10, 20]
    last = orjson.loads((tmp_path / "_delta_log" / "_last_checkpoint").read_bytes())
    assert (last["version"], last["numOfAddFiles"]) == (20, 19)
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.log_segment.checkpoint is not None and snapshot.log_segment.checkpoint.version == 20
    assert DeltaTable(path).version() == 20
    assert len(DeltaTable(path).to_pyarrow_table()) == 19
    # DeltaLog.commit, and the interval of the table's own properties
    other = tmp_path / "other"
    write_table(str(other), pa.table({"id": [0]}), configuration={"delta.checkpointInterval": "3"})
    log = DeltaLog.for_table(str(other))
    for index in range(6):
        add = AddFile(path=f"f{index}.parquet", size=1, modification_time=1, data_change=True)
        log.commit([add])
    assert checkpoint_versions(other) == [3, 6]


def test_a_failing_checkpoint_never_fails_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [0]}), configuration={"delta.checkpointInterval": "1"})

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(post_commit, "write_checkpoint", broken)
    with caplog.at_level(logging.WARNING, logger="replay.txn.post_commit"):
        assert write_table(path, pa.table({"id": [1]})) == 1
    assert checkpoint_versions(tmp_path) == []
    assert (
        "[DELTA_POST_COMMIT_HOOK_FAILED] Committing to the Delta table version 1 succeeded but error while "
        "executing post-commit hook checkpoint: OSError: disk full"
    ) in caplog.text
    log = DeltaLog.for_table(path)
    assert post_commit.run_post_commit_hooks(log.io, 1).error is not None


def age(path: Path, versions: range, days: float, now: float) -> None:
    """Give the log files of ``versions`` a modification time ``days`` in the past."""
    stamp = now - days * 86_400
    for file in (path / "_delta_log").iterdir():
        if file.name[0].isdigit() and int(file.name.split(".")[0]) in versions:
            os.utime(file, (stamp, stamp))


def test_cleanup_keeps_time_travel_inside_retention(tmp_path: Path) -> None:
    path = str(tmp_path)
    properties = {"delta.checkpointInterval": "5", "delta.enableExpiredLogCleanup": "false"}
    for value in range(13):  # versions 0..12, checkpoints 5 and 10
        write_table(path, pa.table({"id": [value]}), configuration=properties)
    for version in (3, 7):
        (tmp_path / "_delta_log" / f"{version:020d}.crc").write_bytes(b"{}")
    assert checkpoint_versions(tmp_path) == [5, 10]
    now = time.time()
    age(tmp_path, range(0, 8), 40, now)  # 0..7 expired (retention: 30 days), 8..12 recent
    log = DeltaLog.for_table(path)
    deleted = log.cleanup_expired_logs()
    # checkpoint 5 is the newest one older than the retention: versions before it go; checkpoint 10
    # is recent, so versions 8 and 9 (inside retention) still need checkpoint 5 and commits 5..9
    assert [Path(p).name for p in deleted] == [
        *(f"{v:020d}.json" for v in range(3)),
        f"{3:020d}.crc",
        f"{3:020d}.json",
        f"{4:020d}.json",
    ]
    assert log.earliest_version() == 5
    for version in (5, 8, 9, 12):
        assert log.snapshot(version).version == version
    assert sorted(r["id"] for r in DeltaTable(path, version=8).to_pyarrow_table().to_pylist()) == list(
        range(9)
    )
    with pytest.raises(VersionNotFoundError, match=r"Available versions: \[5, 12\]"):
        log.snapshot(4)
    # once checkpoint 10 has expired too, everything before it goes
    age(tmp_path, range(8, 11), 35, now)
    assert [Path(p).name for p in log.cleanup_expired_logs()][-1] == f"{9:020d}.json"
    assert log_names(tmp_path, ".json")[0] == f"{10:020d}.json"
    assert checkpoint_versions(tmp_path) == [10]
    assert log.earliest_version() == 10 and log.snapshot(11).version == 11
    assert log.cleanup_expired_logs() == []


def test_cleanup_runs_after_automatic_checkpoints_unless_disabled(tmp_path: Path) -> None:
    enabled, disabled = tmp_path / "enabled", tmp_path / "disabled"
    now = time.time()
    for table, setting in ((enabled, "true"), (disabled, "false")):
        properties = {"delta.checkpointInterval": "2", "delta.enableExpiredLogCleanup": setting}
        for value in range(4):  # versions 0..3, checkpoint 2
            write_table(str(table), pa.table({"id": [value]}), configuration=properties)
        age(table, range(0, 4), 45, now)
        write_table(str(table), pa.table({"id": [4]}))  # version 4: checkpoint, then cleanup
    assert log_names(enabled, ".json")[0] == f"{2:020d}.json"
    assert log_names(disabled, ".json")[0] == f"{0:020d}.json"


def test_cutoff_is_truncated_to_midnight_utc() -> None:
    now = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
    assert cutoff_time(now, 30 * DAY_MS) == 1_697_328_000_000  # 2023-10-15 00:00:00 UTC


def test_cleanup_deletes_the_sidecars_no_kept_checkpoint_lists(tmp_path: Path, golden_root: Path) -> None:
    """A table with V2 checkpoints (Delta's, with sidecars): sidecars go once no checkpoint the
    cleanup keeps lists them and they are older than the cut-off, as Delta's cleanup deletes them."""
    import shutil

    from deltalake import QueryBuilder

    source = golden_root / "delta-spark-golden/v2-checkpoint-parquet/delta"
    shutil.copytree(source, tmp_path / "t")
    table = tmp_path / "t"
    uri, sidecars = str(table), table / "_delta_log" / "_sidecars"
    listed = sorted(p.name for p in sidecars.glob("[!.]*"))  # what checkpoint 2 lists (no .crc)
    shutil.copy(sidecars / listed[0], sidecars / "orphan.parquet")  # listed by no checkpoint
    shutil.copy(sidecars / listed[0], sidecars / "fresh.parquet")  # ... but being written now
    settings = {"delta.enableExpiredLogCleanup": "false"}
    write_table(uri, pa.table({"id": [100]}).cast(_schema(uri)), mode="append", conf=settings)
    now = time.time()
    old = now - 40 * 86_400
    age(table, range(0, 4), 40, now)
    for name in [*listed, "orphan.parquet"]:
        os.utime(sidecars / name, (old, old))
    log = DeltaLog.for_table(uri)
    log.cleanup_expired_logs()  # boundary 2 (the only checkpoint): its sidecars stay
    assert sorted(p.name for p in sidecars.glob("[!.]*")) == sorted([*listed, "fresh.parquet"])
    log.checkpoint()  # version 3: ours, every file inline
    age(table, range(3, 4), 40, now)
    deleted = [Path(p).name for p in log.cleanup_expired_logs()]
    assert set(listed) <= set(deleted)
    assert sorted(p.name for p in sidecars.glob("[!.]*")) == ["fresh.parquet"]
    expected = sorted(log.update().to_arrow().column("id").to_pylist())
    rust = QueryBuilder().register("t", DeltaTable(uri)).execute("select id from t").read_all()
    assert sorted(pa.table(rust).column("id").to_pylist()) == expected


def _schema(uri: str) -> pa.Schema:
    return DeltaLog.for_table(uri).update().schema.to_arrow()
