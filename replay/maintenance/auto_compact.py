"""Auto compaction: Delta's ``AutoCompact`` post-commit hook.

After a commit that wrote data files (``add`` actions with ``dataChange`` and no deletion vector;
never after OPTIMIZE or REORG themselves), when the table sets
``delta.autoOptimize.autoCompact=true`` (or the session ``spark.databricks.delta.autoCompact.enabled``,
which takes precedence), the partitions the commit wrote to are looked at in the version just
committed. Those holding at least ``spark.databricks.delta.autoCompact.minNumFiles`` (50) files
smaller than ``...autoCompact.minFileSize`` (half of ``...autoCompact.maxFileSize``, 128 MiB) are
compacted, at most ``...autoCompact.maxNumModifiedPartitions`` (128) of them, those with the most
small files first: bins of at most ``maxFileSize`` bytes holding at least ``minNumFiles`` files,
up to ``...autoCompact.maxCompactBytes`` (20 GiB) in all (:mod:`replay.maintenance.optimize_plan`).
The compaction commits as operation ``OPTIMIZE`` with ``auto=true`` in its parameters. On a
clustered table it clusters, as Delta's auto compaction does (its OPTIMIZE takes the clustering
strategy whenever the table is clustered): the same small files trigger it, and the files are
chosen and rewritten as OPTIMIZE's clustering chooses and rewrites them
(:mod:`replay.maintenance.clustering`), within the auto compaction's file size.

The hook runs in the writer's process, after the writer's commit, which it never fails: an error
is logged as ``DELTA_POST_COMMIT_HOOK_FAILED`` (:mod:`replay.txn.post_commit`). It is registered
with the post-commit hooks when :mod:`replay.maintenance` is imported (the ``replay`` package
imports it), because the transaction layer cannot import the maintenance code it needs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping

from logstores.conf import get_delta_conf
from replay.maintenance.optimize import OPTIMIZE_OPERATION, REORG_OPERATION, plan_optimize, run_job
from replay.maintenance.optimize_plan import (
    CompactionLimits,
    InvalidOptimizeSettingError,
    OptimizeMode,
    PartitionKey,
    candidate_rows,
    partition_key,
)
from replay.protocol.actions import Action, AddFile
from replay.protocol.arrow_actions import add_actions
from replay.protocol.table_config import TableConfiguration
from replay.txn.post_commit import CommittedVersion
from replay.txn.write_commit import partition_values_predicate

logger = logging.getLogger(__name__)

HOOK_NAME = "Auto Compact"
"""Delta's name of the hook (as ``DELTA_POST_COMMIT_HOOK_FAILED`` names it)."""
ENABLED_KEY = "spark.databricks.delta.autoCompact.enabled"
MAX_PARTITIONS_KEY = "spark.databricks.delta.autoCompact.maxNumModifiedPartitions"
DEFAULT_MAX_PARTITIONS = 128


def auto_compact_enabled(config: TableConfiguration, conf: Mapping[str, str]) -> bool:
    """Whether commits to a table with ``config`` are followed by auto compaction.

    Raises :class:`InvalidOptimizeSettingError` for a session value other than ``true``/``false``
    (Delta's ``DELTA_INVALID_AUTO_COMPACT_TYPE``).
    """
    raw = get_delta_conf(conf, ENABLED_KEY)
    if raw is None:
        return config.auto_compact
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptimizeSettingError(
            f"[DELTA_INVALID_AUTO_COMPACT_TYPE] Invalid auto-compact type: {raw}. "
            "Allowed values are: true, false."
        )
    return value == "true"


def written_partitions(actions: Iterable[Action]) -> set[PartitionKey]:
    """The partitions a commit wrote new data files to."""
    return {
        partition_key(action.partition_values)
        for action in actions
        if isinstance(action, AddFile) and action.data_change and action.deletion_vector is None
    }


def _max_partitions(conf: Mapping[str, str]) -> int:
    raw = get_delta_conf(conf, MAX_PARTITIONS_KEY)
    try:
        value = int(raw) if raw is not None else DEFAULT_MAX_PARTITIONS
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidOptimizeSettingError(f"Invalid value {raw!r} for {MAX_PARTITIONS_KEY}: must be positive")
    return value


def auto_compact_hook(committed: CommittedVersion) -> dict[str, object] | None:
    """The hook: compact the partitions the commit wrote to when they hold enough small files;
    deltalake's metrics dict of the compaction, or ``None`` when there was none."""
    conf = committed.io.conf
    if committed.operation in (OPTIMIZE_OPERATION, REORG_OPERATION):
        return None
    if not auto_compact_enabled(committed.config, conf):
        return None
    written = written_partitions(committed.actions)
    if not written:
        return None
    snapshot = committed.snapshot
    limits = CompactionLimits.for_run(OptimizeMode.AUTO, snapshot.config, conf)
    small = Counter(
        partition_key(file.partition_values)
        for file in add_actions(candidate_rows(snapshot.files_table(), OptimizeMode.AUTO, limits))
        if file.size < limits.min_file_size and partition_key(file.partition_values) in written
    )
    chosen = [key for key, count in small.most_common(_max_partitions(conf)) if count >= limits.min_num_files]
    if not chosen:
        logger.debug("auto compaction of %s skipped: too few small files", committed.io.shown_path)
        return None
    filters = None
    if snapshot.partition_columns:
        filters = partition_values_predicate([dict(key) for key in chosen], snapshot.metadata)
    job = plan_optimize(snapshot, OptimizeMode.AUTO, partition_filters=filters, limits=limits)
    if not job.plan.bins:
        return None
    result = run_job(committed.io, snapshot, job)
    logger.info(
        "auto compaction of %s after version %d committed %s",
        committed.io.shown_path,
        committed.version,
        list(result.versions),
    )
    return result.metrics
