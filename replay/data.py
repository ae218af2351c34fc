"""Reading a table's data files into Arrow: partition values, column mapping, deletion vectors.

Data files are Parquet files named by file actions (``add``, ``remove``, ``cdc``). Reading one
means: fetch it through :func:`logstores.open_filesystem` (the same storage options as the log),
select the physical columns of the requested logical columns (``delta.columnMapping.mode``
``name``: by physical name, ``id``: by Parquet field id, falling back to the physical name),
rename them to logical names (nested fields too), cast to the table schema's Arrow types, fill
columns the file lacks with nulls, add partition columns from the action's ``partitionValues``
(Delta's string serialisation; a missing key or ``null`` is a null) and drop the rows the file's
deletion vector marks as deleted. Files are read concurrently in a thread pool (Arrow decoding
releases the GIL; object-store requests overlap).
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from logstores import open_filesystem
from logstores.filesystem import uri_scheme
from replay.actions import AddCDCFile, AddFile, Metadata, Protocol, RemoveFile, resolve_path
from replay.deletion_vectors import read_deletion_vector
from replay.errors import DeltaError
from replay.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType, arrow_type
from replay.snapshot import check_protocol_readable

logger = logging.getLogger(__name__)

FileAction = AddFile | RemoveFile | AddCDCFile
T = TypeVar("T")
R = TypeVar("R")

REMOTE_READ_CONCURRENCY = 8
"""Files read at once from object stores (requests overlap)."""
LOCAL_READ_CONCURRENCY = max(4, min(8, os.cpu_count() or 4))
"""Files read at once from local disk (decoding releases the GIL; a little more than the cores
keeps them busy while each file is opened)."""


class DataFileNotFoundError(DeltaError, FileNotFoundError):
    """A data file named in the log does not exist (vacuumed, or the table was copied partially)."""


@dataclass(frozen=True)
class RowFilter:
    """Which rows of a file to keep by 0-based row index.

    ``keep=False``: drop ``indexes`` (a deletion vector); ``keep=True``: keep only ``indexes``.
    """

    indexes: np.ndarray
    keep: bool = False

    def mask(self, num_rows: int) -> pa.Array:
        """A boolean mask of the rows to keep in a file of ``num_rows`` rows."""
        hits = np.zeros(num_rows, dtype=bool)
        indexes = self.indexes[self.indexes < num_rows].astype(np.int64)
        hits[indexes] = True
        return pa.array(hits if self.keep else ~hits)


@dataclass(frozen=True)
class TableReader:
    """What is needed to read any data file of one table version (picklable).

    Build it with :meth:`for_metadata`. ``conf`` holds the storage settings for the data files.
    """

    table_path: str
    schema: StructType
    partition_columns: tuple[str, ...]
    column_mapping_mode: str
    conf: Mapping[str, str]

    @classmethod
    def for_metadata(
        cls,
        table_path: str,
        metadata: Metadata,
        protocol: Protocol | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> TableReader:
        """A reader for the table described by ``metadata``.

        Raises :class:`replay.errors.UnsupportedTableFeatureError` if ``protocol`` needs a reader
        version or feature this library cannot read.
        """
        if protocol is not None:
            check_protocol_readable(protocol, table_path)
        return cls(
            table_path=table_path.rstrip("/"),
            schema=metadata.schema,
            partition_columns=tuple(metadata.partition_columns or ()),
            column_mapping_mode=metadata.column_mapping_mode,
            conf=dict(conf or {}),
        )

    @property
    def concurrency(self) -> int:
        """How many files to read at once: more for object stores than for local disk."""
        local = uri_scheme(self.table_path) in ("", "file")
        return LOCAL_READ_CONCURRENCY if local else REMOTE_READ_CONCURRENCY

    # -- schema -------------------------------------------------------------------------------
    def read_fields(self, columns: Sequence[str] | None = None) -> list[StructField]:
        """The schema fields for ``columns`` (all when ``None``), in the order asked.

        Raises :class:`KeyError` naming an unknown column.
        """
        if columns is None:
            return list(self.schema.fields)
        return [self.schema.field(name) for name in columns]

    def arrow_schema(self, columns: Sequence[str] | None = None) -> pa.Schema:
        """The Arrow schema (logical names) of what :meth:`read_file` returns for ``columns``."""
        return pa.schema([arrow_field(f) for f in self.read_fields(columns)])

    # -- reading ------------------------------------------------------------------------------
    def file_uri(self, file: FileAction) -> str:
        """The URI of ``file``'s data file."""
        return resolve_path(self.table_path, file.path)

    def deletion_filter(self, file: FileAction) -> RowFilter | None:
        """The rows ``file``'s deletion vector drops, or ``None`` if it has none."""
        descriptor = getattr(file, "deletion_vector", None)
        if descriptor is None:
            return None
        return RowFilter(read_deletion_vector(descriptor, self.table_path, self.conf))

    def read_file(
        self,
        file: FileAction,
        columns: Sequence[str] | None = None,
        *,
        row_filter: RowFilter | bool | None = True,
        extra_columns: Sequence[pa.Field] = (),
        ignore_missing: bool = False,
    ) -> pa.Table:
        """The rows of one data file as a table with logical column names.

        ``row_filter=True`` applies the file's own deletion vector, ``False``/``None`` keeps every
        row, a :class:`RowFilter` selects rows explicitly. ``extra_columns`` are read from the file
        as stored (e.g. ``_change_type`` of CDC files; nulls if absent). Raises
        :class:`DataFileNotFoundError` naming the file when it is missing, unless ``ignore_missing``
        (then the result is empty).
        """
        fields = self.read_fields(columns)
        if row_filter is True:
            row_filter = self.deletion_filter(file)
        elif row_filter is False:
            row_filter = None
        uri = self.file_uri(file)
        data_fields = [f for f in fields if f.name not in self.partition_columns]
        try:
            parquet = _open_parquet(uri, self.conf)
        except FileNotFoundError:
            if ignore_missing:
                logger.warning("skipping missing data file %s", uri)
                return self._empty(fields, extra_columns)
            raise DataFileNotFoundError(
                f"Data file {uri} of table {self.table_path} does not exist", table=self.table_path
            ) from None
        file_schema = parquet.schema_arrow
        wanted: dict[str, int] = {}
        for struct_field in data_fields:
            index = _match_field(file_schema, struct_field, self.column_mapping_mode)
            if index is not None:
                wanted[struct_field.name] = index
        extra_present = [f for f in extra_columns if file_schema.get_field_index(f.name) >= 0]
        names = [file_schema.field(i).name for i in wanted.values()] + [f.name for f in extra_present]
        raw = parquet.read(columns=names, use_threads=False) if names else None
        num_rows = raw.num_rows if raw is not None else parquet.metadata.num_rows
        if row_filter is not None and num_rows:
            mask = row_filter.mask(num_rows)
            raw = raw.filter(mask) if raw is not None else None
            num_rows = int(pc.sum(mask).as_py() or 0)
        arrays: list[pa.ChunkedArray | pa.Array] = []
        for struct_field in fields:
            if struct_field.name in self.partition_columns:
                value = self._partition_value(file, struct_field)
                arrays.append(partition_value_array(value, struct_field.type, num_rows))
            elif struct_field.name in wanted and raw is not None:
                column = raw.column(file_schema.field(wanted[struct_field.name]).name)
                arrays.append(conform_column(column, struct_field.type, self.column_mapping_mode))
            else:
                arrays.append(pa.nulls(num_rows, arrow_type(struct_field.type)))
        schema_fields = [arrow_field(f) for f in fields]
        for extra in extra_columns:
            if raw is not None and extra in extra_present:
                arrays.append(raw.column(extra.name).cast(extra.type))
            else:
                arrays.append(pa.nulls(num_rows, extra.type))
            schema_fields.append(extra)
        return pa.Table.from_arrays(arrays, schema=_nullable(schema_fields))

    def _partition_value(self, file: FileAction, struct_field: StructField) -> str | None:
        values = file.partition_values or {}
        if self.column_mapping_mode != "none":
            physical = struct_field.physical_name
            if physical in values:
                return values[physical]
        return values.get(struct_field.name)

    def _empty(self, fields: list[StructField], extra_columns: Sequence[pa.Field]) -> pa.Table:
        schema = _nullable([arrow_field(f) for f in fields] + list(extra_columns))
        return schema.empty_table()

    def read_files(
        self,
        files: Iterable[FileAction],
        columns: Sequence[str] | None = None,
        *,
        max_workers: int | None = None,
        ignore_missing: bool = False,
    ) -> pa.Table:
        """All rows of ``files`` (deletion vectors applied), concatenated in the given order.

        ``max_workers`` files are read at once (default: :attr:`concurrency`).
        """
        tables = map_concurrently(
            lambda file: self.read_file(file, columns, ignore_missing=ignore_missing),
            list(files),
            max_workers or self.concurrency,
        )
        if not tables:
            return self._empty(self.read_fields(columns), ())
        return pa.concat_tables(tables)


