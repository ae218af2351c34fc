"""Rewriting one bin of files: the executor side of OPTIMIZE, one bin per call.

A :class:`BinRewriter` holds everything a rewrite needs (a :class:`~replay.data.reader.TableReader`
and a :class:`~replay.txn.write_spec.FileWriteSpec`), is picklable, and turns one
:class:`~replay.maintenance.optimize_plan.Bin` into a :class:`RewrittenBin`: the new files'
``add`` actions and the old files' ``remove`` actions, all with ``dataChange=false``. It never
commits; the caller commits rewritten bins together (:mod:`replay.maintenance.optimize`), so a
Spark front end can run :meth:`BinRewriter.rewrite` in tasks and commit on the driver.

A compaction bin becomes one file. Its rows are streamed: the files are read in insertion order,
:data:`READ_AHEAD` of them ahead on the data pool (or one after the other in the bin's own
thread, which is what a local run with a bin for every thread does), deletion vectors applied,
and handed to the Parquet writer about :data:`BATCH_ROWS` rows at a time, as one contiguous table
(the writer and the statistics pay per chunk, and small files make many); the writer buffers at
most one row group. A bin whose rows are all deleted writes no file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from logstores import open_filesystem
from replay.data.columns import arrow_field
from replay.data.partition_values import partition_value_array
from replay.data.reader import TableReader
from replay.data.row_lineage import ROW_COMMIT_VERSION, ROW_ID, read_with_lineage, with_lineage
from replay.log.concurrency import Work, executor, prefetch
from replay.log.table_io import TableIO
from replay.maintenance.optimize_plan import Bin, describe_partition
from replay.protocol.actions import AddFile, RemoveFile
from replay.protocol.column_mapping import partition_value
from replay.protocol.paths import resolve_path
from replay.protocol.table_config import check_protocol_writable
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import DataFileWriter, WrittenFile, delete_data_files
from replay.txn.write_spec import FileWriteSpec

logger = logging.getLogger(__name__)

READ_AHEAD = 16
"""Files read ahead of the one being written (in groups of four per task of the data pool)."""
BATCH_ROWS = 128 * 1024
"""Rows of consecutive files handed to the writer together."""
WHOLE_READ_BYTES = 8 * 1024 * 1024
"""Local files up to this size are read whole, with one call, and parsed from memory (a small
file's footer and column chunks otherwise take a read each)."""


@dataclass(frozen=True)
class RewrittenBin:
    """What rewriting a bin produced: new files to add, old files to remove (not committed)."""

    bin: Bin
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]
    num_rows: int

    @property
    def written_paths(self) -> list[str]:
        return [add.path for add in self.adds]


def check_rewritable(snapshot: Snapshot) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if this library cannot rewrite the table's files.

    It must read the table and commit to its protocol.
    """
    snapshot.config.check_readable()
    check_protocol_writable(snapshot.protocol, snapshot.table_path)


def write_spec(snapshot: Snapshot, conf: dict[str, str] | None = None) -> FileWriteSpec:
    """The spec of files rewritten in ``snapshot``'s table: its schema, partitioning, statistics,
    and the columns that keep rows' row ids where the table has row tracking enabled."""
    spec = FileWriteSpec.of_table(
        snapshot.table_path, snapshot.config, snapshot.io.conf if conf is None else conf
    )
    return replace(spec, row_tracking=snapshot.config.materialized_row_tracking_columns)


def table_reader(snapshot: Snapshot) -> TableReader:
    return TableReader.for_metadata(
        snapshot.table_path, snapshot.metadata, snapshot.protocol, snapshot.io.conf
    )


