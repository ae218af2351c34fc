"""Committing a row-level change: its actions, what it read, Delta's parameters and metrics.

Every operation commits through one :class:`~replay.txn.transaction.Transaction` made from the
snapshot it planned on. What it read is the pruning predicate (a concurrent append that may hold
matching rows conflicts) and the candidate files (their concurrent removal conflicts), so changes
of disjoint partitions both commit, as in Delta. An operation that changes nothing commits
nothing (Delta's ``commitIfNeeded`` skips empty commits) and still returns its metrics. Files
written are deleted when, and only when, nothing was committed
(:class:`~replay.txn.transaction.CommitOutcome`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from replay.dml.outputs import SinkFiles, Sinks
from replay.dml.rewrite import FileChange
from replay.protocol.actions import Action, AddCDCFile, AddFile
from replay.protocol.predicates import TRUE, Predicate
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import WrittenFile
from replay.txn.transaction import CommitOutcome, Transaction


@dataclass(frozen=True)
class DmlResult:
    """The committed version (``None``: nothing changed, nothing committed) and Delta's metrics."""

    version: int | None
    metrics: dict[str, int]


def change_file(written: WrittenFile) -> AddCDCFile:
    """The ``cdc`` action of a change data file (no statistics, ``dataChange`` false)."""
    add = written.add
    return AddCDCFile(path=add.path, partition_values=dict(add.partition_values or {}), size=add.size)


def elapsed_ms(started_ns: int) -> int:
    return (time.perf_counter_ns() - started_ns) // 1_000_000


@contextlib.contextmanager
def discard_unless_committed(txn: Transaction, sinks: Sinks) -> Iterator[None]:
    """Delete what ``sinks`` wrote if the block fails and ``txn`` certainly committed nothing."""
    try:
        yield
    except BaseException:
        if txn.outcome is CommitOutcome.NOT_COMMITTED:
            sinks.discard()
        raise


@dataclass(frozen=True)
class FileTotals:
    """Sums over the per-file results of an operation."""

    touched: int
    removed_files: int
    removed_bytes: int
    changed_rows: int
    copied_rows: int
    rewritten_files: int
    rewritten_bytes: int
    dv_added: int
    dv_removed: int
    dv_updated: int
    scan_ns: int
    write_ns: int
    counts: dict[str, int]

    @classmethod
    def of(cls, changes: Sequence[FileChange]) -> FileTotals:
        touched = [c for c in changes if c.touched]
        removed = [c for c in touched if c.removed_whole]
        dv: dict[str, int] = {"added": 0, "removed": 0, "updated": 0}
        counts: dict[str, int] = {}
        for change in changes:
            for key, value in change.deletion_vector_counts().items():
                dv[key] += value
            for key, value in change.counts.items():
                counts[key] = counts.get(key, 0) + value
        rewritten = [w for c in touched for w in c.rewritten]
        return cls(
            touched=len(touched),
            removed_files=len(removed),
            removed_bytes=sum(c.file.size for c in removed),
            changed_rows=sum(c.changed_rows for c in touched),
            copied_rows=sum(c.copied_rows for c in touched),
            rewritten_files=len(rewritten),
            rewritten_bytes=sum(w.add.size for w in rewritten),
            dv_added=dv["added"],
            dv_removed=dv["removed"],
            dv_updated=dv["updated"],
            scan_ns=sum(c.scan_ns for c in changes),
            write_ns=sum(c.write_ns for c in changes),
            counts=counts,
        )

    def split_ms(self, wall_ns: int) -> tuple[int, int]:
        """``(scanTimeMs, rewriteTimeMs)``: the wall time of the per-file work split by the time
        its tasks spent finding rows and writing."""
        busy = self.scan_ns + self.write_ns
        if busy <= 0:
            return wall_ns // 1_000_000, 0
        write = wall_ns * self.write_ns // busy
        return (wall_ns - write) // 1_000_000, write // 1_000_000


def file_actions(changes: Iterable[FileChange], shared: SinkFiles, timestamp: int) -> list[Action]:
    """The actions of the target files' changes, the rows written besides them and the change data."""
    actions: list[Action] = []
    for change in changes:
        actions.extend(change.actions(timestamp))
    actions.extend(w.add for w in shared.data)
    actions.extend(change_file(w) for w in shared.changes)
    return actions


def added_files(actions: Iterable[Action]) -> list[AddFile]:
    """New data files among ``actions`` (DV re-adds of existing files excluded)."""
    return [a for a in actions if isinstance(a, AddFile) and a.deletion_vector is None]


def commit_dml(
    txn: Transaction,
    actions: Sequence[Action],
    *,
    reads: Predicate | None,
    read_files: pa.Table | Iterable[AddFile],
    parameters: Mapping[str, Any],
    metrics: dict[str, int],
    started_ns: int,
) -> DmlResult:
    """Commit ``actions`` through ``txn`` (nothing when there are none); ``metrics`` gets
    ``executionTimeMs``."""
    metrics["executionTimeMs"] = elapsed_ms(started_ns)
    if not actions:
        return DmlResult(None, metrics)
    txn.read_predicate(reads if reads is not None else TRUE)
    txn.read_files(read_files)
    txn.add_actions(actions)
    txn.operation_parameters = dict(parameters)
    txn.operation_metrics = dict(metrics)
    return DmlResult(txn.commit(), metrics)


def snapshot_transaction(snapshot: Snapshot, operation: str) -> Transaction:
    """The transaction of an operation planned on ``snapshot``."""
    return Transaction(snapshot.io, snapshot, operation=operation)
