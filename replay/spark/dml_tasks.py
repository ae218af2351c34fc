"""The executor side of a Spark DELETE, UPDATE or MERGE: rows whose fate Spark decided, written as
Delta files by the Python DML's own per-file code.

Spark evaluates the conditions, joins and assignments over the columns they read; each task of
the last stage receives the changed rows of the target files it owns (all of a file's in one
task, in the order of the file) and rows to insert, with these columns:

* :data:`~replay.spark.row_ids.FILE_COLUMN` / :data:`~replay.spark.row_ids.ROW_COLUMN`: the
  target row's file (its position in :attr:`TaskSpec.files`) and physical index (the file is
  null for a row to insert);
* :data:`ACTION_COLUMN`: :data:`DELETE`, :data:`UPDATE` or :data:`INSERT`;
  :data:`CLAUSE_COLUMN`: the clause that decided it (an index into :attr:`TaskSpec.clauses`);
* the values of the columns the clause assigns (:func:`new_column`, by position in the table's
  columns after the change; the others are null).

The unchanged rows and columns never go through Spark: the task reads them from the file, as the
Python DML does, and hands the decision to :class:`~replay.dml.rewrite.FileRewriter`, the code
the Python DML runs per file: the same deletion vectors, copy-on-write files (every live row of
the file, updated rows in place), change data and row counts, written through a
:class:`~replay.dml.outputs.Sinks` (the data writer checks the table's constraints on every
row). The columns an update does not assign keep the target row's values, and generated columns
are computed as the Python DML computes them (:func:`~replay.dml.assignments.regenerate`).

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
from replay.dml.target_rows import TargetRows, read_target_rows
from replay.protocol.actions import AddFile
from replay.protocol.errors import DeltaError
from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN
from replay.txn.identity_values import IdentityValues

ACTION_COLUMN = "_replay_dml_action"
CLAUSE_COLUMN = "_replay_dml_clause"
PAYLOAD_SCHEMA = "payload binary"
DELETE, UPDATE, INSERT = 1, 2, 3


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
    identity: tuple[str, ...] = ()
    """The identity columns whose values the rows it inserts need generated."""


@dataclass(frozen=True)
class TaskSpec:
    """What every task of one operation needs (picklable): the table, the target files it may
    see, and the clauses."""

    table: DmlTable
    files: Sequence[AddFile]
    clauses: tuple[ClauseEffect, ...]
    identity_before: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    """Per identity column whose values the inserted rows need (their clause does not assign
    it), per task (partition) index: how many of the commit's values the tasks before it
    generate. Each task goes on from there, so the commit's values are one run from the column's
    mark (Delta's tasks take every n-th value instead, knowing their number n, which Spark's
    Python tasks are not told)."""


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
    current: int | None = None
    parts: list[pa.Table] = []
    done: set[int] = set()
    identity = _task_identity(spec)
    for batch in batches:
        rows = pa.Table.from_batches([batch])
        for file_id, run in _runs(rows):
            if file_id is None:
                _insert(spec, sinks, run, result.inserted, identity)
                continue
            if file_id != current and parts and current is not None:
                result.changes.append(_file_change(spec, sinks, current, pa.concat_tables(parts)))
                done.add(current)
                parts = []
            if file_id in done:
                raise RuntimeError(
                    f"the rows of target file {spec.files[file_id].path} are not together in their task"
                )
            current = file_id
            parts.append(run)
    if parts and current is not None:
        result.changes.append(_file_change(spec, sinks, current, pa.concat_tables(parts)))


def _runs(rows: pa.Table) -> Iterator[tuple[int | None, pa.Table]]:
    """The runs of consecutive rows of one file (``None``: rows to insert)."""
    if rows.num_rows == 0:
        return
    ids = np.asarray(pc.fill_null(rows.column(FILE_COLUMN), -1).to_numpy(), dtype=np.int64)
    starts = np.flatnonzero(np.diff(ids)) + 1
    bounds = [0, *starts.tolist(), rows.num_rows]
    for begin, end in itertools.pairwise(bounds):
        file_id = int(ids[begin])
        yield (file_id if file_id >= 0 else None), rows.slice(begin, end - begin)


def _numbers(column: pa.ChunkedArray, default: int) -> np.ndarray:
    return np.asarray(pc.fill_null(column, default).to_numpy(), dtype=np.int64)


def _file_change(spec: TaskSpec, sinks: Sinks, file_id: int, rows: pa.Table) -> FileChange:
    """Apply the decided actions to one target file: ``rows`` are its changed rows (row index,
    action, clause, assigned values); the file itself is read for the rest, as the Python DML
    reads it (copying on write every row, for change data and updates the changed rows' columns)."""
    started = time.perf_counter_ns()
    file = spec.files[file_id]
    path = file.path
    row_index = _numbers(rows.column(ROW_COLUMN), 0)
    if row_index.size > 1 and (np.diff(row_index) < 0).any():
        raise RuntimeError(f"the rows of target file {path} are not in the order of the file")
    if row_index.size > 1 and (np.diff(row_index) == 0).any():  # a row several source rows deleted
        first = np.concatenate([[True], np.diff(row_index) != 0])
        rows, row_index = rows.filter(pa.array(first)), row_index[first]
    table = spec.table
    if table.deletion_vectors:
        target = TargetRows(file, rows.select([]), row_index, _physical_rows(table, file))
        positions = np.arange(row_index.size, dtype=np.int64)
    else:
        target = read_target_rows(table.reader, file, [])
        live = target.row_index  # None: every row is live, its index its position
        positions = row_index if live is None else np.searchsorted(live, row_index).astype(np.int64)
        if positions.size and (
            positions[-1] >= target.num_rows
            or (live is not None and (live[positions] != row_index).any())
            or positions[0] < 0
        ):
            raise RuntimeError(f"rows of target file {path} to change are not live rows of it")
    rewriter = FileRewriter(table, sinks, target, started)
    actions = _numbers(rows.column(ACTION_COLUMN), 0)
    clauses = _numbers(rows.column(CLAUSE_COLUMN), -1)
    counts: Counter[str] = Counter()
    for clause in np.unique(clauses):
        counts[spec.clauses[int(clause)].count] += int(np.count_nonzero(clauses == clause))
    deleted = positions[actions == DELETE]
    chosen = [
        (int(c), np.flatnonzero((actions == UPDATE) & (clauses == c)))
        for c in np.unique(clauses[actions == UPDATE])
    ]
    updated = np.concatenate([positions[at] for _, at in chosen]) if chosen else EMPTY
    if not deleted.size and not updated.size:
        return rewriter.unchanged()
    rewriter.load(np.concatenate([deleted, updated]))
    new_rows = []
    for clause, at in chosen:
        assigned = spec.clauses[clause].assigned
        values = _assigned(spec, rows.take(pa.array(at)), assigned, rewriter.full_rows(positions[at]))
        new_rows.append(regenerate(values, table.spec.constraints.generated, assigned, insert=False))
    return rewriter.finish(deleted, updated, pa.concat_tables(new_rows) if new_rows else None, counts)


def _assigned(spec: TaskSpec, rows: pa.Table, assigned: Sequence[str], old: pa.Table | None) -> pa.Table:
    """New rows in the table's columns after the change: the ``assigned`` columns as Spark computed
    them, the others from ``old`` (the target rows an update keeps) or null (inserts, new columns)."""
    schema = spec.table.write_schema
    chosen = set(assigned)
    old_names = set(old.column_names) if old is not None else set()
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for position, column in enumerate(schema):
        if column.name in chosen:
            arrays.append(rows.column(new_column(position)))
        elif old is not None and column.name in old_names:
            arrays.append(old.column(column.name))
        else:
            arrays.append(pa.nulls(rows.num_rows, column.type))
    return align(pa.Table.from_arrays(arrays, names=schema.names), schema)


def _task_identity(spec: TaskSpec) -> IdentityValues | None:
    """The identity values this task generates (:attr:`TaskSpec.identity_before`)."""
    if not spec.identity_before:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    columns = [c for c in spec.table.spec.constraints.identity if c.name in spec.identity_before]
    before = {name: offsets.get(partition, 0) for name, offsets in spec.identity_before.items()}
    return IdentityValues(columns, before)


def _insert(
    spec: TaskSpec, sinks: Sinks, rows: pa.Table, inserted: Counter[str], identity: IdentityValues | None
) -> None:
    """Write the rows to insert (each with its clause's generated columns and identity values)
    and their change data."""
    clauses = _numbers(rows.column(CLAUSE_COLUMN), -1)
    schema = spec.table.write_schema
    for clause in np.unique(clauses):
        effect = spec.clauses[int(clause)]
        picked = rows.filter(pa.array(clauses == clause))
        values = regenerate(
            _assigned(spec, picked, effect.assigned, None),
            spec.table.spec.constraints.generated,
            effect.assigned,
            insert=True,
        )
        if identity is not None:
            values = identity.fill(values, [c for c in identity.columns if c.name in effect.identity])
        sinks.new_rows.write(values)
        sinks.write_changes(change_rows(values, CDC_TYPE_INSERT, schema))
        inserted[effect.count] += values.num_rows


def _physical_rows(table: DmlTable, file: AddFile) -> int:
    """The physical row count of ``file`` a deletion vector is checked against: its statistic, or
    its Parquet footer where the statistic is missing."""
    if file.num_records is not None:
        return file.num_records
    fs, path = open_filesystem(table.reader.file_uri(file), table.conf)
    with fs.open(path, "rb") as handle:
        return int(pq.ParquetFile(handle).metadata.num_rows)