def _nullable(fields: list[pa.Field]) -> pa.Schema:
    """Result columns are nullable: a file may lack a column (added later), which reads as nulls."""
    return pa.schema([f.with_nullable(True) for f in fields])


def _open_parquet(uri: str, conf: Mapping[str, str]) -> pq.ParquetFile:
    fs, path = open_filesystem(uri, conf)
    if isinstance(fs, LocalFileSystem):
        return pq.ParquetFile(path, coerce_int96_timestamp_unit="us")
    return pq.ParquetFile(pa.BufferReader(fs.cat_file(path)), coerce_int96_timestamp_unit="us")


@functools.cache
def _shared_pool(size: int) -> ThreadPoolExecutor:
    """One process-wide pool per size (no thread start-up per call)."""
    return ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"delta-data-{size}")


def map_concurrently(function: Callable[[T], R], items: Sequence[T], max_workers: int) -> list[R]:
    """``[function(item) for item in items]`` on up to ``max_workers`` threads, order kept.

    Runs on a shared pool: ``function`` must not itself call :func:`map_concurrently`.
    """
    if len(items) <= 1 or max_workers <= 1:
        return [function(item) for item in items]
    return list(_shared_pool(max_workers).map(function, items))


# -- Arrow types -------------------------------------------------------------------------------
def arrow_field(struct_field: StructField) -> pa.Field:
    """The Arrow field of a schema field (logical name, no field-id metadata)."""
    return pa.field(struct_field.name, arrow_type(struct_field.type), struct_field.nullable)


