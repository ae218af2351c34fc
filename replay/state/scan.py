"""Scans: the rows of a snapshot that match a filter, read from the files that may hold them.

A :class:`Scan` receives what it works on explicitly (a snapshot's active files, its table
configuration and its IO, like pyiceberg's scans): it prunes the files by partition values and
statistics (:mod:`replay.state.pruning`), reads the survivors through :mod:`replay.data`
(column mapping, partition values, deletion vectors) and filters their rows exactly with pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.data.deletion_vector_reads import dv_batches
from replay.data.reader import TableReader
from replay.log.concurrency import Work, executor, prefetch
from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile
from replay.protocol.arrow_actions import add_actions
from replay.protocol.predicate_expressions import from_expression
from replay.protocol.predicates import (
    PREDICATE_TYPES,
    TRUE,
    DnfTerm,
    InvalidFilterError,
    Predicate,
    column_name,
    columns_of,
    from_dnf,
    has_opaque,
    to_expression,
)
from replay.protocol.table_config import TableConfiguration
from replay.state.dataset import files_dataset
from replay.state.pruning import prune

if TYPE_CHECKING:  # pandas is optional (imported by to_pandas only), and pyarrow.dataset imports it
    import pandas as pd
    import pyarrow.dataset as pa_ds

Filter: TypeAlias = pc.Expression | Sequence[DnfTerm] | Sequence[Sequence[DnfTerm]] | Predicate
"""A row filter: a pyarrow expression, DNF tuples as deltalake and pyarrow take them, or a
:mod:`replay.protocol.predicates` tree (as SQL text and Spark's pushed filters are read into)."""


def read_predicate(row_filter: Filter | None, schema: pa.Schema) -> tuple[Predicate, pc.Expression | None]:
    """The predicate pruning reasons about and the expression rows are filtered with.

    Raises :class:`InvalidFilterError` for a filter of another kind or naming unknown columns.
    """
    if row_filter is None:
        return TRUE, None
    if isinstance(row_filter, pc.Expression):
        return from_expression(row_filter, schema), row_filter
    if isinstance(row_filter, PREDICATE_TYPES):
        predicate: Predicate = row_filter
    elif isinstance(row_filter, list | tuple):
        predicate = from_dnf(row_filter)
    else:
        raise InvalidFilterError(
            f"a filter is a pyarrow.compute.Expression, a list of (column, op, value) tuples or a "
            f"predicate, not {type(row_filter).__name__}"
        )
    try:
        return predicate, to_expression(predicate, schema)
    except KeyError as exc:
        raise InvalidFilterError(str(exc.args[0])) from None


class Scan:
    """The rows of one table version that match a filter, optionally only some columns."""

    def __init__(
        self,
        files: pa.Table,
        config: TableConfiguration,
        io: TableIO,
        *,
        row_filter: Filter | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        self._all_files = files
        self.config = config
        self.io = io
        schema = config.metadata.arrow_schema
        self.predicate, self.expression = read_predicate(row_filter, schema)
        unknown = [name for name in columns or () if name not in schema.names]
        if unknown:
            raise InvalidFilterError(
                f"columns {unknown} are not columns of table {io.table_path} ({schema.names})"
            )
        self.columns = list(columns) if columns is not None else None

    @cached_property
    def _reader(self) -> TableReader:
        return TableReader.for_metadata(
            self.io.table_path, self.config.metadata, self.config.protocol, self.io.conf
        )

    def files(self) -> pa.Table:
        """The active files that may hold matching rows (the columns of ``Snapshot.files_table``)."""
        return self._files

    @cached_property
    def _files(self) -> pa.Table:
        if self.predicate == TRUE:
            return self._all_files
        return prune(self._all_files, self.predicate, self.config)

    @property
    def _read_columns(self) -> list[str] | None:
        """The columns to read: those asked for and those the filter needs (all if unknown)."""
        if self.columns is None or self.expression is None:
            return self.columns
        if has_opaque(self.predicate):
            return None
        needed = {path[0] for path in columns_of(self.predicate)}
        return [*self.columns, *sorted(needed - set(self.columns))]

    def _finish(self, table: pa.Table) -> pa.Table:
        if self.expression is not None:
            table = table.filter(self.expression)
        if self.columns is not None and table.column_names != self.columns:
            table = table.select(self.columns)
        return table

    def to_pyarrow_dataset(self) -> pa_ds.Dataset:
        """The files that may hold matching rows as a ``pyarrow.dataset`` (rows not filtered;
        see :mod:`replay.state.dataset` for the tables it refuses)."""
        return files_dataset(self._files, self.config, self.io)

    def to_arrow(self) -> pa.Table:
        """Every matching row, deletion vectors applied, with the table's logical schema."""
        files = add_actions(self._files)
        table = self._reader.read_files(files, self._read_columns)
        return self._finish(table)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The matching rows file by file, a bounded number of files read ahead (bounded memory);
        the files' deletion vectors a run of files at a time, with one request per DV file
        (:func:`~replay.data.deletion_vector_reads.dv_batches`)."""
        reader = self._reader
        threads = reader.concurrency
        pool = executor(Work.DATA, threads)
        columns = self._read_columns
        for files in dv_batches(add_actions(self._files)):
            known = reader.read_deletion_vectors(files)

            def read(file: AddFile, known: dict[str, np.ndarray] = known) -> pa.Table:
                return reader.read_file(file, columns, row_filter=reader.deletion_filter(file, known))

            for table in prefetch(pool, read, files, threads):
                yield from self._finish(table).to_batches()

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def __repr__(self) -> str:
        where = "" if self.predicate == TRUE else f", filter={self.predicate}"
        return f"Scan({self.io.shown_path!r}{where})"


def filter_description(predicate: Predicate) -> str:
    """The columns a predicate reads, for messages."""
    return ", ".join(sorted(column_name(path) for path in columns_of(predicate)))
