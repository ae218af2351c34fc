"""Write Arrow data to a Delta table: Parquet data files with Delta statistics, then one commit.

Enough of a writer for demos, tests and cross-checks: appends, full overwrites and removal of
whole files. Data files go through :func:`logstores.open_filesystem` (same storage options as
the log), the commit through :func:`replay.commit.commit`, so writes are safe with concurrent
writers on every store that gives mutual exclusion.

Layout follows Delta on Spark: Hive-style partition directories (``col=value``, special
characters escaped, nulls as ``__HIVE_DEFAULT_PARTITION__``), partition columns left out of the
data files, file names ``part-00000-<uuid>-c000.snappy.parquet``, log paths URL-encoded.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import io
import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstores import open_filesystem
from logstores.conf import ConfLike, to_conf_dict
from replay.actions import Action, AddFile, Metadata, Protocol, RemoveFile, normalize_path_key
from replay.errors import DeltaError, TableNotFoundError, UnsupportedTableFeatureError
from replay.schema import StructType

logger = logging.getLogger(__name__)

WRITE_MODES = ("append", "overwrite")
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
STRING_PREFIX_LENGTH = 32
"""Delta truncates string min/max statistics to this many characters."""
MAX_STRING_TIE_BREAKER = "\U0010ffff"
"""Appended to a truncated max string so it stays an upper bound."""
DEFAULT_NUM_INDEXED_COLS = 32

SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "changeDataFeed",
        "inCommitTimestamp",
        "timestampNtz",
        "deletionVectors",
        "domainMetadata",
        "vacuumProtocolCheck",
    }
)
"""Writer features whose tables this writer can append to and remove whole files from."""


# -- schema: Arrow -> Delta -------------------------------------------------------------------
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def delta_schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of a new table with ``schema``; :class:`ValueError` for unsupported types."""
    plain = pa.schema([field.with_type(_VIEW_TYPES.get(field.type, field.type)) for field in schema])
    return StructType.from_arrow(plain).to_json()


def _uses_timestamp_ntz(schema_string: str) -> bool:
    return '"timestamp_ntz"' in schema_string


# -- table creation ---------------------------------------------------------------------------
def _is_true(configuration: Mapping[str, str], key: str) -> bool:
    return str(configuration.get(key, "false")).lower() == "true"


def new_table_protocol(configuration: Mapping[str, str], schema_string: str) -> Protocol:
    """The smallest protocol that supports the table properties and types of a new table.

    Legacy versions where they suffice (writer 2, or 4 for the change data feed); table features
    (reader 3 / writer 7) once ``timestamp_ntz`` or in-commit timestamps are needed.
    """
    ntz = _uses_timestamp_ntz(schema_string)
    ict = _is_true(configuration, "delta.enableInCommitTimestamps")
    cdf = _is_true(configuration, "delta.enableChangeDataFeed")
    if not ntz and not ict:
        return Protocol(min_reader_version=1, min_writer_version=4 if cdf else 2)
    writer = ["appendOnly", "invariants"]
    reader: list[str] = []
    if cdf:
        writer.append("changeDataFeed")
    if ict:
        writer.append("inCommitTimestamp")
    if ntz:
        writer.append("timestampNtz")
        reader.append("timestampNtz")
    if reader:
        return Protocol(
            min_reader_version=3, min_writer_version=7, reader_features=reader, writer_features=writer
        )
    return Protocol(min_reader_version=1, min_writer_version=7, writer_features=writer)


_FEATURES_WHEN_UNUSED = frozenset(
    {"columnMapping", "identityColumns", "generatedColumns", "checkConstraints"}
)
"""Writer features that are harmless to this writer as long as the table does not use them."""


def features_in_use(metadata: Metadata) -> list[str]:
    """Writer features the table's metadata actually uses and this writer cannot honour.

    Column invariants, CHECK constraints, generated and identity columns would have to be
    enforced or computed on write; column mapping would change the data files' column names.
    """
    schema_string = metadata.schema_string or ""
    used = {
        "invariants": "delta.invariants" in schema_string,
        "checkConstraints": any(key.startswith("delta.constraints.") for key in metadata.configuration or {}),
        "generatedColumns": "delta.generationExpression" in schema_string,
        "identityColumns": "delta.identity." in schema_string,
        "columnMapping": metadata.column_mapping_mode != "none",
    }
    return [name for name, in_use in used.items() if in_use]


