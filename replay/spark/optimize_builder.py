"""``DeltaOptimizeBuilder``: Delta's OPTIMIZE builder for PySpark, on the Python OPTIMIZE.

``optimize().where("part = 'a'").executeCompaction()`` and ``.executeZOrderBy("x", "y")`` are
planned on the driver as the Python OPTIMIZE plans them, their bins are rewritten by Spark's
executors, and the driver commits once (:mod:`replay.spark.optimize_jobs`). ``where`` takes what
Delta's takes: a conjunction of equalities of partition columns with
literals; it becomes delta-rs's DNF filters (``[("part", "=", "a")]``). Anything else raises
:class:`InvalidOptimizeFilterError` naming the filter.

The result is Delta's OPTIMIZE DataFrame: the table's path and a ``metrics`` struct with the
counts the Python OPTIMIZE reports under Delta's names.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from replay.delta_log import DeltaLog
from replay.maintenance.optimize import plan_optimize
from replay.maintenance.optimize_plan import OptimizeMode
from replay.protocol.errors import DeltaError
from replay.protocol.predicates import And, Compare, Predicate
from replay.protocol.sql_predicate import parse_predicate
from replay.protocol.table_config import CLUSTERING
from replay.spark.dml_scan import SparkTarget
from replay.spark.optimize_jobs import optimize_on_spark

FILE_STATS = "STRUCT<min: BIGINT, max: BIGINT, avg: DOUBLE, totalFiles: BIGINT, totalSize: BIGINT>"
OPTIMIZE_SCHEMA = (
    f"path STRING, metrics STRUCT<numFilesAdded: BIGINT, numFilesRemoved: BIGINT, filesAdded: {FILE_STATS}, "
    f"filesRemoved: {FILE_STATS}, partitionsOptimized: BIGINT, numBatches: BIGINT, "
    "totalConsideredFiles: BIGINT, totalFilesSkipped: BIGINT, preserveInsertionOrder: BOOLEAN>"
)
_COUNTS = ("numFilesAdded", "numFilesRemoved")
_TAIL = ("partitionsOptimized", "numBatches", "totalConsideredFiles", "totalFilesSkipped")
_STATS = ("min", "max", "avg", "totalFiles", "totalSize")


class InvalidOptimizeFilterError(DeltaError, ValueError):
    """An OPTIMIZE ``where`` filter that is not a conjunction of partition column equalities."""


DnfFilter = list[tuple[str, str, str]]


def _partition_value(value: object) -> str:
    """A literal as a partition value string (what delta-rs's filters compare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | decimal.Decimal | str):
        return str(value)
    if isinstance(value, _dt.date | _dt.datetime):
        return value.isoformat(sep=" ") if isinstance(value, _dt.datetime) else value.isoformat()
    raise TypeError(type(value).__name__)


def _conjuncts(predicate: Predicate) -> list[Predicate]:
    if isinstance(predicate, And):
        return [part for child in predicate.children for part in _conjuncts(child)]
    return [predicate]


def partition_filters(
    conditions: Sequence[str], partition_columns: Sequence[str], table: str
) -> DnfFilter | None:
    """delta-rs's DNF filters of ``where`` conditions (``None``: none given); raises
    :class:`InvalidOptimizeFilterError` for anything but partition column equalities."""
    if not conditions:
        return None
    names = {column.lower(): column for column in partition_columns}
    filters: DnfFilter = []
    for text in conditions:
        for part in _conjuncts(parse_predicate(text).tree):
            column = part.column if isinstance(part, Compare) and len(part.column) == 1 else None
            name = names.get(column[0].lower()) if column is not None else None
            if not isinstance(part, Compare) or part.op != "=" or name is None:
                raise InvalidOptimizeFilterError(
                    f"OPTIMIZE of table {table} takes only equalities of partition columns "
                    f"({', '.join(partition_columns) or 'none'}) joined by AND, not {text!r}",
                    table=table,
                )
            try:
                filters.append((name, "=", _partition_value(part.value)))
            except TypeError:
                raise InvalidOptimizeFilterError(
                    f"OPTIMIZE of table {table}: the value of {name} in {text!r} is not a partition value",
                    table=table,
                ) from None
    return filters


def optimize_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metrics`` struct of Delta's OPTIMIZE result from the Python OPTIMIZE's metrics."""

    def stats(value: object) -> dict[str, Any] | None:
        if not isinstance(value, Mapping):
            return None
        return {key: value.get(key) for key in _STATS}

    row: dict[str, Any] = {key: metrics.get(key) for key in (*_COUNTS, *_TAIL)}
    row["filesAdded"] = stats(metrics.get("filesAdded"))
    row["filesRemoved"] = stats(metrics.get("filesRemoved"))
    row["preserveInsertionOrder"] = metrics.get("preserveInsertionOrder")
    return row


@dataclass(frozen=True)
class DeltaOptimizeBuilder:
    """An OPTIMIZE being built (see the module docstring); made by ``DeltaTable.optimize()``."""

    _spark: Any
    _target: SparkTarget
    _conditions: tuple[str, ...] = ()

    def where(self, partitionFilter: str) -> DeltaOptimizeBuilder:  # noqa: N803 - Delta's name
        """Optimize only the partitions ``partitionFilter`` selects (calls add up with AND)."""
        if not isinstance(partitionFilter, str):
            raise TypeError(f"partitionFilter must be a string, found {type(partitionFilter)}")
        return replace(self, _conditions=(*self._conditions, partitionFilter))

    def executeCompaction(self) -> Any:  # noqa: N802 - Delta's name
        """Compact small files into larger ones on the executors; returns Delta's OPTIMIZE result
        DataFrame."""
        return self._run(OptimizeMode.COMPACT, [])

    def executeZOrderBy(self, *cols: str | Sequence[str]) -> Any:  # noqa: N802 - Delta's name
        """Rewrite the files ordered along a Z-order curve of ``cols``, on the executors."""
        columns = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], list | tuple) else list(cols)
        return self._run(OptimizeMode.ZORDER, [str(c) for c in columns])

    def _run(self, mode: OptimizeMode, columns: list[str]) -> Any:
        return run_optimize(self._target, self._conditions, mode, columns)


def run_optimize(
    target: SparkTarget,
    conditions: Sequence[str],
    mode: OptimizeMode,
    columns: Sequence[str],
    *,
    full: bool = False,
) -> Any:
    """An OPTIMIZE (compaction or clustering, Z-order, or REORG's purge of deletion vectors) of
    ``target``'s latest version, restricted to the partitions ``conditions`` select, with its bins
    rewritten on the executors; returns Delta's OPTIMIZE result DataFrame. ``full``: recluster
    every file of a clustered table."""
    snapshot = DeltaLog.for_table(target.path, target.conf()).update()
    filters: DnfFilter | str | None
    if conditions and snapshot.protocol.has_writer_feature(CLUSTERING):
        filters = " AND ".join(conditions)  # refused as a clustered table's OPTIMIZE refuses a WHERE
    else:
        filters = partition_filters(conditions, snapshot.partition_columns, target.path)
    job = plan_optimize(snapshot, mode, partition_filters=filters, zorder_columns=list(columns), full=full)
    metrics = optimize_on_spark(target.spark, snapshot, job)
    return target.spark.createDataFrame([(target.path, optimize_metrics(metrics))], OPTIMIZE_SCHEMA)
