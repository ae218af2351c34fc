"""Log segments: which files make up a table version (Delta's ``SnapshotManagement``).

A :class:`LogSegment` is at most one complete checkpoint plus the contiguous commits after it
up to the target version, optionally with log compaction files standing in for runs of
commits. :func:`select_log_segment` is pure (it works on a listing);
:func:`build_log_segment` lists the log once and applies it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from logstores.base import FileStatus
from replay.log.checkpoint_instances import CheckpointInstance, latest_complete_checkpoint
from replay.log.last_checkpoint import LastCheckpointInfo, read_last_checkpoint
from replay.log.listing import LogListing, classify_listing, list_log
from replay.log.table_io import TableIO
from replay.protocol.errors import MissingVersionsError, TableNotFoundError, VersionNotFoundError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogSegment:
    """The files needed to reconstruct ``version``.

    ``deltas`` are the commit files after the checkpoint in version order; ``replay_files`` are
    what replay actually reads (``deltas`` with compacted files substituted where they cover a
    run, each with its ``(start, end)`` version range).
    """

    log_path: str
    version: int
    deltas: list[FileStatus]
    checkpoint: CheckpointInstance | None = None
    checkpoint_files: list[FileStatus] = field(default_factory=list)
    replay_files: list[tuple[int, int, FileStatus]] = field(default_factory=list)
    last_commit_file: FileStatus | None = None

    @property
    def checkpoint_version(self) -> int:
        return self.checkpoint.version if self.checkpoint is not None else -1

    @property
    def files(self) -> list[FileStatus]:
        """Every file replay reads: checkpoint files, then commit (or compacted) files."""
        return [*self.checkpoint_files, *(status for _, _, status in self.replay_files)]

    def same_files(self, other: LogSegment) -> bool:
        """Whether ``other`` is this segment, file for file (same paths, sizes and times)."""

        def identity(segment: LogSegment) -> list[tuple[str, int, int]]:
            return [(s.path, s.size, s.modification_time) for s in segment.files]

        return self.version == other.version and identity(self) == identity(other)

    @property
    def last_commit_timestamp(self) -> int:
        """Modification time (ms) of the commit file of :attr:`version`; 0 if it is not listed."""
        return self.last_commit_file.modification_time if self.last_commit_file is not None else 0


def verify_delta_versions(
    versions: Sequence[int], table: str, expected_start: int | None = None, expected_end: int | None = None
) -> None:
    """Delta's ``verifyDeltaVersions``: contiguous, starting and ending where expected.

    Raises :class:`MissingVersionsError` naming the versions found and the missing ones.
    """
    if versions:
        for previous, current in itertools.pairwise(versions):
            if current != previous + 1:
                missing = list(range(previous + 1, current)) if current > previous else []
                listed = ", ".join(str(v) for v in versions)
                raise MissingVersionsError(
                    f"[DELTA_VERSIONS_NOT_CONTIGUOUS] Versions ({listed}) are not contiguous"
                    f" in the log of table {table}" + (f": missing {missing}" if missing else "") + ".",
                    table=table,
                    versions=versions,
                    missing=missing,
                )
    if expected_start is not None and (not versions or versions[0] != expected_start):
        raise MissingVersionsError(
            f"Did not get the first delta file version: {expected_start} to compute Snapshot of table {table}"
            f" (found versions {_describe(versions)})",
            table=table,
            versions=versions,
            missing=[expected_start],
        )
    if expected_end is not None and (not versions or versions[-1] != expected_end):
        raise MissingVersionsError(
            f"Did not get the last delta file version: {expected_end} to compute Snapshot of table {table}"
            f" (found versions {_describe(versions)})",
            table=table,
            versions=versions,
            missing=[expected_end],
        )


def _describe(versions: Sequence[int]) -> str:
    if not versions:
        return "none"
    return f"{versions[0]}..{versions[-1]}" if len(versions) > 2 else ", ".join(map(str, versions))


def select_compacted(
    deltas: Sequence[tuple[int, FileStatus]],
    compacted: Sequence[tuple[int, int, FileStatus]],
    after: int,
    last: int,
) -> list[tuple[int, int, FileStatus]]:
    """Delta's ``useCompactedDeltasForLogSegment``: greedily cover ``after+1 .. last`` preferring compactions.

    Falls back to the plain commits if the greedy choice leaves a gap or overlaps.
    """
    plain = [(version, version, status) for version, status in deltas if after < version <= last]
    candidates = [item for item in compacted if item[0] > after and item[1] <= last]
    if not candidates:
        return plain
    ordered = sorted([*candidates, *plain], key=lambda item: item[2].name)
    chosen: list[tuple[int, int, FileStatus]] = []
    highest = after
    for start, end, status in ordered:
        if start > highest:
            chosen.append((start, end, status))
            highest = end
    expected = after + 1
    for start, end, _ in chosen:
        if start != expected:
            logger.warning(
                "log compaction files do not cover versions %d..%d; using commits", after + 1, last
            )
            return plain
        expected = end + 1
    if expected != last + 1:
        return plain
    return chosen


def select_log_segment(
    log_path: str,
    listing: LogListing,
    table: str,
    *,
    version_to_load: int | None = None,
    before_checkpoint: CheckpointInstance | None = None,
    use_compaction: bool = True,
) -> LogSegment:
    """Choose the checkpoint and commits for ``version_to_load`` (latest if ``None``) from a listing.

    Raises :class:`VersionNotFoundError` if the version does not exist and
    :class:`MissingVersionsError` for a truncated log or a gap.
    """
    found = latest_complete_checkpoint(listing.checkpoints, version_to_load, before_checkpoint)
    checkpoint, checkpoint_files = found if found is not None else (None, [])
    cp_version = checkpoint.version if checkpoint is not None else -1
    if not listing.deltas:
        where = version_to_load if version_to_load is not None else max(cp_version, 0)
        raise MissingVersionsError(
            f"Could not find any delta files for version {where} in the log of table {table}",
            table=table,
            missing=[where],
        )
    after = [(version, status) for version, status in listing.deltas if version > cp_version]
    versions = [version for version, _ in after]
    new_version = versions[-1] if versions else cp_version
    if version_to_load is not None and new_version != version_to_load:
        raise VersionNotFoundError(
            f"Trying to load a non-existent version {version_to_load} of table {table}"
            f" (the latest version is {new_version})",
            table=table,
            version=version_to_load,
            latest=new_version,
        )
    if versions and versions[0] != cp_version + 1:
        first = versions[0]
        missing = list(range(cp_version + 1, first))
        reason = (
            "no checkpoint and version 0 is missing" if checkpoint is None else f"checkpoint {cp_version}"
        )
        raise MissingVersionsError(
            f"[DELTA_TRUNCATED_TRANSACTION_LOG] {log_path}: Unable to reconstruct state at version"
            f" {new_version} of table {table} as the transaction log has been truncated ({reason};"
            f" first commit found is {first}, missing versions {_describe(missing)})",
            table=table,
            versions=versions,
            missing=missing,
        )
    verify_delta_versions(
        versions, table, cp_version + 1 if versions else None, new_version if versions else None
    )
    if use_compaction and listing.compacted:
        replay = select_compacted(after, listing.compacted, cp_version, new_version)
    else:
        replay = [(version, version, status) for version, status in after]
    last_commit = next((status for version, status in listing.deltas if version == new_version), None)
    deltas = [status for _, status in after]
    return LogSegment(log_path, new_version, deltas, checkpoint, checkpoint_files, replay, last_commit)


def build_log_segment(
    io: TableIO,
    *,
    version_to_load: int | None = None,
    last_checkpoint: LastCheckpointInfo | None = None,
    before_checkpoint: CheckpointInstance | None = None,
) -> LogSegment:
    """List the log once (from the ``_last_checkpoint`` hint) and select the segment.

    Falls back to a listing from version 0 when the hint points at nothing usable. Raises
    :class:`TableNotFoundError` when the log is missing or has no Delta files.
    """
    table, log_path = io.table_path, io.log_path
    hint = last_checkpoint.version if last_checkpoint is not None else -1
    if version_to_load is not None and hint > version_to_load:
        hint = -1
    if before_checkpoint is not None:
        hint = -1
    start = max(hint, 0)
    statuses = list_log(io, start)
    listing = classify_listing(statuses or [], version_to_load)
    if hint > 0 and (
        listing.is_empty or latest_complete_checkpoint(listing.checkpoints, version_to_load) is None
    ):
        if not listing.is_empty:
            logger.warning(
                "_last_checkpoint of %s points at version %d without a complete checkpoint; listing all",
                table,
                hint,
            )
        statuses = list_log(io, 0)
        listing = classify_listing(statuses or [], version_to_load)
    if statuses is None or listing.is_empty:
        raise TableNotFoundError.no_commits(table, log_path)
    try:
        return select_log_segment(
            log_path, listing, table, version_to_load=version_to_load, before_checkpoint=before_checkpoint
        )
    except MissingVersionsError as exc:
        if hint > 0 and latest_complete_checkpoint(listing.checkpoints, version_to_load) is None:
            raise MissingVersionsError(
                f"[DELTA_MISSING_PART_FILES] Couldn't find all part files of the checkpoint version: {hint}"
                f" of table {table} ({exc})",
                table=table,
                versions=exc.versions,
                missing=exc.missing,
            ) from exc
        raise


def load_log_segment(io: TableIO, version: int | None = None) -> LogSegment:
    """The segment of ``version`` (latest if ``None``), listed from the ``_last_checkpoint`` hint."""
    return build_log_segment(io, version_to_load=version, last_checkpoint=read_last_checkpoint(io))


def segment_in_listing(io: TableIO, listing: LogListing, version: int) -> LogSegment | None:
    """The segment of ``version`` chosen from ``listing`` alone, or ``None`` if it may not hold it.

    A listing from version 0 always suffices; a later one only when it holds a complete checkpoint
    at or before ``version``. Errors of an impossible segment (a gap) are left to
    :func:`build_log_segment`, which lists again: ``None`` then.
    """
    if listing.listed_from > 0 and latest_complete_checkpoint(listing.checkpoints, version) is None:
        return None
    try:
        return select_log_segment(io.log_path, listing.up_to(version), io.table_path, version_to_load=version)
    except (MissingVersionsError, VersionNotFoundError):
        return None