class _FileReads:
    """Reads the data columns of the files of a rewrite, one file at a time.

    A local file without a deletion vector whose Parquet schema holds the requested data columns
    under their own names and the table's exact Arrow types (the files this library, Spark and
    delta-rs write for a table without column mapping) is opened once (read with one call when
    it is small, :data:`WHOLE_READ_BYTES`) and its columns taken as they are. Every other file,
    and any file that fails to read this way, goes through :meth:`TableReader.read_file`
    (deletion vectors, column mapping, missing columns, type changes, Delta's errors naming the
    file). Partition columns are left to the caller. With ``lineage`` (the names a table with row
    tracking stores row ids under) each file's rows come with their row ids and row commit
    versions (:func:`~replay.data.row_lineage.read_with_lineage`).
    """

    def __init__(
        self, reader: TableReader, columns: Sequence[str] | None, lineage: tuple[str, str] | None = None
    ) -> None:
        self.reader = reader
        self.lineage = lineage
        fields = reader.read_fields(columns)
        self.schema = pa.schema([arrow_field(f).with_nullable(True) for f in fields])
        self.partition_fields = [f for f in fields if f.name in reader.partition_columns]
        self.data = [f for f in self.schema if f.name not in reader.partition_columns]
        self.data_names = [f.name for f in self.data]
        self.data_schema = pa.schema(self.data)
        self.data_types = self.data_schema.types
        fs, root = open_filesystem(reader.table_path, reader.conf)
        plain = reader.column_mapping_mode == "none" and isinstance(fs, LocalFileSystem)
        self.local_root: str | None = str(root).rstrip("/") if plain else None

    def read(self, file: AddFile) -> pa.Table:
        if self.lineage is not None:
            return read_with_lineage(self.reader, file, self.data_names, self.lineage)
        path = self._local_path(file)
        if path is not None:
            try:
                table = self._read_plain(path, file.size)
            except (pa.ArrowException, OSError):
                table = None  # read_file names the file in its error, or reads it its own way
            if table is not None:
                return table
        return self.reader.read_file(file, self.data_names)

    def _local_path(self, file: AddFile) -> str | None:
        if self.local_root is None or file.deletion_vector is not None or not self.data:
            return None
        path = resolve_path(self.local_root, file.path)
        return path if path.startswith("/") else None  # an absolute URI elsewhere: the reader's way

    def _read_plain(self, path: str, size: int) -> pa.Table | None:
        if 0 < size <= WHOLE_READ_BYTES:
            with open(path, "rb") as handle:
                source: pa.NativeFile = pa.BufferReader(handle.read())
        else:
            source = pa.OSFile(path)
        with source:
            # the reader ParquetFile wraps, without the wrapper's index of nested column paths
            # (built in Python, holding the GIL, for each of the thousands of small files a
            # compaction opens) that reading every column needs no index of
            parquet = pq.ParquetReader()
            parquet.open(source, pre_buffer=False)
            raw = parquet.read_all(use_threads=False)
        if raw.schema.equals(self.data_schema):  # names, types and nullability; metadata aside
            return raw
        if raw.schema.names != self.data_names:
            if not set(self.data_names) <= set(raw.schema.names):
                return None  # a column missing or renamed: the reader's way
            raw = raw.select(self.data_names)
        if raw.schema.types != self.data_types:
            return None  # a column of another type: the reader's way
        return pa.Table.from_arrays(raw.columns, schema=self.data_schema)

    def with_partition_columns(self, data: pa.Table, values: Mapping[str, str | None]) -> pa.Table:
        """``data`` (rows of files with partition ``values``) with the requested columns, in order."""
        columns = {name: data.column(name) for name in self.data_names}
        mapped = self.reader.column_mapping_mode != "none"
        for partition in self.partition_fields:
            value = partition_value(values, partition, mapped)
            columns[partition.name] = partition_value_array(value, partition.type, data.num_rows)
        rows = pa.Table.from_arrays([columns[f.name] for f in self.schema], schema=self.schema)
        if self.lineage is None:
            return rows
        return with_lineage(rows, data.column(ROW_ID), data.column(ROW_COMMIT_VERSION))