def check_writable(protocol: Protocol, metadata: Metadata, table: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if this writer cannot write the table safely.

    Refused: writer versions above 7, table features this writer does not know, and features
    the table uses that would need enforcing (see :func:`features_in_use`).
    """
    unsupported: list[str] = []
    if protocol.min_writer_version > 7:
        unsupported.append(f"writer version {protocol.min_writer_version}")
    if protocol.min_writer_version == 7:
        known = SUPPORTED_WRITER_FEATURES | _FEATURES_WHEN_UNUSED
        unsupported += sorted(set(protocol.writer_features or ()) - known)
    unsupported += features_in_use(metadata)
    if unsupported:
        features = list(dict.fromkeys(unsupported))
        raise UnsupportedTableFeatureError(
            f"Cannot write to table {table}: it uses features this writer does not support: "
            f"{', '.join(features)}",
            table=table,
            features=features,
        )


# -- partition values and paths ---------------------------------------------------------------
_ESCAPED_CHARS = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 0x20))
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")


def escape_partition_value(value: str) -> str:
    """Hive's ``escapePathName``: ``%XX`` for characters that are unsafe in a directory name."""
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED_CHARS else ch for ch in value)


def encode_log_path(relative_path: str) -> str:
    """A data file's relative path as the log stores it (Hadoop ``Path.toUri.toString``).

    ASCII characters that are not legal in a URI path are %-encoded (``%`` itself included);
    non-ASCII characters stay as they are.
    """
    out: list[str] = []
    for ch in relative_path:
        if ch in _URI_PATH_SAFE or ord(ch) >= 0x80:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8"))
    return "".join(out)


def partition_value_string(value: Any, arrow_type: pa.DataType) -> str | None:
    """A partition value as Delta serialises it in ``partitionValues`` (``None`` for null/empty)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    text = str(value)
    if text == "" and pa.types.is_string(arrow_type):
        return None
    return text


def partition_directory(partition_columns: list[str], values: Mapping[str, str | None]) -> str:
    """``a=1/b=x%3Ay`` for the given values (``__HIVE_DEFAULT_PARTITION__`` for nulls)."""
    parts = []
    for column in partition_columns:
        value = values[column]
        rendered = HIVE_DEFAULT_PARTITION if value is None else escape_partition_value(value)
        parts.append(f"{escape_partition_value(column)}={rendered}")
    return "/".join(parts)


# -- statistics -------------------------------------------------------------------------------
def _stat_value(value: Any, arrow_type: pa.DataType) -> Any:
    """A min/max value in Delta's JSON stats form, or ``None`` when it must be left out."""
    if value is None:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if arrow_type.precision <= 15 else None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC)
            return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _min_max(array: pa.ChunkedArray) -> tuple[Any, Any]:
    arrow_type = array.type
    if pa.types.is_floating(arrow_type) and pc.any(pc.is_nan(array)).as_py():
        return None, None
    result = pc.min_max(array)
    low, high = result["min"].as_py(), result["max"].as_py()
    if isinstance(low, str) and len(low) > STRING_PREFIX_LENGTH:
        low = low[:STRING_PREFIX_LENGTH]
    if isinstance(high, str) and len(high) > STRING_PREFIX_LENGTH:
        high = high[:STRING_PREFIX_LENGTH] + MAX_STRING_TIE_BREAKER
    return _stat_value(low, arrow_type), _stat_value(high, arrow_type)


def _has_min_max(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_timestamp(arrow_type)
        or pa.types.is_decimal(arrow_type)
    )


@dataclass
class _StatsBudget:
    """How many more leaf columns get statistics (``delta.dataSkippingNumIndexedCols``)."""

    remaining: int

    def take(self) -> bool:
        if self.remaining == 0:
            return False
        self.remaining -= 1
        return True


