"""``Transaction``: one optimistic change of a table, with Delta's conflict rules.

A transaction is bound to the snapshot it read (``None`` creates the table). It records what the
operation read (predicates over partition and data columns, files, the whole table, application
ids) and what it writes (adds, removes, change files, metadata, protocol, domain metadata, app
transactions), with the operation's name, parameters and metrics. :meth:`Transaction.commit`
publishes the next version through a :class:`~replay.txn.committer.Committer`; when another
writer took it, each winning commit is read (never a whole snapshot) and checked by
:func:`~replay.txn.conflicts.check_conflicts`; without a conflict the transaction is retried at
the next version, as Delta rebases. It returns the committed version or raises one of Delta's
conflict exceptions.

Every writer commits through one: ``write_table`` and ``delete_files``, the Spark batch writer
and streaming sink, ``DeltaLog.commit`` (raw actions, :func:`commit_actions`) and the row-level
and maintenance operations.

**Never losing data.** :attr:`Transaction.outcome` says whether the commit happened. It is
``NOT_COMMITTED`` only when that is certain (the transaction was refused before writing, or every
version it tried was taken by another transaction); a write that failed in an unknown way is
``UNKNOWN`` unless reading the version back shows this transaction's ``txnId``. A writer deletes
its data files only on ``NOT_COMMITTED``. Post-commit hooks (automatic checkpoints, log cleanup)
run after the outcome is ``COMMITTED``; their failures are logged, and nothing they raise can make
a writer take back a commit.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from replay.log.commit_files import fetch_log_file, read_commit
from replay.log.table_io import TableIO
from replay.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.arrow_actions import map_dicts
from replay.protocol.errors import (
    ConcurrentModificationError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
    VersionNotFoundError,
)
from replay.protocol.filenames import delta_file
from replay.protocol.iceberg_compat import check_adds as check_iceberg_adds
from replay.protocol.paths import normalize_path_key
from replay.protocol.predicates import Predicate
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import (
    IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP,
    IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION,
)
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.commit_properties import CommitProperties, current_commit_properties
from replay.txn.committer import (
    DEFAULT_MAX_ATTEMPTS,
    Committer,
    FileSystemCommitter,
    InCommitTimestamps,
    OperationInfo,
    commit_info,
    now_ms,
)
from replay.txn.conflicts import (
    CurrentTransaction,
    ReadSet,
    WinningCommit,
    blind_append,
    check_conflicts,
    isolation_level_for,
)
from replay.txn.post_commit import PostCommitResult, run_post_commit_hooks
from replay.txn.row_tracking import FEATURE as ROW_TRACKING_FEATURE
from replay.txn.row_tracking import assign_row_ids, high_water_mark

logger = logging.getLogger(__name__)


class CommitOutcome(enum.Enum):
    """Whether a transaction's commit happened (see the module docstring)."""

    NOT_COMMITTED = "not committed"
    COMMITTED = "committed"
    UNKNOWN = "unknown"


