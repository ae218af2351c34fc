"""Log replay: turning a sequence of commits into table state. Pure: no I/O here.

* :class:`InMemoryLogReplay` is Delta's own algorithm (oldest commit first, action objects),
  with its exact semantics; Spark-side reconstruction and log compaction use it.
* :class:`ReverseLogReplay` is the fast driver-side path (newest commit first, like Delta
  Kernel): it works on the raw JSON dicts of commits and on Arrow tables of checkpoints, keeps
  only the first action it sees per file key, and never builds a Python object per checkpoint
  row. Both produce the same active files, transactions, protocol and metadata.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.actions import (
    KNOWN_KINDS,
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.arrow_actions import (
    adds_to_arrow,
    arrow_file_keys,
    arrow_rows,
    dict_file_key,
    select_rows,
)
from replay.protocol.paths import FileKey


class InMemoryLogReplay:
    """Delta's ``InMemoryLogReplay``: replays commits in version order and emits checkpoint actions.

    ``min_file_retention_timestamp``: tombstones with ``deletionTimestamp`` (0 when absent) not
    greater than it are dropped from the output; ``None`` keeps all. Likewise transactions need a
    ``lastUpdated`` greater than ``min_set_transaction_retention_timestamp`` when it is set.
    Not thread safe.
    """

    def __init__(
        self,
        min_file_retention_timestamp: int | None,
        min_set_transaction_retention_timestamp: int | None = None,
    ) -> None:
        self.min_file_retention_timestamp = min_file_retention_timestamp
        self.min_set_transaction_retention_timestamp = min_set_transaction_retention_timestamp
        self.current_protocol_version: Protocol | None = None
        self.current_metadata: Metadata | None = None
        self.current_version = -1
        self.transactions: dict[str, SetTransaction] = {}
        self.domain_metadatas: dict[str, DomainMetadata] = {}
        self.active_files: dict[FileKey, AddFile] = {}
        self.cancelled_remove_files: dict[FileKey, RemoveFile] = {}
        self.active_remove_files: dict[FileKey, RemoveFile] = {}

    def append(self, version: int, actions: Iterable[Action | None]) -> None:
        """Apply the actions of commit ``version``.

        Raises :class:`AssertionError` ``Attempted to replay version <v>, but state is at <cur>``
        unless the state is fresh (-1) or ``version`` is the next one.
        """
        if not (self.current_version == -1 or version == self.current_version + 1):
            raise AssertionError(
                f"Attempted to replay version {version}, but state is at {self.current_version}"
            )
        self.current_version = version
        for action in actions:
            if isinstance(action, AddFile):
                self._add(action)
            elif isinstance(action, RemoveFile):
                self._remove(action)
            elif isinstance(action, SetTransaction):
                self.transactions[action.app_id] = action
            elif isinstance(action, DomainMetadata):
                self._domain(action)
            elif isinstance(action, Metadata):
                self.current_metadata = action
            elif isinstance(action, Protocol):
                self.current_protocol_version = action
            # commitInfo, cdc, checkpointMetadata and sidecar actions do not change the state

    def _add(self, action: AddFile) -> None:
        key = action.unique_key
        self.active_files[key] = replace(action, data_change=False)
        self.cancelled_remove_files.pop(key, None)
        self.active_remove_files.pop(key, None)

    def _remove(self, action: RemoveFile) -> None:
        key = action.unique_key
        if self.active_files.pop(key, None) is not None:
            self.cancelled_remove_files[key] = action
        else:
            self.active_remove_files[key] = action

    def _domain(self, action: DomainMetadata) -> None:
        if action.removed:
            self.domain_metadatas.pop(action.domain, None)
        else:
            self.domain_metadatas[action.domain] = action

    def get_protocol(self) -> Protocol | None:
        return self.current_protocol_version

    def get_metadata(self) -> Metadata | None:
        return self.current_metadata

    def get_domain_metadatas(self) -> list[DomainMetadata]:
        return list(self.domain_metadatas.values())

    def all_files(self) -> list[AddFile]:
        """The active files (``dataChange`` off)."""
        return list(self.active_files.values())

    def get_tombstones(self) -> list[RemoveFile]:
        """Cancelled then unmatched removes newer than the retention threshold, ``dataChange`` off."""
        threshold = self.min_file_retention_timestamp
        removes = [*self.cancelled_remove_files.values(), *self.active_remove_files.values()]
        return [
            replace(remove, data_change=False)
            for remove in removes
            if threshold is None or remove.del_timestamp > threshold
        ]

    def get_transactions(self) -> list[SetTransaction]:
        threshold = self.min_set_transaction_retention_timestamp
        if threshold is None:
            return list(self.transactions.values())
        return [
            txn
            for txn in self.transactions.values()
            if txn.last_updated is not None and txn.last_updated > threshold
        ]

    def checkpoint(self) -> Iterator[Action]:
        """Protocol, metadata, domain metadata, transactions, then adds and tombstones sorted by path."""
        if self.current_protocol_version is not None:
            yield self.current_protocol_version
        if self.current_metadata is not None:
            yield self.current_metadata
        yield from self.domain_metadatas.values()
        yield from self.get_transactions()
        files: list[AddFile | RemoveFile] = [*self.active_files.values(), *self.get_tombstones()]
        files.sort(key=lambda file_action: file_action.path)
        yield from files


# -- fast reverse replay -------------------------------------------------------------------------
FLUSH_ROWS = 16 * 1024


class MalformedActionError(ValueError):
    """An add action whose fields have the wrong JSON types; ``source`` is its commit file."""

    def __init__(self, message: str, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


def _flat_chunks(arrays: Iterable[pa.Array | pa.ChunkedArray]) -> list[pa.Array]:
    chunks: list[pa.Array] = []
    for array in arrays:
        chunks.extend(array.chunks if isinstance(array, pa.ChunkedArray) else [array])
    return chunks


@dataclass(frozen=True)
class _Resolved:
    adds: list[pa.Table]
    remove_tables: list[pa.Table]
    remove_dicts: list[dict[str, Any]]
    keys: pa.Array  # every key a commit touched, once


class ReverseLogReplay:
    """Kernel-style replay, newest commit first, over raw action dicts and Arrow add tables.

    Feed commits newest first with :meth:`add_commit` (the dicts of one commit in file order)
    or :meth:`add_arrow_commit` (its adds already in Arrow), then the checkpoint with
    :meth:`add_checkpoint_actions` (JSON rows) and/or :meth:`add_checkpoint_files` (Arrow
    add/remove rows). The newest action for a file key decides its fate, as in
    :class:`InMemoryLogReplay`; protocol, metadata, transactions and domains are taken from the
    newest action of their kind.

    Commit file actions are only collected while feeding; they are resolved in one vectorised
    pass (keys hashed by Arrow, no per-row Python work for Arrow adds) when a result is first
    asked for or the checkpoint arrives. Every file action gets a sequence number in replay
    order (newest first), and per key the smallest one wins.
    """

    def __init__(self) -> None:
        self.protocol: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None
        self.transactions: dict[str, dict[str, Any]] = {}
        self.domains: dict[str, dict[str, Any]] = {}
        self.checkpoint_adds: list[pa.Table] = []
        self.checkpoint_removes: list[pa.Table] = []
        self._sequence = 0
        self._add_parts: list[tuple[pa.Table, pa.Array]] = []  # adds in Arrow with their sequence numbers
        self._buffer: list[tuple[list[Mapping[str, Any]], list[int], str | None]] = []
        self._buffered = 0
        self._remove_parts: list[tuple[pa.Table, pa.Array]] = []  # removes in Arrow, with sequence numbers
        self._removes: list[Mapping[str, Any]] = []  # removes as dicts (line by line commits)
        self._remove_keys: list[str] = []
        self._remove_sequence: list[int] = []
        self._resolved: _Resolved | None = None

    def add_commit(
        self, actions: Sequence[Mapping[str, Any]], later_lines_win: bool = True, source: str | None = None
    ) -> None:
        """One commit's parsed lines (``{"add": {...}}`` ...), in file order.

        Within a commit the last action for a key wins, as in :class:`InMemoryLogReplay`. Log
        compaction files list a tombstone before a stale add of the same key and are read with
        ``later_lines_win=False`` (the first action for a key wins, as in Delta Kernel).
        ``source`` names the commit in :class:`MalformedActionError` if one of its adds cannot
        be converted to Arrow.
        """
        base = self._sequence
        self._sequence += len(actions)
        adds: list[Mapping[str, Any]] = []
        sequence: list[int] = []
        lines = reversed(actions) if later_lines_win else actions
        for offset, line in enumerate(lines):
            add = line.get("add")
            if add is None:
                self._other_action(line, base + offset)
            else:
                adds.append(add)
                sequence.append(base + offset)
        if adds:
            self._buffer.append((adds, sequence, source))
            self._buffered += len(adds)
            if self._buffered >= FLUSH_ROWS:
                self.flush()
        self._resolved = None

    def add_arrow_commit(
        self,
        adds: pa.Table,
        add_lines: pa.Array,
        others: Sequence[tuple[int, Mapping[str, Any]]],
        num_lines: int,
        *,
        later_lines_win: bool = True,
        removes: pa.Table | None = None,
        remove_lines: pa.Array | None = None,
    ) -> None:
        """One commit whose adds (and removes) are already Arrow tables.

        ``adds`` has :data:`ADD_ARROW_TYPE` columns, ``removes`` :data:`REMOVE_ARROW_TYPE` ones;
        ``add_lines`` / ``remove_lines`` hold each row's 0-based line number in the file,
        ``others`` the remaining lines as ``(line number, dict)`` in file order, ``num_lines``
        the commit's line count. Same semantics as :meth:`add_commit` on the whole commit.
        """
        self.flush()
        base = self._sequence
        self._sequence += num_lines

        def sequence(lines: pa.Array) -> pa.Array:
            if later_lines_win:
                return pc.subtract(pa.scalar(base + num_lines - 1, pa.int64()), lines.cast(pa.int64()))
            return pc.add(lines.cast(pa.int64()), pa.scalar(base, pa.int64()))

        for line_number, line in reversed(others) if later_lines_win else others:
            position = num_lines - 1 - line_number if later_lines_win else line_number
            self._other_action(line, base + position)
        if adds.num_rows:
            self._add_parts.append((adds, sequence(add_lines)))
        if removes is not None and remove_lines is not None and removes.num_rows:
            self._remove_parts.append((removes, sequence(remove_lines)))
        self._resolved = None

    def flush(self) -> None:
        """Convert the buffered adds of :meth:`add_commit` to Arrow (done every :data:`FLUSH_ROWS` adds).

        Raises :class:`MalformedActionError` naming the commit whose add has a wrong field type.
        """
        if not self._buffer:
            return
        buffered, self._buffer, self._buffered = self._buffer, [], 0
        rows = [add for adds, _, _ in buffered for add in adds]
        try:
            table = adds_to_arrow(rows)
        except ValueError:
            for adds, _, source in buffered:  # find the culprit
                try:
                    adds_to_arrow(adds)
                except ValueError as exc:
                    raise MalformedActionError(f"{exc} in {source}", source=source) from None
            raise
        sequence = pa.array([number for _, numbers, _ in buffered for number in numbers], pa.int64())
        self._add_parts.append((table, sequence))

    def _other_action(self, line: Mapping[str, Any], sequence: int) -> None:
        """Apply the first known, non-null action of ``line`` (unknown kinds are ignored)."""
        for kind, value in line.items():
            if value is None or kind not in KNOWN_KINDS:
                continue
            if kind == "remove":
                self._removes.append(value)
                self._remove_keys.append(dict_file_key(value))
                self._remove_sequence.append(sequence)
            elif kind == "metaData":
                if self.metadata is None:
                    self.metadata = value
            elif kind == "protocol":
                if self.protocol is None:
                    self.protocol = value
            elif kind == "txn":
                self.transactions.setdefault(value["appId"], value)
            elif kind == "domainMetadata":
                self.domains.setdefault(value["domain"], value)
            return

    def _resolve(self) -> _Resolved:
        """Surviving commit adds and removes, and every key a commit touched."""
        if self._resolved is not None:
            return self._resolved
        self.flush()
        tables = [*self._add_parts, *self._remove_parts]
        keys = pa.chunked_array(
            _flat_chunks(
                [*(arrow_file_keys(table) for table, _ in tables), pa.array(self._remove_keys, pa.string())]
            ),
            pa.string(),
        )
        # The hash table is transient and large (about twice the keys' bytes): from the system
        # allocator it is mapped and unmapped once, where pyarrow's default pool (mimalloc)
        # measured about twice slower here, committing and later purging fresh segments.
        # Every chunk of the encoding shares one dictionary: the distinct keys, nulls included.
        encoded = pc.dictionary_encode(keys, null_encoding="encode", memory_pool=pa.system_memory_pool())
        distinct = encoded.chunks[0].dictionary if encoded.num_chunks else pa.array([], pa.string())
        if len(distinct) == len(keys):  # no key repeats (appends): every action survives
            kept = [table for table, _ in tables]
            removes: list[Mapping[str, Any]] = list(self._removes)
        else:
            kept, removes = self._newest_per_key(encoded, tables)
        adds = [table for table in kept[: len(self._add_parts)] if table.num_rows]
        remove_tables = [table for table in kept[len(self._add_parts) :] if table.num_rows]
        self._resolved = _Resolved(adds, remove_tables, [dict(remove) for remove in removes], distinct)
        return self._resolved

    def _newest_per_key(
        self, keys: pa.ChunkedArray, tables: list[tuple[pa.Table, pa.Array]]
    ) -> tuple[list[pa.Table], list[Mapping[str, Any]]]:
        """The general resolution: per key, the action with the smallest sequence number wins.

        ``keys`` are dictionary-encoded (one dictionary for all chunks): the codes of the actions
        in sequence order keep the first action of each code."""
        sequence = pa.chunked_array(
            _flat_chunks([*(numbers for _, numbers in tables), pa.array(self._remove_sequence, pa.int64())]),
            pa.int64(),
        ).to_numpy()
        codes = np.concatenate([chunk.indices.to_numpy() for chunk in keys.chunks])
        order = np.argsort(sequence, kind="stable")
        _, first = np.unique(codes[order], return_index=True)  # a stable sort: the first of each
        winning = np.zeros(len(sequence), dtype=bool)
        winning[order[first]] = True
        wins = pa.array(winning)
        kept = []
        start = 0
        for table, numbers in tables:
            kept.append(select_rows(table, wins.slice(start, len(numbers))))
            start += len(numbers)
        flags = wins.slice(start).to_pylist()
        return kept, [remove for remove, flag in zip(self._removes, flags, strict=True) if flag]

    @property
    def commit_add_tables(self) -> list[pa.Table]:
        """Surviving adds of the commits as Arrow tables (camelCase :data:`ADD_ARROW_TYPE` columns)."""
        return self._resolve().adds

    @property
    def commit_adds(self) -> list[dict[str, Any]]:
        """The surviving adds from commits as JSON-like dicts (``None`` fields omitted)."""
        return [row for table in self.commit_add_tables for row in arrow_rows(table)]

    @property
    def commit_remove_tables(self) -> list[pa.Table]:
        """Surviving removes that came in Arrow (:data:`REMOVE_ARROW_TYPE` columns)."""
        return self._resolve().remove_tables

    @property
    def commit_remove_dicts(self) -> list[dict[str, Any]]:
        """Surviving removes that came as dicts (commits parsed line by line)."""
        return self._resolve().remove_dicts

    @property
    def commit_removes(self) -> list[dict[str, Any]]:
        """All surviving removes (tombstones) from commits, as JSON-like dicts."""
        rows = list(self.commit_remove_dicts)
        for table in self.commit_remove_tables:
            rows += arrow_rows(table)
        return rows

    def add_checkpoint_actions(self, actions: Sequence[Mapping[str, Any]]) -> None:
        """Rows of a JSON (V2) checkpoint or the non-file rows of a Parquet one."""
        self.add_commit(actions)

    def add_checkpoint_files(self, adds: pa.Table | None, removes: pa.Table | None) -> None:
        """Add and remove rows of a checkpoint part (camelCase columns, null-path rows allowed).

        Rows whose key was touched by a newer commit are dropped (checkpoint keys are unique and
        nothing older can shadow them).
        """
        if adds is not None and adds.num_rows:
            self.checkpoint_adds.append(self._unseen(adds))
        if removes is not None and removes.num_rows:
            self.checkpoint_removes.append(self._unseen(removes))

    def _unseen(self, table: pa.Table) -> pa.Table:
        keep = pc.is_valid(table.column("path"))
        seen = self._resolve().keys
        if len(seen) and table.num_rows:
            keep = pc.and_(keep, pc.invert(pc.is_in(arrow_file_keys(table), value_set=seen)))
        return select_rows(table, keep)
