"""``DeltaLog``: one table's transaction log, read (and written) through a LogStore.

Everything touches storage through ``self.store`` (:func:`logstores.create_log_store`). The
latest snapshot is cached and reused while the log has not moved on.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

from logstores import create_log_store
from logstores.base import FileStatus, LogStore
from logstores.conf import ConfLike, to_conf_dict
from logstores.filesystem import uri_scheme
from replay import filenames
from replay.actions import Action, action_from_dict
from replay.checkpoints import complete_checkpoints, read_last_checkpoint
from replay.commit_reader import prefetch, read_commit_file
from replay.errors import (
    DataLossError,
    DeltaError,
    MissingVersionsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from replay.history import CommitRecord, active_commit_at, commit_info_of, history, monotonic_timestamps
from replay.segment import LogListing, LogSegment, build_log_segment, classify_listing, list_log
from replay.snapshot import Snapshot, load_snapshot

READ_THREADS_KEY = "delta.logstores.replay.readThreads"
DEFAULT_READ_THREADS = 8
LOCAL_SCHEMES = frozenset({"file", "memory"})

Timestamp = int | float | str | _dt.datetime | _dt.date


def normalize_table_uri(table_uri: str) -> str:
    """The table root as a URI without trailing slash: local paths become ``file:///abs/path``."""
    scheme = uri_scheme(table_uri)
    if scheme == "":
        return "file://" + os.path.abspath(os.path.expanduser(table_uri))
    if scheme == "file":
        rest = table_uri[5:]
        if rest.startswith("//"):
            rest = rest[2:]
            rest = rest[rest.find("/") :] if not rest.startswith("/") else rest
        return "file://" + os.path.normpath(rest)
    return table_uri.rstrip("/")


def to_timestamp_ms(value: Timestamp) -> int:
    """Milliseconds since the epoch of a number (already ms), ISO string, date or datetime (naive = UTC)."""
    if isinstance(value, bool):
        raise TypeError("a timestamp cannot be a bool")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    return int(value.timestamp() * 1000)


