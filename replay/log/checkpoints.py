"""Reading a checkpoint's content: Arrow rows of its file actions and its other actions as dicts.

Parquet parts are read with pyarrow, one row group at a time and only the columns replay needs;
a V2 checkpoint (JSON or Parquet top-level file) pulls in its sidecars. Files of a multi-part
checkpoint and sidecars are read concurrently on the table's log pool.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstores.base import FileStatus, LogStore
from replay.log.checkpoint_instances import CheckpointFormat, CheckpointInstance
from replay.log.commit_files import parse_json_lines
from replay.log.table_io import TableIO
from replay.protocol import filenames
from replay.protocol.arrow_actions import ADD_ARROW_TYPE, REMOVE_ARROW_TYPE, select_rows
from replay.protocol.errors import CorruptLogError

logger = logging.getLogger(__name__)

NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


@dataclass
class CheckpointData:
    """What replay needs from a checkpoint: Arrow add/remove rows and the other actions as dicts."""

    adds: list[pa.Table] = field(default_factory=list)
    removes: list[pa.Table] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def _struct_fields(schema: pa.Schema, column: str) -> list[str]:
    index = schema.get_field_index(column)
    if index < 0 or not pa.types.is_struct(schema.field(index).type):
        return []
    return [child.name for child in schema.field(index).type]


def _read_file_rows(parquet: pq.ParquetFile, column: str, wanted: Sequence[str]) -> pa.Table | None:
    """The rows of ``column`` (``add`` or ``remove``) with a path, as a flat table of ``wanted`` fields.

    Read one row group at a time, dropping the other actions' rows as it goes: the peak memory
    is the kept rows plus one row group, never the whole column set of the file.
    """
    present = set(_struct_fields(parquet.schema_arrow, column))
    fields = [name for name in wanted if name in present]
    if "path" not in fields:
        return None
    paths = [f"{column}.{name}" for name in fields]
    tables: list[pa.Table] = []
    for group in range(parquet.num_row_groups):
        struct = parquet.read_row_group(group, columns=paths).column(column)
        for chunk in struct.chunks:
            table = _sparse_nulls(pa.Table.from_struct_array(chunk))
            keep = pc.is_valid(table.column("path"))
            if chunk.null_count:  # from_struct_array ignores the struct's own validity
                keep = pc.and_(keep, chunk.is_valid())
            tables.append(select_rows(table, keep))
    if not tables:
        struct_type = parquet.schema_arrow.field(column).type
        return pa.schema([struct_type.field(name) for name in fields]).empty_table()
    return pa.concat_tables(tables)


STATS_PARSED = "stats_parsed"
"""The checkpoint column holding ``add`` statistics as a struct (Delta's ``writeStatsAsStruct``)."""


def _json_value(value: object) -> object:
    """A statistic of ``stats_parsed`` in the form Delta writes it in JSON statistics."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC)
            return value.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, _dt.date | decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{type(value).__name__} is not a statistic")


def _with_json_stats(adds: pa.Table) -> pa.Table:
    """``adds`` with ``stats`` filled from ``stats_parsed`` where only the struct was written.

    Statistics then have one form for everything downstream (pruning reads the JSON). Only the
    rows lacking JSON statistics are converted.
    """
    if STATS_PARSED not in adds.column_names:
        return adds
    parsed = adds.column(STATS_PARSED).combine_chunks()
    adds = adds.drop_columns([STATS_PARSED])
    stats = (
        adds.column("stats").combine_chunks()
        if "stats" in adds.column_names
        else pa.nulls(adds.num_rows, pa.string())
    )
    missing = pc.and_(pc.is_null(stats), pc.is_valid(parsed))
    if not pc.any(missing).as_py():
        return adds
    rows = parsed.filter(missing).to_pylist()
    texts = pa.array(
        [
            orjson.dumps({k: v for k, v in row.items() if v is not None}, default=_json_value).decode()
            for row in rows
        ],
        pa.string(),
    )
    filled = pc.replace_with_mask(stats, missing, texts)
    index = adds.schema.get_field_index("stats")
    if index < 0:
        return adds.append_column("stats", filled)
    return adds.set_column(index, "stats", filled)


def _sparse_nulls(table: pa.Table) -> pa.Table:
    """``table`` with its all-null columns (deletion vectors, row ids ... when unused) not backed by memory.

    ``pa.nulls`` shares one zeroed buffer, where the decoded column holds a full buffer per child.
    """
    columns = [
        pa.nulls(len(column), column.type) if len(column) and column.null_count == len(column) else column
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _non_null_rows(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in table.column_names:
        column = table.column(name)
        if column.null_count == len(column):
            continue
        for value in column.drop_null().to_pylist(maps_as_pydicts="lossy"):
            rows.append({name: {k: v for k, v in value.items() if v is not None}})
    return rows


def _may_hold_values(metadata: pq.FileMetaData, group: int, column: str) -> bool:
    """False only when the statistics prove every leaf of ``column`` is null in row group ``group``."""
    row_group = metadata.row_group(group)
    for index in range(row_group.num_columns):
        chunk = row_group.column(index)
        if chunk.path_in_schema.split(".", 1)[0] != column:
            continue
        stats = chunk.statistics
        if stats is None or not stats.has_null_count or stats.null_count != chunk.num_values:
            return True
    return False


def _read_other_actions(
    parquet: pq.ParquetFile, kinds: Sequence[str] = NON_FILE_COLUMNS
) -> list[dict[str, Any]]:
    """The non-file actions (protocol, metadata, txn ...; those of ``kinds``) of a Parquet checkpoint
    as dicts.

    They are a handful of rows among millions: row groups are read one at a time and skipped
    when their statistics show the columns hold only nulls.
    """
    names = parquet.schema_arrow.names
    columns = [name for name in kinds if name in names]
    rows: list[dict[str, Any]] = []
    for group in range(parquet.num_row_groups):
        wanted = [name for name in columns if _may_hold_values(parquet.metadata, group, name)]
        if wanted:
            rows += _non_null_rows(parquet.read_row_group(group, columns=wanted))
    return rows


SINGLE_ACTION_COLUMNS = frozenset({"protocol", "metaData"})
"""Kinds a checkpoint holds exactly one of."""
_SCAN_ROWS = 4096


def _read_single_actions(parquet: pq.ParquetFile, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """The one ``protocol`` and one ``metaData`` row of a Parquet checkpoint, as dicts.

    Batches are decoded in file order only until both were seen: writers put them first (Delta
    writes protocol, metadata, domains and transactions before the file actions), so a checkpoint
    of a million files costs one small batch, not a million decoded rows.
    """
    names = parquet.schema_arrow.names
    columns = [name for name in kinds if name in names]
    groups = [
        g
        for g in range(parquet.num_row_groups)
        if any(_may_hold_values(parquet.metadata, g, c) for c in columns)
    ]
    rows: list[dict[str, Any]] = []
    if not columns or not groups:
        return rows
    for batch in parquet.iter_batches(batch_size=_SCAN_ROWS, row_groups=groups, columns=columns):
        rows += _non_null_rows(pa.Table.from_batches([batch]))
        if {name for row in rows for name in row} >= set(columns):
            break
    return rows


def read_parquet_checkpoint(
    store: LogStore, status: FileStatus, *, file_rows_only: bool = False
) -> CheckpointData:
    """Read one Parquet checkpoint file (classic part, V2 top-level or sidecar).

    ``status`` comes from a listing (or a sidecar action): the store opens the file knowing its
    size (:meth:`~logstores.base.LogStore.open_file`), so an object store reads it without a HEAD.
    Raises :class:`CorruptLogError` naming the file if it cannot be read.
    """
    path = status.path
    try:
        with store.open_file(status) as stream:
            parquet = pq.ParquetFile(stream)
            data = CheckpointData(files=[path])
            adds = _read_file_rows(parquet, "add", [*ADD_ARROW_TYPE.names, STATS_PARSED])
            removes = _read_file_rows(parquet, "remove", REMOVE_ARROW_TYPE.names)
            if adds is not None:
                data.adds.append(_with_json_stats(adds))
            if removes is not None:
                data.removes.append(removes)
            if not file_rows_only:
                data.actions = _read_other_actions(parquet)
            return data
    except FileNotFoundError as exc:
        raise CorruptLogError(f"checkpoint file {path} is missing: {exc}", path=path) from exc
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}", path=path) from exc


DESCRIPTION_COLUMNS = ("protocol", "metaData")
TABLE_ACTION_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata")
"""The actions a table's description holds besides its files (what a commit is made from)."""


def read_checkpoint_description(io: TableIO, files: Sequence[FileStatus]) -> list[dict[str, Any]]:
    """The ``protocol`` and ``metaData`` actions of a complete checkpoint, as dicts.

    Only those two columns of the Parquet parts are decoded, and V2 sidecars (which hold file
    actions only) are not read. Raises :class:`CorruptLogError` naming the file that cannot be read.
    """
    return read_checkpoint_actions(io, files, DESCRIPTION_COLUMNS, stop_when_found=True)


def read_checkpoint_actions(
    io: TableIO, files: Sequence[FileStatus], kinds: Sequence[str], *, stop_when_found: bool = False
) -> list[dict[str, Any]]:
    """The non-file actions of ``kinds`` in a complete checkpoint, as dicts (``{"txn": {...}}``).

    Only those columns of the Parquet parts are decoded, row groups whose statistics show them
    all null are skipped, and V2 sidecars (file actions only) are not read. With
    ``stop_when_found`` the remaining parts are not read once one action of every kind was seen
    (right for kinds a checkpoint holds once: protocol, metadata). Raises
    :class:`CorruptLogError` naming the file that cannot be read.
    """
    actions: list[dict[str, Any]] = []
    for status in files:
        if status.path.endswith(".json"):
            rows = read_json_checkpoint(io.store, status.path).actions
            actions += [row for row in rows if any(row.get(name) is not None for name in kinds)]
            continue
        single = [kind for kind in kinds if kind in SINGLE_ACTION_COLUMNS]
        many = [kind for kind in kinds if kind not in SINGLE_ACTION_COLUMNS]
        try:
            with io.store.open_file(status) as stream:
                parquet = pq.ParquetFile(stream)
                actions += _read_single_actions(parquet, single)
                if many:
                    actions += _read_other_actions(parquet, many)
        except FileNotFoundError as exc:
            raise CorruptLogError(
                f"checkpoint file {status.path} is missing: {exc}", path=status.path
            ) from exc
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise CorruptLogError(
                f"cannot read checkpoint file {status.path}: {exc}", path=status.path
            ) from exc
        if stop_when_found and {name for action in actions for name in action} >= set(kinds):
            break  # a checkpoint holds one of each: the remaining parts are not read
    return actions


def read_json_checkpoint(store: LogStore, path: str) -> CheckpointData:
    """Read a V2 JSON top-level checkpoint file (all its rows become dict actions)."""
    try:
        raw = store.read_bytes(path)
    except OSError as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}", path=path) from exc
    return CheckpointData(actions=parse_json_lines(raw, path), files=[path])


