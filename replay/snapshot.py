"""Snapshots: the state of a table at one version, and how it is loaded.

:func:`load_snapshot` reads a :class:`~replay.segment.LogSegment`: commit files concurrently
through :mod:`replay.commit_reader` (large ones parsed into Arrow in the pool, the rest with
orjson), replayed newest first with
:class:`~replay.log_replay.ReverseLogReplay` (file keys resolved in Arrow), then the checkpoint
through pyarrow one row group at a time (only the needed columns). Active files stay as Arrow
tables; :meth:`Snapshot.files_table`, :meth:`Snapshot.file_uris` and :meth:`Snapshot.files`
build the views on demand.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from functools import cached_property
from itertools import repeat
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from logstores.base import FileStatus
from replay.actions import (
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    resolve_path,
)
from replay.checkpoints import read_checkpoint
from replay.commit_reader import (
    TASK_BYTES,
    ArrowCommit,
    gc_paused,
    parse_commit,
    parse_commit_arrow,
    prefetch,
    read_commit_bytes,
)
from replay.errors import (
    CorruptLogError,
    DeltaError,
    MissingProtocolOrMetadataError,
    UnsupportedTableFeatureError,
)
from replay.log_replay import (
    ADD_ARROW_TYPE,
    MalformedActionError,
    ReverseLogReplay,
    arrow_rows,
    may_need_canonical_form,
)
from replay.schema import StructType
from replay.segment import LogSegment, build_log_segment

if TYPE_CHECKING:
    from replay.delta_log import DeltaLog

logger = logging.getLogger(__name__)

SUPPORTED_READER_VERSION = 3
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
    }
)

DV_TYPE = pa.struct(
    [
        pa.field("storage_type", pa.string()),
        pa.field("path_or_inline_dv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("size_in_bytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
    ]
)
_STRING_MAP = pa.map_(pa.string(), pa.string())
FILES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), False),
        pa.field("partition_values", _STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modification_time", pa.int64()),
        pa.field("data_change", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", _STRING_MAP),
        pa.field("deletion_vector", DV_TYPE),
        pa.field("base_row_id", pa.int64()),
        pa.field("default_row_commit_version", pa.int64()),
        pa.field("clustering_provider", pa.string()),
    ]
)
"""Columns of :meth:`Snapshot.files_table` (snake_case names of :class:`AddFile` fields)."""
TOMBSTONES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), False),
        pa.field("deletion_timestamp", pa.int64()),
        pa.field("data_change", pa.bool_()),
        pa.field("extended_file_metadata", pa.bool_()),
        pa.field("partition_values", _STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("deletion_vector", DV_TYPE),
    ]
)
_CAMEL = {
    "partition_values": "partitionValues",
    "modification_time": "modificationTime",
    "data_change": "dataChange",
    "deletion_vector": "deletionVector",
    "base_row_id": "baseRowId",
    "default_row_commit_version": "defaultRowCommitVersion",
    "clustering_provider": "clusteringProvider",
    "deletion_timestamp": "deletionTimestamp",
    "extended_file_metadata": "extendedFileMetadata",
}
_DV_CAMEL = ADD_ARROW_TYPE.field("deletionVector").type
_DV_CAMEL_NAMES = {
    "storage_type": "storageType",
    "path_or_inline_dv": "pathOrInlineDv",
    "offset": "offset",
    "size_in_bytes": "sizeInBytes",
    "cardinality": "cardinality",
}

_INTERVAL_UNITS_MS = {
    "week": 7 * 86_400_000,
    "day": 86_400_000,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1000,
    "millisecond": 1,
    "microsecond": 0.001,
    "month": 30 * 86_400_000,
    "year": 365 * 86_400_000,
}
_INTERVAL_RE = re.compile(r"(-?\d+)\s*([a-z]+?)s?\b")
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta interval such as ``interval 1 week`` or ``interval 2 days 3 hours``.

    Raises :class:`ValueError` naming the text when it holds no known unit.
    """
    total = 0.0
    matched = False
    for amount, unit in _INTERVAL_RE.findall(text.lower().removeprefix("interval").strip()):
        if unit not in _INTERVAL_UNITS_MS:
            raise ValueError(f"unknown unit {unit!r} in interval {text!r}")
        total += int(amount) * _INTERVAL_UNITS_MS[unit]
        matched = True
    if not matched:
        raise ValueError(f"not an interval: {text!r}")
    return int(total)