def read_in_order(
    reader: TableReader,
    files: Sequence[AddFile],
    columns: Sequence[str] | None = None,
    *,
    read_ahead: int = READ_AHEAD,
    batch_rows: int = BATCH_ROWS,
    lineage: tuple[str, str] | None = None,
) -> Iterator[pa.Table]:
    """The rows of ``files`` (deletion vectors applied; ``columns`` or all), in order, as tables of
    about ``batch_rows`` rows (consecutive files of one partition together), with at most
    ``read_ahead`` files read ahead on the data pool (none: read here, one after the other).
    ``lineage``: the rows carry their row ids too (:class:`_FileReads`)."""
    reads = _FileReads(reader, columns, lineage)
    pool = executor(Work.DATA, reader.concurrency) if read_ahead > 0 else None
    pending: list[pa.Table] = []
    values: Mapping[str, str | None] = {}
    count = 0
    pairs = prefetch(pool, lambda file: (file, reads.read(file)), list(files), read_ahead, batch=4)
    for file, table in pairs:
        partition = file.partition_values or {}
        if pending and (count >= batch_rows or partition != values):
            yield reads.with_partition_columns(_contiguous(pending), values)
            pending, count = [], 0
        values = partition
        if table.num_rows:
            pending.append(table)
            count += table.num_rows
    if pending:
        yield reads.with_partition_columns(_contiguous(pending), values)


def _contiguous(tables: list[pa.Table]) -> pa.Table:
    """``tables`` as one table, each column in one chunk where its values fit in one."""
    table = pa.concat_tables(tables)
    if all(column.num_chunks <= 1 for column in table.columns):
        return table
    try:
        return table.combine_chunks()
    except pa.ArrowInvalid:  # strings or lists past the 2 GiB offsets of one chunk: left as they are
        return table


def removes_of(files: Sequence[AddFile], deletion_timestamp: int) -> tuple[RemoveFile, ...]:
    """The tombstones of rewritten files (``dataChange=false``, Delta's extended metadata kept)."""
    return tuple(file.remove_with_timestamp(deletion_timestamp, data_change=False) for file in files)


def rearranged(written: Sequence[WrittenFile]) -> tuple[AddFile, ...]:
    """The adds of files that hold the same rows as before (``dataChange=false``)."""
    return tuple(replace(w.add, data_change=False) for w in written)


@dataclass(frozen=True)
class BinRewriter:
    """Rewrites bins of one table version into files of its layout (picklable; see the module
    docstring). ``deletion_timestamp`` is the time every ``remove`` of the run carries."""

    reader: TableReader
    spec: FileWriteSpec
    deletion_timestamp: int
    read_ahead: int = READ_AHEAD

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot, deletion_timestamp: int | None = None) -> BinRewriter:
        return cls(
            table_reader(snapshot),
            write_spec(snapshot),
            int(time.time() * 1000) if deletion_timestamp is None else deletion_timestamp,
        )

    def with_read_ahead(self, files: int) -> BinRewriter:
        """This rewriter reading ``files`` files ahead (0: each file when it is needed)."""
        return replace(self, read_ahead=files)

    def rewrite(self, work: Bin) -> RewrittenBin:
        """Rewrite ``work`` as one file (none if every row is deleted); on failure the files
        written so far are deleted and the error propagates."""
        writer: DataFileWriter | None = None
        rows = 0
        try:
            reads = read_in_order(
                self.reader, work.files, read_ahead=self.read_ahead, lineage=self.spec.row_tracking
            )
            for table in reads:
                if writer is None:
                    writer = DataFileWriter(self.spec)
                rows += table.num_rows
                writer.write(table)
            written = writer.close() if writer is not None else []
        except BaseException:
            if writer is not None:
                writer.discard()
            raise
        logger.debug(
            "rewrote %d files (%d rows) of partition %s of %s into %d",
            len(work.files),
            rows,
            describe_partition(work.partition_values),
            self.spec.table_path,
            len(written),
        )
        return RewrittenBin(work, rearranged(written), removes_of(work.files, self.deletion_timestamp), rows)


def discard_rewritten(io: TableIO, rewritten: Sequence[RewrittenBin]) -> None:
    """Delete the files of bins that will not be committed."""
    paths = [path for each in rewritten for path in each.written_paths]
    if paths:
        delete_data_files(io.table_path, paths, io.conf)
