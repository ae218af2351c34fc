"""What a row-level change knows about its table: how to read target files and write new ones.

:func:`dml_table` checks, on the driver, that this library may change the table (its protocol,
and for operations that remove rows, ``delta.appendOnly``) before anything is read or written, and
decides the two modes of the operation: deletion vectors (the table supports the
``deletionVectors`` writer feature and sets ``delta.enableDeletionVectors``) or copy-on-write, and
whether change data files are written (``delta.enableChangeDataFeed``; never for a DELETE that
writes deletion vectors, as in Delta, whose change feed reads such deletes from the deletion
vectors). The :class:`DmlTable` it returns is picklable: it is what the per-file work receives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pyarrow as pa

from logstores.filesystem import uri_scheme
from replay.cdc.change_actions import CDC_TYPE_COLUMN
from replay.data.reader import TableReader
from replay.log.concurrency import Work, default_threads
from replay.protocol.predicates import Predicate
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import ENABLE_DELETION_VECTORS
from replay.state.pruning import prune
from replay.state.snapshot import Snapshot
from replay.txn.write_plan import file_write_spec
from replay.txn.write_spec import FileWriteSpec

CHANGE_TYPE_FIELD = pa.field(CDC_TYPE_COLUMN, pa.string())


def deletion_vectors_enabled(config: TableConfiguration) -> bool:
    """Whether DML on the table marks rows deleted with deletion vectors instead of copying files
    (Delta's ``deletionVectorsWritable``: the writer feature and ``delta.enableDeletionVectors``)."""
    return config.protocol.has_writer_feature("deletionVectors") and bool(
        ENABLE_DELETION_VECTORS.value_in(config.configuration)
    )


@dataclass(frozen=True)
class DmlTable:
    """What the per-file work of a DELETE, UPDATE or MERGE needs to know about its table.

    ``reader`` reads target files as the snapshot describes them; ``spec`` writes data files with
    the table's schema after the operation (a MERGE may evolve it); ``change_spec`` writes change
    data files (``None``: the operation writes none); ``deletion_vectors`` chooses deletion
    vectors over copy-on-write; ``configuration`` holds the table properties (DV file prefixes).
    """

    table_path: str
    reader: TableReader
    spec: FileWriteSpec
    change_spec: FileWriteSpec | None
    deletion_vectors: bool
    configuration: Mapping[str, str]

    @property
    def conf(self) -> Mapping[str, str]:
        """The storage settings of the data files."""
        return self.spec.conf

    @property
    def local(self) -> bool:
        return uri_scheme(self.table_path) in ("", "file", "memory")

    @property
    def threads(self) -> int:
        """How many target files are worked on at once: one per core locally (decoding and
        encoding Parquet keep a core busy, and each file's rows are held while it is worked on),
        more on object stores (requests overlap)."""
        if not self.local:
            return default_threads(Work.DATA, local=False)
        return max(2, min(os.cpu_count() or 2, default_threads(Work.DATA, local=True)))

    def first_read(self, columns: list[str]) -> list[str]:
        """The columns to read first from a target file that ``columns`` decide about: those
        locally (the others are read only if rows change), every column from object stores,
        where a read fetches the whole file anyway."""
        return columns if self.local else [field.name for field in self.reader.schema.fields]

    @property
    def write_schema(self) -> pa.Schema:
        """The table's columns after the operation, as Arrow (logical names)."""
        return self.spec.schema

    @property
    def read_schema(self) -> pa.Schema:
        """The columns of the target files as the snapshot describes them."""
        return self.reader.arrow_schema()


def dml_table(
    snapshot: Snapshot,
    *,
    removes_rows: bool,
    after: TableConfiguration | None = None,
    change_data: bool = True,
) -> DmlTable:
    """The :class:`DmlTable` of an operation on ``snapshot``.

    ``after`` is the configuration the commit leaves (a MERGE that evolves the schema), by default
    the snapshot's. Raises before anything is written: :class:`UnsupportedTableFeatureError` for
    tables this library cannot change, :class:`AppendOnlyTableError` when ``removes_rows`` on a
    ``delta.appendOnly`` table (Delta's ``DELTA_CANNOT_MODIFY_APPEND_ONLY``). ``change_data=False``
    leaves out the change data files even where the change data feed is on. On a table with row
    tracking enabled the files written keep the row ids of the rows they copy or update
    (:mod:`replay.data.row_lineage`).
    """
    config = snapshot.config
    config.check_writable()
    target = after if after is not None else config
    target.check_commit(removes_data=removes_rows, previous=config)
    io = snapshot.io
    reader = TableReader.for_metadata(io.table_path, snapshot.metadata, snapshot.protocol, io.conf)
    spec = replace(file_write_spec(io, target), row_tracking=target.materialized_row_tracking_columns)
    change_spec = None
    if change_data and target.change_data_feed_enabled:
        change_spec = spec.with_column(CHANGE_TYPE_FIELD)
    return DmlTable(
        table_path=io.table_path,
        reader=reader,
        spec=spec,
        change_spec=change_spec,
        deletion_vectors=deletion_vectors_enabled(config),
        configuration=dict(target.configuration),
    )


def candidate_files(snapshot: Snapshot, predicate: Predicate | None) -> pa.Table:
    """The active files (snapshot form) that may hold a row matching ``predicate`` (all without one),
    by partition values and statistics."""
    files = snapshot.files_table()
    if predicate is None:
        return files
    return prune(files, predicate, snapshot.config)
