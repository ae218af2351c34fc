"""Committing a MERGE: Delta's operation parameters and metrics, whoever did the per-file work.

:func:`finish_merge` is the last step of :func:`replay.dml.merge.merge_rows` and of any engine
that computes the per-file results (:class:`~replay.dml.rewrite.FileChange`) and the inserts
itself (the Spark front end), so both commit the same actions, parameters and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from replay.dml.commit import (
    DmlResult,
    FileTotals,
    added_files,
    commit_dml,
    elapsed_ms,
    file_actions,
)
from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, ClauseSpec
from replay.dml.outputs import SinkFiles
from replay.dml.rewrite import FileChange
from replay.protocol.actions import Action
from replay.protocol.predicates import Predicate
from replay.txn.committer import now_ms
from replay.txn.transaction import Transaction


def merge_parameters(condition: str, specs: Sequence[ClauseSpec]) -> dict[str, object]:
    """Delta's MERGE ``operationParameters``: the condition, then each kind's clauses in order."""

    def of(kind: str) -> list[dict[str, str]]:
        return [spec.operation_parameter() for spec in specs if spec.kind == kind]

    return {
        "predicate": [condition],
        "matchedPredicates": of(MATCHED),
        "notMatchedPredicates": of(NOT_MATCHED),
        "notMatchedBySourcePredicates": of(NOT_MATCHED_BY_SOURCE),
    }


def finish_merge(
    txn: Transaction,
    changes: Sequence[FileChange],
    shared: SinkFiles,
    inserted: Mapping[str, int],
    *,
    metadata_actions: Sequence[Action],
    source_rows: int,
    pruning: Predicate,
    candidates: pa.Table,
    parameters: Mapping[str, object],
    materialize_ms: int,
    started_ns: int,
    scanned_ns: int,
) -> DmlResult:
    """Commit the per-file results and the inserts of a MERGE (however they were computed) with
    Delta's metrics; what it read is the pruning predicate and the candidate files. The caller
    deletes the files written when nothing was committed."""
    actions: list[Action] = [*metadata_actions, *file_actions(changes, shared, now_ms())]
    totals = FileTotals.of(changes)
    scan_ms, rewrite_ms = totals.split_ms(scanned_ns)
    rewrite_ms += max(0, elapsed_ms(started_ns) - scanned_ns // 1_000_000)
    metrics = _metrics(source_rows, totals, inserted, actions, len(shared.changes))
    metrics.update(materializeSourceTimeMs=materialize_ms, scanTimeMs=scan_ms, rewriteTimeMs=rewrite_ms)
    return commit_dml(
        txn,
        actions,
        reads=pruning,
        read_files=candidates,
        parameters=parameters,
        metrics=metrics,
        started_ns=started_ns,
    )


def _metrics(
    source_rows: int,
    totals: FileTotals,
    inserted: Mapping[str, int],
    actions: Sequence[Action],
    change_files: int,
) -> dict[str, int]:
    """Delta's MERGE metrics (``DeltaOperationMetrics.MERGE``, DV counts as Delta reports them)."""
    counts = totals.counts
    added = added_files(actions)
    updated = counts.get("matchedUpdated", 0) + counts.get("notMatchedBySourceUpdated", 0)
    deleted = counts.get("matchedDeleted", 0) + counts.get("notMatchedBySourceDeleted", 0)
    rows_inserted = inserted.get("inserted", 0)
    return {
        "numSourceRows": source_rows,
        "numTargetRowsInserted": rows_inserted,
        "numTargetRowsUpdated": updated,
        "numTargetRowsMatchedUpdated": counts.get("matchedUpdated", 0),
        "numTargetRowsNotMatchedBySourceUpdated": counts.get("notMatchedBySourceUpdated", 0),
        "numTargetRowsDeleted": deleted,
        "numTargetRowsMatchedDeleted": counts.get("matchedDeleted", 0),
        "numTargetRowsNotMatchedBySourceDeleted": counts.get("notMatchedBySourceDeleted", 0),
        "numTargetRowsCopied": totals.copied_rows,
        "numTargetBytesAdded": sum(a.size for a in added),
        "numTargetBytesRemoved": totals.removed_bytes,
        "numOutputRows": rows_inserted + updated + totals.copied_rows,
        "numTargetFilesAdded": len(added),
        "numTargetFilesRemoved": totals.removed_files,
        "numTargetChangeFilesAdded": change_files,
        "executionTimeMs": 0,
        "materializeSourceTimeMs": 0,
        "scanTimeMs": 0,
        "rewriteTimeMs": 0,
        "numTargetDeletionVectorsAdded": totals.dv_added + totals.dv_updated,
        "numTargetDeletionVectorsRemoved": totals.dv_removed + totals.dv_updated,
        "numTargetDeletionVectorsUpdated": totals.dv_updated,
    }