def _collect(
    array: pa.ChunkedArray,
    name: str,
    budget: _StatsBudget,
    *,
    out_min: dict[str, Any],
    out_max: dict[str, Any],
    out_nulls: dict[str, Any],
) -> None:
    arrow_type = array.type
    if pa.types.is_struct(arrow_type):
        child_min: dict[str, Any] = {}
        child_max: dict[str, Any] = {}
        child_nulls: dict[str, Any] = {}
        flattened = [chunk.flatten() for chunk in array.chunks]
        for index in range(arrow_type.num_fields):
            child = pa.chunked_array([parts[index] for parts in flattened], type=arrow_type.field(index).type)
            _collect(
                child,
                arrow_type.field(index).name,
                budget,
                out_min=child_min,
                out_max=child_max,
                out_nulls=child_nulls,
            )
        if child_nulls:
            out_nulls[name] = child_nulls
            out_min[name] = child_min
            out_max[name] = child_max
        return
    if not budget.take():
        return
    out_nulls[name] = array.null_count
    if _has_min_max(arrow_type) and array.null_count < len(array):
        low, high = _min_max(array)
        if low is not None and high is not None:
            out_min[name] = low
            out_max[name] = high


def file_statistics(table: pa.Table, num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS) -> str:
    """Delta's per-file statistics JSON: ``numRecords``, ``minValues``, ``maxValues``, ``nullCount``.

    Only the first ``num_indexed_cols`` leaf columns get statistics (-1: all). Min/max are left
    out for types without an order Delta uses (binary, arrays, maps), for float columns holding
    NaN and for wide decimals; strings are truncated to 32 characters (max keeps a tie breaker).
    """
    budget = _StatsBudget(-1 if num_indexed_cols < 0 else num_indexed_cols)
    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        _collect(column, name, budget, out_min=mins, out_max=maxes, out_nulls=nulls)
    stats = {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxes, "nullCount": nulls}
    return orjson.dumps(stats).decode()


# -- data files -------------------------------------------------------------------------------
@dataclass(frozen=True)
class WrittenFile:
    """A data file this writer produced, ready to be committed."""

    add: AddFile
    num_rows: int


def _split_by_partition(
    table: pa.Table, partition_columns: list[str]
) -> Iterable[tuple[dict[str, str | None], pa.Table]]:
    if not partition_columns:
        yield {}, table
        return
    indexed = table.select(partition_columns).append_column(
        "__row", pa.array(range(table.num_rows), pa.int64())
    )
    groups = indexed.group_by(partition_columns, use_threads=False).aggregate([("__row", "list")])
    data = table.drop_columns(partition_columns)
    types = {name: table.schema.field(name).type for name in partition_columns}
    for group in groups.to_pylist():
        values = {name: partition_value_string(group[name], types[name]) for name in partition_columns}
        yield values, data.take(pa.array(group["__row_list"], pa.int64()))


def _parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(
        table, buffer, compression="snappy", coerce_timestamps="us", allow_truncated_timestamps=False
    )
    return buffer.getvalue()


def write_data_files(
    table_uri: str,
    data: pa.Table,
    partition_columns: list[str],
    *,
    conf: Mapping[str, str] | None = None,
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
    max_rows_per_file: int | None = None,
) -> list[WrittenFile]:
    """Write ``data`` as Parquet files under ``table_uri``; one file per partition (and row chunk).

    Returns the ``AddFile`` actions (``dataChange=true``, stats included). Nothing is committed:
    files written by a failed commit are orphans, harmless to readers.
    """
    fs, root = open_filesystem(table_uri, conf)
    root = root.rstrip("/")
    now = int(time.time() * 1000)
    written: list[WrittenFile] = []
    for values, part in _split_by_partition(data, partition_columns):
        directory = partition_directory(partition_columns, values)
        chunk_rows = max_rows_per_file or max(part.num_rows, 1)
        for offset in range(0, max(part.num_rows, 1), chunk_rows):
            chunk = part.slice(offset, chunk_rows)
            name = f"part-{len(written):05d}-{uuid.uuid4()}-c000.snappy.parquet"
            relative = f"{directory}/{name}" if directory else name
            payload = _parquet_bytes(chunk)
            target = f"{root}/{relative}"
            fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            fs.pipe_file(target, payload)
            add = AddFile(
                path=encode_log_path(relative),
                partition_values=dict(values),
                size=len(payload),
                modification_time=now,
                data_change=True,
                stats=file_statistics(chunk, num_indexed_cols),
            )
            written.append(WrittenFile(add, chunk.num_rows))
    logger.debug("wrote %d data files under %s", len(written), table_uri)
    return written