# -- column mapping ----------------------------------------------------------------------------
_FIELD_ID_METADATA = b"PARQUET:field_id"


def _field_id(arrow_field: pa.Field) -> int | None:
    metadata = arrow_field.metadata or {}
    value = metadata.get(_FIELD_ID_METADATA)
    return int(value) if value is not None else None


def _match_field(container: pa.Schema | pa.StructType, struct_field: StructField, mode: str) -> int | None:
    """Index of the Arrow field storing ``struct_field`` in a file, or ``None`` if it is absent."""
    arrow_fields = list(container)
    if mode == "id" and struct_field.field_id is not None:
        for index, arrow_field in enumerate(arrow_fields):
            if _field_id(arrow_field) == struct_field.field_id:
                return index
    name = struct_field.physical_name if mode != "none" else struct_field.name
    for index, arrow_field in enumerate(arrow_fields):
        if arrow_field.name == name:
            return index
    return None


def conform_column(
    column: pa.ChunkedArray | pa.Array, data_type: DataType, mode: str = "none"
) -> pa.ChunkedArray | pa.Array:
    """``column`` as read from a file, renamed to logical names and cast to ``data_type``'s Arrow type."""
    target = arrow_type(data_type)
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        chunks = [_conform_array(chunk, data_type, mode) for chunk in column.chunks]
        return pa.chunked_array(chunks, type=target)
    return _conform_array(column, data_type, mode)


