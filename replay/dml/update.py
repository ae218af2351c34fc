"""UPDATE: set columns of the rows matching a predicate (Delta's ``UpdateCommand``).

The files that partition values and statistics cannot exclude are read, the predicate's columns
first; in files with matching rows every column of those rows is read (copy-on-write: of every
row), the assignments are evaluated over the matching rows only (an expression that would fail on
other rows does not), and the values are stored into the columns' types with Spark's ANSI store
assignment. With deletion vectors the old rows are marked deleted and the new ones written to new
files; copy-on-write the file is rewritten with the rows updated in place. A row whose partition
column changes moves to a file of its new partition. With the change data feed every updated row
gives an ``update_preimage`` and an ``update_postimage`` row, in both modes (as in Delta).

Driver: :func:`plan_update`, then :func:`update_rows` runs :meth:`UpdatePlan.process_file` over
the candidate files and commits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from replay.dml.assignments import (
    apply_assignments,
    check_unique,
    find_column,
    regenerate,
    unresolved_column,
)
from replay.dml.column_update import ColumnUpdate, fetch_file, plan_column_update, update_columns
from replay.dml.commit import (
    DmlResult,
    FileTotals,
    added_files,
    commit_dml,
    file_actions,
    snapshot_transaction,
)
from replay.dml.context import DmlTable, candidate_files, dml_table
from replay.dml.errors import InvalidDmlArgumentError
from replay.dml.expressions import Assignment, LiteralValue, SqlText, true_positions
from replay.dml.outputs import SinkFiles, Sinks
from replay.dml.rewrite import EMPTY, FileChange, FileRewriter
from replay.dml.runner import run_plan
from replay.dml.target_rows import read_target_rows
from replay.protocol.actions import AddFile
from replay.protocol.identity_columns import update_error
from replay.protocol.predicates import Predicate
from replay.state.snapshot import Snapshot
from replay.txn.committer import now_ms
from replay.txn.transaction import Transaction

OPERATION = "UPDATE"


@dataclass(frozen=True)
class UpdatePlan:
    """An UPDATE as planned on the driver (picklable): what each target file's work needs."""

    table: DmlTable
    condition: SqlText | None
    assignments: Mapping[str, Assignment]
    columns_only: ColumnUpdate | None = None
    """How files are rewritten by their set columns only, where they can be."""

    @property
    def columns(self) -> list[str]:
        return self.condition.bound.columns() if self.condition is not None else []

    def process_file(self, file: AddFile, sinks: Sinks) -> FileChange:
        """Update the matching rows of one target file (the per-file work)."""
        started = time.perf_counter_ns()
        if self.columns_only is not None and not self.table.local:  # fetched whole anyway: once
            data = fetch_file(self.table, file)
            target = read_target_rows(self.table.reader, file, self.columns, data)
        else:
            target = read_target_rows(self.table.reader, file, self.table.first_read(self.columns))
        rewriter = FileRewriter(self.table, sinks, target, started)
        if self.condition is None:
            updated = np.arange(target.num_rows, dtype=np.int64)
        else:
            updated = true_positions(self.condition.bound.matches(target.rows))
        if not updated.size:
            return rewriter.unchanged()
        if self.columns_only is not None:
            change = update_columns(
                self.columns_only,
                self.table,
                sinks,
                target,
                updated=updated,
                assignments=self.assignments,
                started_ns=started,
            )
            if change is not None:
                return change
        rewriter.load(updated)
        new_rows = regenerate(
            apply_assignments(rewriter.full_rows(updated), self.assignments, self.table.write_schema.names),
            self.table.spec.constraints.generated,
            self.assignments,
            insert=False,
        )
        return rewriter.finish(EMPTY, updated, new_rows, Counter(updated=int(updated.size)))


