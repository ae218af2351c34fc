"""Where the rows a row-level change produces go: data files, change data files, deletion vectors.

A :class:`Sinks` belongs to one process working on target files (the local driver, or one Spark
task): a copy-on-write rewrite of a target file gets data files of its own
(:meth:`Sinks.rewrite`, one per partition the rows fall in, so the table keeps its file layout);
rows that belong to no target file (MERGE's inserts, the new values of rows a deletion vector
marks deleted) and change rows are written through writers shared by the threads; deletion
vectors are packed into DV files by one :class:`~replay.data.deletion_vector_writer.DeletionVectorWriter`.
Every writer comes from the operation's :class:`~replay.dml.context.DmlTable`, whose specs come
from :func:`~replay.txn.write_plan.file_write_spec`, so every row written is checked against the
table's constraints. :meth:`Sinks.discard` deletes everything written (the operation committed
nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from replay.data.deletion_vector_writer import DeletionVectorWriter
from replay.dml.context import DmlTable
from replay.txn.data_writer import (
    CHANGE_DATA_FILES,
    DATA_FILES,
    DataFileWriter,
    EncodedFile,
    FileLayout,
    WrittenFile,
    delete_data_files,
)
from replay.txn.write_spec import FileWriteSpec

logger = logging.getLogger(__name__)


class SharedWriter:
    """A :class:`DataFileWriter` that threads take turns writing to, opened on the first rows."""

    def __init__(self, spec: FileWriteSpec, layout: FileLayout) -> None:
        self._spec = spec
        self._layout = layout
        self._lock = threading.Lock()
        self._writer: DataFileWriter | None = None
        self._closed: list[WrittenFile] | None = None

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        with self._lock:
            if self._closed is not None:
                raise RuntimeError(f"the writer of {self._spec.table_path} is closed")
            if self._writer is None:
                self._writer = DataFileWriter(self._spec, layout=self._layout)
            self._writer.write(rows)

    def close(self) -> list[WrittenFile]:
        with self._lock:
            if self._closed is None:
                self._closed = self._writer.close() if self._writer is not None else []
            return list(self._closed)

    def discard(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.discard()
            self._closed = []


@dataclass(frozen=True)
class SinkFiles:
    """What a :class:`Sinks` wrote through its shared writers."""

    data: list[WrittenFile] = field(default_factory=list)
    changes: list[WrittenFile] = field(default_factory=list)


class Sinks:
    """The writers of one process working on an operation's target files (see the module docstring)."""

    def __init__(self, table: DmlTable) -> None:
        self.table = table
        self.new_rows = SharedWriter(table.spec, DATA_FILES)
        self.changes = SharedWriter(table.change_spec, CHANGE_DATA_FILES) if table.change_spec else None
        self.deletion_vectors = (
            DeletionVectorWriter.for_table(table.table_path, table.configuration, table.conf)
            if table.deletion_vectors
            else None
        )
        self._lock = threading.Lock()
        self._rewritten: list[WrittenFile] = []

    @property
    def writes_changes(self) -> bool:
        return self.changes is not None

    def rewrite(self, rows: pa.Table) -> list[WrittenFile]:
        """Write ``rows`` (one target file's rows after the change) as new data files."""
        if rows.num_rows == 0:
            return []

        def write(writer: DataFileWriter) -> list[WrittenFile]:
            writer.write(rows)
            return writer.close()

        return self._rewritten_by(write, keep_dictionaries=True)

    def rewrite_encoded(self, encoded: EncodedFile) -> WrittenFile:
        """Store a target file's replacement, already encoded."""
        return self._rewritten_by(lambda writer: [writer.write_encoded(encoded)], keep_dictionaries=False)[0]

    def _rewritten_by(
        self, write: Callable[[DataFileWriter], list[WrittenFile]], *, keep_dictionaries: bool
    ) -> list[WrittenFile]:
        """The files ``write`` writes with a writer of its own (all deleted if it fails), kept
        for :meth:`discard`."""
        writer = DataFileWriter(self.table.spec, keep_dictionaries=keep_dictionaries)
        try:
            written = write(writer)
        except BaseException:
            writer.discard()
            raise
        with self._lock:
            self._rewritten.extend(written)
        return written

    def write_changes(self, rows: pa.Table) -> None:
        """Write change rows (they carry ``_change_type``)."""
        if self.changes is not None:
            self.changes.write(rows)

    def close(self) -> SinkFiles:
        """Finish every file (DV files too): what the shared writers wrote."""
        data = self.new_rows.close()
        changes = self.changes.close() if self.changes is not None else []
        if self.deletion_vectors is not None:
            self.deletion_vectors.close()
        return SinkFiles(data, changes)

    def discard(self) -> None:
        """Delete every file written (data, change data, deletion vectors); errors are logged."""
        for writer in (self.new_rows, self.changes):
            if writer is not None:
                try:
                    writer.discard()
                except Exception:  # the operation is already failing: report, do not mask
                    logger.warning("could not delete the files of a failed operation", exc_info=True)
        if self.deletion_vectors is not None:
            self.deletion_vectors.discard()
        with self._lock:
            rewritten, self._rewritten = self._rewritten, []
        delete_data_files(self.table.table_path, [w.add.path for w in rewritten], self.table.conf)
