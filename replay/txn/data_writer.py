"""Writing data files the way Delta on Spark lays them out, with Delta's statistics.

Hive-style partition directories (``col=value``, special characters escaped, nulls as
``__HIVE_DEFAULT_PARTITION__``), partition columns left out of the data files, file names
``part-00000-<uuid>-c000.snappy.parquet``, log paths URL-encoded, and per-file statistics
(``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) over the first
``delta.dataSkippingNumIndexedCols`` leaf columns. Files go through
:func:`logstores.open_filesystem`, with the same storage options as the log. Nothing here
commits: files of a failed commit are orphans, harmless to readers.
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
from replay.protocol.actions import AddFile

logger = logging.getLogger(__name__)

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
STRING_PREFIX_LENGTH = 32
"""Delta truncates string min/max statistics to this many characters."""
MAX_STRING_TIE_BREAKER = "\U0010ffff"
"""Appended to a truncated max string so it stays an upper bound."""
DEFAULT_NUM_INDEXED_COLS = 32


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
