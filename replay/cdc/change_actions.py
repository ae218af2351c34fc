"""Which file actions of a commit carry its changes: Delta's CDC action filtering, pure.

A commit's change rows come from its ``cdc`` files if it has any; otherwise its ``add`` and
``remove`` actions with ``dataChange`` become ``insert``/``delete`` rows of their files
(:func:`filter_cdc_actions`, none for a no-op MERGE). :func:`plan_commit_reads` turns the
filtered actions into :class:`ChangeRead` s, pairing a file removed and re-added with different
deletion vectors so that only the rows whose DV membership changed are read. A plain (non-CDF)
stream takes a commit's appends only (:func:`filter_append_actions`). Nothing here does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from replay.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    FileAction,
    Metadata,
    RemoveFile,
)
from replay.protocol.errors import ChangeDataFeedNotEnabledError, DeltaError
from replay.protocol.table_properties import ENABLE_CHANGE_DATA_FEED

logger = logging.getLogger(__name__)

CDC_TYPE_COLUMN = "_change_type"
CDC_COMMIT_VERSION = "_commit_version"
CDC_COMMIT_TIMESTAMP = "_commit_timestamp"
CDC_TYPE_INSERT = "insert"
CDC_TYPE_DELETE = "delete"
CDC_TYPE_UPDATE_PREIMAGE = "update_preimage"
CDC_TYPE_UPDATE_POSTIMAGE = "update_postimage"
CDC_COLUMNS: tuple[pa.Field, ...] = (
    pa.field(CDC_TYPE_COLUMN, pa.string()),
    pa.field(CDC_COMMIT_VERSION, pa.int64()),
    pa.field(CDC_COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")),
)
"""The columns a change data read appends to the table schema."""

ENABLE_CDF_PROPERTY = ENABLE_CHANGE_DATA_FEED.key
E = TypeVar("E", bound=DeltaError)


# -- errors -----------------------------------------------------------------------------------
def table_error(error_type: type[E], message: str, table: str | None, **attributes: Any) -> E:
    """``error_type`` with Delta's ``message`` followed by the table it is about."""
    text = f"{message} (table {table})" if table else message
    return error_type(text, table=table, **attributes)


class InvalidCDCRangeError(DeltaError, ValueError):
    """The requested change range is invalid (no start, or end before start)."""


class UnsupportedSourceChangeError(DeltaError):
    """A plain (non-CDF) stream met a commit that updates or deletes data."""


def missing_change_data_error(
    version: int, start: int, end: int, table: str | None
) -> ChangeDataFeedNotEnabledError:
    """Delta's ``DELTA_MISSING_CHANGE_DATA`` for ``version`` of the range ``[start, end]``."""
    return table_error(
        ChangeDataFeedNotEnabledError,
        f"[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [{start} , {end}] as change "
        f"data was not\nrecorded for version [{version}]. If you've enabled change data feed on this "
        "table,\nuse `DESCRIBE HISTORY` to see when it was first enabled.\nOtherwise, to start "
        "recording change data, use `ALTER TABLE table_name SET TBLPROPERTIES\n"
        "(delta.enableChangeDataFeed=true)`.",
        table,
    )


def end_before_start_error(start: int, end: int, table: str | None) -> InvalidCDCRangeError:
    """Delta's ``DELTA_INVALID_CDC_RANGE``."""
    return table_error(
        InvalidCDCRangeError,
        f"[DELTA_INVALID_CDC_RANGE] CDC range from start {start} to end {end} was invalid. "
        "End cannot be before start.",
        table,
    )


# -- commit filtering -------------------------------------------------------------------------
def is_cdf_enabled(metadata: Metadata) -> bool:
    """Whether ``delta.enableChangeDataFeed`` is ``true`` in ``metadata``."""
    return ENABLE_CHANGE_DATA_FEED.value_in(metadata.configuration)


def should_skip_file_actions(commit_info: CommitInfo | None) -> bool:
    """A MERGE whose metrics say it inserted, updated and deleted 0 rows produces no changes."""
    if commit_info is None or commit_info.operation != "MERGE":
        return False
    metrics = commit_info.operation_metrics
    return all(
        metrics.get(name) == "0"
        for name in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    )


