"""The change data feed (CDF): Delta's ``CDCReader`` and ``DeltaSourceCDCSupport`` in Python.

This package's ``__init__`` is the public face of the change data feed; the work is done in
six modules, each importing only the ones before it:

- :mod:`replay.cdc.change_actions` (pure): which file actions of a commit carry its changes
  (:func:`filter_cdc_actions`) and the file reads that produce its change rows.
- :mod:`replay.cdc.schema_checks` (pure): which schema a change read uses and whether it can
  read every version it crosses (Delta's batch and streaming schema checks and errors).
- :mod:`replay.cdc.change_rows`: reading the rows of file reads with the CDC columns.
- :mod:`replay.cdc.batch`: the batch change feed, :func:`table_changes` (rows with
  ``_change_type``, ``_commit_version`` and ``_commit_timestamp``).
- :mod:`replay.cdc.offsets` (pure): :class:`IndexedFile`, :class:`DeltaSourceOffset` with
  Delta's JSON form and :class:`AdmissionLimits` for micro-batches.
- :mod:`replay.cdc.source`: :func:`filter_and_index_delta_logs`,
  :func:`get_file_changes_for_cdc` and :class:`DeltaSource` for the PySpark stream reader.

They work on a :class:`~replay.state.table_log.TableLog` (a :class:`replay.DeltaLog`).
"""

from __future__ import annotations

from replay.cdc.batch import (
    ChangePlan,
    CommitTimestamps,
    TimestampLike,
    change_read_snapshot,
    plan_changes,
    resolve_change_range,
    starting_version_for_timestamp,
    table_changes,
)
from replay.cdc.change_actions import (
    CDC_COLUMNS,
    CDC_COMMIT_TIMESTAMP,
    CDC_COMMIT_VERSION,
    CDC_TYPE_COLUMN,
    CDC_TYPE_DELETE,
    CDC_TYPE_INSERT,
    CDC_TYPE_UPDATE_POSTIMAGE,
    CDC_TYPE_UPDATE_PREIMAGE,
    ENABLE_CDF_PROPERTY,
    ChangeRead,
    FileAction,
    InvalidCDCRangeError,
    StreamOptions,
    UnsupportedSourceChangeError,
    filter_append_actions,
    filter_cdc_actions,
    is_cdf_enabled,
    plan_commit_reads,
)
from replay.cdc.change_rows import change_read_batches, change_schema, read_change, read_changes
from replay.cdc.offsets import (
    BASE_INDEX,
    DEFAULT_MAX_FILES_PER_TRIGGER,
    END_INDEX,
    METADATA_CHANGE_INDEX,
    POST_METADATA_CHANGE_INDEX,
    AdmissionLimits,
    BatchBounds,
    DeltaSourceOffset,
    IndexedFile,
    InvalidSourceOffsetError,
    admit_version,
    index_commit,
    index_snapshot,
    offset_after,
    select_changes,
)
from replay.cdc.schema_checks import SCHEMA_MODE_KEY, BatchSchemaCheck, StreamSchemaCheck, cdc_read_schema
from replay.cdc.source import DeltaSource, filter_and_index_delta_logs, get_file_changes_for_cdc

__all__ = [
    "BASE_INDEX",
    "CDC_COLUMNS",
    "CDC_COMMIT_TIMESTAMP",
    "CDC_COMMIT_VERSION",
    "CDC_TYPE_COLUMN",
    "CDC_TYPE_DELETE",
    "CDC_TYPE_INSERT",
    "CDC_TYPE_UPDATE_POSTIMAGE",
    "CDC_TYPE_UPDATE_PREIMAGE",
    "DEFAULT_MAX_FILES_PER_TRIGGER",
    "ENABLE_CDF_PROPERTY",
    "END_INDEX",
    "METADATA_CHANGE_INDEX",
    "POST_METADATA_CHANGE_INDEX",
    "SCHEMA_MODE_KEY",
    "AdmissionLimits",
    "BatchBounds",
    "BatchSchemaCheck",
    "ChangePlan",
    "ChangeRead",
    "CommitTimestamps",
    "DeltaSource",
    "DeltaSourceOffset",
    "FileAction",
    "IndexedFile",
    "InvalidCDCRangeError",
    "InvalidSourceOffsetError",
    "StreamOptions",
    "StreamSchemaCheck",
    "TimestampLike",
    "UnsupportedSourceChangeError",
    "admit_version",
    "cdc_read_schema",
    "change_read_batches",
    "change_read_snapshot",
    "change_schema",
    "filter_and_index_delta_logs",
    "filter_append_actions",
    "filter_cdc_actions",
    "get_file_changes_for_cdc",
    "index_commit",
    "index_snapshot",
    "is_cdf_enabled",
    "offset_after",
    "plan_changes",
    "plan_commit_reads",
    "read_change",
    "read_changes",
    "resolve_change_range",
    "select_changes",
    "starting_version_for_timestamp",
    "table_changes",
]
