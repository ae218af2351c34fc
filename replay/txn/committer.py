"""Optimistic commits: write ``N+1.json`` with put-if-absent, resolve races like Delta does.

A transaction reads the table at some version, prepares actions and tries to create the next
commit file with ``store.write(path, lines, overwrite=False)``. The store guarantees that of
several writers of the same file exactly one succeeds. A loser re-reads the commits that won,
checks them for a *logical* conflict with its own actions (Delta's ``ConflictChecker``, in the
subset that matters for file-level writers) and, when there is none, retries at the next free
version. Blind appends therefore never fail because of concurrent appends.

Conflicts (:class:`ConcurrentModificationError`, naming the winning version):

* the winner changed the protocol or the metadata;
* the winner wrote a ``txn`` with an application id this transaction also writes;
* the winner removed a file this transaction removes;
* this transaction read the whole table (an overwrite, or a metadata/protocol change), or the
  partitions ``reads_partitions`` accepts (a ``replaceWhere`` or dynamic partition overwrite), and
  the winner added or removed data files there.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

import orjson

from replay.log.commit_files import read_commit
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
from replay.protocol.errors import ConcurrentModificationError, TableNotFoundError, VersionNotFoundError
from replay.protocol.filenames import delta_file
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot

logger = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 10_000
"""How many versions a commit tries before giving up (Delta's ``maxCommitAttempts`` is larger)."""
ISOLATION_LEVEL = "Serializable"


def engine_info() -> str:
    """``engineInfo`` of every commit this library writes, e.g. ``delta-logstores/0.1.0``."""
    try:
        return f"delta-logstores/{package_version('delta-logstores')}"
    except PackageNotFoundError:
        return "delta-logstores"


def encode_operation_parameters(parameters: Mapping[str, Any] | None) -> dict[str, str | None]:
    """Delta's ``operationParameters`` form: strings and nulls as they are, other values as JSON."""
    encoded: dict[str, str | None] = {}
    for key, value in (parameters or {}).items():
        if value is None or isinstance(value, str):
            encoded[str(key)] = value
        else:
            encoded[str(key)] = orjson.dumps(value).decode()
    return encoded


@dataclass
class _Transaction:
    """What conflict checking needs to know about the actions being committed."""

    table: str
    reads_whole_table: bool
    removed: dict[tuple[str, str | None], str] = field(default_factory=dict)
    app_ids: set[str] = field(default_factory=set)
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    reads_partitions: Callable[[Mapping[str, str | None]], bool] | None = None

    @classmethod
    def of(
        cls,
        table: str,
        actions: Sequence[Action],
        reads_whole_table: bool,
        reads_partitions: Callable[[Mapping[str, str | None]], bool] | None = None,
    ) -> _Transaction:
        txn = cls(table, reads_whole_table, reads_partitions=reads_partitions)
        for action in actions:
            if isinstance(action, RemoveFile):
                txn.removed[action.unique_key] = action.path
            elif isinstance(action, SetTransaction):
                txn.app_ids.add(action.app_id)
            elif isinstance(action, Metadata):
                txn.metadata = action
            elif isinstance(action, Protocol):
                txn.protocol = action
        if txn.metadata is not None or txn.protocol is not None:
            txn.reads_whole_table = True
        return txn

    def check(self, winning_version: int, winner: Iterable[Action]) -> None:
        """Raise :class:`ConcurrentModificationError` if the winning commit conflicts with this one."""
        for action in winner:
            problem = self._conflict(winning_version, action)
            if problem is not None:
                raise ConcurrentModificationError(
                    f"{problem} Conflicting commit: version {winning_version} of table {self.table}.",
                    table=self.table,
                    winning_version=winning_version,
                )

    def _conflict(self, winning_version: int, action: Action) -> str | None:
        if isinstance(action, Protocol):
            hint = (
                " This happens when multiple writers are writing to an empty directory. Creating the "
                "table ahead of time will avoid this conflict."
                if winning_version == 0
                else ""
            )
            return (
                "ProtocolChangedException: The protocol version of the Delta table has been changed "
                f"by a concurrent update.{hint}"
            )
        if isinstance(action, Metadata):
            return (
                "MetadataChangedException: The metadata of the Delta table has been changed by a "
                "concurrent update."
            )
        if isinstance(action, SetTransaction) and action.app_id in self.app_ids:
            return (
                "ConcurrentTransactionException: A concurrent transaction committed for the same "
                f"application id {action.app_id!r}."
            )
        if isinstance(action, RemoveFile) and action.unique_key in self.removed:
            return (
                "ConcurrentDeleteDeleteException: This transaction attempted to delete one or more "
                f"files that were deleted (for example {action.path}) by a concurrent update."
            )
        if isinstance(action, AddFile | RemoveFile) and action.data_change and self._reads(action):
            kind = "added" if isinstance(action, AddFile) else "deleted"
            scope = "the whole table" if self.reads_whole_table else "the partitions it overwrites"
            return (
                f"ConcurrentAppendException: Files were {kind} (for example {action.path}) by a "
                f"concurrent update while this transaction read {scope}."
            )
        return None

    def _reads(self, action: AddFile | RemoveFile) -> bool:
        if self.reads_whole_table:
            return True
        return self.reads_partitions is not None and self.reads_partitions(action.partition_values or {})


def _is_blind_append(actions: Sequence[Action], reads_whole_table: bool, reads_partitions: bool) -> bool:
    if reads_whole_table or reads_partitions:
        return False
    return not any(
        isinstance(a, RemoveFile) or (isinstance(a, AddFile) and not a.data_change) for a in actions
    )


def _commit_info_of(actions: Iterable[Action]) -> CommitInfo | None:
    return next((action for action in actions if isinstance(action, CommitInfo)), None)


class _InCommitTimestamps:
    """Decides whether commits carry ``inCommitTimestamp`` and computes monotonic values."""

    def __init__(self, io: TableIO, txn: _Transaction, read_snapshot: Snapshot | None) -> None:
        self._io = io
        self._known: dict[int, CommitInfo | None] = {}
        if txn.metadata is not None:
            self._enabled: bool | None = _ict_enabled(txn.metadata)
        elif read_snapshot is not None:
            self._enabled = _ict_enabled(read_snapshot.metadata)
        else:
            self._enabled = None  # decided from the previous commit, which carries one iff enabled

    def remember(self, version: int, actions: Iterable[Action]) -> None:
        self._known[version] = _commit_info_of(actions)

    def value(self, version: int, now: int) -> int | None:
        """The in-commit timestamp for ``version`` (``None`` if the table does not use them)."""
        previous = self._previous(version) if version > 0 and self._enabled is not False else None
        if self._enabled is None:
            self._enabled = previous is not None and previous.in_commit_timestamp is not None
        if not self._enabled:
            return None
        if previous is None or previous.in_commit_timestamp is None:
            return now
        return max(now, previous.in_commit_timestamp + 1)

    def _previous(self, version: int) -> CommitInfo | None:
        if version - 1 not in self._known:
            try:
                self.remember(version - 1, read_commit(self._io, version - 1))
            except VersionNotFoundError:
                self._known[version - 1] = None
        return self._known[version - 1]


def _ict_enabled(metadata: Metadata) -> bool:
    return ENABLE_IN_COMMIT_TIMESTAMPS.value_in(metadata.configuration)


def _commit_info(
    *,
    now: int,
    in_commit_timestamp: int | None,
    operation: str,
    parameters: dict[str, str | None],
    read_version: int,
    blind_append: bool,
    metrics: Mapping[str, Any] | None,
    txn_id: str,
    user_metadata: str | None = None,
) -> CommitInfo:
    values: dict[str, Any] = {}
    if in_commit_timestamp is not None:
        values["inCommitTimestamp"] = in_commit_timestamp
    values["timestamp"] = now
    values["operation"] = operation
    values["operationParameters"] = parameters
    if read_version >= 0:
        values["readVersion"] = read_version
    values["isolationLevel"] = ISOLATION_LEVEL
    values["isBlindAppend"] = blind_append
    if metrics:
        values["operationMetrics"] = {str(key): str(value) for key, value in metrics.items()}
    if user_metadata is not None:
        values["userMetadata"] = user_metadata
    values["engineInfo"] = engine_info()
    values["txnId"] = txn_id
    return CommitInfo(values)


def _latest_snapshot(io: TableIO) -> Snapshot | None:
    """The latest snapshot, ``None`` when there is no table yet."""
    try:
        return load_snapshot(io)
    except TableNotFoundError:
        return None


def commit(
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
    reads_partitions: Callable[[Mapping[str, str | None]], bool] | None = None,
    user_metadata: str | None = None,
) -> int:
    """Commit ``actions`` as the next version of the table and return that version.

    ``read_version`` is the version the actions were derived from (default: the version of
    ``read_snapshot``, else the latest version at call time, i.e. a blind commit); ``-1`` creates
    the table, which then requires a protocol and a metadata action and creates ``_delta_log``.
    A ``commitInfo`` (timestamp, operation, JSON-encoded parameters, engine info, blind-append
    flag, and ``inCommitTimestamp`` when the table enables them) is written as the first line;
    ``commitInfo`` actions among ``actions`` are dropped.

    ``reads_partitions`` marks a transaction that read only some partitions (it gets a file's
    partition values); ``user_metadata`` becomes ``commitInfo.userMetadata``.

    Before anything is written, Delta's writer checks are applied to the table configuration the
    commit leaves in force (:meth:`TableConfiguration.check_commit`, the one home of these
    rules): the snapshot the commit is made from is loaded when not given, so a log whose
    versions cannot be reconstructed (missing commits, no usable checkpoint) raises its
    :class:`~replay.protocol.errors.MissingVersionsError` here.

    Raises :class:`ConcurrentModificationError` (with ``winning_version``) when a concurrent
    commit conflicts or ``max_attempts`` versions were all taken, :class:`ValueError` for a
    table creation without protocol or metadata, :class:`UnsupportedTableFeatureError` for a
    table (or a protocol upgrade) this library cannot commit to, :class:`AppendOnlyTableError`
    for a data removal from an append-only table; storage errors propagate.
    """
    actions = [action for action in actions if not isinstance(action, CommitInfo)]
    if read_snapshot is None:
        if read_version is None:
            read_snapshot = _latest_snapshot(io)
            read_version = read_snapshot.version if read_snapshot is not None else -1
        elif read_version >= 0:
            read_snapshot = load_snapshot(io, version=read_version)
    elif read_version is None:
        read_version = read_snapshot.version
    table = io.table_path
    txn = _Transaction.of(table, actions, reads_whole_table, reads_partitions)
    base = read_snapshot if read_version >= 0 else None
    if base is None and (txn.metadata is None or txn.protocol is None):
        named = (("protocol", txn.protocol), ("metadata", txn.metadata))
        missing = " and ".join(name for name, action in named if action is None)
        raise ValueError(f"Cannot create table {table}: the first commit needs a {missing} action")
    configuration_after(io, txn, base).check_commit(
        removes_data=any(isinstance(a, RemoveFile) and a.data_change for a in actions),
        previous=base.config if base is not None else None,
    )
    if base is None:
        io.store.create_directories(io.log_path)
    parameters = encode_operation_parameters(operation_parameters)
    blind_append = _is_blind_append(actions, reads_whole_table, reads_partitions is not None)
    body = [action.json() for action in actions]
    timestamps = _InCommitTimestamps(io, txn, read_snapshot)
    txn_id = str(uuid.uuid4())
    version = read_version + 1
    for attempt in range(1, max_attempts + 1):
        now = int(time.time() * 1000)
        info = _commit_info(
            now=now,
            in_commit_timestamp=timestamps.value(version, now),
            operation=operation,
            parameters=parameters,
            read_version=read_version,
            blind_append=blind_append,
            metrics=operation_metrics,
            txn_id=txn_id,
            user_metadata=user_metadata,
        )
        try:
            path = delta_file(io.log_path, version)
            io.store.write(path, [info.json(), *body], overwrite=False)
        except FileExistsError:
            logger.info("commit of version %d of %s lost a race (attempt %d)", version, table, attempt)
            version = _check_winners(io, txn, timestamps, version)
            continue
        logger.debug("committed version %d of %s (%d actions)", version, table, len(actions))
        return version
    raise ConcurrentModificationError(
        f"Gave up committing to table {table} after {max_attempts} attempts; "
        f"version {version - 1} was the last taken by a concurrent writer.",
        table=table,
        winning_version=version - 1,
    )


def configuration_after(io: TableIO, txn: _Transaction, read_snapshot: Snapshot | None) -> TableConfiguration:
    """The table configuration a commit of ``txn`` leaves in force (its protocol and metadata
    over those of ``read_snapshot``; for a new table, the ones the commit creates)."""
    if read_snapshot is None:
        assert txn.protocol is not None and txn.metadata is not None
        return TableConfiguration(txn.protocol, txn.metadata, io.table_path)
    return read_snapshot.config.updated(txn.protocol, txn.metadata)


def _check_winners(io: TableIO, txn: _Transaction, timestamps: _InCommitTimestamps, first: int) -> int:
    """Check every commit from ``first`` on for conflicts; return the first free version."""
    version = first
    while True:
        try:
            winner = read_commit(io, version)
        except VersionNotFoundError:
            return version
        txn.check(version, winner)
        timestamps.remember(version, winner)
        version += 1
