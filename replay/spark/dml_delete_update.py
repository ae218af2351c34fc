"""DELETE and UPDATE on Spark: planned as the Python DML plans them, rows found and changed by
Spark, files written by the executors, one commit on the driver.

Planning is :func:`replay.dml.plan_delete` / :func:`replay.dml.plan_update` (binding, errors,
the table's checks, the pruning predicate), then :func:`replay.dml.context.candidate_files`.
A DELETE whose condition partition values decide removes whole files without reading them
(Delta's metadata-only delete), as in Python. Otherwise:

* with deletion vectors, one pass: the candidate files are read (for a DELETE only the
  condition's columns, for an UPDATE every column) with each row's file and physical index,
  Spark keeps the rows the condition holds for and computes the new values, and the tasks write
  the deletion vectors, the updated rows and the change data;
* copying on write, two passes, as Delta's commands do: the first reads the condition's columns
  of the candidate files and finds the files with a matching row (the touched files); the
  second reads every row of the touched files, Spark marks each row deleted, updated (with its
  new values) or copied, and each task rewrites whole files.

The target read hands each task whole files, in row order, and nothing in between moves rows, so
the tasks that read the files also write them: no shuffle.

The driver commits through :func:`replay.dml.delete.finish_delete` /
:func:`replay.dml.update.finish_update`: the same actions, operation parameters and metrics as
the Python DML, with the pruning predicate and the candidate files as what was read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from replay.dml.commit import DmlResult, snapshot_transaction
from replay.dml.context import candidate_files
from replay.dml.delete import delete_parameters, delete_rows, finish_delete, plan_delete, remove_whole_files
from replay.dml.update import finish_update, plan_update, update_parameters
from replay.protocol.arrow_actions import add_actions
from replay.spark.dml_columns import decided, functions, holds, spark_types, stored
from replay.spark.dml_jobs import discard_unless_committed, run_changes
from replay.spark.dml_scan import SparkTarget, touched_files
from replay.spark.dml_tasks import COPY, DELETE, UPDATE, ClauseEffect, TaskSpec
from replay.state.pruning import decided_by_partition_values


def spark_delete(target: SparkTarget, condition: str | None) -> DmlResult:
    """DELETE the rows of the table matching ``condition`` (SQL; every row without one)."""
    started = time.perf_counter_ns()
    snapshot = target.latest()
    if condition is None:
        return delete_rows(snapshot, None)  # every file removed, nothing read
    F = functions()  # noqa: N806 - PySpark's convention
    txn = snapshot_transaction(snapshot, "DELETE")
    parameters = delete_parameters(condition)
    plan, pruning = plan_delete(snapshot, condition, alias=target.alias)
    candidates = candidate_files(snapshot, pruning)
    if decided_by_partition_values(candidates, pruning, snapshot.config):
        return remove_whole_files(txn, candidates, pruning, parameters, started)
    files = {file.path: file for file in add_actions(candidates)}
    matches = holds(condition)
    columns = plan.columns
    if plan.table.deletion_vectors:
        frame = target.scan(snapshot.version, files, columns).filter(matches)
        selected = frame.select(*decided(F.lit(DELETE), F.lit(0), [], []))
        old: tuple[str, ...] = ()
    else:
        touched = touched_files(target.scan(snapshot.version, files, columns).filter(matches))
        old = tuple(plan.table.read_schema.names)
        frame = target.scan(snapshot.version, touched)
        action = F.when(matches, F.lit(DELETE)).otherwise(F.lit(COPY))
        selected = frame.select(*decided(action, F.lit(0), [target.column(c) for c in old], []))
    spec = TaskSpec(plan.table, files, (ClauseEffect(DELETE, "deleted"),), old, ())
    changes = run_changes(target.spark, selected, spec, shuffle=False)
    scanned_ns = time.perf_counter_ns() - started
    with discard_unless_committed(txn, changes):
        return finish_delete(
            txn,
            changes.changes,
            changes.shared,
            pruning=pruning,
            candidates=candidates,
            parameters=parameters,
            started_ns=started,
            scanned_ns=scanned_ns,
        )


def spark_update(target: SparkTarget, condition: str | None, assignments: Mapping[str, str]) -> DmlResult:
    """UPDATE the rows of the table matching ``condition`` (SQL; every row without one), setting
    columns to SQL expressions."""
    started = time.perf_counter_ns()
    snapshot = target.latest()
    F = functions()  # noqa: N806 - PySpark's convention
    txn = snapshot_transaction(snapshot, "UPDATE")
    plan, pruning = plan_update(snapshot, dict(assignments), None, condition, alias=target.alias)
    candidates = candidate_files(snapshot, pruning)
    files = {file.path: file for file in add_actions(candidates)}
    schema = plan.table.write_schema
    names = tuple(schema.names)
    matches = holds(condition)
    values: list[Any] = []
    for name, data_type in zip(names, spark_types(schema), strict=True):
        assignment = plan.assignments.get(name)
        text = getattr(assignment, "text", None)
        values.append(stored(text, data_type) if text is not None else target.column(name))
    old = [target.column(c) for c in names]
    if plan.table.deletion_vectors:
        frame = target.scan(snapshot.version, files).filter(matches)
        selected = frame.select(*decided(F.lit(UPDATE), F.lit(0), old, values))
    else:
        touched = (
            touched_files(target.scan(snapshot.version, files, plan.columns).filter(matches))
            if condition is not None
            else list(files)
        )
        frame = target.scan(snapshot.version, touched)
        action = F.when(matches, F.lit(UPDATE)).otherwise(F.lit(COPY))
        new = [F.when(matches, value) for value in values]
        selected = frame.select(*decided(action, F.lit(0), old, new))
    effect = ClauseEffect(UPDATE, "updated", tuple(plan.assignments))
    spec = TaskSpec(plan.table, files, (effect,), names, names)
    changes = run_changes(target.spark, selected, spec, shuffle=False)
    scanned_ns = time.perf_counter_ns() - started
    with discard_unless_committed(txn, changes):
        return finish_update(
            txn,
            changes.changes,
            changes.shared,
            pruning=pruning,
            candidates=candidates,
            parameters=update_parameters(condition),
            started_ns=started,
            scanned_ns=scanned_ns,
        )