class Transaction:
    """A change to the table at ``io``, made from ``read_snapshot`` (``None``: a new table)."""

    def __init__(
        self,
        io: TableIO,
        read_snapshot: Snapshot | None,
        *,
        operation: str = "WRITE",
        committer: Committer | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        txn_id: str | None = None,
    ) -> None:
        self.io = io
        self.read_snapshot = read_snapshot
        self.operation = operation
        self.operation_parameters: dict[str, Any] = {}
        self.operation_metrics: dict[str, Any] = {}
        properties = current_commit_properties() or CommitProperties()
        self.user_metadata: str | None = properties.user_metadata
        self.custom_metadata: dict[str, Any] = dict(properties.custom_metadata or {})
        """Extra ``commitInfo`` fields (:mod:`replay.txn.commit_properties`)."""
        self.committer: Committer = committer or FileSystemCommitter()
        retries = properties.max_commit_retries
        self.max_attempts = max_attempts if retries is None else retries + 1
        self.txn_id = txn_id or str(uuid.uuid4())
        """The commit's ``commitInfo.txnId``: how a writer finds out later whether it committed."""
        self.outcome = CommitOutcome.NOT_COMMITTED
        self.version: int | None = None
        self.post_commit: PostCommitResult | None = None
        self._actions: list[Action] = []
        self._predicates: list[Predicate] = []
        self._read_files: dict[str, Mapping[str, str | None]] = {}
        self._whole_table = False
        self._app_ids: set[str] = set()
        self._started = False
        self._row_id_mark = -1  # the row id high water mark commits are numbered after (row tracking)

    @classmethod
    def for_table(cls, io: TableIO, version: int | None = None, *, operation: str = "WRITE") -> Transaction:
        """A transaction on the latest version (or ``version``), or creating the table if there is
        none. Only the table's description is replayed; the files on first use."""
        try:
            snapshot = load_snapshot(io, version=version, files=False)
        except TableNotFoundError:
            if version is not None:
                raise
            snapshot = None
        return cls(io, snapshot, operation=operation)

    def __repr__(self) -> str:
        return f"Transaction({self.io.table_path!r}, read_version={self.read_version}, {self.operation})"

    @property
    def read_version(self) -> int:
        """The version read (-1: the transaction creates the table)."""
        return self.read_snapshot.version if self.read_snapshot is not None else -1

    @property
    def read_config(self) -> TableConfiguration | None:
        return self.read_snapshot.config if self.read_snapshot is not None else None

    # -- what it read ---------------------------------------------------------------------------
    def read_whole_table(self) -> None:
        """The result depends on every file (an overwrite, a full scan): any concurrent change
        other than a blind append under ``WriteSerializable`` is a conflict."""
        self._whole_table = True

    def read_predicate(self, predicate: Predicate) -> None:
        """The operation read the rows matching ``predicate`` (partition and data columns):
        concurrently added files that may hold such rows are a conflict."""
        self._predicates.append(predicate)

    def read_files(self, files: pa.Table | Iterable[AddFile]) -> None:
        """The operation read these files (a ``files_table`` or adds): their concurrent removal is a
        conflict."""
        if isinstance(files, pa.Table):
            paths = files.column("path").to_pylist()
            values = map_dicts(files.column("partition_values"))
            for path, partition in zip(paths, values, strict=True):
                self._read_files[normalize_path_key(path)] = partition or {}
            return
        for add in files:
            self._read_files[normalize_path_key(add.path)] = add.partition_values or {}

    def app_transaction_version(self, app_id: str) -> int | None:
        """The last version ``app_id`` committed as of the read snapshot; the transaction then depends
        on it (a concurrent commit for the same id is a conflict)."""
        self._app_ids.add(app_id)
        if self.read_snapshot is None:
            return None
        return self.read_snapshot.set_transactions.get(app_id)

    # -- what it writes -------------------------------------------------------------------------
    def add_actions(self, actions: Iterable[Action]) -> None:
        """Actions to commit (a ``commitInfo`` among them is dropped: the commit writes its own)."""
        self._actions.extend(action for action in actions if not isinstance(action, CommitInfo))

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Record that application ``app_id`` committed ``version`` (idempotent writes)."""
        self._app_ids.add(app_id)
        self._actions.append(SetTransaction(app_id, version, now_ms()))

    @property
    def actions(self) -> list[Action]:
        return list(self._actions)

    # -- committing ---------------------------------------------------------------------------------
    def commit(self) -> int:
        """Commit as the next version and run the post-commit hooks; returns the version.

        Before anything is written, Delta's writer checks apply to the configuration the commit
        leaves (:meth:`TableConfiguration.check_commit`: protocols this library cannot commit to,
        data removed from an append-only table), and a new table needs a protocol and a metadata
        action (:class:`ValueError`). Raises Delta's conflict exceptions (subclasses of
        :class:`ConcurrentModificationError`, naming the winning version and operation) when a
        concurrent commit conflicts or ``max_attempts`` versions were all taken; storage errors
        propagate (see :attr:`outcome`).
        """
        if self._started:
            raise RuntimeError(f"{self!r} was already committed or attempted")
        self._started = True
        config = self._check()
        table_level = config.isolation_level
        level = isolation_level_for(self._actions, table_level)
        reads = self._read_set()
        current = CurrentTransaction(self.io.table_path, self.read_config, reads, self._actions, level)
        if self.read_snapshot is None:
            self.io.store.create_directories(self.io.log_path)
        version = self._publish(current, config)
        self.version = version
        self.outcome = CommitOutcome.COMMITTED
        logger.debug(
            "committed version %d of %s (%d actions)", version, self.io.table_path, len(self._actions)
        )
        self.post_commit = run_post_commit_hooks(
            self.io, version, config, operation=self.operation, actions=self.actions
        )
        return version

    def _check(self) -> TableConfiguration:
        """The configuration after the commit, once Delta's writer checks pass."""
        protocol = next((a for a in reversed(self._actions) if isinstance(a, Protocol)), None)
        metadata = next((a for a in reversed(self._actions) if isinstance(a, Metadata)), None)
        base = self.read_snapshot
        if base is None:
            if protocol is None or metadata is None:
                named = (("protocol", protocol), ("metadata", metadata))
                missing = " and ".join(name for name, action in named if action is None)
                raise ValueError(
                    f"Cannot create table {self.io.table_path}: the first commit needs a {missing} action"
                )
            config = TableConfiguration(protocol, metadata, self.io.table_path)
        else:
            config = base.config.updated(protocol, metadata)
        config.check_commit(
            removes_data=removes_data(self._actions), previous=base.config if base is not None else None
        )
        adds = (a for a in self._actions if isinstance(a, AddFile))
        check_iceberg_adds(adds, config.configuration, self.io.table_path)
        return config

    def _read_set(self) -> ReadSet:
        whole = self._whole_table
        app_ids = {a.app_id for a in self._actions if isinstance(a, SetTransaction)} | self._app_ids
        return ReadSet(tuple(self._predicates), dict(self._read_files), whole, frozenset(app_ids))

    def _publish(self, current: CurrentTransaction, config: TableConfiguration) -> int:
        """Write the commit at the first version no conflicting transaction took."""
        row_ids = config.protocol.has_writer_feature(ROW_TRACKING_FEATURE)
        if row_ids and self.read_snapshot is not None:  # the table's domains are read only then
            mark = high_water_mark(self.read_snapshot.domain_metadata)
            self._row_id_mark = -1 if mark is None else mark
        enables_ict = (
            config.in_commit_timestamps_enabled
            and self.read_config is not None
            and not self.read_config.in_commit_timestamps_enabled
        )
        timestamps = InCommitTimestamps(self.io, config.in_commit_timestamps_enabled)
        info = OperationInfo(
            self.operation,
            self.operation_parameters,
            self.operation_metrics,
            self.user_metadata,
            self.custom_metadata,
        )
        blind = blind_append(self._actions, current.reads)
        version = self.read_version + 1
        for attempt in range(1, self.max_attempts + 1):
            now = now_ms()
            in_commit_timestamp = timestamps.value(version, now)
            actions: Sequence[Action] = self._actions  # as given, each attempt anew
            if enables_ict and in_commit_timestamp is not None:
                actions = self._ict_enablement_actions(version, in_commit_timestamp)
            if row_ids:  # the ids of this attempt's version, after the winners' (row_tracking)
                actions, _ = assign_row_ids(actions, version, self._row_id_mark)
            body = [action.json() for action in actions]
            line = commit_info(
                info,
                now=now,
                in_commit_timestamp=in_commit_timestamp,
                read_version=self.read_version,
                isolation_level=current.isolation_level,
                blind_append=blind,
                txn_id=self.txn_id,
            ).json()
            try:
                self.committer.commit(self.io, version, [line, *body])
            except FileExistsError:
                logger.info(
                    "commit of version %d of %s lost a race (attempt %d)",
                    version,
                    self.io.table_path,
                    attempt,
                )
            except BaseException as exc:
                self.outcome = self._outcome_after_failure(version)
                if self.outcome is not CommitOutcome.COMMITTED or not isinstance(exc, Exception):
                    if self.outcome is CommitOutcome.COMMITTED:
                        self.version = version  # an interrupt still ends the caller, after the commit
                    raise
                logger.warning(
                    "the write of version %d of %s failed (%s) but the commit is in the log",
                    version,
                    self.io.table_path,
                    exc,
                )
                return version
            else:
                return version
            mine, version = self._rebase(current, timestamps, version)
            if mine:
                return version
        raise ConcurrentModificationError(
            f"Gave up committing to table {self.io.table_path} after {self.max_attempts} attempts; "
            f"version {version - 1} was the last taken by a concurrent writer.",
            table=self.io.table_path,
            winning_version=version - 1,
        )

    def _ict_enablement_actions(self, version: int, in_commit_timestamp: int) -> list[Action]:
        """The actions of a commit that enables in-commit timestamps on an existing table, its
        metadata recording where they start (Delta's ``delta.inCommitTimestampEnablementVersion``
        and ``...Timestamp``: the version and in-commit timestamp of this commit)."""
        actions: list[Action] = []
        for action in self._actions:
            if isinstance(action, Metadata):
                configuration = {
                    **action.configuration,
                    IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION.key: str(version),
                    IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP.key: str(in_commit_timestamp),
                }
                actions.append(dataclasses.replace(action, configuration=configuration))
            else:
                actions.append(action)
        return actions

    def _rebase(
        self, current: CurrentTransaction, timestamps: InCommitTimestamps, first: int
    ) -> tuple[bool, int]:
        """Check every commit from ``first`` (the version this transaction just lost) on:
        ``(True, first)`` if that one is this transaction's own commit (a write whose success was
        not reported), else ``(False, the first free version)``. Raises the conflict a winner
        causes; if a winner cannot be read, the outcome is unknown and the error propagates."""
        version = first
        try:
            while True:
                try:
                    actions = read_commit(self.io, version)
                except VersionNotFoundError:
                    return False, version
                winner = WinningCommit(version, actions)
                if winner.txn_id == self.txn_id:
                    return True, version
                check_conflicts(current, winner)
                winners_mark = high_water_mark(actions)
                if winners_mark is not None:
                    self._row_id_mark = max(self._row_id_mark, winners_mark)
                timestamps.remember(version, actions)
                version += 1
        except (ConcurrentModificationError, UnsupportedTableFeatureError):
            raise  # ``first`` belongs to another transaction: nothing of this one is in the log
        except BaseException:
            if version == first:
                self.outcome = CommitOutcome.UNKNOWN  # the version lost may be this transaction's
            raise

    def _outcome_after_failure(self, version: int) -> CommitOutcome:
        """After a write of ``version`` failed in an unknown way: read it back."""
        try:
            actions = read_commit(self.io, version)
        except VersionNotFoundError:
            return CommitOutcome.UNKNOWN  # a request still in flight may yet create it
        except Exception:
            logger.debug("reading back version %d of %s failed", version, self.io.table_path, exc_info=True)
            return CommitOutcome.UNKNOWN
        mine = WinningCommit(version, actions).txn_id == self.txn_id
        return CommitOutcome.COMMITTED if mine else CommitOutcome.NOT_COMMITTED


