"""Delta's conflict checker: may a transaction commit after the commits that won the race?

A transaction read a snapshot, decided its actions, and found its version taken. Each winning
commit (read from the log, never a whole snapshot) is checked against what the transaction read
and writes, in the order of Delta's ``ConflictChecker.checkConflicts``:

1. **protocol**: this library must be able to read and write the winner's protocol; a winner
   that changes the protocol fails a transaction that changes it too (also two concurrent table
   creations) or drops features (:class:`ProtocolChangedException`);
2. **metadata**: a winner that changes the metadata fails every transaction
   (:class:`MetadataChangedException`);
3. **domain metadata**: both writing one domain fails (:class:`ConcurrentTransactionException`);
4. **application transactions**: the winner committed for an app id this transaction read or
   writes (:class:`ConcurrentTransactionException`, a streaming query running twice);
5. **appends**: files the winner added that this transaction's reads could have matched, judged
   from partition values and file statistics (:class:`ConcurrentAppendException`). Which added
   files count depends on the isolation level: ``Serializable`` all of them,
   ``WriteSerializable`` all but a blind append's (unless this transaction changes the metadata),
   ``SnapshotIsolation`` none. A blind append reads nothing and never conflicts here;
6. **delete-read**: the winner removed a file this transaction read, or removed any file while
   this transaction read the whole table (:class:`ConcurrentDeleteReadException`);
7. **delete-delete**: the winner removed a file this transaction removes too
   (:class:`ConcurrentDeleteDeleteException`).

No conflict means Delta rebases: the transaction is retried at the next version. Everything here
works on values (no I/O).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from replay.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.arrow_actions import FILES_SCHEMA, camel_dicts_to_snake
from replay.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
)
from replay.protocol.isolation import IsolationLevel
from replay.protocol.paths import normalize_path_key
from replay.protocol.predicates import TRUE, Or, Predicate
from replay.protocol.table_config import TableConfiguration, check_protocol_writable, check_readable
from replay.state.pruning import prune

EMPTY_DIRECTORY_HINT = (
    " This happens when multiple writers are writing to an empty directory. Creating the table ahead"
    " of time will avoid this conflict."
)


@dataclass(frozen=True)
class ReadSet:
    """What a transaction read: predicates over partition and data columns, files (by path, with
    their partition values), the whole table, and application ids."""

    predicates: tuple[Predicate, ...] = ()
    files: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    whole_table: bool = False
    app_ids: frozenset[str] = frozenset()

    @property
    def depends_on_files(self) -> bool:
        """Whether the transaction read any data (Delta's ``dependsOnFiles``)."""
        return self.whole_table or bool(self.predicates) or bool(self.files)


@dataclass(frozen=True)
class CurrentTransaction:
    """The losing transaction as the checker sees it."""

    table: str
    read_config: TableConfiguration | None
    """The configuration it read (``None``: it creates the table)."""
    reads: ReadSet
    actions: Sequence[Action]
    isolation_level: IsolationLevel

    @cached_property
    def removed(self) -> dict[str, Mapping[str, str | None]]:
        return {
            normalize_path_key(a.path): a.partition_values or {}
            for a in self.actions
            if isinstance(a, RemoveFile)
        }

    @cached_property
    def changes_protocol(self) -> bool:
        return any(isinstance(action, Protocol) for action in self.actions)

    @cached_property
    def changes_metadata(self) -> bool:
        return any(isinstance(action, Metadata) for action in self.actions)

    @cached_property
    def domains(self) -> set[str]:
        return {action.domain for action in self.actions if isinstance(action, DomainMetadata)}

    @cached_property
    def is_blind_append(self) -> bool:
        """Only adds among its file actions and nothing read (Delta's ``isBlindAppend``)."""
        return blind_append(self.actions, self.reads)


def blind_append(actions: Iterable[Action], reads: ReadSet) -> bool:
    """Delta's ``isBlindAppend``: every file action is an add and the transaction read no data."""
    only_adds = all(
        isinstance(a, AddFile) for a in actions if isinstance(a, AddFile | RemoveFile | AddCDCFile)
    )
    return only_adds and not reads.depends_on_files


def isolation_level_for(actions: Iterable[Action], table_level: IsolationLevel) -> IsolationLevel:
    """Delta's ``getIsolationLevelToUse``: ``SnapshotIsolation`` for a commit of file actions none of
    which changes data (a compaction, or nothing at all), the table's level otherwise (any data
    change, or any other action: metadata, protocol, app transactions, domains)."""
    for action in actions:
        if not isinstance(action, AddFile | RemoveFile | AddCDCFile) or action.data_change:
            return table_level
    return IsolationLevel.SNAPSHOT_ISOLATION


@dataclass(frozen=True)
class WinningCommit:
    """A commit that took a version this transaction wanted."""

    version: int
    actions: Sequence[Action]

    @cached_property
    def commit_info(self) -> dict[str, Any] | None:
        info = next((a for a in self.actions if isinstance(a, CommitInfo)), None)
        return info.inner_dict() if info is not None else None

    @property
    def txn_id(self) -> str | None:
        value = (self.commit_info or {}).get("txnId")
        return str(value) if value is not None else None

    @cached_property
    def is_blind_append(self) -> bool:
        return bool((self.commit_info or {}).get("isBlindAppend", False))

    @property
    def adds(self) -> list[AddFile]:
        return [a for a in self.actions if isinstance(a, AddFile)]

    @property
    def removes(self) -> list[RemoveFile]:
        return [a for a in self.actions if isinstance(a, RemoveFile)]


def check_conflicts(current: CurrentTransaction, winner: WinningCommit) -> None:
    """Raise the Delta conflict exception for the first rule ``winner`` breaks (see the module
    docstring); return when the transaction may be retried at the next version. Raises
    :class:`~replay.protocol.errors.UnsupportedTableFeatureError` when the winner moved the table
    to a protocol this library cannot read or write."""
    _check_protocol(current, winner)
    if any(isinstance(a, Metadata) for a in winner.actions):
        raise _error(
            MetadataChangedException,
            "The metadata of the Delta table has been changed by {winner}.",
            current,
            winner,
        )
    for action in winner.actions:
        if isinstance(action, DomainMetadata) and action.domain in current.domains:
            raise _error(
                ConcurrentTransactionException,
                f"A conflicting metadata domain {action.domain} is added by {{winner}}.",
                current,
                winner,
            )
    for action in winner.actions:
        if isinstance(action, SetTransaction) and action.app_id in current.reads.app_ids:
            raise _error(
                ConcurrentTransactionException,
                "This error occurs when multiple streaming queries are using the same checkpoint to write "
                f"into this table (application id {action.app_id!r}, committed by {{winner}}). Did you run "
                "multiple instances of the same streaming query at the same time?",
                current,
                winner,
            )
    _check_appends(current, winner)
    _check_deletes(current, winner)


def _check_protocol(current: CurrentTransaction, winner: WinningCommit) -> None:
    protocol = next((a for a in winner.actions if isinstance(a, Protocol)), None)
    if protocol is None:
        return
    check_readable(protocol, current.table)
    check_protocol_writable(protocol, current.table)
    read = current.read_config.protocol if current.read_config is not None else None
    dropped = read is not None and _features(read) - _features(protocol)
    if current.changes_protocol or dropped:
        hint = EMPTY_DIRECTORY_HINT if winner.version == 0 else ""
        raise _error(
            ProtocolChangedException,
            "The protocol version of the Delta table has been changed by {winner}." + hint,
            current,
            winner,
        )


def _features(protocol: Protocol) -> set[str]:
    return {*(protocol.reader_features or ()), *(protocol.writer_features or ())}


def _check_appends(current: CurrentTransaction, winner: WinningCommit) -> None:
    level = current.isolation_level
    if level is IsolationLevel.SNAPSHOT_ISOLATION or current.is_blind_append:
        return
    if winner.is_blind_append and level is IsolationLevel.WRITE_SERIALIZABLE and not current.changes_metadata:
        return  # WriteSerializable orders blind appends before this transaction
    added = winner.adds
    if not added:
        return
    matched = first_matching_file(added, current.reads, current.read_config)
    if matched is not None:
        where = partition_message(matched.partition_values, current.read_config)
        raise _error(
            ConcurrentAppendException, f"Files were added to {where} by {{winner}}.", current, winner
        )


def _check_deletes(current: CurrentTransaction, winner: WinningCommit) -> None:
    removes = winner.removes
    if not removes:
        return
    for remove in removes:
        read = current.reads.files.get(normalize_path_key(remove.path))
        if read is not None:
            where = partition_message(read, current.read_config)
            raise _error(
                ConcurrentDeleteReadException,
                "This transaction attempted to read one or more files that were deleted (for example "
                f"{remove.path} in {where}) by {{winner}}.",
                current,
                winner,
            )
    if current.reads.whole_table:
        raise _error(
            ConcurrentDeleteReadException,
            "This transaction attempted to read one or more files that were deleted (for example "
            f"{removes[0].path}) by {{winner}}.",
            current,
            winner,
        )
    removed = current.removed
    for remove in removes:
        mine = removed.get(normalize_path_key(remove.path))
        if mine is not None:
            where = partition_message(mine, current.read_config)
            raise _error(
                ConcurrentDeleteDeleteException,
                "This transaction attempted to delete one or more files that were deleted (for example "
                f"{remove.path} in {where}) by {{winner}}.",
                current,
                winner,
            )


def first_matching_file(
    added: Sequence[AddFile], reads: ReadSet, config: TableConfiguration | None
) -> AddFile | None:
    """The first of ``added`` that the transaction's reads could have matched, or ``None``.

    The whole table matches every file; predicates match a file unless its partition values and
    statistics prove that no row of it satisfies any of them (the pruning rules of scans, which
    never exclude a file that may hold a matching row).
    """
    if reads.whole_table or config is None:
        return added[0] if added else None
    predicates = [p for p in reads.predicates]
    if not predicates:
        return None
    if any(p == TRUE for p in predicates):
        return added[0]
    files = _files_table(added)
    kept = prune(files, predicates[0] if len(predicates) == 1 else Or(tuple(predicates)), config)
    if kept.num_rows == 0:
        return None
    first = kept.column("path")[0].as_py()
    return next(add for add in added if add.path == first)


def _files_table(added: Sequence[AddFile]) -> pa.Table:
    return camel_dicts_to_snake([add.inner_dict() for add in added], FILES_SCHEMA)


def partition_message(values: Mapping[str, str | None] | None, config: TableConfiguration | None) -> str:
    """Delta's ``getPrettyPartitionMessage``: ``partition [a=1, b=x]``, or ``the root of the table``
    for an unpartitioned table."""
    columns = list(config.metadata.partition_columns) if config is not None else []
    if config is None or not columns or not values:
        return "the root of the table"
    lowered = {str(key).lower(): value for key, value in values.items()}
    keys = config.metadata.partition_value_keys  # physical names under column mapping
    shown = ", ".join(f"{name}={lowered.get(keys[name].lower())}" for name in columns)
    return f"partition [{shown}]"


def _error(
    kind: type[ProtocolChangedException]
    | type[MetadataChangedException]
    | type[ConcurrentTransactionException]
    | type[ConcurrentAppendException]
    | type[ConcurrentDeleteReadException]
    | type[ConcurrentDeleteDeleteException],
    description: str,
    current: CurrentTransaction,
    winner: WinningCommit,
) -> Exception:
    return kind.conflict(
        description, table=current.table, winning_version=winner.version, winning_commit=winner.commit_info
    )
