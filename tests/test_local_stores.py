"""Store-specific behaviour of the local, memory and rename-based stores."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from logstores import HDFSLogStore, LocalLogStore, LogStore, MemoryLogStore


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
