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
from typing import TYPE_CHECKING, Any

from logstores.base import FileStatus
from replay.errors import TimestampOutOfRangeError

if TYPE_CHECKING:
    from replay.delta_log import DeltaLog


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


def format_timestamp(timestamp_ms: int) -> str:
    """``2024-01-02 03:04:05.678 UTC`` for error messages."""
    moment = _dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d} UTC"


def active_commit_at(
    records: Sequence[CommitRecord],
    timestamp_ms: int,
    *,
    table: str,
    can_return_last_commit: bool = False,
    can_return_earliest_commit: bool = False,
) -> int:
    """Delta's ``getActiveCommitAtTime``: the last commit whose timestamp is ``<= timestamp_ms``.

    ``records`` are ascending by version with increasing timestamps. Raises
    :class:`TimestampOutOfRangeError` when the time is before the first record (unless
    ``can_return_earliest_commit``) or after the last one (unless ``can_return_last_commit``).
    """
    if not records:
        raise TimestampOutOfRangeError(f"table {table} has no commits", table=table, timestamp=timestamp_ms)
    first, last = records[0], records[-1]

    def out_of_range(code: str, relation: str, record: CommitRecord, advice: str) -> TimestampOutOfRangeError:
        return TimestampOutOfRangeError(
            f"[{code}] The provided timestamp ({format_timestamp(timestamp_ms)}) is {relation} available to"
            f" table {table} (version {record.version} at {format_timestamp(record.timestamp)}). Please use a"
            f" timestamp {advice} {format_timestamp(record.timestamp)}.",
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


def history(delta_log: DeltaLog, limit: int | None = None) -> list[dict[str, Any]]:
    """Commit information newest first: every ``commitInfo`` field plus ``version`` and ``timestamp``.

    ``timestamp`` is the effective commit timestamp (see :meth:`DeltaLog.commit_timestamp`), not
    the one the writer recorded; commits without ``commitInfo`` give just version and timestamp.
    """
    from replay.commit_reader import prefetch, read_commit_file

    records = delta_log.commit_records()
    selected = list(reversed(records))
    if limit is not None:
        selected = selected[: max(limit, 0)]
    out: list[dict[str, Any]] = []
    window = max(2, 2 * delta_log.read_threads)
    with delta_log.executor() as executor:
        statuses = [r.status for r in selected]
        reader = prefetch(
            executor,
            lambda status: read_commit_file(delta_log, status),
            statuses,
            window,
            task="Reading history",
        )
        for record, actions in zip(selected, reader, strict=True):
            entry: dict[str, Any] = dict(commit_info_of(actions) or {})
            entry["version"] = record.version
            entry["timestamp"] = record.timestamp
            out.append(entry)
    return out