def check_protocol_readable(protocol: Protocol, table: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if we cannot read a table with ``protocol``."""
    if protocol.min_reader_version > SUPPORTED_READER_VERSION:
        raise UnsupportedTableFeatureError(
            f"[DELTA_INVALID_PROTOCOL_VERSION] Unsupported Delta protocol version: table {table} requires"
            f" reader version {protocol.min_reader_version}, writer version {protocol.min_writer_version},"
            f" but this library supports reader versions 1, 2, 3",
            table=table,
        )
    if protocol.min_reader_version == SUPPORTED_READER_VERSION:
        unsupported = sorted(set(protocol.reader_features or ()) - SUPPORTED_READER_FEATURES)
        if unsupported:
            raise UnsupportedTableFeatureError(
                f"[DELTA_UNSUPPORTED_FEATURES_FOR_READ] Unsupported Delta read feature: table {table}"
                " requires"
                f" reader table feature(s) that are unsupported by this library: {', '.join(unsupported)}.",
                table=table,
                features=unsupported,
            )


def _clean(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not None}


class Snapshot:
    """The immutable state of a table at :attr:`version`.

    Protocol, metadata, transactions and domains are resolved on load; active files are kept
    in their raw form and converted by :meth:`files_table` (Arrow) and :meth:`files` (objects).
    """

    def __init__(
        self,
        delta_log: DeltaLog,
        segment: LogSegment,
        state: ReverseLogReplay,
        *,
        newest_commit: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.delta_log = delta_log
        self.log_segment = segment
        self.version = segment.version
        self._state = state
        table = delta_log.table_path
        if state.protocol is None or state.metadata is None:
            missing = "protocol" if state.protocol is None else "metadata"
            raise MissingProtocolOrMetadataError(
                f"[DELTA_STATE_RECOVER_ERROR] The {missing} of your Delta table could not be recovered while"
                f" Reconstructing\nversion: {segment.version}. Did you manually delete files in the"
                " _delta_log"
                f" directory? (table {table})",
                table=table,
                version=segment.version,
                missing=missing,
            )
        self.protocol: Protocol = Protocol.from_dict(_clean(state.protocol))
        self.metadata: Metadata = Metadata.from_dict(_clean(state.metadata))
        check_protocol_readable(self.protocol, table)
        self._newest_commit_info = next(
            (line["commitInfo"] for line in newest_commit if line.get("commitInfo") is not None), None
        )
        now = int(time.time() * 1000)
        configuration = self.metadata.configuration or {}
        retention = configuration.get("delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION)
        self.min_file_retention_timestamp = now - parse_interval_ms(retention)
        txn_retention = configuration.get("delta.setTransactionRetentionDuration")
        self.min_set_transaction_retention_timestamp = (
            now - parse_interval_ms(txn_retention) if txn_retention else None
        )

    # -- table-level properties ------------------------------------------------------------------
    @property
    def table_path(self) -> str:
        return self.delta_log.table_path

    @property
    def schema(self) -> StructType:
        return self.metadata.schema

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @cached_property
    def set_transactions(self) -> dict[str, int]:
        """App id -> latest committed version (txns older than the txn retention are dropped)."""
        threshold = self.min_set_transaction_retention_timestamp
        out: dict[str, int] = {}
        for app_id, txn in self._state.transactions.items():
            updated = txn.get("lastUpdated")
            if threshold is None or (updated is not None and updated > threshold):
                out[app_id] = int(txn["version"])
        return out

    def transactions(self) -> list[SetTransaction]:
        """The ``txn`` actions kept in the state (same retention as :attr:`set_transactions`)."""
        keep = self.set_transactions
        return [
            SetTransaction.from_dict(_clean(t)) for app, t in self._state.transactions.items() if app in keep
        ]

    @cached_property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        """Domain -> its live ``domainMetadata`` (removed domains are absent)."""
        out: dict[str, DomainMetadata] = {}
        for domain, value in self._state.domains.items():
            action = DomainMetadata.from_dict(_clean(value))
            if not action.removed:
                out[domain] = action
        return out

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return (self.metadata.configuration or {}).get(
            "delta.enableInCommitTimestamps", "false"
        ).lower() == "true"

    @cached_property
    def timestamp(self) -> int:
        """The commit time (ms) of :attr:`version`: its in-commit timestamp if enabled, else file mtime."""
        if self.in_commit_timestamps_enabled:
            info = self._newest_commit_info
            if info is not None and info.get("inCommitTimestamp") is not None:
                return int(info["inCommitTimestamp"])
            return self.delta_log.commit_timestamp(self.version)
        return self.log_segment.last_commit_timestamp

    # -- files ---------------------------------------------------------------------------------------
    @property
    def _add_tables(self) -> list[pa.Table]:
        return [*self._state.commit_add_tables, *self._state.checkpoint_adds]

    @cached_property
    def num_files(self) -> int:
        return sum(table.num_rows for table in self._add_tables)

    def files_table(self) -> pa.Table:
        """The active files as Arrow, columns :data:`FILES_SCHEMA` (``data_change`` is False).

        Built once and cached (the snapshot is immutable).
        """
        return self._files_table

    @cached_property
    def _files_table(self) -> pa.Table:
        by_schema: dict[pa.Schema, list[pa.Table]] = {}
        for add_table in self._add_tables:  # one conversion per schema, not per commit
            by_schema.setdefault(add_table.schema, []).append(add_table)
        parts = [_checkpoint_to_arrow(pa.concat_tables(same), FILES_SCHEMA) for same in by_schema.values()]
        table = pa.concat_tables(parts) if parts else FILES_SCHEMA.empty_table()
        return table.set_column(
            table.schema.get_field_index("data_change"),
            FILES_SCHEMA.field("data_change"),
            pa.repeat(pa.scalar(False), table.num_rows),
        )

    def files(self) -> list[AddFile]:
        """The active files as :class:`AddFile` objects (``data_change`` False)."""
        with gc_paused():
            return [
                AddFile.from_dict({**row, "dataChange": False})
                for table in self._add_tables
                for row in arrow_rows(table)
            ]

    def file_uris(self, chunk_rows: int = 64 * 1024) -> list[str]:
        """The active files' URIs (:func:`~replay.actions.resolve_path` of each path), like delta-rs's
        ``DeltaTable.file_uris()``, in :meth:`files_table` order.

        Built ``chunk_rows`` paths at a time: plain relative paths are joined to the table root in
        Arrow, others (escapes, absolute paths, URIs) resolved one by one.
        """
        root = self.table_path.rstrip("/") + "/"
        uris: list[str] = []
        for chunk in self.files_table().column("path").chunks:
            special = may_need_canonical_form(chunk, (b"%", b":"))
            for start in range(0, len(chunk), chunk_rows):
                paths = chunk.slice(start, chunk_rows)
                if special and pc.any(pc.match_substring_regex(paths, "^/|[%:]")).as_py():
                    uris += [resolve_path(self.table_path, path) for path in paths.to_pylist()]
                else:
                    uris += pc.binary_join_element_wise(root, paths, "").to_pylist()
        return uris

    def file_paths(self) -> list[str]:
        """The raw (URL-encoded) paths of the active files."""
        paths: list[str] = []
        for table in self._add_tables:
            paths += table.column("path").to_pylist()
        return paths

    def tombstones(self) -> list[RemoveFile]:
        """Removes still within ``delta.deletedFileRetentionDuration`` (``data_change`` False)."""
        threshold = self.min_file_retention_timestamp
        out: list[RemoveFile] = []
        rows: list[dict[str, Any]] = list(self._state.commit_remove_dicts)
        for table in [*self._state.commit_remove_tables, *self._state.checkpoint_removes]:
            rows += arrow_rows(table)
        for row in rows:
            if (row.get("deletionTimestamp") or 0) > threshold:
                out.append(RemoveFile.from_dict({**row, "dataChange": False}))
        return out

    def tombstones_table(self) -> pa.Table:
        """:meth:`tombstones` as Arrow (:data:`TOMBSTONES_SCHEMA`)."""
        parts = [_dicts_to_arrow(self._state.commit_remove_dicts, TOMBSTONES_SCHEMA)]
        tables = [*self._state.commit_remove_tables, *self._state.checkpoint_removes]
        parts += [_checkpoint_to_arrow(table, TOMBSTONES_SCHEMA) for table in tables]
        table = pa.concat_tables(parts)
        table = table.set_column(
            table.schema.get_field_index("data_change"),
            TOMBSTONES_SCHEMA.field("data_change"),
            pa.repeat(pa.scalar(False), table.num_rows),
        )
        deleted = pc.fill_null(table.column("deletion_timestamp"), 0)
        return table.filter(pc.greater(deleted, self.min_file_retention_timestamp))

    def __repr__(self) -> str:
        return f"Snapshot({self.table_path!r}, version={self.version})"


def _dv_from_camel(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A camelCase deletion vector column as :data:`DV_TYPE`, chunk by chunk (no concatenation)."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([_dv_from_camel(chunk) for chunk in array.chunks], DV_TYPE)
    if array.null_count == len(array):
        return pa.nulls(len(array), DV_TYPE)
    children = []
    for target in DV_TYPE:
        index = array.type.get_field_index(_DV_CAMEL_NAMES[target.name])
        if index < 0:
            children.append(pa.nulls(len(array), target.type))
        else:
            children.append(pc.cast(array.field(index), target.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=array.is_null())


def _dicts_to_arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    columns = []
    for target in schema:
        if target.name == "data_change":
            columns.append(pa.nulls(len(rows), pa.bool_()))  # callers set the real value
            continue
        key = _CAMEL.get(target.name, target.name)
        values = list(map(dict.get, rows, repeat(key)))  # C-level loop: much faster than a comprehension
        if target.name == "deletion_vector":
            columns.append(_dv_from_camel(pa.array(values, _DV_CAMEL)))
        elif pa.types.is_nested(target.type):
            columns.append(pa.array(values, target.type))
        else:
            # type inference then a cast is several times faster than converting to a given type
            columns.append(pa.array(values).cast(target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _checkpoint_to_arrow(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for target in schema:
        key = _CAMEL.get(target.name, target.name)
        if key not in table.column_names:
            columns.append(pa.nulls(table.num_rows, target.type))
        elif target.name == "deletion_vector":
            columns.append(_dv_from_camel(table.column(key)))
        else:
            columns.append(pc.cast(table.column(key), target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def load_snapshot(delta_log: DeltaLog, segment: LogSegment, executor: Executor | None = None) -> Snapshot:
    """Replay ``segment`` into a :class:`Snapshot`.

    If the checkpoint cannot be read, the newest older complete checkpoint (or the commits from
    version 0) is used instead with a logged warning; if there is none, the checkpoint's
    :class:`CorruptLogError` is raised. A corrupt commit file always raises (never a partial state).
    """
    if executor is not None:
        return _load(delta_log, segment, executor)
    with delta_log.executor() as pool:
        return _load(delta_log, segment, pool)


def _load(delta_log: DeltaLog, segment: LogSegment, executor: Executor | None) -> Snapshot:
    state = ReverseLogReplay()
    newest_first = list(reversed(segment.replay_files))
    newest: list[dict[str, Any]] = []
    window = max(2, 2 * delta_log.read_threads)
    statuses = [status for _, _, status in newest_first]
    # small commits are batched to amortise the pool's per-task cost; large ones (parsed by pyarrow
    # in the pool) go a few at a time so that the threads finish together
    average = sum(max(status.size, 0) for status in statuses) / max(len(statuses), 1)
    batch = max(1, min(32, len(statuses) // (4 * delta_log.read_threads), int(TASK_BYTES / max(average, 1))))

    def read(status: FileStatus) -> tuple[bytes, ArrowCommit | None]:
        # runs in the pool: pyarrow's JSON parsing releases the GIL, so commits parse in parallel
        raw = read_commit_bytes(delta_log, status)
        return raw, parse_commit_arrow(raw)

    commits = prefetch(executor, read, statuses, window, batch, task="Reading commits")
    with gc_paused():
        for index, ((start, end, status), (raw, parsed)) in enumerate(
            zip(newest_first, commits, strict=True)
        ):
            if parsed is not None:
                if index == 0:
                    newest = [line for _, line in parsed.others]
                state.add_arrow_commit(
                    parsed.adds,
                    parsed.add_lines,
                    parsed.others,
                    parsed.num_lines,
                    later_lines_win=start == end,
                    removes=parsed.removes,
                    remove_lines=parsed.remove_lines,
                )
                continue
            actions = parse_commit(delta_log, status, raw)
            if index == 0:
                newest = actions
            state.add_commit(actions, later_lines_win=start == end, source=status.path)
        _finish_commits(delta_log, state)
    if segment.checkpoint is not None:
        try:
            data = read_checkpoint(
                delta_log.store, delta_log.log_path, segment.checkpoint, segment.checkpoint_files, executor
            )
        except CorruptLogError as exc:
            exc.table = delta_log.table_path
            return _fall_back(delta_log, segment, executor, exc)
        state.add_checkpoint_actions(data.actions)
        for adds in data.adds:
            state.add_checkpoint_files(adds, None)
        for removes in data.removes:
            state.add_checkpoint_files(None, removes)
    if segment.replay_files and segment.replay_files[-1][1] != segment.version:
        newest = []
    return Snapshot(delta_log, segment, state, newest_commit=newest)


def _finish_commits(delta_log: DeltaLog, state: ReverseLogReplay) -> None:
    try:
        state.flush()
    except MalformedActionError as exc:
        raise CorruptLogError(str(exc), table=delta_log.table_path, path=exc.source) from exc


def _fall_back(
    delta_log: DeltaLog, segment: LogSegment, executor: Executor | None, error: CorruptLogError
) -> Snapshot:
    assert segment.checkpoint is not None
    try:
        older = build_log_segment(
            delta_log.store,
            delta_log.log_path,
            delta_log.table_path,
            version_to_load=segment.version,
            before_checkpoint=segment.checkpoint,
        )
    except DeltaError:
        raise error from None
    logger.warning(
        "checkpoint %d of %s is unreadable (%s); replaying from %s instead",
        segment.checkpoint.version,
        delta_log.table_path,
        error,
        f"checkpoint {older.checkpoint.version}" if older.checkpoint else "version 0",
    )
    return _load(delta_log, older, executor)
