"""``DeltaLog``: the facade over one table's transaction log.

A thin layer: it owns the table's :class:`~replay.log.table_io.TableIO` and a cache of the
latest snapshot, and delegates every operation to the layer that owns it (``log`` for
versions, commits and their times, ``state`` for snapshots, ``txn`` for commits and
checkpoints). Nothing below imports it; the change data feed works on it through the
:class:`~replay.state.table_log.TableLog` protocol.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from logstores.base import LogStore
from logstores.conf import ConfLike
from replay.log import commit_timestamps
from replay.log.commit_files import iter_commits, read_commit
from replay.log.commit_timestamps import CommitRecord, active_commit_at
from replay.log.listing import LogListing, earliest_recreatable_version, full_listing, latest_version
from replay.log.log_segment import LogSegment, build_log_segment, load_log_segment, segment_in_listing
from replay.log.table_io import TableIO
from replay.protocol.actions import Action
from replay.protocol.errors import MissingVersionsError, TableNotFoundError, VersionNotFoundError
from replay.protocol.timestamps import UTC, Timestamp, to_datetime, to_timestamp_ms
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.checkpoint_writer import CheckpointResult, write_checkpoint
from replay.txn.log_cleanup import cleanup_expired_logs
from replay.txn.transaction import Transaction, commit_actions


class DeltaLog:
    """The transaction log of the table at :attr:`table_path`."""

    def __init__(self, table_uri: str, conf: ConfLike | None = None, store: LogStore | None = None) -> None:
        self.io = TableIO.for_table(table_uri, conf, store)
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None

    @classmethod
    def for_table(cls, table_uri: str, conf: ConfLike | None = None) -> DeltaLog:
        """The log of ``table_uri`` with the store ``create_log_store(conf)`` chooses."""
        return cls(table_uri, conf)

    @property
    def table_path(self) -> str:
        return self.io.table_path

    @property
    def log_path(self) -> str:
        return self.io.log_path

    @property
    def store(self) -> LogStore:
        return self.io.store

    @property
    def conf(self) -> Mapping[str, str]:
        return self.io.conf

    @property
    def read_threads(self) -> int:
        return self.io.read_threads

    def __repr__(self) -> str:
        return f"DeltaLog({self.io.shown_path!r})"

    # -- versions ------------------------------------------------------------------------------------
    def table_exists(self) -> bool:
        try:
            self.latest_version()
        except TableNotFoundError:
            return False
        return True

    def latest_version(self) -> int:
        """The newest committed version. Raises :class:`TableNotFoundError` if there is none."""
        return latest_version(self.io)

    def earliest_commit_version(self) -> int:
        """The oldest commit file still in the log (it may not be recreatable)."""
        return full_listing(self.io).deltas[0][0]

    def earliest_version(self) -> int:
        """The earliest version a snapshot can be built for (Delta's ``getEarliestRecreatableCommit``)."""
        return earliest_recreatable_version(full_listing(self.io), self.table_path)

    # -- snapshots -----------------------------------------------------------------------------------
    def snapshot(self, version: int | None = None, timestamp: Timestamp | None = None) -> Snapshot:
        """The table at ``version``, at the version active at ``timestamp``, or the latest one.

        A timestamp without a zone is read as UTC; errors show times in the timestamp's zone.
        Raises :class:`TableNotFoundError`, :class:`VersionNotFoundError` (version before the
        earliest recoverable or after the latest), :class:`TimestampOutOfRangeError`,
        :class:`MissingVersionsError`, :class:`CorruptLogError`,
        :class:`MissingProtocolOrMetadataError` or :class:`UnsupportedTableFeatureError`.
        """
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        if timestamp is not None:
            listing = full_listing(self.io)  # one listing serves the commit times and the segment
            moment = to_datetime(timestamp)
            version = active_commit_at(
                self._commit_records(listing),
                to_timestamp_ms(moment),
                table=self.table_path,
                zone=moment.tzinfo or UTC,
            )
            segment = segment_in_listing(self.io, listing, version)
            if segment is not None:
                return (
                    self._cached(segment)
                    if version == listing.latest_version
                    else load_snapshot(self.io, segment)
                )
        if version is None:
            return self.update()
        if version < 0:
            self._raise_version_not_found(version)
        try:
            segment = load_log_segment(self.io, version)
        except (VersionNotFoundError, MissingVersionsError, TableNotFoundError):
            self._raise_version_not_found(version)
        return load_snapshot(self.io, segment)

    def _raise_version_not_found(self, version: int) -> NoReturn:
        latest = self.latest_version()
        try:
            earliest: int | None = self.earliest_version()
        except MissingVersionsError:
            earliest = None
        if earliest is not None and earliest <= version <= latest:
            # inside the range: the real problem is a gap or corruption, let it surface
            build_log_segment(self.io, version_to_load=version)
        raise VersionNotFoundError(
            f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table {self.table_path} to version"
            f" {version}. Available versions: [{earliest}, {latest}].",
            table=self.table_path,
            version=version,
            earliest=earliest,
            latest=latest,
        )

    def update(self, *, files: bool = True) -> Snapshot:
        """The latest snapshot, reusing the cached one if the log has not changed. With
        ``files=False`` a newly loaded snapshot replays its files on first use
        (:func:`~replay.state.loader.load_snapshot`)."""
        return self._cached(load_log_segment(self.io), files=files)

    def _cached(self, segment: LogSegment, *, files: bool = True) -> Snapshot:
        """The snapshot of the latest ``segment``: the cached one if it is that segment, else loaded."""
        with self._lock:
            cached = self._latest
        if cached is not None and cached.log_segment.same_files(segment):
            return cached
        snapshot = load_snapshot(self.io, segment, files=files)
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
        return read_commit(self.io, version)

    def get_changes(
        self, start_version: int, end_version: int | None = None, fail_on_data_loss: bool = True
    ) -> Iterator[tuple[int, list[Action]]]:
        """Commits ``start_version..end_version`` in order as ``(version, actions)`` (Delta's ``getChanges``).

        With ``fail_on_data_loss``, a missing first commit or a gap raises :class:`DataLossError`.
        """
        return iter_commits(self.io, start_version, end_version, fail_on_data_loss=fail_on_data_loss)

    def commit(
        self,
        actions: Sequence[Action],
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        *,
        read_version: int | None = None,
        reads_whole_table: bool = False,
    ) -> int:
        """Commit ``actions`` as the next version in one :class:`~replay.txn.transaction.Transaction`.

        ``read_version`` is the version the actions were derived from: commits landed since then
        are checked for conflicts. ``None`` makes a blind commit against the latest version
        (``-1`` creates the table). Delta's writer checks apply to the snapshot the commit is
        made from, which must load: an unreadable or gapped log, a protocol this library cannot
        commit to and a data removal from an append-only table are refused before anything is
        written (see :meth:`replay.protocol.table_config.TableConfiguration.check_commit`).
        The post-commit hooks run afterwards (automatic checkpoint, log cleanup; see
        :mod:`replay.txn.post_commit`).
        """
        read_snapshot = self._commit_base(read_version)
        try:
            return commit_actions(
                self.io,
                actions,
                operation,
                operation_parameters,
                read_version=-1 if read_snapshot is None else read_snapshot.version,
                read_snapshot=read_snapshot,
                reads_whole_table=reads_whole_table,
            )
        finally:
            self.invalidate()

    def start_transaction(self, version: int | None = None, *, operation: str = "WRITE") -> Transaction:
        """A :class:`~replay.txn.transaction.Transaction` reading the latest version (or ``version``);
        it creates the table if there is none. Record what it reads and add its actions, then
        ``commit()`` (Delta's ``startTransaction``)."""
        return Transaction(self.io, self._commit_base(version), operation=operation)

    def _commit_base(self, read_version: int | None) -> Snapshot | None:
        """The snapshot a commit is made from (``None`` for a new table): the cached latest one if
        it is current, else one whose files are replayed only if the commit needs them."""
        if read_version is not None and read_version < 0:
            return None
        try:
            segment = load_log_segment(self.io, read_version)
        except TableNotFoundError:
            if read_version is not None:
                raise
            return None
        with self._lock:
            cached = self._latest
        if cached is not None and cached.log_segment.same_files(segment):
            return cached
        return load_snapshot(self.io, segment, files=False)

    def checkpoint(self, version: int | None = None) -> CheckpointResult:
        """Write a checkpoint of ``version`` (latest if ``None``); see :mod:`replay.txn.checkpoint_writer`."""
        snapshot = self.snapshot(version) if version is not None else self.update()
        return write_checkpoint(self.io, snapshot)

    def cleanup_expired_logs(self) -> list[str]:
        """Delete expired log files now (Delta's ``MetadataCleanup``; see :mod:`replay.txn.log_cleanup`).

        Runs whatever ``delta.enableExpiredLogCleanup`` says (the automatic cleanup after a
        checkpoint honours it); returns the deleted paths.
        """
        try:
            return cleanup_expired_logs(self.io, self.update().config)
        finally:
            self.invalidate()

    # -- time ----------------------------------------------------------------------------------------
    def commit_records(self) -> list[CommitRecord]:
        """Every recreatable commit with its effective timestamp, oldest first."""
        return self._commit_records(full_listing(self.io))

    def _commit_records(self, listing: LogListing) -> list[CommitRecord]:
        """:meth:`commit_records` from a whole-log listing (also used to find the latest snapshot)."""
        latest = segment_in_listing(self.io, listing, listing.deltas[-1][0])
        snapshot = self._cached(latest) if latest is not None else self.update()
        return commit_timestamps.commit_records(self.io, listing, snapshot.config.in_commit_timestamps_since)

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
        zone: _dt.tzinfo = UTC,
    ) -> int:
        """The version active at ``timestamp_ms`` (Delta's ``getActiveCommitAtTime``); errors show
        times in ``zone``."""
        return active_commit_at(
            self.commit_records(),
            timestamp_ms,
            table=self.table_path,
            can_return_last_commit=can_return_last_commit,
            can_return_earliest_commit=can_return_earliest_commit,
            zone=zone,
        )

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information newest first (see :func:`replay.log.commit_timestamps.history`)."""
        return commit_timestamps.history(self.io, self.commit_records(), limit)
