"""Reading change rows: the rows of one file read of the change data feed, with the CDC columns.

A :class:`~replay.cdc.change_actions.ChangeRead` names a file, the rows of it that changed (through
deletion vectors) and the change type, version and commit time to stamp on them;
:func:`read_change` reads one, :func:`read_changes` many (whole files scanned together, the others
concurrently), sharing their constant CDC columns (:class:`ConstantColumns`).
:func:`change_read_batches` splits many reads into runs, each with the deletion vectors its reads
need, read with one request per DV file, for :func:`read_change` to use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from replay.cdc.change_actions import CDC_COLUMNS, ChangeRead
from replay.data.deletion_vector_reads import (
    RowFilter,
    dv_batches,
    file_deletion_vectors,
    read_deletion_vectors,
)
from replay.data.deletion_vectors import DeletionVectorDescriptorLike, dv_location
from replay.data.partition_values import constant_array
from replay.data.reader import TableReader
from replay.log.concurrency import Work, gc_paused, map_concurrently


def change_schema(reader: TableReader, columns: Sequence[str] | None = None) -> pa.Schema:
    """The schema of change rows: the table's (or ``columns``) plus the three CDC columns."""
    base = reader.arrow_schema(columns)
    return pa.schema([f.with_nullable(True) for f in base] + list(CDC_COLUMNS))


