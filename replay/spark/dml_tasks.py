"""The executor side of a Spark DELETE, UPDATE or MERGE: rows whose fate Spark decided, written as
Delta files by the Python DML's own per-file code.

Spark evaluates the conditions, joins and assignments; each task of the last stage receives rows
of the target files it owns (every row of a file in one task, sorted by physical row index) and
the rows to insert, with these columns:

* :data:`~replay.spark.row_ids.FILE_COLUMN` / :data:`~replay.spark.row_ids.ROW_COLUMN`: the
  target row's file and physical index (the file is null for a row to insert);
* :data:`ACTION_COLUMN`: :data:`COPY` (kept as is, copy-on-write only), :data:`DELETE`,
  :data:`UPDATE` or :data:`INSERT`; :data:`CLAUSE_COLUMN`: the clause that decided it (an index
  into :attr:`TaskSpec.clauses`);
* the target row's columns (:func:`old_column`) and the new row's (:func:`new_column`).

For each file the task builds the file's :class:`~replay.dml.target_rows.TargetRows` and hands
the decision to :class:`~replay.dml.rewrite.FileRewriter`, the code the Python DML runs per file:
the same deletion vectors, copy-on-write files, change data and row counts, written through a
:class:`~replay.dml.outputs.Sinks` (the data writer checks the table's constraints on every
row). Generated columns are computed as the Python DML computes them
(:func:`~replay.dml.assignments.regenerate`).

A task returns one row: a pickled :class:`TaskResult` (the files' :class:`FileChange`\\ s, the
files its shared writers wrote, the deletion vector files, the inserted rows). A Delta error
(a constraint violated, a deletion vector that does not fit its file) is returned in the result
after the task deleted what it wrote, so the driver raises it as the Python DML would; any other
error deletes what the task wrote and fails the task (Spark may run it again).
"""

from __future__ import annotations

import itertools
import pickle
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstores import open_filesystem
from replay.cdc.change_actions import CDC_TYPE_INSERT
from replay.dml.assignments import regenerate
from replay.dml.context import DmlTable
from replay.dml.outputs import SinkFiles, Sinks
from replay.dml.rewrite import EMPTY, FileChange, FileRewriter, align, change_rows
from replay.dml.target_rows import TargetRows
from replay.protocol.actions import AddFile
from replay.protocol.errors import DeltaError
from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN

ACTION_COLUMN = "_replay_dml_action"
CLAUSE_COLUMN = "_replay_dml_clause"
PAYLOAD_SCHEMA = "payload binary"
COPY, DELETE, UPDATE, INSERT = 0, 1, 2, 3


def old_column(position: int) -> str:
    """The name under which a task receives the target row's column at ``position``."""
    return f"_replay_dml_o{position}"


def new_column(position: int) -> str:
    """The name under which a task receives the new row's column at ``position``."""
    return f"_replay_dml_n{position}"


@dataclass(frozen=True)
class ClauseEffect:
    """What a clause does to the rows it decides: its action, the count its rows add to (the
    operation's metric categories: ``deleted``, ``updated``, ``matchedUpdated``, ``inserted``
    ...) and the columns it assigns (for generated columns)."""

    action: int
    count: str
    assigned: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """What every task of one operation needs (picklable): the table, the target files it may
    see, the clauses, and the table columns behind the old and new row columns."""

    table: DmlTable
    files: Mapping[str, AddFile]
    clauses: tuple[ClauseEffect, ...]
    old_columns: tuple[str, ...]
    new_columns: tuple[str, ...]


@dataclass
class TaskResult:
    """What one task did (see the module docstring)."""

    changes: list[FileChange] = field(default_factory=list)
    shared: SinkFiles = field(default_factory=SinkFiles)
    inserted: Counter[str] = field(default_factory=Counter)
    deletion_vector_files: list[str] = field(default_factory=list)
    error: BaseException | None = None

    def data_paths(self) -> list[str]:
        """Every data and change data file written (as the log names them)."""
        rewritten = [w.add.path for c in self.changes for w in c.rewritten]
        return rewritten + [w.add.path for w in self.shared.data] + [w.add.path for w in self.shared.changes]


WrittenPaths = tuple[list[str], list[str]]
"""The data files (log paths) and deletion vector files (storage paths) a task wrote."""


