"""Spark-side state reconstruction equals driver-side replay (golden tables and our own tables)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from replay.delta_log import DeltaLog
from replay.protocol.actions import RemoveFile, SetTransaction, action_from_dict
from replay.protocol.paths import canonicalize_path
from replay.spark import reconstruct_state
from replay.txn.transaction import commit_actions as commit
from replay.txn.write import write_table

pytestmark = pytest.mark.spark

GOLDEN = [
    "delta-spark-golden/multi-part-checkpoint/delta",
    "delta-spark-golden/log-replay-dv-key-cases/delta",
    "delta-spark-golden/canonicalized-paths-special-a/delta",
    "delta-rs/checkpoint_with_partitions/delta",
    "delta-spark-golden/v2-checkpoint-parquet/delta",
    "delta-rs/checkpoint-v2-table/delta",
]


def canonical(action: Any) -> Any:
    return replace(action, path=canonicalize_path(action.path))


def driver_state(log: DeltaLog, version: int | None = None) -> dict[str, Any]:
    """The driver snapshot's state, file paths in the canonical form Spark replay emits."""
    snapshot = log.snapshot(version)
    return {
        "protocol": [snapshot.protocol],
        "metaData": [snapshot.metadata],
        "txn": sorted(snapshot.transactions(), key=lambda t: t.app_id),
        "domainMetadata": sorted(snapshot.domain_metadata.values(), key=lambda d: d.domain),
        "add": sorted(map(canonical, snapshot.files()), key=lambda a: a.unique_key),
        "remove": sorted(map(canonical, snapshot.tombstones()), key=lambda r: r.unique_key),
    }


def spark_state(spark: Any, log: DeltaLog, version: int | None = None) -> dict[str, Any]:
    rows = reconstruct_state(spark, log, version).collect()
    state: dict[str, list[Any]] = {
        kind: [] for kind in ("protocol", "metaData", "txn", "domainMetadata", "add", "remove")
    }
    for row in rows:
        action = action_from_dict(orjson.loads(row.action))
        assert action is not None and row.kind == action.KEY
        assert row.path == getattr(action, "path", None)
        state[row.kind].append(action)
    state["txn"].sort(key=lambda t: t.app_id)
    state["domainMetadata"].sort(key=lambda d: d.domain)
    state["add"].sort(key=lambda a: a.unique_key)
    state["remove"].sort(key=lambda r: r.unique_key)
    return state


def test_golden_tables(spark: Any, golden_root: Path) -> None:
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "3")
    try:
        for name in GOLDEN:
            log = DeltaLog.for_table(str(golden_root / name))
            assert spark_state(spark, log) == driver_state(log), name
    finally:
        spark.conf.unset("spark.databricks.delta.snapshotPartitions")


def test_checkpoint_removes_and_time_travel(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for index in range(6):
        write_table(path, pa.table({"id": [index], "p": [f"v{index % 3}"]}), partition_by=["p"])
    log = DeltaLog.for_table(path)
    victims = log.snapshot().files()[:2]
    now = int(time.time() * 1000)
    commit(log.io, [RemoveFile(path=v.path, deletion_timestamp=now, data_change=True) for v in victims])
    log.checkpoint()
    commit(
        log.io, [RemoveFile(path=log.snapshot().files()[0].path, deletion_timestamp=now, data_change=True)]
    )
    write_table(path, pa.table({"id": [9], "p": ["v0"]}))
    state = spark_state(spark, log)
    assert state == driver_state(log)
    assert len(state["add"]) == 4
    assert len(state["remove"]) == 3
    assert spark_state(spark, log, 3) == driver_state(log, 3)


def test_expired_tombstones_and_transactions_are_dropped_by_the_table_retention(
    spark: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    retention = {
        "delta.deletedFileRetentionDuration": "interval 1 hour",
        "delta.setTransactionRetentionDuration": "interval 1 hour",
    }
    for index in range(3):
        write_table(path, pa.table({"id": [index]}), configuration=retention)
    log = DeltaLog.for_table(path)
    now = int(time.time() * 1000)
    old, recent = now - 2 * 3600 * 1000, now - 60 * 1000
    first, second = log.snapshot().files()[:2]
    commit(
        log.io,
        [
            RemoveFile(path=first.path, deletion_timestamp=old, data_change=True),
            RemoveFile(path=second.path, deletion_timestamp=recent, data_change=True),
            SetTransaction(app_id="stale", version=1, last_updated=old),
            SetTransaction(app_id="fresh", version=2, last_updated=recent),
        ],
    )
    state = spark_state(spark, log)
    assert state == driver_state(log)
    assert [r.path for r in state["remove"]] == [canonicalize_path(second.path)]
    assert [t.app_id for t in state["txn"]] == ["fresh"]