# -- public API -------------------------------------------------------------------------------
def _conform(data: pa.Table, table_schema: pa.Schema, table: str) -> pa.Table:
    """``data`` with the table's column order and types; raises :class:`ValueError` on mismatch."""
    expected = set(table_schema.names)
    given = set(data.column_names)
    if expected != given:
        missing = sorted(expected - given)
        extra = sorted(given - expected)
        raise ValueError(
            f"Schema of the data does not match table {table}: missing columns {missing}, "
            f"unknown columns {extra}"
        )
    try:
        return data.select(table_schema.names).cast(table_schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"Data cannot be written to table {table}: {exc}") from None


def _num_indexed_cols(configuration: Mapping[str, str]) -> int:
    return int(configuration.get("delta.dataSkippingNumIndexedCols", DEFAULT_NUM_INDEXED_COLS))


def write_table(  # noqa: PLR0917 (signature shared with the public API)
    table_uri: str,
    arrow_table: pa.Table,
    mode: str = "append",
    partition_by: list[str] | None = None,
    conf: ConfLike | None = None,
    configuration: Mapping[str, str] | None = None,
    *,
    max_rows_per_file: int | None = None,
) -> int:
    """Write ``arrow_table`` to the Delta table at ``table_uri`` and return the committed version.

    ``mode="append"`` adds files; ``mode="overwrite"`` also removes every current file in the
    same commit. The first write creates the table (protocol + metadata) with ``partition_by``
    and the table properties ``configuration`` (e.g. ``delta.enableChangeDataFeed``); later
    writes must match the table's columns and partitioning (``ValueError`` otherwise) and ignore
    ``configuration``. Raises :class:`UnsupportedTableFeatureError` for tables needing writer
    features this writer lacks and :class:`replay.errors.ConcurrentModificationError` when a
    concurrent commit conflicts (an overwrite conflicts with any concurrent append).
    """
    from replay.commit import commit
    from replay.delta_log import DeltaLog

    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(WRITE_MODES)}, not {mode!r}")
    settings = to_conf_dict(conf)
    log = DeltaLog.for_table(table_uri, settings)
    snapshot = _latest_snapshot(log)
    actions: list[Action] = []
    if snapshot is None:
        partition_columns = list(partition_by or [])
        _check_partition_columns(partition_columns, arrow_table.schema, table_uri)
        schema_string = delta_schema_string(arrow_table.schema)
        table_configuration = {str(k): str(v) for k, v in (configuration or {}).items()}
        protocol = new_table_protocol(table_configuration, schema_string)
        metadata = Metadata(
            id=str(uuid.uuid4()),
            schema_string=schema_string,
            partition_columns=partition_columns,
            configuration=table_configuration,
            created_time=int(time.time() * 1000),
        )
        actions += [protocol, metadata]
    else:
        protocol, metadata = snapshot.protocol, snapshot.metadata
        check_writable(protocol, metadata, table_uri)
        partition_columns = list(metadata.partition_columns)
        if partition_by is not None and list(partition_by) != partition_columns:
            raise ValueError(
                f"Partition columns {list(partition_by)} do not match table {table_uri}, "
                f"which is partitioned by {partition_columns}"
            )
    data = _conform(arrow_table, metadata.arrow_schema, table_uri)
    files = write_data_files(
        log.table_path,
        data,
        partition_columns,
        conf=settings,
        num_indexed_cols=_num_indexed_cols(metadata.configuration or {}),
        max_rows_per_file=max_rows_per_file,
    )
    removes: list[RemoveFile] = []
    if mode == "overwrite" and snapshot is not None:
        _check_not_append_only(metadata, table_uri)
        now = int(time.time() * 1000)
        removes = [remove_action(add, now) for add in snapshot.files()]
    actions += [written.add for written in files]
    actions += removes
    metrics = {
        "numFiles": len(files),
        "numOutputRows": sum(written.num_rows for written in files),
        "numOutputBytes": sum(written.add.size for written in files),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes)
    parameters = {"mode": "Overwrite" if mode == "overwrite" else "Append", "partitionBy": partition_columns}
    return commit(
        log,
        actions,
        "WRITE",
        parameters,
        read_snapshot=snapshot,
        reads_whole_table=mode == "overwrite",
        operation_metrics=metrics,
    )


