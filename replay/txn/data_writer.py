"""Writing data files the way Delta on Spark lays them out.

Hive-style partition directories (:mod:`replay.txn.partition_paths`), partition columns left out
of the data files, file names ``part-<task:05d>-<uuid>-c<nnn>.snappy.parquet`` (``nnn`` counts
the files a task rolled over to within one partition), log paths URL-encoded, and Delta's
statistics for each file (:mod:`replay.txn.statistics`). Under column mapping the files,
their statistics and their ``partitionValues`` use the physical names
(:mod:`replay.protocol.column_mapping`); files go to random prefix directories where Delta puts
them there (a partitioned table with column mapping, ``delta.randomizeFilePrefixes``).

A :class:`DataFileWriter` takes Arrow batches (what a Spark task receives, or slices of a Python
table), conforms them to the table's columns (:mod:`replay.txn.write_spec`), checks the write's
constraints (the table's, :mod:`replay.txn.constraint_checks`, then a ``replaceWhere``
predicate), splits them by partition and streams them into Parquet files of row groups of about
:data:`ROW_GROUP_ROWS` rows, at most ``max_records_per_file`` rows and about ``target_file_size``
bytes (a file closes once its row groups reach it). Nothing per row happens in Python. Files go through
:func:`logstores.open_filesystem` with the same storage settings as the log (local files are
written by pyarrow directly). Nothing here commits: :func:`delete_data_files` removes the files
of a write that will not be committed.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import random
import string
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from logstores import open_filesystem
from replay.data.dictionaries import (
    decode_dictionaries,
    dictionary_columns,
    has_dictionaries,
)
from replay.data.parquet_files import ARROW_SCHEMA_KEY
from replay.data.row_lineage import LINEAGE_COLUMNS
from replay.protocol.actions import AddFile
from replay.protocol.paths import resolve_path
from replay.txn.partition_paths import encode_log_path, partition_directory, partition_value_string
from replay.txn.statistics import StatisticsCollector
from replay.txn.write_spec import FileWriteSpec, check_replace_where, conform, to_stored_columns

logger = logging.getLogger(__name__)

ROW_GROUP_ROWS = 1024 * 1024
"""Rows per Parquet row group (batches are buffered up to this many rows or :data:`ROW_GROUP_BYTES`)."""
ROW_GROUP_BYTES = 128 * 1024 * 1024
DICTIONARY_PAGE_BYTES = 64 * 1024
"""Size of a column chunk's dictionary beyond which the writer falls back to plain encoding: columns
with few distinct values keep their dictionary, unique ones (ids, measurements) stop paying for one
early (pyarrow's default of 1 MiB dictionary-encodes 100 000 distinct longs, slower and larger)."""
PAGE_BYTES = 1024 * 1024
"""The size of a Parquet data page (pyarrow's default, and Spark's)."""
MIN_BATCH_ROWS = 1024
MAX_BATCH_ROWS = 64 * 1024
"""Bounds of the rows the Parquet writer encodes per step (:func:`write_batch_rows`)."""
SAMPLE_ROWS = 64 * 1024
"""Rows of a file's first rows whose bytes per row :func:`write_batch_rows` measures."""
MAX_OPEN_FILES = 64
"""Files one writer keeps open at once (one per partition); the least recently used closes first."""
PREFIX_CHARACTERS = string.ascii_letters + string.digits
"""The characters of a random directory prefix (:attr:`FileWriteSpec.prefix_length`)."""


# -- files --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileLayout:
    """Where a writer's files go under the table and how they are named.

    ``directory`` is a directory under the table root that holds the files (and their partition
    directories); ``name`` formats a file name from ``task`` (the Spark partition id), ``uuid`` and
    ``count`` (the files the task rolled over to within one partition).
    """

    directory: str = ""
    name: str = "part-{task:05d}-{uuid}-c{count:03d}.snappy.parquet"


DATA_FILES = FileLayout()
"""Data files: ``[<partition dirs>/]part-00000-<uuid>-c000.snappy.parquet``."""
CHANGE_DATA_FILES = FileLayout("_change_data", "cdc-{task:05d}-{uuid}.c{count:03d}.snappy.parquet")
"""Change data files, named as Delta names them:
``_change_data/[<partition dirs>/]cdc-00000-<uuid>.c000.snappy.parquet``."""


@dataclass(frozen=True)
class WrittenFile:
    """A data file this writer produced, ready to be committed."""

    add: AddFile
    num_rows: int


@dataclass(frozen=True)
class EncodedFile:
    """A data file encoded elsewhere: its bytes (``parts``, concatenated), its partition
    (``partition_values`` as an ``add`` action has them), its statistics and its row count."""

    parts: Sequence[bytes | memoryview]
    partition_values: Mapping[str, str | None]
    stats: str
    rows: int


class _OpenFile:
    """One Parquet file being written: buffered batches, the Parquet writer, running statistics."""

    def __init__(self, fs: AbstractFileSystem, root: str, relative: str, spec: FileWriteSpec) -> None:
        self.relative = relative
        self.target = f"{root}/{relative}"
        self._fs = fs
        self._schema = spec.stored_schema
        self._renamed = spec.renames_columns
        self._tags = dict(spec.file_tags) or None
        self._stats = StatisticsCollector(
            spec.stats_schema,
            spec.num_indexed_cols,
            spec.string_prefix_length,
            from_footer=True,
            stats_columns=spec.stored_stats_columns,
        )
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._bound_bytes = 0  # the distinct buffers the tables hold, whole (cheap: the memory they pin)
        self._measured = 0  # buffered tables whose own bytes are in _own_bytes
        self._own_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._handle: Any = None
        self._chunk_schema: pa.Schema | None = None
        self._flush_bytes = min(ROW_GROUP_BYTES, spec.target_file_size or ROW_GROUP_BYTES)
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        if self._renamed:
            table = to_stored_columns(table, self._schema)
        if self._chunk_schema is None:  # dictionary columns (or none) as the first rows have them
            self._chunk_schema = table.schema
        elif not table.schema.equals(self._chunk_schema):
            table = table.cast(self._chunk_schema)
        self._buffer.append(table)
        self._buffered_rows += table.num_rows
        self._bound_bytes += table.get_total_buffer_size()
        self.rows += table.num_rows
        if self._buffered_rows >= ROW_GROUP_ROWS or (
            self._bound_bytes >= self._flush_bytes and self.buffered_bytes >= self._flush_bytes
        ):
            self._flush()

    @property
    def written_bytes(self) -> int:
        """The bytes of the row groups written so far (the rows still buffered not counted)."""
        if self._writer is None:
            return 0
        return int(self._handle.tell()) if self._handle is not None else os.path.getsize(self.target)

    def _open(self, first: pa.Table) -> pq.ParquetWriter:
        """The Parquet writer of the file, whose first rows are ``first`` (they decide which
        columns are dictionary-encoded, :func:`~replay.data.dictionaries.dictionary_columns`, and
        the rows encoded per step, :func:`write_batch_rows`)."""
        parent = self.target.rsplit("/", 1)[0]
        if isinstance(self._fs, LocalFileSystem):
            os.makedirs(parent, exist_ok=True)
            where: Any = self.target
        else:
            self._fs.makedirs(parent, exist_ok=True)
            self._handle = where = self._fs.open(self.target, "wb")
        return open_parquet_writer(where, self._schema, first, self._chunk_schema)

    @property
    def buffered_bytes(self) -> int:
        """The buffered rows' own bytes (``nbytes``: a slice counts its share of its parent's
        buffers, not the whole of them), measured when asked for the tables added since. A flush
        looks at the cheap whole-buffer size first and measures only once that reaches the limit:
        slices of larger tables (Z-order's ranges) get there long before their own bytes do."""
        for table in self._buffer[self._measured :]:
            self._own_bytes += table.nbytes
        self._measured = len(self._buffer)
        return self._own_bytes

    def _flush(self) -> None:
        if not self._buffer:
            return
        chunk = pa.concat_tables(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer, self._buffered_rows = [], 0
        self._bound_bytes = self._measured = self._own_bytes = 0
        if self._writer is None:
            self._writer = self._open(chunk)
        self._writer.write_table(chunk, row_group_size=ROW_GROUP_ROWS)
        self._stats.add(chunk)

    def close(self, partition_values: dict[str, str | None], now: int) -> WrittenFile:
        self._flush()
        if self._writer is None:  # an empty file still has a schema
            self._writer = self._open(self._schema.empty_table())
        self._writer.close()
        if self._handle is not None:
            size = self._handle.tell()
            self._handle.close()
        else:
            size = os.path.getsize(self.target)
        add = AddFile(
            path=encode_log_path(self.relative),
            partition_values=partition_values,
            size=size,
            modification_time=now,
            data_change=True,
            stats=self._stats.to_json(self._writer.writer.metadata),
            tags=self._tags,
        )
        return WrittenFile(add, self.rows)

    def discard(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._handle is not None:
                self._handle.close()
        except Exception:  # the file is deleted anyway
            logger.debug("closing %s before deleting it failed", self.target, exc_info=True)


def open_parquet_writer(
    where: Any, schema: pa.Schema, first: pa.Table, chunks: pa.Schema | None = None
) -> pq.ParquetWriter:
    """A Parquet writer of a data file with ``schema`` whose first rows are ``first`` (they decide
    which columns are dictionary-encoded, :func:`~replay.data.dictionaries.dictionary_columns`,
    and the rows encoded per step, :func:`write_batch_rows`); ``chunks``: the schema of the rows
    written, when dictionary columns among them are written as they are."""
    options: dict[str, Any] = {
        "compression": "snappy",
        "write_statistics": True,
        "use_dictionary": dictionary_columns(first),
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES,
        "write_batch_size": write_batch_rows(first),
    }
    if chunks is None or not has_dictionaries(chunks):
        return pq.ParquetWriter(where, schema, **options)
    # Dictionary columns are written as they are (their Parquet type is their values'); the
    # file's Arrow schema says what it says for any other file: the plain types.
    written = pa.schema([f.with_type(chunks.field(f.name).type) for f in schema])
    writer = pq.ParquetWriter(where, written, store_schema=False, **options)
    writer.add_key_value_metadata(
        {ARROW_SCHEMA_KEY: base64.b64encode(schema.serialize().to_pybytes()).decode()}
    )
    return writer


def write_batch_rows(first: pa.Table) -> int:
    """The rows the Parquet writer encodes per step in a file whose first rows are ``first``: as
    many as fill about a data page (:data:`PAGE_BYTES`) of its widest column, within
    :data:`MIN_BATCH_ROWS` and :data:`MAX_BATCH_ROWS`.

    The writer checks a page's size, and updates its statistics, once per step; pyarrow's step of
    1024 rows makes those checks a tenth of the cost of encoding narrow columns. A page still
    closes within one step of reaching its size, so pages stay about :data:`PAGE_BYTES` (at most
    twice that); a dictionary is likewise checked against :data:`DICTIONARY_PAGE_BYTES` once per
    step, so one that outgrows it falls back to plain encoding at the end of that step.
    """
    if not first.num_rows:
        return MIN_BATCH_ROWS
    sample = first.slice(0, SAMPLE_ROWS)  # the bytes of a few rows, not of every chunk
    widest = max((column.nbytes for column in sample.columns), default=0) / sample.num_rows
    rows = int(PAGE_BYTES / widest) if widest else MAX_BATCH_ROWS
    return max(MIN_BATCH_ROWS, min(MAX_BATCH_ROWS, rows))


def _constant(column: pa.ChunkedArray, value: Any) -> bool:
    """Whether every value of ``column`` is ``value`` (nulls only when ``value`` is ``None``)."""
    if value is None:
        return column.null_count == len(column)
    if column.null_count:
        return False
    return bool(pc.all(pc.equal(column, pa.scalar(value, column.type))).as_py())


def _task_id() -> int:
    """The Spark task's partition id inside a Spark worker (which has pyspark imported), else 0.
    A plain Python write never imports pyspark (a quarter of a second)."""
    if "pyspark" not in sys.modules:
        return 0
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class DataFileWriter:
    """Writes a stream of Arrow batches as the data files of one commit (see the module docstring).

    Use :meth:`write` for each batch, then :meth:`close` for the files written; :meth:`discard`
    deletes everything written so far (call it when the write fails). ``layout`` places and names
    the files (:data:`DATA_FILES`, or :data:`CHANGE_DATA_FILES` for the change data files of a
    DML operation, whose spec's schema then carries the ``_change_type`` column).
    ``keep_dictionaries``: dictionary columns are written as dictionaries rather than decoded
    first (a copy-on-write rewrite, :mod:`replay.data.dictionaries`).
    """

    def __init__(
        self,
        spec: FileWriteSpec,
        task_id: int | None = None,
        *,
        layout: FileLayout = DATA_FILES,
        keep_dictionaries: bool = False,
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.keep_dictionaries = keep_dictionaries
        self.task_id = _task_id() if task_id is None else task_id
        self._fs, root = open_filesystem(spec.table_path, spec.conf)
        self._root = root.rstrip("/")
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self._rolls: dict[tuple[str | None, ...], int] = {}
        self._written: list[WrittenFile] = []
        self._started: list[str] = []
        self._types = {name: spec.schema.field(name).type for name in spec.partition_columns}
        self._constraints = spec.compile_constraints()

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Conform, check and write ``data`` (rows in any column order, names in any case)."""
        if data.num_rows == 0:
            return
        table = conform(data, self.spec, self._constraints, keep_dictionaries=self.keep_dictionaries)
        if self.spec.replace_where is not None:
            check_replace_where(decode_dictionaries(table), self.spec.replace_where)
        for key, part in self._split(table):
            self._append(key, part)

    def _split(self, table: pa.Table) -> Iterator[tuple[tuple[str | None, ...], pa.Table]]:
        columns = list(self.spec.partition_columns)
        if not columns:
            yield (), table
            return
        data = self._file_rows(table, columns)
        keys = table.select(columns)
        first = keys.slice(0, 1).to_pylist()[0]
        if all(_constant(keys.column(c), first[c]) for c in columns):
            yield self._key(first), data  # the usual case: a batch holds one partition
            return
        indexed = keys.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
        groups = indexed.group_by(columns, use_threads=False).aggregate([("__row", "list")])
        for group in groups.to_pylist():
            yield self._key(group), data.take(pa.array(group["__row_list"], pa.int64()))

    def _file_rows(self, table: pa.Table, columns: list[str]) -> pa.Table:
        """The columns of ``table`` a data file stores, in the order of the spec's stored schema:
        the data columns, the partition columns if files hold them, the row lineage columns."""
        if not self.spec.partitions_in_files:
            return table.drop_columns(columns)
        kept = [name for name in table.column_names if name not in columns]
        lineage = [name for name in kept if name in LINEAGE_COLUMNS]
        return table.select([*(name for name in kept if name not in lineage), *columns, *lineage])

    def _key(self, values: Mapping[str, Any]) -> tuple[str | None, ...]:
        return tuple(partition_value_string(values[c], self._types[c]) for c in self.spec.partition_columns)

    def _append(self, key: tuple[str | None, ...], table: pa.Table) -> None:
        limit, size = self.spec.max_records_per_file, self.spec.target_file_size
        piece = table.num_rows
        if size is not None:  # pieces of at most a row group, so that a file closes near its size
            piece = max(1, min(ROW_GROUP_BYTES, size) * table.num_rows // max(1, table.nbytes))
        while table.num_rows:
            current = self._open.pop(key, None) or self._new_file(key)
            self._open[key] = current  # most recently used last
            room = min(piece, table.num_rows if limit is None else limit - current.rows)
            current.add(table.slice(0, room))
            table = table.slice(room)
            full = limit is not None and current.rows >= limit
            if full or (size is not None and current.written_bytes >= size):
                self._finish(key)
        while len(self._open) > MAX_OPEN_FILES:
            self._finish(next(iter(self._open)))

    def _relative_path(self, key: tuple[str | None, ...]) -> str:
        """The path under the table of the next file of partition ``key``."""
        count = self._rolls.get(key, 0)
        self._rolls[key] = count + 1
        name = self.layout.name.format(task=self.task_id, uuid=uuid.uuid4(), count=count)
        if self.spec.prefix_length:  # Delta's random prefixes rather than partition directories
            directory = "".join(random.choices(PREFIX_CHARACTERS, k=self.spec.prefix_length))
        else:
            values = dict(zip(self.spec.partition_columns, key, strict=True))
            directory = partition_directory(list(self.spec.partition_columns), values)
        return "/".join(part for part in (self.layout.directory, directory, name) if part)

    def _new_file(self, key: tuple[str | None, ...]) -> _OpenFile:
        opened = _OpenFile(self._fs, self._root, self._relative_path(key), self.spec)
        self._started.append(opened.target)
        return opened

    def write_encoded(self, encoded: EncodedFile) -> WrittenFile:
        """Store a data file already encoded, named and tracked as every file of this writer."""
        parts = encoded.parts
        lowered = {name.lower(): value for name, value in encoded.partition_values.items()}
        key = tuple(lowered.get(column.lower()) for column in self.spec.partition_keys)
        relative = self._relative_path(key)
        target = f"{self._root}/{relative}"
        self._started.append(target)
        parent = target.rsplit("/", 1)[0]
        if isinstance(self._fs, LocalFileSystem):
            os.makedirs(parent, exist_ok=True)
            with open(target, "wb") as handle:
                handle.writelines(parts)
        else:  # streamed, as the files of write(): an object store uploads it in parts
            self._fs.makedirs(parent, exist_ok=True)
            with self._fs.open(target, "wb") as stream:
                for part in parts:
                    stream.write(part)
        add = AddFile(
            path=encode_log_path(relative),
            partition_values=dict(zip(self.spec.partition_keys, key, strict=True)),
            size=sum(len(part) for part in parts),
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=encoded.stats,
            tags=dict(self.spec.file_tags) or None,
        )
        written = WrittenFile(add, encoded.rows)
        self._written.append(written)
        return written

    def _finish(self, key: tuple[str | None, ...]) -> None:
        opened = self._open.pop(key)
        values = dict(zip(self.spec.partition_keys, key, strict=True))
        self._written.append(opened.close(values, int(time.time() * 1000)))

    @property
    def buffered_bytes(self) -> int:
        """Bytes of rows the open files buffer before encoding them (up to a row group each)."""
        return sum(opened.buffered_bytes for opened in self._open.values())

    def flush(self) -> None:
        """Encode the rows buffered in the open files now, as smaller row groups: lets a caller
        with many writers open at once bound their memory."""
        for opened in self._open.values():
            opened._flush()

    def close(self) -> list[WrittenFile]:
        """Finish every open file; the files written, in the order they were finished."""
        for key in list(self._open):
            self._finish(key)
        logger.debug("wrote %d data files under %s", len(self._written), self.spec.table_path)
        return self._written

    def discard(self) -> None:
        """Close and delete every file this writer started."""
        for opened in self._open.values():
            opened.discard()
        self._open.clear()
        _remove_files(self._fs, self._started)
        self._started, self._written = [], []


def write_batches(spec: FileWriteSpec, batches: Iterable[pa.RecordBatch | pa.Table]) -> list[WrittenFile]:
    """Write ``batches`` as data files; on any error delete them and re-raise."""
    writer = DataFileWriter(spec)
    try:
        for batch in batches:
            writer.write(batch)
        return writer.close()
    except BaseException:
        writer.discard()
        raise


def _remove_files(fs: AbstractFileSystem, paths: Sequence[str]) -> None:
    if not paths:
        return
    try:
        fs.rm(list(paths))
    except FileNotFoundError:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                fs.rm(path)
    except OSError as exc:  # the caller is already failing: report, do not mask its error
        logger.warning("could not delete %d data files (%s)", len(paths), exc)


def delete_data_files(table_path: str, paths: Iterable[str], conf: Mapping[str, str] | None = None) -> None:
    """Delete data files named as in the log (``AddFile.path``) under ``table_path``; missing ones
    are ignored. For the files of a write that will not be committed."""
    uris = [resolve_path(table_path, path) for path in paths]
    if not uris:
        return
    fs, _ = open_filesystem(table_path, conf)
    _remove_files(fs, [open_filesystem(uri, conf)[1] for uri in uris])
