"""What an OPTIMIZE run reports: delta-rs's metrics dict, Delta's ``operationMetrics``, and the
text of its partition predicate for ``operationParameters``.

:class:`OptimizeMetrics` adds up a run (one or several commits) and gives it back as the dict
``deltalake.DeltaTable.optimize.compact()`` returns (deltalake 1.6.6's keys, ``filesAdded`` and
``filesRemoved`` as JSON text as it returns them). :func:`operation_metrics` is what each commit
records in ``commitInfo.operationMetrics``: Delta's ``DeltaOperationMetrics.OPTIMIZE`` names
(file counts and bytes, the added files' size percentiles as Delta's
``FileSizeStatsWithHistogram`` takes them, deletion vectors removed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import orjson

from replay.maintenance.optimize_plan import OptimizeMode, OptimizePlan
from replay.maintenance.optimize_rewrite import RewrittenBin
from replay.protocol.predicates import (
    And,
    Compare,
    CompareColumns,
    In,
    IsNull,
    Not,
    Or,
    Predicate,
    StartsWith,
    column_name,
)

PLANNER_STRATEGIES = {
    OptimizeMode.COMPACT: "preserveLocality",
    OptimizeMode.AUTO: "preserveLocality",
    OptimizeMode.PURGE: "preserveLocality",
    OptimizeMode.ZORDER: "zOrder",
    OptimizeMode.CLUSTER: "clustering",
}
"""deltalake's ``plannerStrategy`` names: bins in insertion order, Z-order (or, a name of this
library's, liquid clustering)."""


@dataclass
class FileSizeStats:
    """Sizes of a set of files (Delta's ``FileSizeStats``)."""

    min: int = 0
    max: int = 0
    total_files: int = 0
    total_size: int = 0

    def merge(self, sizes: Iterable[int]) -> None:
        for size in sizes:
            self.min = size if self.total_files == 0 else min(self.min, size)
            self.max = size if self.total_files == 0 else max(self.max, size)
            self.total_files += 1
            self.total_size += size

    @property
    def avg(self) -> float:
        return self.total_size / self.total_files if self.total_files else 0.0

    def as_json(self) -> str:
        """deltalake's form: ``{"avg":..,"max":..,"min":..,"totalFiles":..,"totalSize":..}``."""
        values = {
            "avg": float(self.avg),
            "max": self.max,
            "min": self.min,
            "totalFiles": self.total_files,
            "totalSize": self.total_size,
        }
        return orjson.dumps(values).decode()


@dataclass
class OptimizeMetrics:
    """A run's figures, added up over its commits (see the module docstring)."""

    mode: OptimizeMode
    considered_files: int = 0
    added: FileSizeStats = field(default_factory=FileSizeStats)
    removed: FileSizeStats = field(default_factory=FileSizeStats)
    partitions: set[tuple[tuple[str, str | None], ...]] = field(default_factory=set)
    num_batches: int = 0
    max_bin_files: int = 0
    deletion_vectors_removed: int = 0
    versions: list[int] = field(default_factory=list)

    @classmethod
    def for_plan(cls, plan: OptimizePlan) -> OptimizeMetrics:
        return cls(plan.mode, considered_files=plan.considered_files)

    def record(self, rewritten: Sequence[RewrittenBin]) -> None:
        """Count bins that were committed."""
        for each in rewritten:
            self.added.merge(add.size for add in each.adds)
            self.removed.merge(remove.size or 0 for remove in each.removes)
            self.partitions.add(tuple(sorted(each.bin.partition_values.items())))
            self.num_batches += 1
            self.max_bin_files = max(self.max_bin_files, len(each.bin.files))
            self.deletion_vectors_removed += len(each.bin.deletion_vectors)

    def as_dict(self) -> dict[str, object]:
        """deltalake 1.6.6's metrics dict."""
        return {
            "numFilesAdded": self.added.total_files,
            "numFilesRemoved": self.removed.total_files,
            "filesAdded": self.added.as_json(),
            "filesRemoved": self.removed.as_json(),
            "partitionsOptimized": len(self.partitions),
            "numBatches": self.num_batches,
            "totalConsideredFiles": self.considered_files,
            "totalFilesSkipped": self.considered_files - self.removed.total_files,
            "preserveInsertionOrder": self.mode not in (OptimizeMode.ZORDER, OptimizeMode.CLUSTER),
            "plannerStrategy": PLANNER_STRATEGIES[self.mode],
            "preservedStableOrder": self.mode not in (OptimizeMode.ZORDER, OptimizeMode.CLUSTER),
            "maxBinSpanFiles": self.max_bin_files,
        }


def operation_metrics(rewritten: Sequence[RewrittenBin]) -> dict[str, int]:
    """Delta's ``operationMetrics`` of a commit of ``rewritten`` bins."""
    added = sorted(add.size for each in rewritten for add in each.adds)
    removed = [remove.size or 0 for each in rewritten for remove in each.removes]
    metrics = {
        "numAddedFiles": len(added),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(added),
        "numRemovedBytes": sum(removed),
    }
    if added:  # Delta's FileSizeStatsWithHistogram: min, sizes at count/4, count/2, 3*count/4, max
        count = len(added)
        metrics |= {
            "minFileSize": added[0],
            "p25FileSize": added[count // 4],
            "p50FileSize": added[count // 2],
            "p75FileSize": added[count * 3 // 4],
            "maxFileSize": added[-1],
        }
    metrics["numDeletionVectorsRemoved"] = sum(len(each.bin.deletion_vectors) for each in rewritten)
    return metrics


def _literal(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    as_py = getattr(value, "as_py", None)
    return _literal(as_py()) if callable(as_py) else str(value)


def predicate_sql(predicate: Predicate) -> str:
    """SQL text of a predicate, for ``commitInfo`` (not parsed back)."""
    if isinstance(predicate, Compare):
        return f"{column_name(predicate.column)} {predicate.op} {_literal(predicate.value)}"
    if isinstance(predicate, In):
        values = ", ".join(_literal(v) for v in predicate.values)
        return f"{column_name(predicate.column)} {'NOT IN' if predicate.negated else 'IN'} ({values})"
    if isinstance(predicate, IsNull):
        return f"{column_name(predicate.column)} IS {'NOT NULL' if predicate.negated else 'NULL'}"
    if isinstance(predicate, StartsWith):
        return f"{column_name(predicate.column)} LIKE {_literal(predicate.prefix + '%')}"
    if isinstance(predicate, And | Or):
        joiner = " AND " if isinstance(predicate, And) else " OR "
        if not predicate.children:
            return "true" if isinstance(predicate, And) else "false"
        parts = [predicate_sql(child) for child in predicate.children]
        return parts[0] if len(parts) == 1 else "(" + joiner.join(parts) + ")"
    if isinstance(predicate, Not):
        return f"NOT ({predicate_sql(predicate.child)})"
    if isinstance(predicate, CompareColumns):
        return f"{column_name(predicate.left)} {predicate.op} {column_name(predicate.right)}"
    return predicate.text