def read_checkpoint(
    io: TableIO, instance: CheckpointInstance, files: Sequence[FileStatus], executor: Executor | None
) -> CheckpointData:
    """Read every file of a complete checkpoint, V2 sidecars included (concurrently if ``executor``).

    Raises :class:`CorruptLogError` naming the file that cannot be read or a sidecar list
    without its ``checkpointMetadata``.
    """
    paths = [status.path for status in files]
    if instance.format == CheckpointFormat.V2 and paths[0].endswith(".json"):
        parts = [read_json_checkpoint(io.store, paths[0])]
    else:
        parts = _map(executor, lambda s: read_parquet_checkpoint(io.store, s), files)
    data = CheckpointData()
    for part in parts:
        data.adds += part.adds
        data.removes += part.removes
        data.actions += part.actions
        data.files += part.files
    sidecars = [action["sidecar"] for action in data.actions if "sidecar" in action]
    if sidecars:
        if not any("checkpointMetadata" in action for action in data.actions):
            raise CorruptLogError(
                f"checkpoint {paths[0]} lists sidecar files but has no checkpointMetadata action",
                path=paths[0],
            )
        sidecar_files = [sidecar_status(io.log_path, sidecar) for sidecar in sidecars]
        for part in _map(
            executor, lambda s: read_parquet_checkpoint(io.store, s, file_rows_only=True), sidecar_files
        ):
            data.adds += part.adds
            data.removes += part.removes
            data.files += part.files
    return data


def sidecar_status(log_path: str, sidecar: Mapping[str, Any]) -> FileStatus:
    """The file of a ``sidecar`` action of the log at ``log_path``, with the size and time it records."""
    return FileStatus(
        filenames.sidecar_file(log_path, sidecar["path"]),
        int(sidecar.get("sizeInBytes") or 0),
        int(sidecar.get("modificationTime") or 0),
    )


def _map(
    executor: Executor | None, function: Callable[[FileStatus], CheckpointData], items: Sequence[FileStatus]
) -> list[CheckpointData]:
    if executor is None or len(items) <= 1:
        return [function(item) for item in items]
    return list(executor.map(function, items))