def _conform_array(array: pa.Array, data_type: DataType, mode: str) -> pa.Array:
    target = arrow_type(data_type)
    if array.type == target:
        return array
    mask = array.is_null() if array.null_count else None
    if isinstance(data_type, StructType) and pa.types.is_struct(array.type):
        children = []
        for struct_field in data_type.fields:
            index = _match_field(array.type, struct_field, mode)
            if index is None:
                children.append(pa.nulls(len(array), arrow_type(struct_field.type)))
            else:
                children.append(_conform_array(array.field(index), struct_field.type, mode))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if isinstance(data_type, ArrayType) and (
        pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    ):
        values = _conform_array(array.values, data_type.element_type, mode)
        offsets = array.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    if isinstance(data_type, MapType) and pa.types.is_map(array.type):
        keys = _conform_array(array.keys, data_type.key_type, mode)
        items = _conform_array(array.items, data_type.value_type, mode)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_timestamp(array.type) and pa.types.is_timestamp(target):
        return array.cast(target, safe=False)  # nanoseconds are truncated to microseconds, like Spark
    return array.cast(target)


# -- partition values --------------------------------------------------------------------------
def parse_partition_value(value: str | None, data_type: DataType) -> Any:
    """The Python value of a serialised partition value (``None`` stays null).

    Delta writes partition values as strings: numbers in decimal, booleans ``true``/``false``,
    dates ``yyyy-MM-dd``, timestamps ``yyyy-MM-dd HH:mm:ss[.ffffff]`` (UTC) or ISO-8601 with a
    zone, binary as the string's UTF-8 bytes. An empty string is null for every type but string.
    Raises :class:`ValueError` naming the value and the type when it cannot be parsed.
    """
    if value is None:
        return None
    if not isinstance(data_type, PrimitiveType):
        raise ValueError(f"partition columns must have a primitive type, not {data_type}")
    name = data_type.name
    if name == "string":
        return value
    if value == "":
        return None
    try:
        if name in ("long", "integer", "short", "byte"):
            return int(value)
        if name in ("float", "double"):
            return float(value)
        if name == "boolean":
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(value)
            return lowered == "true"
        if name == "date":
            return _dt.date.fromisoformat(value.strip()[:10])
        if name in ("timestamp", "timestamp_ntz"):
            return _parse_timestamp(value, zoned=name == "timestamp")
        if name == "binary":
            return value.encode("utf-8")
        if data_type.is_decimal:
            return Decimal(value)
    except ValueError:
        raise ValueError(f"Cannot parse partition value {value!r} as {name}") from None
    raise ValueError(f"unsupported partition column type {name}")


def _parse_timestamp(value: str, zoned: bool) -> _dt.datetime:
    parsed = _dt.datetime.fromisoformat(value.strip())
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(_dt.UTC)
        return parsed if zoned else parsed.replace(tzinfo=None)
    return parsed.replace(tzinfo=_dt.UTC) if zoned else parsed


def partition_value_array(value: str | None, data_type: DataType, length: int) -> pa.Array:
    """``length`` copies of a serialised partition value as an array of ``data_type``'s Arrow type."""
    target = arrow_type(data_type)
    parsed = parse_partition_value(value, data_type)
    if parsed is None:
        return pa.nulls(length, target)
    return pa.repeat(pa.scalar(parsed, type=target), length)


# -- entry points ------------------------------------------------------------------------------
def read_files(
    files: Iterable[FileAction],
    *,
    table_path: str,
    metadata: Metadata,
    protocol: Protocol | None = None,
    conf: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
    max_workers: int | None = None,
) -> pa.Table:
    """The rows of ``files`` with the table's logical schema (or ``columns`` of it).

    Partition values are filled in, column mapping is honoured and deletion vectors of
    ``add``/``remove`` actions are applied. Raises :class:`DataFileNotFoundError` for a missing
    file and :class:`UnsupportedTableFeatureError` for unreadable reader features.
    """
    reader = TableReader.for_metadata(table_path, metadata, protocol, conf)
    return reader.read_files(files, columns, max_workers=max_workers)


def read_snapshot(snapshot: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """All rows of a :class:`replay.snapshot.Snapshot` (or ``columns`` of them)."""
    return read_files(
        snapshot.files(),
        table_path=snapshot.table_path,
        metadata=snapshot.metadata,
        protocol=snapshot.protocol,
        conf=snapshot.delta_log.conf,
        columns=columns,
    )
