"""The DataFrames of a Spark ``DeltaTable``'s ``history()`` and ``detail()``, and the results of its
operations, in Delta's schemas.

``history()`` has Delta's ``DESCRIBE HISTORY`` columns (Delta's ``DeltaHistory``: ``version``,
``timestamp``, ``userId``, ``userName``, ``operation``, ``operationParameters``, ``job``,
``notebook``, ``clusterId``, ``readVersion``, ``isolationLevel``, ``isBlindAppend``,
``operationMetrics``, ``userMetadata``, ``engineInfo``), newest first; ``detail()`` the one row
of ``DESCRIBE DETAIL`` (``format``, ``id``, ``name``, ``description``, ``location``,
``createdAt``, ``lastModified``, ``partitionColumns``, ``clusteringColumns``, ``numFiles``,
``sizeInBytes``, ``properties``, ``minReaderVersion``, ``minWriterVersion``, ``tableFeatures``).
Both are built on the driver from the log and handed to Spark as small DataFrames.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pyarrow.compute as pc

from replay.protocol.clustering_columns import clustering_column_names
from replay.protocol.table_features import supported_features
from replay.state.snapshot import Snapshot

HISTORY_SCHEMA = (
    "version BIGINT, timestamp TIMESTAMP, userId STRING, userName STRING, operation STRING, "
    "operationParameters MAP<STRING, STRING>, "
    "job STRUCT<jobId: STRING, jobName: STRING, jobRunId: STRING, runId: STRING, jobOwnerId: STRING, "
    "triggerType: STRING>, "
    "notebook STRUCT<notebookId: STRING>, clusterId STRING, readVersion BIGINT, isolationLevel STRING, "
    "isBlindAppend BOOLEAN, operationMetrics MAP<STRING, STRING>, userMetadata STRING, engineInfo STRING"
)
DETAIL_SCHEMA = (
    "format STRING, id STRING, name STRING, description STRING, location STRING, createdAt TIMESTAMP, "
    "lastModified TIMESTAMP, partitionColumns ARRAY<STRING>, clusteringColumns ARRAY<STRING>, "
    "numFiles BIGINT, sizeInBytes BIGINT, properties MAP<STRING, STRING>, minReaderVersion INT, "
    "minWriterVersion INT, tableFeatures ARRAY<STRING>"
)
MERGE_RESULT_SCHEMA = (
    "num_affected_rows BIGINT, num_updated_rows BIGINT, num_deleted_rows BIGINT, num_inserted_rows BIGINT"
)
AFFECTED_ROWS_SCHEMA = "num_affected_rows BIGINT"
RESTORE_RESULT_SCHEMA = (
    "table_size_after_restore BIGINT, num_of_files_after_restore BIGINT, num_removed_files BIGINT, "
    "num_restored_files BIGINT, removed_files_size BIGINT, restored_files_size BIGINT"
)


def _time(milliseconds: object) -> _dt.datetime | None:
    if not isinstance(milliseconds, int):
        return None
    return _dt.datetime.fromtimestamp(milliseconds / 1000, _dt.UTC)


def _strings(values: object) -> dict[str, str] | None:
    if not isinstance(values, Mapping):
        return None
    return {str(k): v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in values.items()}


def _struct(values: object, fields: Sequence[str]) -> dict[str, Any] | None:
    if not isinstance(values, Mapping):
        return None
    return {name: (None if values.get(name) is None else str(values.get(name))) for name in fields}


def history_rows(entries: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows of :data:`HISTORY_SCHEMA` from :meth:`replay.DeltaLog.history` entries."""
    rows = []
    for entry in entries:
        rows.append(
            (
                entry.get("version"),
                _time(entry.get("timestamp")),
                entry.get("userId"),
                entry.get("userName"),
                entry.get("operation"),
                _strings(entry.get("operationParameters")) or {},
                _struct(
                    entry.get("job"), ("jobId", "jobName", "jobRunId", "runId", "jobOwnerId", "triggerType")
                ),
                _struct(entry.get("notebook"), ("notebookId",)),
                entry.get("clusterId"),
                entry.get("readVersion"),
                entry.get("isolationLevel"),
                entry.get("isBlindAppend"),
                _strings(entry.get("operationMetrics")),
                entry.get("userMetadata"),
                entry.get("engineInfo"),
            )
        )
    return rows


def clustering_columns(snapshot: Snapshot) -> list[str]:
    """The clustering columns of a clustered table as Delta's DESCRIBE DETAIL names them."""
    mapped = snapshot.config.column_mapping_mode != "none"
    return clustering_column_names(snapshot.schema, snapshot.domain_metadata, mapped)


def detail_row(snapshot: Snapshot, location: str) -> tuple[Any, ...]:
    """The row of :data:`DETAIL_SCHEMA` of ``snapshot`` (the table at ``location``)."""
    metadata, protocol = snapshot.metadata, snapshot.protocol
    files = snapshot.files_table()
    size = pc.sum(files.column("size")).as_py() if files.num_rows else 0
    return (
        "delta",
        metadata.id,
        metadata.name,
        metadata.description,
        location,
        _time(metadata.created_time),
        _time(snapshot.timestamp),
        list(metadata.partition_columns),
        clustering_columns(snapshot),
        files.num_rows,
        int(size or 0),
        dict(metadata.configuration),
        protocol.min_reader_version,
        protocol.min_writer_version,
        sorted(supported_features(protocol)),
    )


def merge_result(metrics: Mapping[str, int]) -> tuple[int, int, int, int]:
    """Delta's MERGE result row: affected (updated + deleted + inserted), updated, deleted, inserted."""
    updated = int(metrics.get("numTargetRowsUpdated", 0))
    deleted = int(metrics.get("numTargetRowsDeleted", 0))
    inserted = int(metrics.get("numTargetRowsInserted", 0))
    return updated + deleted + inserted, updated, deleted, inserted


def restore_result(metrics: Mapping[str, int]) -> tuple[int, ...]:
    """Delta's RESTORE result row from its metrics."""
    keys = (
        "tableSizeAfterRestore",
        "numOfFilesAfterRestore",
        "numRemovedFiles",
        "numRestoredFiles",
        "removedFilesSize",
        "restoredFilesSize",
    )
    return tuple(int(metrics.get(key, 0)) for key in keys)
