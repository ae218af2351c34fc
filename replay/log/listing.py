"""Listing ``_delta_log``: one ``list_from`` per operation, classified into commits and checkpoints.

A :class:`LogListing` keeps only the files Delta reads (commits, compacted commits, non-empty
checkpoint files); everything that needs to know which versions exist works on one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from logstores.base import FileStatus
from logstores.errors import BucketNotFoundError
from replay.log.checkpoint_instances import complete_checkpoints
from replay.log.last_checkpoint import read_last_checkpoint
from replay.log.table_io import TableIO
from replay.protocol import filenames
from replay.protocol.errors import MissingVersionsError, TableNotFoundError


@dataclass(frozen=True)
class LogListing:
    """The Delta files of a ``_delta_log`` listing, classified (nothing else is kept)."""

    deltas: list[tuple[int, FileStatus]]
    compacted: list[tuple[int, int, FileStatus]]
    checkpoints: list[FileStatus]
    listed_from: int = 0
    """The version the listing started at: nothing older is in it."""

    @property
    def is_empty(self) -> bool:
        return not (self.deltas or self.compacted or self.checkpoints)

    @property
    def versions(self) -> list[int]:
        return [version for version, _ in self.deltas]

    @property
    def latest_version(self) -> int | None:
        return self.deltas[-1][0] if self.deltas else None

    def up_to(self, version: int) -> LogListing:
        """The files of this listing that a table at ``version`` may use (nothing later)."""
        return LogListing(
            [(v, status) for v, status in self.deltas if v <= version],
            [(start, end, status) for start, end, status in self.compacted if end <= version],
            [status for status in self.checkpoints if filenames.checkpoint_version(status.name) <= version],
            self.listed_from,
        )


def classify_listing(
    statuses: Iterable[FileStatus], max_version: int | None = None, listed_from: int = 0
) -> LogListing:
    """Keep commits, compacted commits and non-empty checkpoint files with version <= ``max_version``.

    ``listed_from`` is the version the listing of ``statuses`` started at.
    """
    deltas: list[tuple[int, FileStatus]] = []
    compacted: list[tuple[int, int, FileStatus]] = []
    checkpoints: list[FileStatus] = []
    for status in statuses:
        if status.is_dir:
            continue
        name = status.name
        if filenames.is_delta_file(name) and not filenames.is_staged_delta_file(status.path):
            version = filenames.delta_version(name)
            if max_version is None or version <= max_version:
                deltas.append((version, status))
        elif filenames.is_checkpoint_file(name):
            if status.size > 0 and (max_version is None or filenames.checkpoint_version(name) <= max_version):
                checkpoints.append(status)
        elif filenames.is_compacted_delta_file(name):
            start, end = filenames.compacted_delta_versions(name)
            if max_version is None or end <= max_version:
                compacted.append((start, end, status))
    deltas.sort(key=lambda item: item[0])
    return LogListing(deltas, compacted, checkpoints, listed_from)


def list_log(io: TableIO, start_version: int) -> list[FileStatus] | None:
    """``list_from`` the listing prefix of ``start_version``; ``None`` if the log directory is missing.

    A listing that races with commits can miss a commit created while it ran yet show a later one:
    a local directory is read in hash order, not name order, and a name created behind the read
    position is not returned. Every commit seen was created after all earlier ones, so when the
    commits the table needs (those after the newest checkpoint listed) have a hole, the log is
    listed once more: a commit missed by the first listing existed before the second began. A
    hole that is still there is real and left to the version-gap check.

    A missing bucket or container is not a missing log: its
    :class:`~logstores.errors.BucketNotFoundError` (naming the bucket) propagates.
    """
    prefix = filenames.listing_prefix(io.log_path, start_version)
    try:
        statuses = list(io.store.list_from(prefix))
        if _has_hole_after_checkpoint(statuses):
            statuses = list(io.store.list_from(prefix))
    except BucketNotFoundError:
        raise
    except FileNotFoundError:
        return None
    return statuses


def _has_hole_after_checkpoint(statuses: list[FileStatus]) -> bool:
    listing = classify_listing(statuses)
    newest_checkpoint = max((filenames.checkpoint_version(s.name) for s in listing.checkpoints), default=-1)
    needed = [version for version in listing.versions if version >= newest_checkpoint]
    return bool(needed) and needed[-1] - needed[0] + 1 != len(needed)


def listing_from(io: TableIO, version: int) -> LogListing:
    """The log from ``version`` on, classified (one ``list_from``).

    Raises :class:`TableNotFoundError` if the log directory is missing or has no commit at all
    from ``version`` on.
    """
    start = max(version, 0)
    statuses = list_log(io, start)
    listing = classify_listing(statuses or [], listed_from=start)
    if statuses is None or (not listing.deltas and start == 0):
        raise TableNotFoundError.no_commits(io.table_path, io.log_path)
    return listing


def full_listing(io: TableIO) -> LogListing:
    """The whole log, classified; :class:`TableNotFoundError` if it holds no commit."""
    listing = classify_listing(list_log(io, 0) or [])
    if not listing.deltas:
        raise TableNotFoundError.no_commits(io.table_path, io.log_path)
    return listing


def latest_version(io: TableIO) -> int:
    """The newest committed version, listed from the ``_last_checkpoint`` hint.

    Raises :class:`TableNotFoundError` if there is no commit.
    """
    hint = read_last_checkpoint(io)
    start = hint.version if hint is not None else 0
    listing = classify_listing(list_log(io, start) or [])
    if not listing.deltas and start > 0:
        listing = classify_listing(list_log(io, 0) or [])
    if not listing.deltas:
        raise TableNotFoundError.no_commits(io.table_path, io.log_path)
    return listing.deltas[-1][0]


def earliest_recreatable_version(listing: LogListing, table: str) -> int:
    """The earliest version a snapshot can be built for (Delta's ``getEarliestRecreatableCommit``).

    That is the oldest of version 0 (if ``0.json`` exists) and complete checkpoint versions
    from which every later commit is present. Raises :class:`MissingVersionsError` if none is.
    """
    versions = listing.versions
    present = set(versions)
    latest = versions[-1]
    newest_gap = max((v for v in range(versions[0], latest + 1) if v not in present), default=-1)
    candidates = sorted(
        {instance.version for instance in complete_checkpoints(listing.checkpoints)}
        | ({0} if 0 in present else set())
    )
    for candidate in candidates:
        if newest_gap <= candidate <= latest:
            return candidate
    raise MissingVersionsError(
        f"no version of table {table} can be reconstructed: no checkpoint or version 0"
        f" followed by contiguous commits (commits found {versions[0]}..{latest})",
        table=table,
        versions=versions,
    )