def remove_action(add: AddFile, deletion_timestamp: int) -> RemoveFile:
    """The tombstone that removes ``add`` as a data change (extended file metadata kept)."""
    return RemoveFile(
        path=add.path,
        deletion_timestamp=deletion_timestamp,
        data_change=True,
        extended_file_metadata=True,
        partition_values=dict(add.partition_values),
        size=add.size,
        stats=add.stats,
        tags=add.tags,
        deletion_vector=add.deletion_vector,
        base_row_id=add.base_row_id,
        default_row_commit_version=add.default_row_commit_version,
    )


def delete_files(table_uri: str, paths: Iterable[str], conf: ConfLike | None = None) -> int:
    """Remove whole data files from the table in one commit; returns the committed version.

    ``paths`` are paths as the log spells them (``AddFile.path``, compared with %-escapes
    normalised) or resolved URIs of the files. Raises :class:`ValueError` naming every path that
    is not an active file, :class:`TableNotFoundError` if there is no table, and
    :class:`replay.errors.ConcurrentModificationError` if a concurrent commit removed one of them.
    """
    from replay.actions import resolve_path
    from replay.commit import commit
    from replay.delta_log import DeltaLog

    log = DeltaLog.for_table(table_uri, to_conf_dict(conf))
    snapshot = _latest_snapshot(log)
    if snapshot is None:
        raise TableNotFoundError(f"Cannot delete files: no Delta table at {table_uri}", table=table_uri)
    check_writable(snapshot.protocol, snapshot.metadata, table_uri)
    _check_not_append_only(snapshot.metadata, table_uri)
    by_key: dict[str, AddFile] = {}
    for add in snapshot.files():
        by_key[normalize_path_key(add.path)] = add
        by_key[resolve_path(log.table_path, add.path)] = add
    wanted = list(dict.fromkeys(paths))
    unknown = [path for path in wanted if path not in by_key and normalize_path_key(path) not in by_key]
    if unknown:
        raise ValueError(f"Not active files of table {table_uri} at version {snapshot.version}: {unknown}")
    now = int(time.time() * 1000)
    chosen = {id(add): add for add in (by_key.get(p) or by_key[normalize_path_key(p)] for p in wanted)}
    removes = [remove_action(add, now) for add in chosen.values()]
    metrics = {"numRemovedFiles": len(removes)}
    parameters = {"predicate": [f"path = '{remove.path}'" for remove in removes]}
    return commit(log, removes, "DELETE", parameters, read_snapshot=snapshot, operation_metrics=metrics)


def _latest_snapshot(log: Any) -> Any:
    try:
        return log.snapshot()
    except TableNotFoundError:
        return None


def _check_partition_columns(partition_columns: list[str], schema: pa.Schema, table: str) -> None:
    missing = [name for name in partition_columns if name not in schema.names]
    if missing:
        raise ValueError(f"Partition columns {missing} are not columns of the data written to {table}")
    if partition_columns and len(partition_columns) == len(schema.names):
        raise ValueError(f"Cannot partition table {table} by all of its columns {partition_columns}")


def _check_not_append_only(metadata: Metadata, table: str) -> None:
    if _is_true(metadata.configuration or {}, "delta.appendOnly"):
        raise DeltaError(
            f"This table is configured to only allow appends: cannot remove files from {table} "
            "(delta.appendOnly = true)",
            table=table,
        )
