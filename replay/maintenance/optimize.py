"""OPTIMIZE: compaction, Z-ordering and deletion-vector purges, committed through transactions.

A run has three steps, each usable on its own (a Spark front end plans on the driver, rewrites
bins in tasks and commits on the driver):

1. :func:`plan_optimize` picks the files (the active files of the partitions ``partition_filters``
   selects, a predicate on partition columns only) and groups them into bins
   (:mod:`replay.maintenance.optimize_plan`); it returns an :class:`OptimizeJob` with the
   rewriter of its bins and what the commits will say;
2. the job's rewriter turns each bin into new files (:mod:`replay.maintenance.optimize_rewrite`,
   :mod:`replay.maintenance.zorder`); :func:`run_job` runs ``max_concurrent_tasks`` bins at a time;
3. :func:`commit_rewritten` commits rewritten bins in one transaction from the planned snapshot:
   ``add`` and ``remove`` actions with ``dataChange=false`` (so the commit runs under
   ``SnapshotIsolation``: concurrent appends neither fail it nor are failed by it, and the change
   data feed shows nothing), the rewritten files recorded as read (a concurrent delete of one is
   Delta's ``ConcurrentDeleteReadException``), ``commitInfo`` with Delta's operation
   (``OPTIMIZE``, or ``REORG`` for a purge), ``operationParameters`` and ``operationMetrics``.
   With ``min_commit_interval``, bins finished so far are committed whenever that much time has
   passed since the last commit, so a long run commits in several versions.

Files written for bins that are not committed are deleted when it is certain they are not in
the table (a refused commit, a failed rewrite); never when the outcome of a commit is unknown.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa

from replay.log.concurrency import Work, default_threads, executor, gc_paused
from replay.log.table_io import TableIO
from replay.maintenance.clustering import ClusteringRewriter, clustered_optimize, clustering_run
from replay.maintenance.optimize_metrics import OptimizeMetrics, operation_metrics, predicate_sql
from replay.maintenance.optimize_plan import (
    Bin,
    CompactionLimits,
    InvalidOptimizeSettingError,
    OptimizeMode,
    OptimizePlan,
    candidate_rows,
    plan_bins,
)
from replay.maintenance.optimize_rewrite import (
    BinRewriter,
    RewrittenBin,
    check_rewritable,
    discard_rewritten,
)
from replay.maintenance.zorder import ZOrderRewriter, resolve_zorder_columns
from replay.protocol.arrow_actions import add_actions, map_dicts
from replay.protocol.errors import DeltaError
from replay.protocol.predicates import (
    TRUE,
    Predicate,
    column_name,
    columns_of,
    has_opaque,
)
from replay.protocol.sql_predicate import parse_predicate
from replay.state.pruning import decided_by_partition_values, prune
from replay.state.scan import Filter, read_predicate
from replay.state.snapshot import Snapshot
from replay.txn.commit_properties import commit_properties, deltalake_arguments
from replay.txn.transaction import CommitOutcome, Transaction
from replay.txn.write_commit import partitions_matching

logger = logging.getLogger(__name__)

OPTIMIZE_OPERATION = "OPTIMIZE"
REORG_OPERATION = "REORG"
PartitionFilter = Filter | str
"""Which partitions to optimize: DNF tuples (deltalake's ``partition_filters``), a pyarrow
expression, a predicate tree, or SQL text (``"date >= '2024-01-01'"``); partition columns only."""
Interval = float | _dt.timedelta


class OptimizeArgumentError(DeltaError, ValueError):
    """An OPTIMIZE argument Delta refuses (a filter on a data column, an interval below zero)."""


@dataclass(frozen=True)
class OptimizeJob:
    """A planned run: its bins, their rewriter, and what its commits record."""

    plan: OptimizePlan
    rewriter: BinRewriter | ZOrderRewriter | ClusteringRewriter
    operation: str
    parameters: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class OptimizeResult:
    """What a run did: deltalake's metrics dict and the versions it committed (oldest first)."""

    metrics: dict[str, object]
    versions: tuple[int, ...]

    @property
    def version(self) -> int | None:
        return self.versions[-1] if self.versions else None


# -- planning -----------------------------------------------------------------------------------
def partition_predicate(filters: PartitionFilter | None, snapshot: Snapshot) -> tuple[Predicate, list[str]]:
    """The predicate ``filters`` stand for, and its text for ``commitInfo`` (Delta's ``predicate``
    parameter: one string per filter). Raises :class:`OptimizeArgumentError` naming a data column
    the filter reads (Delta's ``DELTA_NON_PARTITION_COLUMN_REFERENCE``) and
    :class:`~replay.protocol.predicates.InvalidFilterError` for a malformed filter."""
    if filters is None:
        return TRUE, []
    if isinstance(filters, str):
        parsed = parse_predicate(filters).resolve(snapshot.schema.field_names)
        predicate, texts = parsed.tree, [filters]
    else:
        predicate, _ = read_predicate(filters, snapshot.metadata.arrow_schema)
        texts = [] if predicate == TRUE else [predicate_sql(predicate)]
    if has_opaque(predicate):
        raise OptimizeArgumentError(
            f"Cannot tell which partitions the filter {filters!r} selects: use DNF tuples, SQL text or "
            "a simple pyarrow expression on partition columns",
            table=snapshot.table_path,
        )
    partitions = list(snapshot.partition_columns)
    lowered = {name.lower() for name in partitions}
    for path in sorted(columns_of(predicate)):
        if len(path) != 1 or path[0].lower() not in lowered:
            raise OptimizeArgumentError(
                f"[DELTA_NON_PARTITION_COLUMN_REFERENCE] Predicate references non-partition column "
                f"'{column_name(path)}'. Only the partition columns may be referenced: "
                f"[{', '.join(partitions)}]",
                table=snapshot.table_path,
            )
    return predicate, texts


def selected_files(snapshot: Snapshot, predicate: Predicate) -> pa.Table:
    """The active files of the partitions ``predicate`` (on partition columns) selects, exactly."""
    files = snapshot.files_table()
    if predicate == TRUE:
        return files
    files = prune(files, predicate, snapshot.config)
    if files.num_rows == 0 or decided_by_partition_values(files, predicate, snapshot.config):
        return files
    matches = partitions_matching(predicate, snapshot.metadata)
    values = map_dicts(files.column("partition_values"))
    return files.filter(pa.array([matches(partition or {}) for partition in values], pa.bool_()))


def plan_optimize(
    snapshot: Snapshot,
    mode: OptimizeMode,
    *,
    partition_filters: PartitionFilter | None = None,
    zorder_columns: Sequence[str] = (),
    target_size: int | None = None,
    limits: CompactionLimits | None = None,
    parameters: Mapping[str, object] | None = None,
    full: bool = False,
) -> OptimizeJob:
    """Plan a ``mode`` run over ``snapshot`` (see the module docstring). On a clustered table
    (with clustering columns) compaction clusters, as Delta's OPTIMIZE does
    (:mod:`replay.maintenance.clustering`; ``full``: every file, Delta's ``OPTIMIZE ... FULL``).

    Raises :class:`~replay.protocol.errors.UnsupportedTableFeatureError` for a table this
    library cannot rewrite, :class:`~replay.maintenance.clustering.ClusteringError` for a
    partition filter or Z-order columns on a clustered table,
    :class:`OptimizeArgumentError` for a filter on data columns,
    :class:`~replay.maintenance.zorder.ZOrderColumnError` for bad Z-order columns and
    :class:`InvalidOptimizeSettingError` for bad sizes.
    """
    check_rewritable(snapshot)
    io = snapshot.io
    paths = clustered_optimize(snapshot, zorder_columns, partition_filters, full=full)
    if paths and mode in (OptimizeMode.COMPACT, OptimizeMode.CLUSTER, OptimizeMode.AUTO):
        auto = mode is OptimizeMode.AUTO
        plan, clusterer, recorded = clustering_run(snapshot, paths, target_size, limits, full=full, auto=auto)
        return OptimizeJob(plan, clusterer, OPTIMIZE_OPERATION, recorded)
    predicate, texts = partition_predicate(partition_filters, snapshot)
    files = selected_files(snapshot, predicate)
    limits = limits or CompactionLimits.for_run(mode, snapshot.config, io.conf, target_size)
    columns: list[str] = []
    if mode is OptimizeMode.ZORDER:
        columns = resolve_zorder_columns(
            zorder_columns,
            snapshot.schema,
            snapshot.partition_columns,
            snapshot.config.num_indexed_cols,
            io.conf,
            stats_columns=snapshot.config.stats_columns,
        )
    candidates = add_actions(candidate_rows(files, mode, limits))
    plan = plan_bins(candidates, mode, limits, considered=files.num_rows)
    now = int(time.time() * 1000)
    rewriter: BinRewriter | ZOrderRewriter
    if mode is OptimizeMode.ZORDER:
        rewriter = ZOrderRewriter.for_snapshot(snapshot, columns, limits.max_file_size, now)
    else:
        rewriter = BinRewriter.for_snapshot(snapshot, now)
    if mode is OptimizeMode.PURGE:
        operation, recorded = REORG_OPERATION, {"predicate": texts, "applyPurge": True}
    else:
        recorded = {
            "predicate": texts,
            "zOrderBy": columns,
            "clusterBy": [],
            "auto": mode is OptimizeMode.AUTO,
        }
        operation = OPTIMIZE_OPERATION
    return OptimizeJob(plan, rewriter, operation, recorded if parameters is None else parameters)


# -- running --------------------------------------------------------------------------------------
def interval_seconds(value: Interval | None) -> float | None:
    """``min_commit_interval`` in seconds (a number of seconds or a ``timedelta``, as deltalake)."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, _dt.timedelta) else float(value)
    if seconds < 0:
        raise OptimizeArgumentError(f"min_commit_interval must not be negative, got {value!r}")
    return seconds


def commit_rewritten(
    io: TableIO, snapshot: Snapshot, job: OptimizeJob, rewritten: Sequence[RewrittenBin]
) -> int | None:
    """Commit ``rewritten`` bins in one transaction from ``snapshot`` (see the module docstring);
    returns the version, or ``None`` when there is nothing to commit. On failure, their files are
    deleted when the transaction certainly did not commit, and the error propagates."""
    if not any(each.removes for each in rewritten):
        return None
    txn = Transaction(io, snapshot, operation=job.operation)
    try:
        txn.read_files(file for each in rewritten for file in each.bin.files)
        for each in rewritten:
            txn.add_actions([*each.adds, *each.removes])
        txn.operation_parameters = dict(job.parameters)
        txn.operation_metrics = operation_metrics(rewritten)
        return txn.commit()
    except BaseException:
        if txn.outcome is CommitOutcome.NOT_COMMITTED:
            discard_rewritten(io, rewritten)
        raise


def _rewrite_in_order(
    rewrite: Callable[[Bin], RewrittenBin],
    bins: Sequence[Bin],
    threads: int,
    cleanup: Callable[[RewrittenBin], None],
) -> Generator[RewrittenBin, None, None]:
    """``map(rewrite, bins)`` in order on the rewrite pool of ``threads`` threads, one bin more
    than that in flight (a thread that finishes before the bin ahead of it starts the next one
    at once). If the consumer stops early or a bin fails, bins still running are waited for and
    ``cleanup`` gets each that finished (their files must not be left behind)."""
    pool = executor(Work.REWRITE, threads)
    if pool is None:
        yield from map(rewrite, bins)
        return
    pending: deque[Future[RewrittenBin]] = deque()
    upcoming = iter(bins)
    try:
        for work in upcoming:
            pending.append(pool.submit(rewrite, work))
            if len(pending) > threads:
                break
        while pending:
            result = pending.popleft().result()
            following = next(upcoming, None)
            if following is not None:
                pending.append(pool.submit(rewrite, following))
            yield result
    finally:
        for future in pending:
            if future.cancel():
                continue
            try:
                finished = future.result()
            except BaseException:  # noqa: BLE001 - its own files are already deleted
                continue
            cleanup(finished)


def _check_tasks(max_concurrent_tasks: int | None) -> None:
    if max_concurrent_tasks is not None and max_concurrent_tasks < 1:
        raise OptimizeArgumentError(f"max_concurrent_tasks must be at least 1, got {max_concurrent_tasks}")


def run_job(
    io: TableIO,
    snapshot: Snapshot,
    job: OptimizeJob,
    *,
    max_concurrent_tasks: int | None = None,
    min_commit_interval: Interval | None = None,
) -> OptimizeResult:
    """Rewrite the job's bins and commit them (see the module docstring)."""
    interval = interval_seconds(min_commit_interval)
    _check_tasks(max_concurrent_tasks)
    threads = max_concurrent_tasks or default_threads(Work.REWRITE, io.is_local)
    rewriter = job.rewriter
    if io.is_local and len(job.plan.bins) >= threads:
        # enough bins to keep every thread busy: each reads its own files, with no hand-offs
        # between threads (read-ahead pays where a read waits on a remote store, or for few bins)
        rewriter = rewriter.with_read_ahead(0)
    metrics = OptimizeMetrics.for_plan(job.plan)
    waiting: list[RewrittenBin] = []
    last_commit = time.monotonic()

    def commit(batch: list[RewrittenBin]) -> None:
        version = commit_rewritten(io, snapshot, job, batch)
        if version is not None:
            metrics.versions.append(version)
            metrics.record(batch)
            logger.info(
                "%s committed %d bins of %s as version %d", job.operation, len(batch), io.shown_path, version
            )

    def discard(finished: RewrittenBin) -> None:
        discard_rewritten(io, [finished])

    try:
        with (
            gc_paused(),
            contextlib.closing(  # rewrites build no reference cycles
                _rewrite_in_order(rewriter.rewrite, job.plan.bins, threads, discard)
            ) as done,
        ):
            for rewritten in done:
                waiting.append(rewritten)
                if interval is not None and time.monotonic() - last_commit >= interval:
                    batch, waiting = waiting, []
                    commit(batch)
                    last_commit = time.monotonic()
        batch, waiting = waiting, []
        if batch:
            commit(batch)
    except BaseException:
        discard_rewritten(io, waiting)
        raise
    return OptimizeResult(metrics.as_dict(), tuple(metrics.versions))


def optimize(
    snapshot: Snapshot,
    mode: OptimizeMode,
    *,
    partition_filters: PartitionFilter | None = None,
    zorder_columns: Sequence[str] = (),
    target_size: int | None = None,
    max_concurrent_tasks: int | None = None,
    min_commit_interval: Interval | None = None,
    full: bool = False,
) -> OptimizeResult:
    """Plan and run an OPTIMIZE of ``snapshot``'s table (see :func:`plan_optimize`, :func:`run_job`)."""
    interval_seconds(min_commit_interval)  # refused before any work
    _check_tasks(max_concurrent_tasks)
    job = plan_optimize(
        snapshot,
        mode,
        partition_filters=partition_filters,
        zorder_columns=zorder_columns,
        target_size=target_size,
        full=full,
    )
    return run_job(
        snapshot.io,
        snapshot,
        job,
        max_concurrent_tasks=max_concurrent_tasks,
        min_commit_interval=min_commit_interval,
    )


# -- the facade's optimizer ---------------------------------------------------------------------------
class TableOptimizer:
    """``DeltaTable.optimize``: delta-rs's ``TableOptimizer`` (``compact``, ``z_order``) and the purge
    of deletion vectors (Delta's ``REORG TABLE ... APPLY (PURGE)``).

    Each method optimizes the table's loaded version, returns deltalake's metrics dict, and moves the
    table to the last version it committed.
    """

    def __init__(self, snapshot: Callable[[], Snapshot], moved_to: Callable[[int | None], None]) -> None:
        self._snapshot = snapshot
        self._moved_to = moved_to

    def _optimize(
        self,
        mode: OptimizeMode,
        partition_filters: PartitionFilter | None,
        target_size: int | None,
        max_concurrent_tasks: int | None,
        min_commit_interval: Interval | None,
        *,
        zorder_columns: Sequence[str] = (),
        full: bool = False,
        deltalake_options: Mapping[str, object] | None = None,
    ) -> dict[str, object]:
        """Run :func:`optimize` on the loaded version (its commit with deltalake's
        ``commit_properties``, if given), move the table to what it committed, and return the
        metrics."""
        method = "z_order" if mode is OptimizeMode.ZORDER else mode.value  # as the caller named it
        properties = deltalake_arguments(method, deltalake_options or {})
        with commit_properties(properties):
            result = optimize(
                self._snapshot(),
                mode,
                partition_filters=partition_filters,
                zorder_columns=zorder_columns,
                target_size=target_size,
                max_concurrent_tasks=max_concurrent_tasks,
                min_commit_interval=min_commit_interval,
                full=full,
            )
        self._moved_to(result.version)
        return result.metrics

    def compact(
        self,
        partition_filters: PartitionFilter | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        min_commit_interval: Interval | None = None,
        *,
        full: bool = False,
        **deltalake_options: object,
    ) -> dict[str, object]:
        """Compact small files into files of about ``target_size`` bytes (Delta's ``OPTIMIZE``).

        On a clustered table this clusters, as Delta's OPTIMIZE does: the files not yet
        clustered, with the small ZCubes, along the Hilbert curve of the clustering columns
        (:mod:`replay.maintenance.clustering`); ``full=True`` reclusters every file (``OPTIMIZE
        ... FULL``). deltalake's engine arguments (``max_spill_size``, ``writer_properties`` ...)
        are taken as :mod:`replay.protocol.deltalake_options` says."""
        return self._optimize(
            OptimizeMode.COMPACT,
            partition_filters,
            target_size,
            max_concurrent_tasks,
            min_commit_interval,
            full=full,
            deltalake_options=deltalake_options,
        )

    def z_order(
        self,
        columns: Iterable[str],
        partition_filters: PartitionFilter | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        min_commit_interval: Interval | None = None,
        **deltalake_options: object,
    ) -> dict[str, object]:
        """Rewrite every file of the selected partitions clustered along the Z-curve of ``columns``
        (Delta's ``OPTIMIZE ... ZORDER BY``). deltalake's engine arguments: as for ``compact``."""
        return self._optimize(
            OptimizeMode.ZORDER,
            partition_filters,
            target_size,
            max_concurrent_tasks,
            min_commit_interval,
            zorder_columns=list(columns),
            deltalake_options=deltalake_options,
        )

    def purge_deletion_vectors(
        self,
        partition_filters: PartitionFilter | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        min_commit_interval: Interval | None = None,
    ) -> dict[str, object]:
        """Rewrite the files that have deleted rows without them, so no deletion vector is left
        (Delta's ``REORG TABLE ... APPLY (PURGE)``; recorded as operation ``REORG``)."""
        return self._optimize(
            OptimizeMode.PURGE, partition_filters, target_size, max_concurrent_tasks, min_commit_interval
        )


__all__ = [
    "InvalidOptimizeSettingError",
    "OptimizeArgumentError",
    "OptimizeJob",
    "OptimizeMode",
    "OptimizeResult",
    "TableOptimizer",
    "commit_rewritten",
    "optimize",
    "plan_optimize",
    "run_job",
]
