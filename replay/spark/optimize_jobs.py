"""OPTIMIZE on Spark: planned on the driver, bins rewritten by the executors, one commit.

:func:`optimize_on_spark` plans the run with :func:`replay.maintenance.optimize.plan_optimize`
(Delta's bin packing, per partition), hands each bin to a task of one Spark job (a bin per
partition of a ``range``, so compaction of many partitions runs on every executor), and commits
what the tasks wrote in one transaction with
:func:`replay.maintenance.optimize.commit_rewritten`, as the Python OPTIMIZE commits. A task runs
:meth:`~replay.maintenance.optimize_rewrite.BinRewriter.rewrite` (or the Z-order rewriter's), which
deletes its own files when it fails.

Files of tasks that finished are deleted when the job fails (known from an accumulator; Spark
Connect has none, and such files stay behind unreferenced until VACUUM) and when the commit
certainly did not land.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from replay.maintenance.optimize import OptimizeJob, commit_rewritten
from replay.maintenance.optimize_metrics import OptimizeMetrics
from replay.maintenance.optimize_rewrite import RewrittenBin, discard_rewritten
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import delete_data_files

logger = logging.getLogger(__name__)

_PAYLOAD = "bin BINARY"


class _PathsParam(AccumulatorParam[list[str]]):
    """Accumulates the data files finished tasks wrote."""

    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, value1: list[str], value2: list[str]) -> list[str]:  # noqa: N802 - PySpark's name
        value1.extend(value2)
        return value1


def _rewrite_task(
    job: OptimizeJob, written: Any, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The executor side: rewrite the bins whose indexes reach this task."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            rewritten = job.rewriter.rewrite(job.plan.bins[index])
            if written is not None:
                written.add(list(rewritten.written_paths))
            payload = pickle.dumps((index, rewritten))
            yield pa.record_batch([pa.array([payload], pa.binary())], names=["bin"])


def rewrite_bins(spark: Any, job: OptimizeJob) -> list[RewrittenBin]:
    """Rewrite every bin of ``job`` in a task of its own; deletes what finished tasks wrote if the
    job fails."""
    bins = job.plan.bins
    if not bins:
        return []
    try:
        written = spark.sparkContext.accumulator([], _PathsParam())
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext, no accumulators
        written = None
    indexes = spark.range(0, len(bins), 1, numPartitions=len(bins))
    outputs = indexes.mapInArrow(functools.partial(_rewrite_task, job, written), _PAYLOAD)
    try:
        rows = outputs.collect()
    except BaseException:
        if written is not None and written.value:
            spec = job.rewriter.spec
            delete_data_files(spec.table_path, list(written.value), spec.conf)
        raise
    done: list[tuple[int, RewrittenBin]] = [pickle.loads(row[0]) for row in rows]
    return [rewritten for _, rewritten in sorted(done, key=lambda pair: pair[0])]


def optimize_on_spark(spark: Any, snapshot: Snapshot, job: OptimizeJob) -> dict[str, object]:
    """Run ``job`` (planned on ``snapshot``) on Spark's executors and commit it; returns the
    Python OPTIMIZE's metrics."""
    rewritten: Sequence[RewrittenBin] = rewrite_bins(spark, job)
    metrics = OptimizeMetrics.for_plan(job.plan)
    version = commit_rewritten(snapshot.io, snapshot, job, rewritten)  # deletes them if not committed
    if version is not None:
        metrics.versions.append(version)
        metrics.record(rewritten)
        logger.info(
            "%s of %s committed %d bins as version %d",
            job.operation,
            snapshot.io.shown_path,
            len(rewritten),
            version,
        )
    elif rewritten:
        discard_rewritten(snapshot.io, rewritten)
    return metrics.as_dict()
