"""DELETE: remove the rows matching a predicate (Delta's ``DeleteCommand``).

* No predicate: every file is removed, nothing is read.
* A predicate that partition values decide for every file (partition columns only, compared
  exactly): the files whose partitions match are removed without being read (Delta's
  metadata-only delete); the change data feed reads their rows as deleted.
* Otherwise the files that partition values and statistics cannot exclude are read (the
  predicate's columns first, the others only for files with matching rows); with deletion vectors
  the matching rows are marked deleted, copy-on-write the files are rewritten without them.
  Change data (``delete`` rows) is written copy-on-write only, as in Delta: a deletion-vector
  DELETE leaves the change feed to read the deleted rows from the deletion vectors.

Driver: :func:`plan_delete` (bind, prune, decide), then :func:`delete_rows` runs
:meth:`DeletePlan.process_file` over the candidate files and commits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from replay.dml.commit import (
    DmlResult,
    FileTotals,
    added_files,
    commit_dml,
    elapsed_ms,
    file_actions,
    snapshot_transaction,
)
from replay.dml.context import DmlTable, candidate_files, deletion_vectors_enabled, dml_table
from replay.dml.expressions import SqlText, true_positions
from replay.dml.outputs import SinkFiles, Sinks
from replay.dml.rewrite import FileChange, FileRewriter, removal
from replay.dml.runner import run_plan
from replay.dml.target_rows import read_target_rows
from replay.protocol.actions import AddFile
from replay.protocol.arrow_actions import add_actions
from replay.protocol.predicates import Predicate
from replay.state.pruning import decided_by_partition_values
from replay.state.snapshot import Snapshot
from replay.txn.committer import now_ms
from replay.txn.transaction import Transaction

OPERATION = "DELETE"


@dataclass(frozen=True)
class DeletePlan:
    """A DELETE as planned on the driver (picklable): what each target file's work needs."""

    table: DmlTable
    condition: SqlText

    @cached_property
    def columns(self) -> list[str]:
        return self.condition.bound.columns()

    def process_file(self, file: AddFile, sinks: Sinks) -> FileChange:
        """Delete the matching rows of one target file (the per-file work)."""
        started = time.perf_counter_ns()
        target = read_target_rows(self.table.reader, file, self.table.first_read(self.columns))
        rewriter = FileRewriter(self.table, sinks, target, started)
        deleted = true_positions(self.condition.bound.matches(target.rows))
        if not deleted.size:
            return rewriter.unchanged()
        return rewriter.finish(deleted, counts=Counter(deleted=int(deleted.size)))


def plan_delete(
    snapshot: Snapshot, predicate: str, *, alias: str | None = None
) -> tuple[DeletePlan, Predicate]:
    """Bind ``predicate`` to the table (errors name unknown columns and functions with their
    position) and check the table can be changed; returns the plan and its pruning predicate.
    With ``alias`` the predicate may also qualify the table's columns with it (``t.id``)."""
    dv = deletion_vectors_enabled(snapshot.config)
    table = dml_table(snapshot, removes_rows=True, change_data=not dv)
    condition = SqlText(predicate, {alias or "": table.read_schema}, kind="predicate")
    return DeletePlan(table, condition), condition.bound.to_predicate()


def delete_rows(snapshot: Snapshot, predicate: str | None = None) -> DmlResult:
    """Delete the rows of the table at ``snapshot`` matching ``predicate`` (all rows without one)."""
    started = time.perf_counter_ns()
    txn = snapshot_transaction(snapshot, OPERATION)
    parameters = delete_parameters(predicate)
    if predicate is None:
        dml_table(snapshot, removes_rows=True)
        files = snapshot.files_table()
        return remove_whole_files(txn, files, None, parameters, started)
    plan, pruning = plan_delete(snapshot, predicate)
    candidates = candidate_files(snapshot, pruning)
    if decided_by_partition_values(candidates, pruning, snapshot.config):
        return remove_whole_files(txn, candidates, pruning, parameters, started)
    return run_plan(
        txn,
        plan,
        candidates,
        started,
        lambda changes, sinks, scanned_ns: finish_delete(
            txn,
            changes,
            sinks.close(),
            pruning=pruning,
            candidates=candidates,
            parameters=parameters,
            started_ns=started,
            scanned_ns=scanned_ns,
        ),
    )


