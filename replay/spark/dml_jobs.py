"""The driver side of the writing stage of a Spark row-level change: run the tasks, gather what
they did, and delete what they wrote when nothing is committed.

:func:`run_changes` hands the rows Spark decided (:mod:`replay.spark.dml_tasks`) to tasks that
each own whole target files: the rows are partitioned by their file (rows to insert are spread
by ``spread``) and sorted by file and physical row index, then ``mapInArrow`` runs
:func:`~replay.spark.dml_tasks.run_task` on each partition. The driver collects one
:class:`~replay.spark.dml_tasks.TaskResult` per task: only the attempt Spark counts as the
task's result, so the files of failed or duplicate attempts are never committed (a failed
attempt deletes its own files before it fails).

What is deleted, and when:

* a task that returns a Delta error (or rows of one file that reached two tasks): every file
  every task wrote (the error is raised as is);
* a job that fails (a task failed every attempt, the job was cancelled): the files of the tasks
  that had finished, known from an accumulator (classic PySpark; on Spark Connect, which has no
  accumulators, such files stay behind unreferenced, as after any failed write, and VACUUM
  deletes them);
* a commit that certainly did not land (:func:`discard_unless_committed`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import pickle
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.accumulators import AccumulatorParam

from logstores import open_filesystem
from replay.dml.context import DmlTable
from replay.dml.outputs import SinkFiles
from replay.dml.rewrite import FileChange
from replay.spark.dml_tasks import PAYLOAD_SCHEMA, TaskResult, TaskSpec, WrittenPaths, run_task
from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN
from replay.txn.data_writer import delete_data_files
from replay.txn.transaction import CommitOutcome, Transaction

logger = logging.getLogger(__name__)


class WrittenPathsParam(AccumulatorParam[list[WrittenPaths]]):
    """Accumulates the :data:`~replay.spark.dml_tasks.WrittenPaths` of finished tasks."""

    def zero(self, value: list[WrittenPaths]) -> list[WrittenPaths]:
        return []

    def addInPlace(self, value1: list[WrittenPaths], value2: list[WrittenPaths]) -> list[WrittenPaths]:  # noqa: N802 - PySpark's name
        value1.extend(value2)
        return value1


@dataclass
class Changes:
    """What the tasks of one operation did, gathered on the driver."""

    table: DmlTable
    changes: list[FileChange] = field(default_factory=list)
    shared: SinkFiles = field(default_factory=SinkFiles)
    inserted: Counter[str] = field(default_factory=Counter)
    written: list[WrittenPaths] = field(default_factory=list)

    def add(self, result: TaskResult) -> None:
        seen = {change.file.path for change in self.changes}
        split = [change.file.path for change in result.changes if change.file.path in seen]
        if split:
            raise RuntimeError(f"the rows of target file {split[0]} reached more than one task")
        self.changes.extend(result.changes)
        self.shared = SinkFiles(
            self.shared.data + result.shared.data, self.shared.changes + result.shared.changes
        )
        self.inserted.update(result.inserted)
        self.written.append((result.data_paths(), result.deletion_vector_files))

    def extend(self, other: Changes) -> None:
        """Add what the tasks of another stage of the same operation did."""
        seen = {change.file.path for change in self.changes}
        split = [change.file.path for change in other.changes if change.file.path in seen]
        if split:
            raise RuntimeError(f"the rows of target file {split[0]} reached more than one task")
        self.changes.extend(other.changes)
        self.shared = SinkFiles(
            self.shared.data + other.shared.data, self.shared.changes + other.shared.changes
        )
        self.inserted.update(other.inserted)
        self.written.extend(other.written)

    def discard(self) -> None:
        """Delete every file the tasks wrote (missing ones are ignored)."""
        discard_written(self.table, self.written)


def discard_written(table: DmlTable, written: Sequence[WrittenPaths]) -> None:
    """Delete data files (log paths) and deletion vector files (storage paths); errors are logged,
    the caller is already failing."""
    data = [path for paths, _ in written for path in paths]
    vectors = [path for _, paths in written for path in paths]
    try:
        delete_data_files(table.table_path, data, table.conf)
        if vectors:
            fs, _ = open_filesystem(table.table_path, table.conf)
            for path in vectors:
                with contextlib.suppress(FileNotFoundError):
                    fs.rm(path)
    except Exception:
        logger.warning(
            "could not delete the files of a failed operation on %s", table.table_path, exc_info=True
        )


def _accumulator(spark: Any) -> Any:
    """An accumulator of written paths (``None`` on Spark Connect, which has none)."""
    try:
        return spark.sparkContext.accumulator([], WrittenPathsParam())
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext
        return None


def run_changes(
    spark: Any, frame: Any, spec: TaskSpec, *, spread: Any | None = None, shuffle: bool = True
) -> Changes:
    """Run the writing stage over ``frame`` (rows with decided actions, see
    :mod:`~replay.spark.dml_tasks`) and gather what the tasks did; raises the first Delta error a
    task returned.

    ``shuffle``: partition the rows by file and sort them (``spread``, a negative int column,
    spreads the rows to insert over tasks). Without it ``frame``'s own partitions are the tasks: the rows
    of each file must already be in one partition, together and in row order, as a target read
    gives them (and a join that streams the target, with the source broadcast, keeps them); a
    task, and the driver, fail the operation otherwise.
    """
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

    ordered = frame
    if shuffle:
        key = F.col(FILE_COLUMN) if spread is None else F.coalesce(F.col(FILE_COLUMN), spread)
        ordered = frame.repartition(key).sortWithinPartitions(
            F.col(FILE_COLUMN).asc_nulls_first(), F.col(ROW_COLUMN)
        )
    written = _accumulator(spark)
    outputs = ordered.mapInArrow(functools.partial(run_task, spec, written), PAYLOAD_SCHEMA)
    try:
        rows = outputs.collect()
    except BaseException:
        if written is not None:
            discard_written(spec.table, list(written.value))
        raise
    results: list[TaskResult] = [pickle.loads(row[0]) for row in rows]
    gathered = Changes(spec.table)
    errors: list[BaseException] = [r.error for r in results if r.error is not None]
    for result in results:
        try:
            gathered.add(result)
        except RuntimeError as exc:
            errors.append(exc)
    if errors:
        discard_written(spec.table, [(r.data_paths(), r.deletion_vector_files) for r in results])
        raise errors[0]
    return gathered


@contextlib.contextmanager
def discard_on_failure(changes: Changes) -> Iterator[None]:
    """Delete what ``changes``' tasks wrote if the block fails (a later stage of the operation)."""
    try:
        yield
    except BaseException:
        changes.discard()
        raise


def log_files(operation: str, table: DmlTable, read: int, total: int, changes: Changes) -> None:
    """Log how many target files the operation read (the files that can match), of how many, and
    how many it changed."""
    changed = sum(1 for change in changes.changes if change.touched)
    logger.info(
        "%s of %s read %d of %d files and changed %d", operation, table.table_path, read, total, changed
    )


@contextlib.contextmanager
def discard_unless_committed(txn: Transaction, changes: Changes | None) -> Iterator[None]:
    """Delete what the tasks wrote if the block fails and ``txn`` certainly committed nothing."""
    try:
        yield
    except BaseException:
        if changes is not None and txn.outcome is CommitOutcome.NOT_COMMITTED:
            changes.discard()
        raise
