"""Reading one target file of a row-level change: its live rows and their physical row indexes.

A DML operation reads a target file twice at most: first the columns that decide which rows
change (a DELETE's predicate, a MERGE's join keys and clause conditions), then, only if some
row changes and only for the rows that need them, the other columns. Rows the file's deletion
vector already deletes are left out; every row keeps its physical index in the file, which is
what a new deletion vector records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from replay.data.reader import TableReader
from replay.protocol.actions import AddFile


@dataclass(frozen=True)
class TargetRows:
    """The live rows of one target file: ``rows`` (the columns read), ``row_index`` (the physical
    index of each row in the file; ``None`` when every row of the file is live, each row's index
    its position), ``num_records`` (the file's physical row count), ``data`` (the file's
    bytes when they were fetched whole: later reads decode them instead of reading again) and
    ``deleted`` (the rows the file's deletion vector deletes; ``None`` without one)."""

    file: AddFile
    rows: pa.Table
    row_index: np.ndarray | None
    num_records: int
    data: bytes | None = None
    deleted: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def physical(self, positions: np.ndarray) -> np.ndarray:
        """The physical indexes of the rows at ``positions`` (indexes into :attr:`rows`)."""
        return positions if self.row_index is None else self.row_index[positions]


def _readable(reader: TableReader, columns: Sequence[str]) -> list[str]:
    """``columns`` in schema spelling, never empty: a read of no column would have no rows, so the
    first partition column (free: it comes from the file's partition values) or else the first
    column is read."""
    names = {field.name.lower(): field.name for field in reader.schema.fields}
    wanted = list(dict.fromkeys(names[c.lower()] for c in columns if c.lower() in names))
    if wanted:
        return wanted
    return [reader.partition_columns[0] if reader.partition_columns else reader.schema.fields[0].name]


def read_target_rows(
    reader: TableReader,
    file: AddFile,
    columns: Sequence[str],
    data: bytes | None = None,
    known: Mapping[str, np.ndarray] | None = None,
) -> TargetRows:
    """The live rows of ``file`` with ``columns`` (at least one column is read); ``data``: the
    file's bytes, already fetched; ``known``: deletion vectors already read (by ``dv_key``)."""
    raw = reader.read_file(file, _readable(reader, columns), row_filter=False, data=data)
    num_records = raw.num_rows
    deleted = reader.deletion_filter(file, known)
    if deleted is None:
        return TargetRows(file, raw, None, num_records, data)
    keep = deleted.mask(num_records, reader.file_uri(file))
    index = np.flatnonzero(keep.to_numpy(zero_copy_only=False))
    return TargetRows(file, raw.filter(keep), index.astype(np.int64), num_records, data, deleted.indexes)


def rows_with_columns(
    reader: TableReader,
    target: TargetRows,
    positions: np.ndarray | None,
    columns: Sequence[str],
    *,
    keep_dictionaries: bool = False,
) -> pa.Table:
    """The rows at ``positions`` (indexes into ``target.rows``; ``None``: every row) with
    ``columns``, in that order: columns already read are taken from ``target``, the others read
    from the file now (``keep_dictionaries``: as :meth:`TableReader.read_file`)."""
    have = set(target.rows.column_names)
    missing = [column for column in columns if column not in have]
    taken = pa.array(positions, pa.int64()) if positions is not None else None
    parts: dict[str, pa.ChunkedArray] = {}
    for name in columns:
        if name in have:
            column = target.rows.column(name)
            parts[name] = column.take(taken) if taken is not None else column
    if missing:
        raw = reader.read_file(
            target.file, missing, row_filter=False, keep_dictionaries=keep_dictionaries, data=target.data
        )
        if positions is not None:
            raw = raw.take(pa.array(target.physical(positions), pa.int64()))
        elif target.row_index is not None:
            raw = raw.take(pa.array(target.row_index, pa.int64()))
        for name in missing:
            parts[name] = raw.column(name)
    return pa.Table.from_arrays([parts[name] for name in columns], names=list(columns))
