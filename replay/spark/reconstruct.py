"""Distributed state reconstruction in Spark, for logs too big to replay on the driver.

The same algorithm as Delta's ``Snapshot.stateReconstruction`` (reference §5.7): the driver
only lists the log segment; executors read the checkpoint and commit files through the
LogStore built from the table's configuration, key every file action by its canonical path,
``repartition`` by that key into ``spark.databricks.delta.snapshotPartitions`` partitions
(default 50; non-file actions all hash to one partition), sort each partition by version and
line and run :class:`replay.log.log_replay.InMemoryLogReplay` over it. The result is the checkpoint
actions of the snapshot, one row per action; as in Delta, absolute local file paths come out
canonical (``/x`` and ``file:///x`` as ``file:/x``) because replay matches files by that form.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstores import create_log_store
from logstores.base import FileStatus
from replay import Metadata, Protocol, TableConfiguration
from replay.delta_log import DeltaLog
from replay.log.checkpoint_instances import CheckpointFormat
from replay.log.checkpoints import read_json_checkpoint, read_parquet_checkpoint, sidecar_status
from replay.log.commit_files import parse_json_lines
from replay.log.log_replay import InMemoryLogReplay
from replay.log.log_segment import LogSegment, load_log_segment
from replay.protocol.actions import action_from_dict
from replay.protocol.errors import MissingProtocolOrMetadataError
from replay.protocol.paths import canonicalize_path, file_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SNAPSHOT_PARTITIONS_KEY = "spark.databricks.delta.snapshotPartitions"
DEFAULT_SNAPSHOT_PARTITIONS = 50

ACTIONS_DDL = "version LONG, line LONG, key STRING, action STRING"
RESULT_DDL = "kind STRING, path STRING, action STRING"
"""Columns of the result: the action kind (``add``, ``remove``, ``metaData``...), the file path
for file actions, and the action as one Delta log JSON line."""

_SKIPPED_KINDS = frozenset({"commitInfo", "cdc", "checkpointMetadata", "sidecar"})
_CONFIGURATION_KINDS = ("protocol", "metaData")


def _log_lines(kind: str, path: str, size: int, conf: Mapping[str, str]) -> Iterator[bytes]:
    """The JSON lines of one commit file or one checkpoint file (of ``size`` bytes), read through the
    LogStore."""
    store = create_log_store(dict(conf))
    if kind == "commit":
        yield from store.read_bytes(path).split(b"\n")
        return
    data = (
        read_json_checkpoint(store, path)
        if path.endswith(".json")
        else read_parquet_checkpoint(store, FileStatus(path, size, 0))
    )
    for action in data.actions:
        yield orjson.dumps(action)
    for column, tables in (("add", data.adds), ("remove", data.removes)):
        for table in tables:
            present = table.filter(pc.is_valid(table.column("path")))  # rows of other actions are null
            for row in present.to_pylist(maps_as_pydicts="lossy"):
                yield orjson.dumps({column: {k: v for k, v in row.items() if v is not None}})


def _keyed_rows(task: tuple[int, str, str, int], conf: Mapping[str, str]) -> Iterator[tuple]:
    """``(version, line, key, json)`` for every action of a task (version, kind, path, size) that
    replay needs."""
    version, kind, path, size = task
    for line, text in enumerate(_log_lines(kind, path, size, conf)):
        raw = text
        if not raw.strip():
            continue
        parsed = orjson.loads(raw)
        action_kind = next((name for name, value in parsed.items() if value is not None), None)
        if action_kind is None or action_kind in _SKIPPED_KINDS:
            continue
        key = None
        if action_kind in ("add", "remove"):
            file_action = parsed[action_kind]
            path = file_action["path"]
            canonical = canonicalize_path(path)
            if canonical != path:  # replay compares canonical paths, like Delta's stateReconstruction
                file_action["path"] = canonical
                raw = orjson.dumps(parsed)
            key = file_key(canonical, None)[0]
        yield version, line, key, raw.decode("utf-8") if isinstance(raw, bytes) else raw


def _replay_partition(rows: Iterable[Any], file_cutoff: int, txn_cutoff: int | None) -> Iterator[tuple]:
    replay = InMemoryLogReplay(file_cutoff, txn_cutoff)
    replay.append(0, (action_from_dict(orjson.loads(row.action)) for row in rows))
    for action in replay.checkpoint():
        path = getattr(action, "path", None)
        yield action.KEY, path, action.json()


def reconstruct_state(spark: SparkSession, delta_log: DeltaLog, version: int | None = None) -> DataFrame:
    """The checkpoint actions of ``version`` (latest if ``None``), computed by Spark executors.

    Rows: ``kind``, ``path`` (file actions only), ``action`` (one log line). Tombstones older
    than ``delta.deletedFileRetentionDuration`` and expired transactions are dropped like
    Delta's checkpointing state does; the rest equals driver-side replay of the same version.
    Raises the replay errors of :meth:`DeltaLog.snapshot` for a missing table or version.
    """
    from pyspark.sql import functions as F  # noqa: N812

    segment = _segment(delta_log, version)
    conf = dict(delta_log.conf)
    tasks = [
        (segment.checkpoint_version, "checkpoint", status.path, status.size)
        for status in _checkpoint_files(delta_log, segment)
    ]
    tasks += [(end, "commit", status.path, status.size) for _, end, status in segment.replay_files]
    config = _table_configuration(delta_log, segment)
    now_ms = int(time.time() * 1000)
    file_cutoff = config.min_file_retention_timestamp(now_ms)
    txn_cutoff = config.min_set_transaction_retention_timestamp(now_ms)
    partitions = int(spark.conf.get(SNAPSHOT_PARTITIONS_KEY, None) or DEFAULT_SNAPSHOT_PARTITIONS)
    if partitions <= 0:
        raise ValueError(f"{SNAPSHOT_PARTITIONS_KEY} must be positive, got {partitions}")
    context = spark.sparkContext
    rows = context.parallelize(tasks, max(1, min(len(tasks), context.defaultParallelism * 4))).flatMap(
        lambda task: _keyed_rows(task, conf)
    )
    actions = spark.createDataFrame(rows, ACTIONS_DDL)
    ordered = actions.repartition(partitions, F.col("key")).sortWithinPartitions("version", "line")
    replayed = ordered.rdd.mapPartitions(lambda part: _replay_partition(part, file_cutoff, txn_cutoff))
    return spark.createDataFrame(replayed, RESULT_DDL)


def _segment(delta_log: DeltaLog, version: int | None) -> LogSegment:
    """The checkpoint and commits of ``version``, found by listing only (no replay on the driver)."""
    return load_log_segment(delta_log.io, version)


def _checkpoint_files(delta_log: DeltaLog, segment: LogSegment) -> list[FileStatus]:
    """Every file of the segment's checkpoint: classic parts, or a V2 top-level file and its sidecars.

    Each becomes one Spark task. The V2 top-level file (small) is read here to list its sidecars.
    """
    if segment.checkpoint is None:
        return []
    files = segment.checkpoint_files
    if segment.checkpoint.format != CheckpointFormat.V2 and len(files) > 1:
        return list(files)
    top = files[0]
    if top.path.endswith(".json"):
        rows = read_json_checkpoint(delta_log.store, top.path).actions
    else:  # a single-part Parquet checkpoint may be V2 too: read only its sidecar column
        with delta_log.store.open_file(top) as stream:
            parquet = pq.ParquetFile(stream)
            has_sidecars = "sidecar" in parquet.schema_arrow.names
            rows = parquet.read(columns=["sidecar"]).to_pylist() if has_sidecars else []
    sidecars = [row["sidecar"] for row in rows if row.get("sidecar") is not None]
    return [top, *(sidecar_status(delta_log.log_path, sidecar) for sidecar in sidecars)]


def _table_configuration(delta_log: DeltaLog, segment: LogSegment) -> TableConfiguration:
    """The :class:`~replay.TableConfiguration` of the segment's newest ``protocol`` and ``metaData``,
    read on the driver: it decides the retention of tombstones and transactions.

    Commits are scanned newest first (a cheap substring test before parsing), then only the
    ``protocol`` and ``metaData`` columns of the checkpoint are read. Raises
    :class:`MissingProtocolOrMetadataError`.
    """
    found: dict[str, dict[str, Any]] = {}
    store = delta_log.store
    for _, _, status in reversed(segment.replay_files):
        raw = store.read_bytes(status.path)
        if b"metaData" not in raw and b"protocol" not in raw:
            continue
        for action in reversed(parse_json_lines(raw, status.path)):
            for kind in _CONFIGURATION_KINDS:
                if action.get(kind) is not None:
                    found.setdefault(kind, action[kind])
        if len(found) == len(_CONFIGURATION_KINDS):
            break
    for status in segment.checkpoint_files if len(found) < len(_CONFIGURATION_KINDS) else ():
        if status.name.endswith(".json"):
            rows = parse_json_lines(store.read_bytes(status.path), status.path)
        else:
            with store.open_file(status) as stream:
                parquet = pq.ParquetFile(stream)
                columns = [kind for kind in _CONFIGURATION_KINDS if kind in parquet.schema_arrow.names]
                rows = parquet.read(columns=columns).to_pylist(maps_as_pydicts="lossy") if columns else []
        for row in rows:
            for kind in _CONFIGURATION_KINDS:
                if row.get(kind) is not None:
                    found.setdefault(kind, row[kind])
    missing = [kind for kind in _CONFIGURATION_KINDS if kind not in found]
    if missing:
        what = "metadata" if "metaData" in missing else "protocol"
        raise MissingProtocolOrMetadataError(
            f"[DELTA_STATE_RECOVER_ERROR] The {what} of table {delta_log.table_path} could not be "
            f"recovered while reconstructing version {segment.version}.",
            table=str(delta_log.table_path),
            version=segment.version,
            missing=what,
        )
    return TableConfiguration(
        Protocol.from_dict(found["protocol"]),
        Metadata.from_dict(found["metaData"]),
        str(delta_log.table_path),
    )