def filter_cdc_actions(actions: Sequence[Action], version: int) -> list[FileAction]:
    """The file actions of commit ``version`` that carry its change data.

    Its ``cdc`` files if it has any; otherwise its ``add`` and ``remove`` actions with
    ``dataChange`` true (none for a no-op MERGE). Order is kept.
    """
    cdc = [action for action in actions if isinstance(action, AddCDCFile)]
    if cdc:
        return list(cdc)
    commit_info = next((action for action in actions if isinstance(action, CommitInfo)), None)
    if should_skip_file_actions(commit_info):
        logger.debug("version %d is a no-op MERGE: no change rows", version)
        return []
    return [action for action in actions if isinstance(action, AddFile | RemoveFile) and action.data_change]


# -- plain (non-CDF) streams ------------------------------------------------------------------
@dataclass(frozen=True)
class StreamOptions:
    """Options of Delta's plain streaming source for commits that change existing data."""

    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False


def filter_append_actions(
    actions: Sequence[Action], version: int, options: StreamOptions, table: str | None = None
) -> list[AddFile]:
    """The adds a plain stream emits for commit ``version`` (Delta's stream hygiene rules).

    A commit removing data (``remove`` with ``dataChange``) is skipped with
    ``skip_change_commits``, passes with ``ignore_changes`` (or ``ignore_deletes`` when it adds
    nothing), and otherwise raises :class:`UnsupportedSourceChangeError`.
    """
    adds = [action for action in actions if isinstance(action, AddFile) and action.data_change]
    removes = [action for action in actions if isinstance(action, RemoveFile) and action.data_change]
    if not removes:
        return adds
    if options.skip_change_commits:
        return []
    if adds and not options.ignore_changes:
        raise UnsupportedSourceChangeError(
            f"[DELTA_SOURCE_TABLE_IGNORE_CHANGES] Detected a data update (for example {removes[0].path}) in "
            f"the source table at version {version}. This is currently not supported. If you'd like to "
            "ignore updates, set the option 'skipChangeCommits' to 'true'. If you would like the data "
            "update to be reflected, please restart this query with a fresh checkpoint directory. The "
            f"source table can be found at path {table}.",
            table=table,
        )
    if not adds and not (options.ignore_deletes or options.ignore_changes):
        raise UnsupportedSourceChangeError(
            f"[DELTA_SOURCE_IGNORE_DELETE] Detected deleted data (for example {removes[0].path}) from "
            f"streaming source at version {version}. This is currently not supported. If you'd like to "
            "ignore deletes, set the option 'ignoreDeletes' to 'true'. The source table can be found at "
            f"path {table}.",
            table=table,
        )
    return adds


# -- reading change rows ----------------------------------------------------------------------
@dataclass(frozen=True)
class ChangeRead:
    """One file read of a change feed: whose rows, as which change type, at which commit.

    ``change_type`` is ``None`` for ``cdc`` files (the type is stored in the file). With
    ``keep_dv`` set only the rows in ``keep_dv`` and not in ``minus_dv`` are read (a deletion
    vector diff); otherwise the file's own deletion vector drops rows.
    """

    file: FileAction
    change_type: str | None
    version: int
    timestamp_ms: int
    keep_dv: DeletionVectorDescriptor | None = None
    minus_dv: DeletionVectorDescriptor | None = None


def plan_commit_reads(version: int, timestamp_ms: int, files: Sequence[FileAction]) -> list[ChangeRead]:
    """The reads producing a commit's change rows from its filtered file actions (pure).

    ``cdc`` files are read as written. A path both removed and added pairs up: rows newly in
    the add's DV are ``delete``, rows only in the remove's DV are ``insert`` (Delta's DV diff).
    Other adds are ``insert`` rows and removes ``delete`` rows, minus their own DV.
    """
    adds = {f.path: f for f in files if isinstance(f, AddFile)}
    removes = {f.path: f for f in files if isinstance(f, RemoveFile)}
    reads: list[ChangeRead] = []
    for file in files:
        if isinstance(file, AddCDCFile):
            reads.append(ChangeRead(file, None, version, timestamp_ms))
            continue
        change_type, partner = (
            (CDC_TYPE_INSERT, removes.get(file.path))
            if isinstance(file, AddFile)
            else (CDC_TYPE_DELETE, adds.get(file.path))
        )
        if partner is None:
            reads.append(ChangeRead(file, change_type, version, timestamp_ms))
        elif partner.deletion_vector is not None:
            # Rows in the partner's DV but not in this action's: the rows this action changes.
            reads.append(
                ChangeRead(
                    file, change_type, version, timestamp_ms, partner.deletion_vector, file.deletion_vector
                )
            )
    return reads