class ConstantColumns:
    """Constant columns shared by the files of one change read (thread-safe).

    A column of ``rows`` copies of a value is a slice of the longest one built for that value
    so far: the reads of one commit share their ``_commit_version`` and ``_commit_timestamp``
    columns, and every inferred insert or delete its ``_change_type``, instead of each file
    writing (and faulting in) its own copy.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple[Any, pa.DataType], pa.Array] = {}
        self._lock = threading.Lock()

    def column(self, value: Any, data_type: pa.DataType, rows: int) -> pa.Array:
        """``rows`` copies of ``value`` as an array of ``data_type``."""
        key = (value, data_type)
        with self._lock:
            array = self._arrays.get(key)
        if array is None or len(array) < rows:
            array = constant_array(value, data_type, rows)
            with self._lock:
                known = self._arrays.get(key)
                if known is None or len(known) < rows:
                    self._arrays[key] = array
        return array if len(array) == rows else array.slice(0, rows)


def read_change(
    reader: TableReader,
    read: ChangeRead,
    columns: Sequence[str] | None = None,
    *,
    ignore_missing: bool = False,
    constants: ConstantColumns | None = None,
    known: Mapping[str, np.ndarray] | None = None,
) -> pa.Table:
    """The change rows of one :class:`ChangeRead` (``constants``: see :func:`with_change_columns`;
    ``known``: deletion vectors already read, by :func:`~replay.data.deletion_vector_reads.dv_key`)."""

    row_filter: RowFilter | bool | None
    if read.keep_dv is None:  # the file's rows as its own deletion vector leaves them
        row_filter = True if known is None else reader.deletion_filter(read.file, known)
    else:
        keep = reader.deletion_vector_rows(read.keep_dv, known)
        source = dv_location(read.keep_dv, reader.table_path)
        if read.minus_dv is not None:
            minus = reader.deletion_vector_rows(read.minus_dv, known)
            keep = np.setdiff1d(keep, minus, assume_unique=True)
            source += f" (without the rows of {dv_location(read.minus_dv, reader.table_path)})"
        row_filter = RowFilter(keep, keep=True, source=source)
    table = reader.read_file(
        read.file,
        columns,
        row_filter=row_filter,
        extra_columns=CDC_COLUMNS[:1],
        ignore_missing=ignore_missing,
    )
    return with_change_columns(table, read, constants)


def with_change_columns(
    table: pa.Table, read: ChangeRead, constants: ConstantColumns | None = None
) -> pa.Table:
    """The rows of ``read``'s file, read with their ``_change_type`` column, with all CDC columns.

    ``cdc`` files keep the change type they store; other reads get ``read.change_type``. The
    constant columns come from ``constants`` when given (shared with other reads), else are new.
    """
    column = constants.column if constants is not None else constant_array
    rows = table.num_rows
    change_type, commit_version, commit_timestamp = CDC_COLUMNS
    if read.change_type is not None:
        stamped = column(read.change_type, change_type.type, rows)
        table = table.set_column(table.schema.get_field_index(change_type.name), change_type, stamped)
    table = table.append_column(commit_version, column(read.version, commit_version.type, rows))
    timestamp_us = read.timestamp_ms * 1000
    return table.append_column(commit_timestamp, column(timestamp_us, commit_timestamp.type, rows))


def read_changes(
    reader: TableReader,
    reads: Sequence[ChangeRead],
    columns: Sequence[str] | None = None,
    *,
    max_workers: int | None = None,
    ignore_missing: bool = False,
) -> pa.Table:
    """All change rows of ``reads``, concatenated in order.

    Reads of whole files (no deletion vector) go through :meth:`TableReader.read_unfiltered`,
    which scans local files together; the others are read file by file, concurrently. The reads
    share their constant CDC columns (:class:`ConstantColumns`).
    """
    schema = change_schema(reader, columns)
    reads = list(reads)
    workers = max_workers or reader.concurrency
    constants = ConstantColumns()
    tables: dict[int, pa.Table] = {}
    whole = [i for i, read in enumerate(reads) if not _deletion_vectors(read)]
    with gc_paused():  # the reads allocate no reference cycles; a collection would only scan the heap
        found = reader.read_unfiltered(
            [reads[i].file for i in whole],
            columns,
            extra_columns=CDC_COLUMNS[:1],
            ignore_missing=ignore_missing,
            max_workers=workers,
            finish=lambda position, table: with_change_columns(table, reads[whole[position]], constants),
        )
        tables.update(zip(whole, found, strict=True))
        rest = [i for i in range(len(reads)) if i not in tables]
        known = change_deletion_vectors(reader, [reads[i] for i in rest], workers)
        found = map_concurrently(
            lambda i: read_change(
                reader, reads[i], columns, ignore_missing=ignore_missing, constants=constants, known=known
            ),
            rest,
            Work.DATA,
            workers,
        )
        tables.update(zip(rest, found, strict=True))
    if not tables:
        return schema.empty_table()
    ordered = (tables[i] for i in range(len(reads)))
    return pa.concat_tables([table if table.schema == schema else table.cast(schema) for table in ordered])


def change_deletion_vectors(
    reader: TableReader, reads: Sequence[ChangeRead], max_workers: int | None = None
) -> dict[str, np.ndarray]:
    """The deletion vectors :func:`read_change` reads for ``reads`` (the ones naming a read's rows,
    else its file's own), read with one request per DV file, by
    :func:`~replay.data.deletion_vector_reads.dv_key`: pass them as its ``known``."""
    wanted = [dv for read in reads for dv in _deletion_vectors(read)]
    if not wanted:
        return {}
    return read_deletion_vectors(wanted, reader.table_path, reader.conf, max_workers or reader.concurrency)


def change_read_batches(
    reader: TableReader, reads: Sequence[ChangeRead], max_workers: int | None = None
) -> Iterator[tuple[Sequence[ChangeRead], dict[str, np.ndarray]]]:
    """``reads`` in consecutive runs (:func:`~replay.data.deletion_vector_reads.dv_batches`:
    their DVs bounded in size), each with the DVs of its reads (:func:`change_deletion_vectors`)."""
    for batch in dv_batches(reads, _deletion_vectors):
        yield batch, change_deletion_vectors(reader, batch, max_workers)


def _deletion_vectors(read: ChangeRead) -> list[DeletionVectorDescriptorLike]:
    """The DVs :func:`read_change` reads for ``read``: the ones naming its rows, else its file's."""
    if read.keep_dv is not None:
        return [dv for dv in (read.keep_dv, read.minus_dv) if dv is not None]
    return file_deletion_vectors(read.file)
