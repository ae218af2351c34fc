"""Delta's LogStore contract as a test class: subclass :class:`LogStoreContract` to check a store.

The cases are those of Delta's ``LogStoreSuite`` and the guarantees stated in
:mod:`logstores.base`: put-if-absent and overwrite, the file format and Java-style trimming of
read lines, ``list_from`` ordering, prefixes, directories and statuses, missing directories and
files, empty files, whole-file visibility while a write is in progress, exactly one winner of a
create race between threads and between processes, paths with spaces, ``%`` and non-ASCII
characters, and exact binary round trips for Parquet checkpoints.

A subclass provides two fixtures, ``log_store`` (the store under test) and ``log_root`` (the URI
of an empty directory the test may write under, fresh for each test), and may set the class
attributes below where its storage differs. The cross-process race rebuilds the store in other
processes with :meth:`LogStoreContract.store_for_other_process`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstores.base import FileStatus, LogStore
from logstores.errors import BinaryAccessUnsupportedError

RACE_TIMEOUT_S = 120.0
"""How long a cross-process race may take in all (spawning interpreters on a busy machine)."""


def commit_name(version: int) -> str:
    """``00000000000000000007.json``."""
    return f"{version:020d}.json"


def names(statuses: Iterable[FileStatus]) -> list[str]:
    return [status.name for status in statuses]


def writer_lines(writer: int, count: int = 200) -> list[str]:
    """The lines writer ``writer`` writes in a race: long enough to make a write take a while."""
    return [f"writer-{writer}-line-{n}-" + "x" * 200 for n in range(count)]


def _race_in_process(
    store_factory: Callable[[], LogStore],
    path: str,
    writer: int,
    barrier: Any,
    results: Any,
) -> None:
    """One racing process: build the store, wait for the others, create ``path``, report."""
    try:
        store = store_factory()
        lines = writer_lines(writer)
        barrier.wait(timeout=RACE_TIMEOUT_S)
        try:
            store.write(path, lines)
            results.put((writer, "won"))
        except FileExistsError:
            results.put((writer, "lost"))
    except Exception as exc:  # noqa: BLE001 (reported to the test, which fails with it)
        results.put((writer, f"error: {type(exc).__name__}: {exc}"))


class LogStoreContract:
    """The LogStore contract; subclass it and provide the fixtures ``log_store`` and ``log_root``.

    ``log_root`` is the URI of an empty directory (it exists where the storage has directories);
    each test writes under ``<log_root>/_delta_log`` or other names below ``log_root``.
    """

    writes_need_parent_directory: ClassVar[bool | None] = None
    """``True`` where a write into a missing directory fails with :class:`FileNotFoundError` (local
    disk, HDFS), ``False`` where it creates the file (object stores), ``None`` to accept either."""

    exclusive_across_processes: ClassVar[bool] = True
    """Whether put-if-absent excludes writers in other processes; ``False`` skips the race between
    processes for stores that are safe for one writing process only (an in-memory store, Delta's
    ``S3SingleDriverLogStore``)."""

    binary_files: ClassVar[bool] = True
    """Whether the store keeps any bytes (Parquet checkpoints); ``False`` for a store implementing
    only the text methods, which must then refuse binary data with
    :class:`~logstores.errors.BinaryAccessUnsupportedError` and write nothing."""

    race_threads: ClassVar[int] = 8
    race_processes: ClassVar[int] = 3

    def store_for_other_process(self, log_store: LogStore) -> Callable[[], LogStore]:
        """A picklable callable building, in another process, a store equivalent to ``log_store``.

        The default rebuilds it from its class and configuration, as the providers do; the class
        must be importable by its module name there. Override it for stores built otherwise.
        """
        return functools.partial(type(log_store), dict(log_store.conf))

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def log_dir(log_store: LogStore, log_root: str) -> str:
        """``<log_root>/_delta_log``, created."""
        log_dir = f"{log_root.rstrip('/')}/_delta_log"
        log_store.create_directories(log_dir)
        return log_dir

    @staticmethod
    def write_versions(log_store: LogStore, log_dir: str, count: int) -> None:
        """Commits ``0`` .. ``count - 1`` (stores coordinating commits need version N-1 before N)."""
        for version in range(count):
            log_store.write(f"{log_dir}/{commit_name(version)}", [f"version {version}"])

    # -- reading and writing ------------------------------------------------------------------
    def test_read_write_round_trip(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/0", ["zero", "none"])
        log_store.write(f"{log}/1", iter(["one"]))
        assert log_store.read(f"{log}/0") == ["zero", "none"]
        assert log_store.read(f"{log}/1") == ["one"]
        with log_store.read_as_iterator(f"{log}/0") as lines:
            assert list(lines) == ["zero", "none"]

    def test_file_format_is_one_newline_per_action_in_utf8(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/0", ["a", "ü€"])
        assert log_store.read_bytes(f"{log}/0") == "a\nü€\n".encode()
        assert log_store.read(f"{log}/0") == ["a", "ü€"]

    def test_empty_write_makes_a_zero_byte_file(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/0", [])
        assert log_store.read_bytes(f"{log}/0") == b""
        assert log_store.read(f"{log}/0") == []
        [status] = log_store.list_from(f"{log}/0")
        assert status.size == 0

    def test_lines_are_trimmed_like_java(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/0", ["  padded\t", "\x01ctl\x1f", "inner  space"])
        assert log_store.read(f"{log}/0") == ["padded", "ctl", "inner  space"]

    def test_read_as_iterator_is_lazy_and_closeable(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        lines = log_store.read_as_iterator(f"{log}/not-yet-written")  # nothing is opened yet
        log_store.write(f"{log}/not-yet-written", ["foo", "bar"])
        assert next(lines) == "foo"
        lines.close()
        assert list(lines) == []

    def test_read_of_a_missing_file_raises_file_not_found(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        with pytest.raises(FileNotFoundError):
            log_store.read(f"{log}/{commit_name(9)}")
        with pytest.raises(FileNotFoundError):
            log_store.read_bytes(f"{log}/{commit_name(9)}")

    def test_put_if_absent_refuses_an_existing_file(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        self.write_versions(log_store, log, 1)
        target = f"{log}/{commit_name(1)}"
        log_store.write(target, ["one"])
        with pytest.raises(FileExistsError, match=commit_name(1).replace(".", r"\.")):
            log_store.write(target, ["uno"])
        assert log_store.read(target) == ["one"]

    def test_overwrite_replaces_the_whole_file(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/_last_checkpoint", ["a much longer first version"])
        log_store.write(f"{log}/_last_checkpoint", ["short"], overwrite=True)
        assert log_store.read(f"{log}/_last_checkpoint") == ["short"]
        log_store.write(f"{log}/new", ["created"], overwrite=True)
        assert log_store.read(f"{log}/new") == ["created"]

    def test_write_into_a_missing_directory(self, log_store: LogStore, log_root: str) -> None:
        target = f"{log_root.rstrip('/')}/missing-parent/_delta_log/{commit_name(0)}"
        try:
            log_store.write(target, ["x"])
        except FileNotFoundError as exc:
            assert self.writes_need_parent_directory is not False, f"the write failed: {exc}"
            assert "missing-parent" in str(exc)
            with pytest.raises(FileNotFoundError):
                log_store.read(target)
        else:
            assert self.writes_need_parent_directory is not True, "the write created a missing directory"
            assert log_store.read(target) == ["x"]

    def test_no_temporary_files_are_left_behind(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        log_store.write(f"{log}/0", ["zero"])
        with pytest.raises(FileExistsError):
            log_store.write(f"{log}/0", ["again"])
        log_store.write(f"{log}/0", ["replaced"], overwrite=True)
        assert names(log_store.list_from(f"{log}/.")) == ["0"]  # "." sorts before hidden temp names

    # -- listing ------------------------------------------------------------------------------
    def test_list_from_returns_names_at_or_after_the_start_sorted(
        self, log_store: LogStore, log_root: str
    ) -> None:
        log = self.log_dir(log_store, log_root)
        for name in ("3", "1", "2"):
            log_store.write(f"{log}/{name}", ["x"])
        assert names(log_store.list_from(f"{log}/0")) == ["1", "2", "3"]
        assert names(log_store.list_from(f"{log}/1")) == ["1", "2", "3"]
        assert names(log_store.list_from(f"{log}/2")) == ["2", "3"]
        assert names(log_store.list_from(f"{log}/3")) == ["3"]
        assert names(log_store.list_from(f"{log}/4")) == []

    def test_list_from_a_prefix_that_is_not_a_file(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        self.write_versions(log_store, log, 8)
        log_store.write(f"{log}/{5:020d}.checkpoint.parquet", ["x"])
        listed = names(log_store.list_from(f"{log}/{5:020d}."))
        assert listed == [f"{5:020d}.checkpoint.parquet", commit_name(5), commit_name(6), commit_name(7)]

    def test_list_from_reports_directories_and_full_statuses(
        self, log_store: LogStore, log_root: str
    ) -> None:
        log = self.log_dir(log_store, log_root)
        before_ms = int(time.time() * 1000) - 5_000
        log_store.create_directories(f"{log}/_sidecars")
        log_store.write(f"{log}/_sidecars/a.parquet", ["x"])
        log_store.write(f"{log}/{commit_name(0)}", ["abc", "de"])
        by_name = {status.name: status for status in log_store.list_from(f"{log}/0")}
        assert list(by_name) == [commit_name(0), "_sidecars"]
        commit = by_name[commit_name(0)]
        assert isinstance(commit, FileStatus)
        assert commit.size == len(b"abc\nde\n")
        assert not commit.is_dir
        assert before_ms <= commit.modification_time <= int(time.time() * 1000) + 5_000
        assert by_name["_sidecars"].is_dir
        # A listed path is fully qualified and reads back through the same store.
        assert "://" in commit.path
        assert log_store.read(commit.path) == ["abc", "de"]

    def test_list_from_a_missing_directory_raises_file_not_found(
        self, log_store: LogStore, log_root: str
    ) -> None:
        missing = f"{log_root.rstrip('/')}/no-such-table/_delta_log"
        with pytest.raises(FileNotFoundError, match="no-such-table"):
            list(log_store.list_from(f"{missing}/{commit_name(0)}"))

    def test_resolve_path_on_physical_storage_is_fully_qualified(
        self, log_store: LogStore, log_root: str
    ) -> None:
        log = self.log_dir(log_store, log_root)
        resolved = log_store.resolve_path_on_physical_storage(f"{log}/0")
        assert "://" in resolved
        assert resolved.endswith("/_delta_log/0")
        log_store.write(resolved, ["via resolved path"])
        assert log_store.read(f"{log}/0") == ["via resolved path"]

    def test_paths_with_spaces_percent_and_non_ascii(self, log_store: LogStore, log_root: str) -> None:
        directory = "tàble with space %25 ünï"
        log = self.log_dir(log_store, f"{log_root.rstrip('/')}/{directory}")
        target = f"{log}/{commit_name(0)}"
        log_store.write(target, ["ok"])
        assert log_store.read(target) == ["ok"]
        [status] = log_store.list_from(target)
        assert status.name == commit_name(0)
        assert directory in status.path
        assert log_store.read(status.path) == ["ok"]
        with pytest.raises(FileExistsError):
            log_store.write(status.path, ["again"])

    # -- binary files (checkpoints) -----------------------------------------------------------
    def test_binary_round_trip_of_a_checkpoint(self, log_store: LogStore, log_root: str) -> None:
        log = self.log_dir(log_store, log_root)
        target = f"{log}/{1:020d}.checkpoint.parquet"
        buffer = io.BytesIO()
        pq.write_table(pa.table({"add": [f"part-{n}.parquet" for n in range(100)]}), buffer)
        payload = buffer.getvalue() + bytes(range(256))  # trailing bytes of every value
        if not self.binary_files:
            with pytest.raises(BinaryAccessUnsupportedError):
                log_store.write_bytes(target, payload)
            with pytest.raises(FileNotFoundError):
                log_store.read_bytes(target)
            return
        log_store.write_bytes(target, payload)
        assert log_store.read_bytes(target) == payload
        with log_store.open_input(target) as handle:
            handle.seek(len(payload) - 256)
            assert handle.read(4) == bytes([0, 1, 2, 3])
        [status] = log_store.list_from(target)
        assert status.size == len(payload)
        with log_store.open_file(status) as handle:
            assert handle.read() == payload
        with pytest.raises(FileExistsError):
            log_store.write_bytes(target, b"other")
        assert log_store.read_bytes(target) == payload

    # -- visibility and mutual exclusion ------------------------------------------------------
    def test_a_file_being_written_is_invisible_or_whole(self, log_store: LogStore, log_root: str) -> None:
        """Where partial writes are not visible, a reader racing a large write sees no file or all of it."""
        log = self.log_dir(log_store, log_root)
        self.write_versions(log_store, log, 1)
        target = f"{log}/{commit_name(1)}"
        lines = [f"{n:06d}" + "y" * 1000 for n in range(1000)]  # ~1 MB
        expected = "".join(f"{line}\n" for line in lines).encode()
        atomic = not log_store.is_partial_write_visible(target)
        seen: list[int] = []
        failures: list[BaseException] = []
        done = threading.Event()

        def read_until_done() -> None:
            while not done.is_set():
                try:
                    seen.append(len(log_store.read_bytes(target)))
                except FileNotFoundError:
                    pass
                except Exception as exc:  # noqa: BLE001 (reported to the test, which fails with it)
                    failures.append(exc)
                    return

        reader = threading.Thread(target=read_until_done, name="contract-reader")
        reader.start()
        try:
            log_store.write(target, lines)
        finally:
            done.set()
            reader.join(timeout=RACE_TIMEOUT_S)
        assert not failures, f"reading during the write failed: {failures[0]!r}"
        assert log_store.read_bytes(target) == expected
        if atomic:
            partial = sorted({size for size in seen if size != len(expected)})
            assert not partial, f"a reader saw {len(partial)} partial sizes of {len(expected)} bytes"

    def test_concurrent_create_race_between_threads_has_one_winner(
        self, log_store: LogStore, log_root: str
    ) -> None:
        log = self.log_dir(log_store, log_root)
        self.write_versions(log_store, log, 7)
        target = f"{log}/{commit_name(7)}"
        barrier = threading.Barrier(self.race_threads)
        outcomes: dict[int, str] = {}

        def writer(index: int) -> None:
            lines = writer_lines(index)
            barrier.wait(timeout=RACE_TIMEOUT_S)
            try:
                log_store.write(target, lines)
                outcomes[index] = "won"
            except FileExistsError:
                outcomes[index] = "lost"
            except Exception as exc:  # noqa: BLE001 (reported to the test, which fails with it)
                outcomes[index] = f"error: {type(exc).__name__}: {exc}"

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(self.race_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=RACE_TIMEOUT_S)
        self._check_race(log_store, target, outcomes, self.race_threads)

    def test_concurrent_create_race_between_processes_has_one_winner(
        self, log_store: LogStore, log_root: str
    ) -> None:
        if not self.exclusive_across_processes:
            pytest.skip(f"{type(self).__name__} declares writers exclusive within one process only")
        log = self.log_dir(log_store, log_root)
        self.write_versions(log_store, log, 3)
        target = f"{log}/{commit_name(3)}"
        factory = self.store_for_other_process(log_store)
        context = multiprocessing.get_context("spawn")  # independent writers, as on other machines
        barrier = context.Barrier(self.race_processes)
        results = context.Queue()
        processes = [
            context.Process(target=_race_in_process, args=(factory, target, i, barrier, results), daemon=True)
            for i in range(self.race_processes)
        ]
        for process in processes:
            process.start()
        outcomes: dict[int, str] = {}
        deadline = time.monotonic() + RACE_TIMEOUT_S
        try:
            while len(outcomes) < self.race_processes and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    writer, outcome = results.get(timeout=1)
                    outcomes[writer] = outcome
        finally:
            for process in processes:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
                    process.join()
        self._check_race(log_store, target, outcomes, self.race_processes)

    @staticmethod
    def _check_race(log_store: LogStore, target: str, outcomes: dict[int, str], writers: int) -> None:
        errors = sorted(outcome for outcome in outcomes.values() if outcome.startswith("error"))
        assert not errors, f"writers failed: {errors}"
        assert len(outcomes) == writers, f"only {len(outcomes)} of {writers} writers finished"
        winners = sorted(index for index, outcome in outcomes.items() if outcome == "won")
        assert len(winners) == 1, f"{len(winners)} writers created {target}: {winners}"
        assert log_store.read(target) == writer_lines(winners[0])