def delete_parameters(predicate: str | None) -> dict[str, list[str]]:
    """Delta's DELETE ``operationParameters``."""
    return {"predicate": [predicate] if predicate is not None else []}


def finish_delete(
    txn: Transaction,
    changes: Sequence[FileChange],
    shared: SinkFiles,
    *,
    pruning: Predicate,
    candidates: pa.Table,
    parameters: Mapping[str, object],
    started_ns: int,
    scanned_ns: int,
) -> DmlResult:
    """Commit the per-file results of a DELETE (however they were computed) with Delta's metrics;
    what it read is the pruning predicate and the candidate files. The caller deletes the files
    written when nothing was committed."""
    actions = file_actions(changes, shared, now_ms())
    totals = FileTotals.of(changes)
    scan_ms, rewrite_ms = totals.split_ms(scanned_ns)
    added = added_files(actions)
    metrics = _metrics(
        added_files=len(added),
        removed_files=totals.removed_files,
        dv=(totals.dv_added, totals.dv_removed, totals.dv_updated),
        change_files=len(shared.changes),
        deleted_rows=totals.counts.get("deleted", 0),
        copied_rows=totals.copied_rows,
        scan_ms=scan_ms,
        rewrite_ms=rewrite_ms,
        removed_bytes=totals.removed_bytes,
        added_bytes=sum(a.size for a in added),
    )
    return commit_dml(
        txn,
        actions,
        reads=pruning,
        read_files=candidates,
        parameters=parameters,
        metrics=metrics,
        started_ns=started_ns,
    )


def remove_whole_files(
    txn: Transaction,
    files: pa.Table,
    pruning: Predicate | None,
    parameters: Mapping[str, object],
    started: int,
) -> DmlResult:
    """Remove ``files`` without reading them (no predicate, or one partition values decide)."""
    removed = add_actions(files)
    timestamp = now_ms()
    logical = [_logical_records(f) for f in removed]
    metrics = _metrics(
        added_files=0,
        removed_files=len(removed),
        dv=(0, sum(1 for f in removed if f.deletion_vector is not None), 0),
        change_files=0,
        deleted_rows=sum(n for n in logical if n is not None) if None not in logical else 0,
        copied_rows=0,
        scan_ms=elapsed_ms(started),
        rewrite_ms=0,
        removed_bytes=sum(f.size for f in removed),
        added_bytes=0,
    )
    return commit_dml(
        txn,
        [removal(f, timestamp) for f in removed],
        reads=pruning,
        read_files=files,
        parameters=parameters,
        metrics=metrics,
        started_ns=started,
    )


def _logical_records(file: AddFile) -> int | None:
    """The live rows of ``file`` by its statistics (``None``: unknown)."""
    records = file.num_records
    if records is None:
        return None
    return records - (file.deletion_vector.cardinality if file.deletion_vector is not None else 0)


def _metrics(
    *,
    added_files: int,
    removed_files: int,
    dv: tuple[int, int, int],
    change_files: int,
    deleted_rows: int,
    copied_rows: int,
    scan_ms: int,
    rewrite_ms: int,
    removed_bytes: int,
    added_bytes: int,
) -> dict[str, int]:
    """Delta's DELETE metrics (``DeltaOperationMetrics.DELETE``; DV counts as Delta reports them:
    an updated DV counts as one added and one removed). Where rows were removed by whole files and
    their count is unknown, the row counts and ``numAddedFiles`` are left out, as Delta does."""
    dv_added, dv_removed, dv_updated = dv
    metrics = {
        "numAddedFiles": added_files,
        "numRemovedFiles": removed_files,
        "numDeletionVectorsAdded": dv_added + dv_updated,
        "numDeletionVectorsRemoved": dv_removed + dv_updated,
        "numDeletionVectorsUpdated": dv_updated,
        "numAddedChangeFiles": change_files,
        "numDeletedRows": deleted_rows,
        "numCopiedRows": copied_rows,
        "executionTimeMs": 0,
        "scanTimeMs": scan_ms,
        "rewriteTimeMs": rewrite_ms,
        "numRemovedBytes": removed_bytes,
        "numAddedBytes": added_bytes,
    }
    if deleted_rows == 0 and removed_files != 0:
        for key in ("numDeletedRows", "numCopiedRows", "numAddedFiles"):
            del metrics[key]
    return metrics
