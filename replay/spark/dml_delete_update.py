"""DELETE and UPDATE on Spark: planned as the Python DML plans them, rows found and changed by
Spark, files written by the executors, one commit on the driver.

Planning is :func:`replay.dml.plan_delete` / :func:`replay.dml.plan_update` (binding, errors,
the table's checks, the pruning predicate), then :func:`replay.dml.context.candidate_files`.
A DELETE whose condition partition values decide removes whole files without reading them
(Delta's metadata-only delete), as in Python. Otherwise one pass: the candidate files are read
through the data source with the columns the condition and the assignments read and each row's
file and physical index; Spark keeps the rows the condition holds for and computes the assigned
values; and the tasks that read a file also write its new state (the read hands each task whole
files, in row order, and nothing moves rows in between: no shuffle). A task reads the rest of a
file it changes itself (:mod:`replay.spark.dml_tasks`): copying on write every row, with deletion
vectors the changed rows' columns the change data needs. Files without a matching row are
neither read twice nor rewritten.

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
from replay.spark.dml_jobs import discard_unless_committed, log_files, run_changes
from replay.spark.dml_scan import SparkTarget, file_ids
from replay.spark.dml_tasks import DELETE, UPDATE, ClauseEffect, TaskSpec
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
    rows = target.scan(snapshot.version, files, plan.columns).filter(holds(condition))
    selected = rows.select(*decided(F.lit(DELETE), F.lit(0), []))
    spec = TaskSpec(plan.table, [files[path] for path in file_ids(files)], (ClauseEffect(DELETE, "deleted"),))
    changes = run_changes(target.spark, selected, spec, shuffle=False)
    log_files("DELETE", plan.table, len(files), snapshot.num_files, changes)
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
    values: list[Any] = []
    read = list(plan.columns)
    for name, data_type in zip(schema.names, spark_types(schema), strict=True):
        assignment = plan.assignments.get(name)
        text = getattr(assignment, "text", None)
        values.append(stored(text, data_type) if text is not None else F.lit(None).cast(data_type))
        if assignment is not None:
            read += assignment.bound.columns()
    rows = target.scan(snapshot.version, files, read).filter(holds(condition))
    selected = rows.select(*decided(F.lit(UPDATE), F.lit(0), values))
    effect = ClauseEffect(UPDATE, "updated", tuple(plan.assignments))
    spec = TaskSpec(plan.table, [files[path] for path in file_ids(files)], (effect,))
    changes = run_changes(target.spark, selected, spec, shuffle=False)
    log_files("UPDATE", plan.table, len(files), snapshot.num_files, changes)
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
