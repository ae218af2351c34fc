"""Rewriting one bin of files: the executor side of OPTIMIZE, one bin per call.

A :class:`BinRewriter` holds everything a rewrite needs (a :class:`~replay.data.reader.TableReader`
and a :class:`~replay.txn.data_writer.FileWriteSpec`), is picklable, and turns one
:class:`~replay.maintenance.optimize_plan.Bin` into a :class:`RewrittenBin`: the new files'
``add`` actions and the old files' ``remove`` actions, all with ``dataChange=false``. It never
commits; the caller commits rewritten bins together (:mod:`replay.maintenance.optimize`), so a
Spark front end can run :meth:`BinRewriter.rewrite` in tasks and commit on the driver.

A compaction bin becomes one file. Its rows are streamed: the files are read in insertion order,
a few at a time (:data:`CHUNK_BYTES` of input per read, :attr:`BinRewriter.read_ahead` reads in
flight), deletion vectors applied, and each chunk goes to the Parquet writer, which buffers at
most one row group. A bin whose rows are all deleted writes no file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from replay.data.reader import TableReader
from replay.log.concurrency import Work, executor, prefetch
from replay.log.table_io import TableIO
from replay.maintenance.optimize_plan import Bin, describe_partition
from replay.protocol.actions import AddFile, RemoveFile
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.table_config import check_protocol_writable
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import DataFileWriter, FileWriteSpec, WrittenFile, delete_data_files

logger = logging.getLogger(__name__)

CHUNK_BYTES = 32 * 1024 * 1024
"""Input bytes (as the log sizes them) read together; small files are read as one Arrow scan."""


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

    It must read the table and commit to its protocol; column mapping is refused because the
    writer names the columns of data files by their logical names.
    """
    snapshot.config.check_readable()
    check_protocol_writable(snapshot.protocol, snapshot.table_path)
    if snapshot.config.column_mapping_mode != "none":
        raise UnsupportedTableFeatureError(
            f"Cannot rewrite the files of table {snapshot.io.shown_path}: it uses column mapping "
            f"(delta.columnMapping.mode={snapshot.config.column_mapping_mode}), which this writer "
            "does not write",
            table=snapshot.table_path,
            features=["columnMapping"],
        )


def write_spec(snapshot: Snapshot, conf: dict[str, str] | None = None) -> FileWriteSpec:
    """The spec of files rewritten in ``snapshot``'s table: its schema, partitioning, statistics."""
    config = snapshot.config
    return FileWriteSpec(
        table_path=snapshot.table_path,
        schema=snapshot.schema.to_arrow(),
        partition_columns=tuple(snapshot.partition_columns),
        conf=dict(snapshot.io.conf if conf is None else conf),
        num_indexed_cols=config.num_indexed_cols,
        string_prefix_length=config.string_prefix_length,
    )


def table_reader(snapshot: Snapshot) -> TableReader:
    return TableReader.for_metadata(
        snapshot.table_path, snapshot.metadata, snapshot.protocol, snapshot.io.conf
    )


def chunks(files: Sequence[AddFile], chunk_bytes: int = CHUNK_BYTES) -> list[list[AddFile]]:
    """``files`` in order, cut into runs of about ``chunk_bytes`` (a file larger alone)."""
    runs: list[list[AddFile]] = []
    current: list[AddFile] = []
    size = 0
    for file in files:
        if current and size + file.size > chunk_bytes:
            runs.append(current)
            current, size = [], 0
        current.append(file)
        size += file.size
    if current:
        runs.append(current)
    return runs


def read_in_chunks(
    reader: TableReader,
    files: Sequence[AddFile],
    columns: Sequence[str] | None = None,
    *,
    read_ahead: int = 2,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[pa.Table]:
    """The rows of ``files`` (deletion vectors applied), a chunk of files at a time, in order,
    with at most ``read_ahead`` chunks read ahead."""
    pool = executor(Work.DATA, reader.concurrency) if read_ahead > 0 else None
    yield from prefetch(
        pool, lambda run: reader.read_files(run, columns), chunks(files, chunk_bytes), max(read_ahead, 1)
    )


DICTIONARY_SAMPLE_ROWS = 10_000
DICTIONARY_MAX_DISTINCT = 0.5


def dictionary_columns(table: pa.Table, partition_columns: Sequence[str] = ()) -> tuple[str, ...] | None:
    """The data columns worth dictionary-encoding, judged on the first rows of ``table``: those whose
    values repeat (at most half distinct), never floating-point ones. Deciding up front spares the
    Parquet writer building dictionaries it then abandons (pyarrow's default tries every column),
    which costs time and makes files larger. ``None`` (pyarrow's default) for nested columns."""
    head = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for name in head.column_names:
        if name in partition_columns:
            continue
        column = head.column(name)
        if pa.types.is_nested(column.type):
            return None
        if pa.types.is_floating(column.type):
            continue
        if len(column) == 0 or pc.count_distinct(column).as_py() <= DICTIONARY_MAX_DISTINCT * len(column):
            chosen.append(name)
    return tuple(chosen)


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
    read_ahead: int = 2
    chunk_bytes: int = CHUNK_BYTES

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot, deletion_timestamp: int | None = None) -> BinRewriter:
        return cls(
            table_reader(snapshot),
            write_spec(snapshot),
            int(time.time() * 1000) if deletion_timestamp is None else deletion_timestamp,
        )

    def rewrite(self, work: Bin) -> RewrittenBin:
        """Rewrite ``work`` as one file (none if every row is deleted); on failure the files
        written so far are deleted and the error propagates."""
        writer: DataFileWriter | None = None
        rows = 0
        try:
            for table in read_in_chunks(
                self.reader, work.files, read_ahead=self.read_ahead, chunk_bytes=self.chunk_bytes
            ):
                if table.num_rows == 0:
                    continue
                if writer is None:
                    encoded = dictionary_columns(table, self.spec.partition_columns)
                    writer = DataFileWriter(replace(self.spec, dictionary_columns=encoded))
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