def run_task(spec: TaskSpec, written: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The body of a ``mapInArrow`` task (see the module docstring); ``written`` is an
    accumulator of :data:`WrittenPaths` (``None`` where there is none, Spark Connect)."""
    sinks = Sinks(spec.table)
    result = TaskResult()
    try:
        _work(spec, sinks, batches, result)
        result.shared = sinks.close()
        if sinks.deletion_vectors is not None:
            result.deletion_vector_files = sinks.deletion_vectors.close()
    except DeltaError as exc:
        sinks.discard()
        result = TaskResult(error=exc)
    except BaseException:
        sinks.discard()
        raise
    if written is not None and result.error is None:
        written.add([(result.data_paths(), result.deletion_vector_files)])
    yield pa.RecordBatch.from_pydict(
        {"payload": [pickle.dumps(result)]}, pa.schema([("payload", pa.binary())])
    )


def _work(spec: TaskSpec, sinks: Sinks, batches: Iterator[pa.RecordBatch], result: TaskResult) -> None:
    """Group the sorted rows by file and work on each file, and insert the rows without one."""
    current: str | None = None
    parts: list[pa.Table] = []
    done: set[str] = set()
    for batch in batches:
        rows = pa.Table.from_batches([batch])
        for path, run in _runs(rows):
            if path is None:
                _insert(spec, sinks, run, result.inserted)
                continue
            if path != current and parts:
                result.changes.append(_file_change(spec, sinks, current or "", pa.concat_tables(parts)))
                done.add(current or "")
                parts = []
            if path in done:
                raise RuntimeError(f"the rows of target file {path} are not together in their task")
            current = path
            parts.append(run)
    if parts:
        result.changes.append(_file_change(spec, sinks, current or "", pa.concat_tables(parts)))


def _runs(rows: pa.Table) -> Iterator[tuple[str | None, pa.Table]]:
    """The runs of consecutive rows of one file (``None``: rows to insert)."""
    if rows.num_rows == 0:
        return
    encoded = pc.dictionary_encode(rows.column(FILE_COLUMN)).combine_chunks()
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    dictionary = encoded.dictionary.to_pylist()
    starts = np.flatnonzero(np.diff(codes)) + 1
    bounds = [0, *starts.tolist(), rows.num_rows]
    for begin, end in itertools.pairwise(bounds):
        code = int(codes[begin])
        yield (dictionary[code] if code >= 0 else None), rows.slice(begin, end - begin)


def _numbers(column: pa.ChunkedArray, default: int) -> np.ndarray:
    return np.asarray(pc.fill_null(column, default).to_numpy(), dtype=np.int64)


def _columns(rows: pa.Table, names: Sequence[str], renamed: Sequence[str], schema: pa.Schema) -> pa.Table:
    """``rows``' columns ``names`` as the table columns ``renamed``, in ``schema``'s types (a
    table without columns keeps its row count)."""
    table = rows.select(list(names)).rename_columns(list(renamed))
    return align(table, schema) if names else table


def _file_change(spec: TaskSpec, sinks: Sinks, path: str, rows: pa.Table) -> FileChange:
    """Apply the decided actions to one target file (all its rows copying on write, the changed
    ones with deletion vectors)."""
    started = time.perf_counter_ns()
    row_index = _numbers(rows.column(ROW_COLUMN), 0)
    if row_index.size > 1 and (np.diff(row_index) < 0).any():
        raise RuntimeError(f"the rows of target file {path} are not in the order of the file")
    if row_index.size > 1 and (np.diff(row_index) == 0).any():  # a row several source rows deleted
        first = np.concatenate([[True], np.diff(row_index) != 0])
        rows, row_index = rows.filter(pa.array(first)), row_index[first]
    file = spec.files[path]
    table = spec.table
    old_names = [old_column(i) for i in range(len(spec.old_columns))]
    target = TargetRows(
        file,
        _columns(rows, old_names, spec.old_columns, table.reader.arrow_schema(list(spec.old_columns))),
        row_index,
        _physical_rows(table, file, rows.num_rows),
    )
    rewriter = FileRewriter(table, sinks, target, started)
    actions = _numbers(rows.column(ACTION_COLUMN), COPY)
    clauses = _numbers(rows.column(CLAUSE_COLUMN), -1)
    counts: Counter[str] = Counter()
    for clause in np.unique(clauses[actions != COPY]):
        counts[spec.clauses[int(clause)].count] += int(
            np.count_nonzero((clauses == clause) & (actions != COPY))
        )
    deleted = np.flatnonzero(actions == DELETE).astype(np.int64)
    updated_parts: list[np.ndarray] = []
    new_rows: list[pa.Table] = []
    for clause in np.unique(clauses[actions == UPDATE]):
        positions = np.flatnonzero((actions == UPDATE) & (clauses == clause)).astype(np.int64)
        updated_parts.append(positions)
        values = _new_rows(spec, rows.take(pa.array(positions)))
        new_rows.append(
            regenerate(
                values, table.spec.constraints.generated, spec.clauses[int(clause)].assigned, insert=False
            )
        )
    if not deleted.size and not updated_parts:
        return rewriter.unchanged()
    updated = np.concatenate(updated_parts) if updated_parts else EMPTY
    return rewriter.finish(deleted, updated, pa.concat_tables(new_rows) if new_rows else None, counts)


def _new_rows(spec: TaskSpec, rows: pa.Table) -> pa.Table:
    names = [new_column(i) for i in range(len(spec.new_columns))]
    return _columns(rows, names, spec.new_columns, spec.table.write_schema)


def _insert(spec: TaskSpec, sinks: Sinks, rows: pa.Table, inserted: Counter[str]) -> None:
    """Write the rows to insert (each with its clause's generated columns) and their change data."""
    clauses = _numbers(rows.column(CLAUSE_COLUMN), -1)
    schema = spec.table.write_schema
    for clause in np.unique(clauses):
        effect = spec.clauses[int(clause)]
        picked = rows.filter(pa.array(clauses == clause))
        values = regenerate(
            _new_rows(spec, picked), spec.table.spec.constraints.generated, effect.assigned, insert=True
        )
        sinks.new_rows.write(values)
        sinks.write_changes(change_rows(values, CDC_TYPE_INSERT, schema))
        inserted[effect.count] += values.num_rows


def _physical_rows(table: DmlTable, file: AddFile, live: int) -> int:
    """The physical row count of ``file`` a deletion vector is checked against: its statistic, or
    its Parquet footer where the statistic is missing (copying on write, where it is not used:
    the ``live`` rows)."""
    if file.num_records is not None:
        return file.num_records
    if not table.deletion_vectors:
        return live
    fs, path = open_filesystem(table.reader.file_uri(file), table.conf)
    with fs.open(path, "rb") as handle:
        return int(pq.ParquetFile(handle).metadata.num_rows)