class DeltaLog:
    """The transaction log of the table at :attr:`table_path`."""

    def __init__(self, table_uri: str, conf: ConfLike | None = None, store: LogStore | None = None) -> None:
        self.conf: dict[str, str] = to_conf_dict(conf)
        self.table_path = normalize_table_uri(table_uri)
        self.log_path = f"{self.table_path}/_delta_log"
        self.store: LogStore = store if store is not None else create_log_store(self.conf)
        local = uri_scheme(self.table_path) in LOCAL_SCHEMES
        default = min(os.cpu_count() or 1, 4) if local else DEFAULT_READ_THREADS
        self.read_threads = int(self.conf.get(READ_THREADS_KEY, default))
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None

    @classmethod
    def for_table(cls, table_uri: str, conf: ConfLike | None = None) -> DeltaLog:
        """The log of ``table_uri`` with the store ``create_log_store(conf)`` chooses."""
        return cls(table_uri, conf)

    @contextlib.contextmanager
    def executor(self) -> Iterator[ThreadPoolExecutor | None]:
        """A pool for concurrent reads, or ``None`` (read inline) when :attr:`read_threads` is 1.

        On object stores the pool hides request latency; locally it is sized by the CPUs, for
        the parsing it does without the GIL.
        """
        if self.read_threads <= 1:
            yield None
            return
        with ThreadPoolExecutor(max_workers=self.read_threads, thread_name_prefix="delta-log") as pool:
            yield pool

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_path!r})"

    # -- versions ------------------------------------------------------------------------------------
    def _segment(self, version: int | None = None) -> LogSegment:
        hint = read_last_checkpoint(self.store, self.log_path)
        return build_log_segment(
            self.store, self.log_path, self.table_path, version_to_load=version, last_checkpoint=hint
        )

    def table_exists(self) -> bool:
        try:
            self.latest_version()
        except TableNotFoundError:
            return False
        return True

    def latest_version(self) -> int:
        """The newest committed version. Raises :class:`TableNotFoundError` if there is none."""
        hint = read_last_checkpoint(self.store, self.log_path)
        start = hint.version if hint is not None else 0
        listing = classify_listing(list_log(self.store, self.log_path, start) or [])
        if not listing.deltas and start > 0:
            listing = classify_listing(list_log(self.store, self.log_path, 0) or [])
        if not listing.deltas:
            raise TableNotFoundError.no_commits(self.table_path, self.log_path)
        return listing.deltas[-1][0]

    def _full_listing(self) -> LogListing:
        """The whole log, classified; :class:`TableNotFoundError` if it holds no commit."""
        listing = classify_listing(list_log(self.store, self.log_path, 0) or [])
        if not listing.deltas:
            raise TableNotFoundError.no_commits(self.table_path, self.log_path)
        return listing

    def earliest_commit_version(self) -> int:
        """The oldest commit file still in the log (it may not be recreatable)."""
        return self._full_listing().deltas[0][0]

    def earliest_version(self) -> int:
        """The earliest version a snapshot can be built for (Delta's ``getEarliestRecreatableCommit``).

        That is the oldest of version 0 (if ``0.json`` exists) and complete checkpoint versions
        from which every later commit is present.
        """
        return self._earliest_version_in(self._full_listing())

    def _earliest_version_in(self, listing: LogListing) -> int:
        versions = [version for version, _ in listing.deltas]
        present = set(versions)
        latest = versions[-1]
        newest_gap = max((v for v in range(versions[0], latest + 1) if v not in present), default=-1)
        candidates = sorted(
            {instance.version for instance in complete_checkpoints(listing.checkpoints)}
            | ({0} if 0 in present else set())
        )
        for candidate in candidates:
            if candidate >= newest_gap and candidate <= latest:
                return candidate
        raise MissingVersionsError(
            f"no version of table {self.table_path} can be reconstructed: no checkpoint or version 0"
            f" followed by contiguous commits (commits found {versions[0]}..{latest})",
            table=self.table_path,
            versions=versions,
        )

    # -- snapshots -----------------------------------------------------------------------------------
    def snapshot(self, version: int | None = None, timestamp: Timestamp | None = None) -> Snapshot:
        """The table at ``version``, at the version active at ``timestamp``, or the latest one.

        Raises :class:`TableNotFoundError`, :class:`VersionNotFoundError` (version before the
        earliest recoverable or after the latest), :class:`TimestampOutOfRangeError`,
        :class:`MissingVersionsError`, :class:`CorruptLogError`,
        :class:`MissingProtocolOrMetadataError` or :class:`UnsupportedTableFeatureError`.
        """
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        if timestamp is not None:
            version = self.version_at_timestamp(to_timestamp_ms(timestamp))
        if version is None:
            return self.update()
        if version < 0:
            self._raise_version_not_found(version)
        try:
            segment = self._segment(version)
        except (VersionNotFoundError, MissingVersionsError, TableNotFoundError):
            self._raise_version_not_found(version)
        return load_snapshot(self, segment)

    def _raise_version_not_found(self, version: int) -> NoReturn:
        latest = self.latest_version()
        try:
            earliest: int | None = self.earliest_version()
        except MissingVersionsError:
            earliest = None
        if earliest is not None and earliest <= version <= latest:
            # inside the range: the real problem is a gap or corruption, let it surface
            build_log_segment(self.store, self.log_path, self.table_path, version_to_load=version)
        raise VersionNotFoundError(
            f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table {self.table_path} to version"
            f" {version}."
            f" Available versions: [{earliest}, {latest}].",
            table=self.table_path,
            version=version,
            earliest=earliest,
            latest=latest,
        )

    def update(self) -> Snapshot:
        """The latest snapshot, reusing the cached one if the log has not changed."""
        segment = self._segment()
        with self._lock:
            cached = self._latest
        if cached is not None and _same_segment(cached.log_segment, segment):
            return cached
        snapshot = load_snapshot(self, segment)
        with self._lock:
            self._latest = snapshot
        return snapshot

    def invalidate(self) -> None:
        """Forget the cached snapshot and the store's cached listings."""
        with self._lock:
            self._latest = None
        self.store.invalidate_cache()

    # -- commits -------------------------------------------------------------------------------------
    def read_version(self, version: int) -> list[Action]:
        """The actions of commit ``version`` in file order (unknown kinds skipped)."""
        path = filenames.delta_file(self.log_path, version)
        try:
            lines = read_commit_file(self, FileStatus(path, 0, 0))
        except DeltaError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                raise VersionNotFoundError(
                    f"commit {version} of table {self.table_path} does not exist ({path})",
                    table=self.table_path,
                    version=version,
                ) from None
            raise
        return _to_actions(lines)

    def get_changes(
        self, start_version: int, end_version: int | None = None, fail_on_data_loss: bool = True
    ) -> Iterator[tuple[int, list[Action]]]:
        """Commits ``start_version..end_version`` in order as ``(version, actions)`` (Delta's ``getChanges``).

        With ``fail_on_data_loss``, a missing first commit or a gap raises :class:`DataLossError`.
        """
        statuses = list_log(self.store, self.log_path, max(start_version, 0))
        if statuses is None:
            raise TableNotFoundError.no_commits(self.table_path, self.log_path)
        deltas = classify_listing(statuses, end_version).deltas
        expected = start_version
        for version, _ in deltas:
            if version != expected and fail_on_data_loss:
                raise DataLossError(
                    f"[DELTA_VERSIONS_NOT_CONTIGUOUS] the log of table {self.table_path} was expected to have"
                    f" version {expected} but the next available version is {version}: commits were deleted"
                    " (log retention or manual removal).",
                    table=self.table_path,
                )
            expected = version + 1
        window = max(2, 2 * self.read_threads)
        with self.executor() as executor:
            statuses = [s for _, s in deltas]
            reader = prefetch(
                executor, lambda s: read_commit_file(self, s), statuses, window, task="Reading commits"
            )
            for (version, _), lines in zip(deltas, reader, strict=True):
                yield version, _to_actions(lines)

    def commit(
        self,
        actions: Sequence[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        *,
        read_version: int | None = None,
        reads_whole_table: bool = False,
    ) -> int:
        """Commit ``actions`` as the next version (see :func:`replay.commit.commit`); returns it.

        ``read_version`` is the version the actions were derived from: commits landed since then
        are checked for conflicts. ``None`` makes a blind commit against the latest version.
        """
        from replay.commit import commit

        return commit(
            self,
            actions,
            operation,
            operation_parameters,
            read_version=read_version,
            reads_whole_table=reads_whole_table,
        )

    def checkpoint(self, version: int | None = None) -> Any:
        """Write a checkpoint of ``version`` (latest if ``None``) via :mod:`replay.checkpoint_writer`."""
        from replay.checkpoint_writer import write_checkpoint

        snapshot = self.snapshot(version) if version is not None else self.update()
        return write_checkpoint(self, snapshot)

    # -- time ----------------------------------------------------------------------------------------
    def commit_records(self) -> list[CommitRecord]:
        """Every recreatable commit with its effective timestamp, oldest first."""
        listing = self._full_listing()
        deltas = listing.deltas
        try:
            earliest = self._earliest_version_in(listing)
        except MissingVersionsError:
            earliest = deltas[0][0]
        records = monotonic_timestamps([(v, s) for v, s in deltas if v >= earliest])
        ict_from = self._in_commit_timestamps_from()
        if ict_from is None:
            return records
        wanted = [record for record in records if record.version >= ict_from]
        window = max(2, 2 * self.read_threads)
        with self.executor() as executor:
            reader = prefetch(
                executor, lambda s: read_commit_file(self, s), [r.status for r in wanted], window
            )
            ict = {}
            for record, lines in zip(wanted, reader, strict=True):
                info = commit_info_of(lines) or {}
                if info.get("inCommitTimestamp") is not None:
                    ict[record.version] = int(info["inCommitTimestamp"])
        return [CommitRecord(r.version, ict.get(r.version, r.timestamp), r.status) for r in records]

    def _in_commit_timestamps_from(self) -> int | None:
        configuration = self.update().metadata.configuration or {}
        if configuration.get("delta.enableInCommitTimestamps", "false").lower() != "true":
            return None
        return int(configuration.get("delta.inCommitTimestampEnablementVersion", 0))

    def commit_timestamp(self, version: int) -> int:
        """The effective timestamp (ms) of commit ``version``: in-commit timestamp, else monotonic mtime."""
        for record in self.commit_records():
            if record.version == version:
                return record.timestamp
        self._raise_version_not_found(version)

    def version_at_timestamp(
        self,
        timestamp_ms: int,
        *,
        can_return_last_commit: bool = False,
        can_return_earliest_commit: bool = False,
    ) -> int:
        """The version active at ``timestamp_ms`` (Delta's ``getActiveCommitAtTime``)."""
        return active_commit_at(
            self.commit_records(),
            timestamp_ms,
            table=self.table_path,
            can_return_last_commit=can_return_last_commit,
            can_return_earliest_commit=can_return_earliest_commit,
        )

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information newest first (see :func:`replay.history.history`)."""
        return history(self, limit)


def _to_actions(lines: list[dict[str, Any]]) -> list[Action]:
    actions = []
    for line in lines:
        action = action_from_dict(line)
        if action is not None:
            actions.append(action)
    return actions


def _same_segment(left: LogSegment, right: LogSegment) -> bool:
    def files(segment: LogSegment) -> list[tuple[str, int, int]]:
        statuses = [*segment.checkpoint_files, *(s for _, _, s in segment.replay_files)]
        return [(s.path, s.size, s.modification_time) for s in statuses]

    return left.version == right.version and files(left) == files(right)
