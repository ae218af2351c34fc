"""Commit times and history: which version was current at a time, and what each commit did.

Commit timestamps follow Delta's ``DeltaHistoryManager``: file modification times forced to
increase strictly (a commit never appears older than its predecessor) and, from the version
In-Commit Timestamps were enabled at, the ``commitInfo.inCommitTimestamp`` of each commit.
"""

from __future__ import annotations

import bisect
import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from logstores.base import FileStatus
from replay.log.commit_files import read_commit_dicts
from replay.log.concurrency import prefetch
from replay.log.listing import LogListing, earliest_recreatable_version
from replay.log.table_io import TableIO
from replay.progress import track
from replay.protocol.errors import MissingVersionsError, TimestampOutOfRangeError
from replay.protocol.timestamps import UTC, format_timestamp


@dataclass(frozen=True)
class CommitRecord:
    """One commit file with its effective timestamp (ms)."""

    version: int
    timestamp: int
    status: FileStatus


def monotonic_timestamps(commits: Sequence[tuple[int, FileStatus]]) -> list[CommitRecord]:
    """Records with file mtimes adjusted so each is > the previous one (previous + 1 ms if not)."""
    records: list[CommitRecord] = []
    previous = None
    for version, status in commits:
        timestamp = status.modification_time
        if previous is not None and timestamp <= previous:
            timestamp = previous + 1
        records.append(CommitRecord(version, timestamp, status))
        previous = timestamp
    return records


def active_commit_at(
    records: Sequence[CommitRecord],
    timestamp_ms: int,
    *,
    table: str,
    can_return_last_commit: bool = False,
    can_return_earliest_commit: bool = False,
    zone: _dt.tzinfo = UTC,
) -> int:
    """Delta's ``getActiveCommitAtTime``: the last commit whose timestamp is ``<= timestamp_ms``.

    ``records`` are ascending by version with increasing timestamps. Raises
    :class:`TimestampOutOfRangeError` when the time is before the first record (unless
    ``can_return_earliest_commit``) or after the last one (unless ``can_return_last_commit``);
    its message shows times in ``zone`` (the zone the caller's timestamp was given in).
    """
    if not records:
        raise TimestampOutOfRangeError(f"table {table} has no commits", table=table, timestamp=timestamp_ms)
    first, last = records[0], records[-1]

    def out_of_range(code: str, relation: str, record: CommitRecord, advice: str) -> TimestampOutOfRangeError:
        given, committed = format_timestamp(timestamp_ms, zone), format_timestamp(record.timestamp, zone)
        return TimestampOutOfRangeError(
            f"[{code}] The provided timestamp ({given}) is {relation} available to table {table}"
            f" (version {record.version} at {committed}). Please use a timestamp {advice} {committed}.",
            table=table,
            timestamp=timestamp_ms,
            earliest=first.timestamp,
            latest=last.timestamp,
        )

    index = bisect.bisect_right([record.timestamp for record in records], timestamp_ms) - 1
    if index < 0:
        if can_return_earliest_commit:
            return first.version
        raise out_of_range(
            "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION",
            "before the earliest version",
            first,
            "after or at",
        )
    record = records[index]
    if record is last and record.timestamp < timestamp_ms and not can_return_last_commit:
        raise out_of_range(
            "DELTA_TIMESTAMP_GREATER_THAN_COMMIT", "after the latest version", last, "before or at"
        )
    return record.version


def commit_info_of(actions: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``commitInfo`` object of a parsed commit, if it has one."""
    return next((line["commitInfo"] for line in actions if line.get("commitInfo") is not None), None)


def listed_commit_times(listing: LogListing) -> dict[int, int]:
    """Version -> commit time (ms) of every commit of ``listing``, modification times made strictly
    increasing from the listing's first commit on (Delta's ``getCommitsWithNonIctTimestamps``
    looks back the same way, from a window before the versions it needs)."""
    return {record.version: record.timestamp for record in monotonic_timestamps(listing.deltas)}


def commit_records(io: TableIO, listing: LogListing, ict_since: int | None) -> list[CommitRecord]:
    """Every recreatable commit of ``listing`` with its effective timestamp, oldest first.

    File modification times made strictly increasing; from version ``ict_since`` on (``None``:
    in-commit timestamps are not enabled) a commit's ``inCommitTimestamp`` wins.
    """
    deltas = listing.deltas
    try:
        earliest = earliest_recreatable_version(listing, io.table_path)
    except MissingVersionsError:
        earliest = deltas[0][0]
    records = monotonic_timestamps([(v, s) for v, s in deltas if v >= earliest])
    if ict_since is None:
        return records
    wanted = [record for record in records if record.version >= ict_since]
    reader = prefetch(
        io.executor(), lambda s: read_commit_dicts(io, s), [r.status for r in wanted], io.window
    )
    ict = {}
    for record, actions in zip(wanted, reader, strict=True):
        info = commit_info_of(actions) or {}
        if info.get("inCommitTimestamp") is not None:
            ict[record.version] = int(info["inCommitTimestamp"])
    return [CommitRecord(r.version, ict.get(r.version, r.timestamp), r.status) for r in records]


def history(io: TableIO, records: Sequence[CommitRecord], limit: int | None = None) -> list[dict[str, Any]]:
    """Commit information newest first: every ``commitInfo`` field plus ``version`` and ``timestamp``.

    ``records`` come from :func:`commit_records`; ``timestamp`` is the effective commit
    timestamp, not the one the writer recorded; commits without ``commitInfo`` give just version
    and timestamp.
    """
    selected = list(reversed(records))
    if limit is not None:
        selected = selected[: max(limit, 0)]
    statuses = [r.status for r in selected]
    reader = prefetch(io.executor(), lambda status: read_commit_dicts(io, status), statuses, io.window)
    out: list[dict[str, Any]] = []
    for record, actions in zip(selected, track("Reading history", reader, len(statuses)), strict=True):
        entry: dict[str, Any] = dict(commit_info_of(actions) or {})
        entry["version"] = record.version
        entry["timestamp"] = record.timestamp
        out.append(entry)
    return out