def _assignments(
    table: DmlTable,
    updates: Mapping[str, str] | None,
    new_values: Mapping[str, Any] | None,
    scope: str = "",
) -> dict[str, Assignment]:
    """The column -> value assignments (delta-rs's rules: ``updates`` SQL or ``new_values`` Python
    values, one of the two)."""
    if updates is not None and new_values is not None:
        raise InvalidDmlArgumentError(
            "Passing updates and new_values at same time is not allowed, pick one.", table=table.table_path
        )
    if updates is None and new_values is None:
        raise InvalidDmlArgumentError(
            "Either updates or new_values need to be passed to update the table.", table=table.table_path
        )
    schema = table.read_schema
    given = dict(updates if updates is not None else new_values or {})
    if not given:
        raise InvalidDmlArgumentError(
            f"No column to update in table {table.table_path}", table=table.table_path
        )
    names = _names(given, schema.names)
    check_unique(names, table.table_path)
    identity = [column.name for column in table.spec.constraints.identity]
    for name in names:
        if find_column(identity, name) is not None:
            raise update_error(name, table.table_path)
    resolved: dict[str, Assignment] = {}
    for name, value in given.items():
        column = find_column(schema.names, str(name))
        if column is None:
            raise unresolved_column(str(name), schema)
        target = schema.field(column).type
        if updates is not None:
            if not isinstance(value, str):
                raise TypeError(
                    f"The values of the updates parameter must all be SQL strings. Got {dict(updates)}. "
                    "Did you mean to use the new_values parameter?"
                )
            resolved[column] = SqlText(value, {scope: schema}, target=target, column=column)
        else:
            resolved[column] = LiteralValue(value, target, column)
    for assignment in resolved.values():
        _ = assignment.bound  # unknown columns, functions and types fail now, before anything is read
    return resolved


def _names(given: Mapping[str, Any], columns: list[str]) -> list[str]:
    return [find_column(columns, str(name)) or str(name) for name in given]


def plan_update(
    snapshot: Snapshot,
    updates: Mapping[str, str] | None = None,
    new_values: Mapping[str, Any] | None = None,
    predicate: str | None = None,
    *,
    alias: str | None = None,
) -> tuple[UpdatePlan, Predicate | None]:
    """Bind the assignments and ``predicate`` and check the table can be changed; returns the
    plan and its pruning predicate (``None``: every file). With ``alias`` the expressions may
    also qualify the table's columns with it (``t.id``)."""
    table = dml_table(snapshot, removes_rows=True)
    assignments = _assignments(table, updates, new_values, alias or "")
    condition = None
    pruning = None
    if predicate is not None:
        condition = SqlText(predicate, {alias or "": table.read_schema}, kind="predicate")
        pruning = condition.bound.to_predicate()
    return UpdatePlan(table, condition, assignments, plan_column_update(table, assignments)), pruning


def update_parameters(predicate: str | None) -> dict[str, list[str]]:
    """Delta's UPDATE ``operationParameters``."""
    return {"predicate": [predicate] if predicate is not None else []}


def update_rows(
    snapshot: Snapshot,
    updates: Mapping[str, str] | None = None,
    new_values: Mapping[str, Any] | None = None,
    predicate: str | None = None,
) -> DmlResult:
    """Update the rows of the table at ``snapshot`` matching ``predicate`` (all rows without one)."""
    started = time.perf_counter_ns()
    txn = snapshot_transaction(snapshot, OPERATION)
    plan, pruning = plan_update(snapshot, updates, new_values, predicate)
    candidates = candidate_files(snapshot, pruning)
    return run_plan(
        txn,
        plan,
        candidates,
        started,
        lambda changes, sinks, scanned_ns: finish_update(
            txn,
            changes,
            sinks.close(),
            pruning=pruning,
            candidates=candidates,
            parameters=update_parameters(predicate),
            started_ns=started,
            scanned_ns=scanned_ns,
        ),
    )


def finish_update(
    txn: Transaction,
    changes: Sequence[FileChange],
    shared: SinkFiles,
    *,
    pruning: Predicate | None,
    candidates: pa.Table,
    parameters: Mapping[str, object],
    started_ns: int,
    scanned_ns: int,
) -> DmlResult:
    """Commit the per-file results of an UPDATE (however they were computed) with Delta's
    metrics; what it read is the pruning predicate and the candidate files. The caller deletes
    the files written when nothing was committed."""
    actions = file_actions(changes, shared, now_ms())
    totals = FileTotals.of(changes)
    scan_ms, rewrite_ms = totals.split_ms(scanned_ns)
    added = added_files(actions)
    metrics = {
        "numAddedFiles": len(added),
        "numRemovedFiles": totals.removed_files,
        "numAddedChangeFiles": len(shared.changes),
        "numDeletionVectorsAdded": totals.dv_added + totals.dv_updated,
        "numDeletionVectorsRemoved": totals.dv_removed + totals.dv_updated,
        "numDeletionVectorsUpdated": totals.dv_updated,
        "numUpdatedRows": totals.counts.get("updated", 0),
        "numCopiedRows": totals.copied_rows,
        "executionTimeMs": 0,
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": rewrite_ms,
        "numRemovedBytes": totals.removed_bytes,
        "numAddedBytes": sum(a.size for a in added),
    }
    return commit_dml(
        txn,
        actions,
        reads=pruning,
        read_files=candidates,
        parameters=parameters,
        metrics=metrics,
        started_ns=started_ns,
    )
