"""Expired log cleanup (Delta's ``MetadataCleanup``): delete log files no version in retention needs.

The cut-off is ``now - delta.logRetentionDuration``, truncated to midnight UTC as Delta does (so
files are kept up to a day longer, and checkpoints are not chased continuously). Commit times
are file modification times made strictly increasing by version, as Delta's history does.

What goes: commit, checkpoint, checksum and compacted-commit files of versions before the
*cleanup boundary*, the newest version ``c`` that has a complete checkpoint and whose commit is
older than the cut-off, and on a table with V2 checkpoints the sidecar files no kept checkpoint
lists, once older than the cut-off. Every version newer than the cut-off is newer than ``c`` and is still
rebuilt from checkpoint ``c`` and the commits after it, so time travel to any version inside
retention keeps working; versions before ``c`` are gone, as after Delta's cleanup. (Delta itself
may delete up to its *latest* checkpoint, which can break time travel to versions between an
older checkpoint and the cut-off; this keeps the stronger guarantee.) Nothing is deleted when
the commits from ``c`` to the latest version are not all present. Files are deleted oldest
first, so an interrupted cleanup still leaves a contiguous log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from logstores.base import FileStatus
from replay.log.checkpoint_instances import complete_checkpoints
from replay.log.checkpoints import read_checkpoint_actions
from replay.log.commit_timestamps import monotonic_timestamps
from replay.log.listing import classify_listing, list_log
from replay.log.table_io import TableIO
from replay.protocol import filenames
from replay.protocol.table_config import TableConfiguration
from replay.protocol.timestamps import format_timestamp

logger = logging.getLogger(__name__)

DAY_MS = 86_400_000
FIRST_NAME = " "
"""A name no sidecar sorts before: listing ``_sidecars`` from it lists them all."""


def cutoff_time(now_ms: int, retention_ms: int) -> int:
    """``now - retention`` truncated down to midnight UTC (Delta's ``truncateDay``)."""
    return (now_ms - retention_ms) // DAY_MS * DAY_MS


@dataclass(frozen=True)
class _LogFile:
    version: int
    status: FileStatus


def _log_files(statuses: list[FileStatus]) -> list[_LogFile]:
    """Every file cleanup may delete (commits, compacted commits, checkpoints, checksums) with the
    version it belongs to."""
    return [
        _LogFile(filenames.file_version(status.name), status)
        for status in statuses
        if not status.is_dir and not filenames.is_staged_delta_file(status.path) and _is_log_file(status.name)
    ]


def _is_log_file(name: str) -> bool:
    return (
        filenames.is_delta_file(name)
        or filenames.is_compacted_delta_file(name)
        or filenames.is_checkpoint_file(name)
        or filenames.is_checksum_file(name)
    )


def cleanup_boundary(statuses: list[FileStatus], cutoff_ms: int) -> int | None:
    """The newest version with a complete checkpoint whose commit is older than ``cutoff_ms``, or
    ``None`` when there is none (or the commits after it are not contiguous)."""
    commits = classify_listing(statuses).deltas
    if not commits:
        return None
    times = {record.version: record.timestamp for record in monotonic_timestamps(commits)}
    checkpointed = {instance.version for instance in complete_checkpoints(statuses)}
    candidates = [v for v in checkpointed if v in times and times[v] < cutoff_ms]
    if not candidates:
        return None
    boundary = max(candidates)
    versions = [version for version, _ in commits if version >= boundary]
    if versions != list(range(boundary, commits[-1][0] + 1)):
        return None
    return boundary


def cleanup_expired_logs(io: TableIO, config: TableConfiguration, now_ms: int | None = None) -> list[str]:
    """Delete the log files that expired under ``config``'s ``delta.logRetentionDuration``.

    Returns the deleted paths, oldest version first. Storage errors propagate (a post-commit hook
    reports them without failing the commit).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = cutoff_time(now, config.log_retention_ms)
    logger.info(
        "Starting the deletion of log files older than %s in %s", format_timestamp(cutoff), io.log_path
    )
    statuses = list_log(io, 0) or []
    boundary = cleanup_boundary(statuses, cutoff)
    if boundary is None:
        return []
    files = _log_files(statuses)
    expired = sorted((f for f in files if f.version < boundary), key=lambda f: (f.version, f.status.name))
    deleted: list[str] = []
    for log_file in expired:
        io.store.delete(log_file.status.path)
        deleted.append(log_file.status.path)
    if config.protocol.has_writer_feature("v2Checkpoint"):
        for status in unreferenced_sidecars(io, statuses, boundary, cutoff):
            io.store.delete(status.path)
            deleted.append(status.path)
    logger.info(
        "Deleted %d log files of %s older than %s", len(deleted), io.table_path, format_timestamp(cutoff)
    )
    return deleted


def unreferenced_sidecars(
    io: TableIO, statuses: list[FileStatus], boundary: int, cutoff_ms: int
) -> list[FileStatus]:
    """The V2 checkpoint sidecars (``_delta_log/_sidecars``) no checkpoint kept by cleanup (those
    at ``boundary`` or later) lists, written before ``cutoff_ms``: what Delta's cleanup deletes
    with the checkpoints that referenced them. A newer sidecar may belong to a checkpoint being
    written, and is kept."""
    referenced: set[str] = set()
    for instance, files in complete_checkpoints(statuses).items():
        if instance.version >= boundary:
            for action in read_checkpoint_actions(io, files, ["sidecar"]):
                referenced.add(filenames.sidecar_file(io.log_path, action["sidecar"]["path"]))
    try:
        sidecars = list(io.store.list_from(filenames.sidecar_file(io.log_path, FIRST_NAME)))
    except FileNotFoundError:
        return []
    return [
        status
        for status in sidecars
        if not status.is_dir
        and not status.name.startswith(".")  # a hidden file (a Hadoop checksum) is no sidecar
        and status.path not in referenced
        and status.modification_time < cutoff_ms
    ]
