"""Store-specific behaviour of the local, memory and rename-based stores."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
import time
import uuid
from pathlib import Path

import pytest

from logstores import HDFSLogStore, LocalLogStore, LogStore, MemoryLogStore
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.txn.transaction import commit_actions as commit


def test_partial_write_visibility_per_store(tmp_path: Path) -> None:
    assert LocalLogStore().is_partial_write_visible(str(tmp_path / "x")) is False
    assert MemoryLogStore().is_partial_write_visible("memory://t/x") is False
    assert HDFSLogStore().is_partial_write_visible(f"file://{tmp_path}/x") is True


def test_local_paths_resolve_to_file_uris(tmp_path: Path) -> None:
    store = LocalLogStore()
    assert store.resolve_path_on_physical_storage(str(tmp_path / "a")) == f"file://{tmp_path}/a"
    assert store.resolve_path_on_physical_storage(f"file://{tmp_path}/a") == f"file://{tmp_path}/a"


def test_local_overwrite_never_exposes_a_partial_file(tmp_path: Path) -> None:
    store = LocalLogStore()
    target = str(tmp_path / "_last_checkpoint")
    store.write(target, ["old"])
    inode_before = os.stat(target).st_ino
    store.write(target, ["new"], overwrite=True)
    assert os.stat(target).st_ino != inode_before  # replaced by rename, not rewritten in place
    assert store.read(target) == ["new"]


def test_rename_store_uses_hidden_temp_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = HDFSLogStore()
    seen: list[str] = []
    original = os.link

    def recording_link(source: str, target: str) -> None:
        seen.append(source)
        original(source, target)

    monkeypatch.setattr(os, "link", recording_link)
    store.write(f"file://{tmp_path}/{1:020d}.json", ["one"])
    [temp] = seen
    name = temp.rsplit("/", 1)[-1]
    assert name.startswith(f".{1:020d}.json.") and name.endswith(".tmp")
    assert sorted(os.listdir(tmp_path)) == [f"{1:020d}.json"]


def test_memory_store_is_shared_within_the_process() -> None:
    MemoryLogStore().write("memory://shared-table/_delta_log/0", ["a"])
    assert MemoryLogStore().read("memory://shared-table/_delta_log/0") == ["a"]


def _race(store_class: type[LogStore], target: str, index: int, start: object, results: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    try:
        store_class().write(target, [f"process-{index}-{n}" for n in range(2000)])
        results.put((index, "won"))  # type: ignore[attr-defined]
    except FileExistsError:
        results.put((index, "lost"))  # type: ignore[attr-defined]


@pytest.mark.parametrize("store_class", [LocalLogStore, HDFSLogStore])
def test_four_processes_race_for_one_file(store_class: type[LogStore], tmp_path: Path) -> None:
    target = f"file://{tmp_path}/{3:020d}.json"
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(4), context.Queue()
    processes = [
        context.Process(target=_race, args=(store_class, target, index, start, results)) for index in range(4)
    ]
    for process in processes:
        process.start()
    outcomes = dict(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    winners = [index for index, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1, outcomes
    assert store_class().read(target) == [f"process-{winners[0]}-{n}" for n in range(2000)]
    assert os.listdir(tmp_path) == [f"{3:020d}.json"]


def test_path_locks_are_released_when_unused() -> None:
    from logstores.filesystem import PATH_LOCKS, path_lock

    before = len(PATH_LOCKS)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        with path_lock("file:///held"):
            started.set()
            release.wait(5)

    worker = threading.Thread(target=hold)
    worker.start()
    started.wait(5)
    assert len(PATH_LOCKS) == before + 1
    for index in range(1000):
        with path_lock(f"file:///t/{index}.json"):
            pass
    assert len(PATH_LOCKS) == before + 1
    release.set()
    worker.join(5)
    assert len(PATH_LOCKS) == before


# -- permissions, durability and leftovers of crashed writers -----------------------------------------
LOCAL_STORES = [LocalLogStore, HDFSLogStore]
SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def _table_with_checkpoint(store: LogStore, uri: str) -> Path:
    """A table written through replay: two commits, a checkpoint and ``_last_checkpoint``."""
    log = DeltaLog(uri, None, store)
    metadata = Metadata(id="t", schema_string=SCHEMA, configuration={})
    commit(log.io, [Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1)
    log.commit([AddFile(path="a", size=1, modification_time=1, data_change=True)])
    log.checkpoint()
    return Path(uri.removeprefix("file://")) / "_delta_log"


@pytest.mark.parametrize("store_class", LOCAL_STORES)
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_log_files_get_the_permissions_of_a_plain_open(
    store_class: type[LogStore], umask: int, tmp_path: Path
) -> None:
    previous = os.umask(umask)
    try:
        with open(tmp_path / "plain", "w"):
            pass
        log_dir = _table_with_checkpoint(store_class(), f"file://{tmp_path}/t")
    finally:
        os.umask(previous)
    expected = stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
    assert expected == 0o666 & ~umask
    names = sorted(os.listdir(log_dir))
    assert names == [f"{0:020d}.json", f"{1:020d}.checkpoint.parquet", f"{1:020d}.json", "_last_checkpoint"]
    modes = {name: oct(stat.S_IMODE(os.stat(log_dir / name).st_mode)) for name in names}
    assert modes == dict.fromkeys(names, oct(expected))


@pytest.mark.parametrize("store_class", LOCAL_STORES)
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_write_is_synced_before_it_is_published_and_the_directory_after(
    store_class: type[LogStore], overwrite: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(source: str, target: str) -> None:
        events.append(("publish", source))
        real_link(source, target)

    def replace(source: str, target: str) -> None:
        events.append(("publish", source))
        real_replace(source, target)

    target = f"file://{tmp_path}/{0:020d}.json"
    if overwrite:
        store_class().write(target, ["old"])
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    store_class().write(target, ["new"], overwrite=overwrite)
    [(_, temp)] = [event for event in events if event[0] == "publish"]
    assert events == [("fsync", temp), ("publish", temp), ("fsync", str(tmp_path))]
    assert Path(temp).name.startswith(f".{0:020d}.json.") and temp.endswith(".tmp")
    assert sorted(os.listdir(tmp_path)) == [f"{0:020d}.json"]


@pytest.mark.parametrize("store_class", LOCAL_STORES)
def test_temp_files_of_crashed_writers_are_cleaned_up_and_never_read_as_log_files(
    store_class: type[LogStore], tmp_path: Path
) -> None:
    store = store_class()
    uri = f"file://{tmp_path}/t"
    log_dir = _table_with_checkpoint(store, uri)
    old = [
        f"._last_checkpoint.{uuid.uuid4().hex}.tmp",
        f".{2:020d}.json.{uuid.uuid4().hex}.tmp",
        f".{1:020d}.checkpoint.parquet.{uuid.uuid4().hex}.tmp",
    ]
    fresh = f".{2:020d}.json.{uuid.uuid4().hex}.tmp"
    for name in [*old, fresh]:
        (log_dir / name).write_text(
            '{"add":{"path":"ghost","size":1,"modificationTime":1,"dataChange":true}}\n'
        )
    hour_ago = time.time() - 3600
    for name in old:
        os.utime(log_dir / name, (hour_ago, hour_ago))
    snapshot = DeltaLog(uri, None, store_class()).snapshot()
    assert (snapshot.version, [add.path for add in snapshot.files()]) == (1, ["a"])
    removed = store.delete_stale_temp_files(f"{uri}/_delta_log", older_than_s=600)
    assert sorted(Path(path).name for path in removed) == sorted(old)
    assert sorted(os.listdir(log_dir)) == sorted(
        [f"{0:020d}.json", f"{1:020d}.checkpoint.parquet", f"{1:020d}.json", "_last_checkpoint", fresh]
    )
    assert store.delete_stale_temp_files(f"{uri}/_delta_log", older_than_s=0) == [f"file://{log_dir}/{fresh}"]
    assert store.delete_stale_temp_files(f"file://{tmp_path}/missing/_delta_log") == []