def transaction_committed(io: TableIO, read_version: int, txn_id: str) -> bool:
    """Whether a commit after ``read_version`` carries ``txnId`` ``txn_id`` (a byte search of each
    newer commit file, newest last). For a writer that must decide, in another process, whether
    its files are in the table before deleting them."""
    needle = f'"txnId":"{txn_id}"'.encode()
    version = read_version + 1
    while True:
        try:
            raw = fetch_log_file(io, delta_file(io.log_path, version))
        except FileNotFoundError:
            return False
        if needle in raw:
            return True
        version += 1


def removes_data(actions: Iterable[Action]) -> bool:
    """Whether the actions remove data (a ``remove`` with ``dataChange``): the one home of the rule
    that append-only tables refuse such commits."""
    return any(isinstance(a, RemoveFile) and a.data_change for a in actions)


def commit_actions(
    io: TableIO,
    actions: Sequence[Action],
    operation: str = "WRITE",
    operation_parameters: Mapping[str, Any] | None = None,
    *,
    read_version: int | None = None,
    read_snapshot: Snapshot | None = None,
    reads_whole_table: bool = False,
    operation_metrics: Mapping[str, Any] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> int:
    """Commit raw ``actions`` in one transaction; returns the version (``DeltaLog.commit``).

    ``read_version`` is the version the actions were derived from (default: the version of
    ``read_snapshot``, else the latest, i.e. a blind commit; ``-1`` creates the table);
    ``reads_whole_table`` marks a transaction that read every file. Nothing else counts as read:
    removing a file another commit removed too is a ``ConcurrentDeleteDeleteException``. See
    :meth:`Transaction.commit` for the checks and errors.
    """
    if read_snapshot is None:
        if read_version is None:
            read_snapshot = _latest(io)
        elif read_version >= 0:
            read_snapshot = load_snapshot(io, version=read_version, files=False)
    txn = Transaction(io, read_snapshot, operation=operation, max_attempts=max_attempts)
    txn.add_actions(actions)
    txn.operation_parameters = dict(operation_parameters or {})
    txn.operation_metrics = dict(operation_metrics or {})
    if reads_whole_table:
        txn.read_whole_table()
    return txn.commit()


def _latest(io: TableIO) -> Snapshot | None:
    try:
        return load_snapshot(io, files=False)
    except TableNotFoundError:
        return None
