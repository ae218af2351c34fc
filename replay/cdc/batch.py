"""The batch change data feed: Delta's ``CDCReader`` (:func:`table_changes`).

:func:`table_changes` returns every row changed between two versions with ``_change_type``
(``insert``, ``delete``, ``update_preimage``, ``update_postimage``), ``_commit_version`` and
``_commit_timestamp``. The version range is resolved from versions or timestamps with Delta's
errors (:func:`resolve_change_range`); :func:`plan_changes` walks the commits once, checking the
feed is enabled throughout and that every version can be read with the read schema
(:mod:`replay.cdc.schema_checks`: the end version's for column-mapping tables, else the latest),
and lists the file reads (:mod:`replay.cdc.change_actions` decides which);
:func:`~replay.cdc.change_rows.read_changes` reads them concurrently into one Arrow table with the
read schema.
"""

from __future__ import annotations

import datetime as _dt
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from replay.cdc.change_actions import (
    ChangeRead,
    InvalidCDCRangeError,
    end_before_start_error,
    filter_cdc_actions,
    is_cdf_enabled,
    missing_change_data_error,
    plan_commit_reads,
    table_error,
)
from replay.cdc.change_rows import change_schema, read_changes
from replay.cdc.schema_checks import BatchSchemaCheck, batch_read_version
from replay.data.reader import TableReader
from replay.log.commit_files import iter_commits
from replay.log.commit_timestamps import listed_commit_times
from replay.log.listing import LogListing, listing_from
from replay.log.log_segment import segment_in_listing
from replay.log.table_io import TableIO
from replay.protocol.actions import Action, CommitInfo, Metadata, Protocol
from replay.protocol.errors import DataLossError, VersionNotFoundError
from replay.protocol.filenames import delta_file
from replay.protocol.table_config import TYPE_WIDENING_FEATURES, TableConfiguration
from replay.protocol.timestamps import UTC, Timestamp, to_datetime, to_timestamp_ms
from replay.state.loader import KnownDescription, load_table_configuration
from replay.state.snapshot import Snapshot
from replay.state.table_log import TableLog

TimestampLike = Timestamp
"""Kept for callers of earlier releases: the same as :data:`replay.protocol.timestamps.Timestamp`."""


# -- version ranges ---------------------------------------------------------------------------
def starting_version_for_timestamp(
    delta_log: TableLog, timestamp_ms: int, *, allow_out_of_range: bool = False, zone: _dt.tzinfo = UTC
) -> int:
    """The first version committed at or after ``timestamp_ms`` (streaming start semantics).

    A timestamp before the earliest commit gives the earliest version. One after the latest
    commit raises :class:`replay.protocol.errors.TimestampOutOfRangeError` (showing times in
    ``zone``) unless ``allow_out_of_range`` (then it gives latest + 1).
    """
    version = delta_log.version_at_timestamp(
        timestamp_ms, can_return_last_commit=True, can_return_earliest_commit=True, zone=zone
    )
    if delta_log.commit_timestamp(version) >= timestamp_ms:
        return version
    if version + 1 <= delta_log.latest_version() or allow_out_of_range:
        return version + 1
    # Let the time-travel lookup raise its "after the latest version" error.
    delta_log.version_at_timestamp(timestamp_ms, zone=zone)
    return version + 1


def resolve_change_range(
    delta_log: TableLog,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: TimestampLike | None = None,
    ending_timestamp: TimestampLike | None = None,
    *,
    allow_out_of_range: bool = False,
    latest: int | None = None,
) -> tuple[int, int] | None:
    """The inclusive version range a change read covers, or ``None`` when it is empty.

    Versions win over timestamps. ``latest`` is the latest version when the caller knows it.
    Raises :class:`InvalidCDCRangeError` (no start; end before start) and
    :class:`VersionNotFoundError` (start after the latest version) with Delta's texts.
    """
    table = delta_log.table_path
    if latest is None:
        latest = delta_log.latest_version()
    start_ts = end_ts = None
    if starting_version is not None:
        start = int(starting_version)
    elif starting_timestamp is not None:
        start_moment = to_datetime(starting_timestamp)
        start_ts = to_timestamp_ms(start_moment)
        start = starting_version_for_timestamp(
            delta_log, start_ts, allow_out_of_range=allow_out_of_range, zone=start_moment.tzinfo or UTC
        )
    else:
        raise table_error(
            InvalidCDCRangeError,
            "[DELTA_NO_START_FOR_CDC_READ] No startingVersion or startingTimestamp provided for CDC read.",
            table,
        )
    if ending_version is not None:
        end = int(ending_version)
    elif ending_timestamp is not None:
        end_moment = to_datetime(ending_timestamp)
        end_ts = to_timestamp_ms(end_moment)
        end = delta_log.version_at_timestamp(
            end_ts, can_return_last_commit=allow_out_of_range, zone=end_moment.tzinfo or UTC
        )
    else:
        end = latest
    if start > latest:
        if allow_out_of_range:
            return None
        raise table_error(
            VersionNotFoundError,
            f"[DELTA_CDC_START_VERSION_AFTER_LATEST] Start version {start} for change data feed exceeds "
            f"the latest table version {latest}.",
            table,
            version=start,
            latest=latest,
        )
    if start_ts is not None and end_ts is not None:
        if start_ts > end_ts:
            raise end_before_start_error(start, end, table)
        if end == start - 1:
            return None
    if end < start:
        raise end_before_start_error(start, end, table)
    return start, min(end, latest)


def table_changes(
    delta_log: TableLog,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: TimestampLike | None = None,
    ending_timestamp: TimestampLike | None = None,
    *,
    columns: Sequence[str] | None = None,
    allow_out_of_range: bool = False,
    fail_on_data_loss: bool = False,
    max_workers: int | None = None,
) -> pa.Table:
    """Every row changed in versions ``[start, end]`` with the three CDC columns.

    ``delta_log`` is a :class:`replay.delta_log.DeltaLog`. The start is ``starting_version`` or
    the first commit at/after ``starting_timestamp``; the end is ``ending_version``, the last
    commit at/before ``ending_timestamp`` or the latest version. The schema is the latest
    snapshot's, or the end version's for tables with column mapping (Delta's default schema
    mode). Raises :class:`ChangeDataFeedNotEnabledError` if CDF is off at the start version
    or is turned off inside the range, :class:`IncompatibleSchemaChangeError` if the range
    crosses a schema change that schema cannot read, :class:`InvalidCDCRangeError` /
    :class:`VersionNotFoundError` for bad ranges, :class:`DataLossError` if commits in the range
    are missing and ``fail_on_data_loss`` (by default they are skipped, like Delta's batch read),
    and :class:`replay.data.DataFileNotFoundError` for missing data files.
    """
    listing = None
    if starting_version is not None:  # the one listing of the call (timestamps need all commits)
        listing = changes_listing(delta_log.io, int(starting_version))
    resolved = resolve_change_range(
        delta_log,
        starting_version,
        ending_version,
        starting_timestamp,
        ending_timestamp,
        allow_out_of_range=allow_out_of_range,
        latest=listing.latest_version if listing is not None else None,
    )
    if resolved is None:
        latest = delta_log.update()
        reader = TableReader.for_metadata(
            delta_log.table_path, latest.metadata, latest.protocol, delta_log.io.conf
        )
        return change_schema(reader, columns).empty_table()
    plan = plan_changes(delta_log, *resolved, fail_on_data_loss=fail_on_data_loss, listing=listing)
    return read_changes(plan.reader(delta_log.io.conf), plan.reads, columns, max_workers=max_workers)


LOOK_BACK = 100
"""Commits listed before a change range's start, so that commit times are made increasing as Delta
makes them (its history manager looks back as far)."""


def changes_listing(io: TableIO, start: int) -> LogListing:
    """The listing a change read of versions from ``start`` on works with: from ``start - LOOK_BACK``.

    Raises :class:`TableNotFoundError` when there is no table.
    """
    listing = listing_from(io, start - LOOK_BACK)
    if not listing.deltas:
        listing = listing_from(io, 0)  # commits older than the window only: the start is after them
    return listing


class CommitTimestamps:
    """Commit timestamps (ms) of one table.

    With a ``listing`` (the change read's own), a commit is timed by its in-commit timestamp when
    its actions carry one, else by its file's modification time made increasing over the listing;
    without one, every recreatable commit is listed once on first use (``commit_records``).
    """

    def __init__(self, delta_log: TableLog, listing: LogListing | None = None) -> None:
        self.delta_log = delta_log
        self._listing = listing
        self._listed: dict[int, int] | None = None

    def of(self, version: int, actions: Sequence[Action] = ()) -> int:
        """The timestamp of commit ``version`` (whose ``actions`` may hold an in-commit timestamp).

        A commit older than the earliest recreatable version is timed by its in-commit timestamp
        or else its file's modification time. Raises :class:`DataLossError` if the commit file
        is gone.
        """
        in_commit = next(
            (
                a.in_commit_timestamp
                for a in actions
                if isinstance(a, CommitInfo) and a.in_commit_timestamp is not None
            ),
            None,
        )
        if self._listing is not None:
            if in_commit is not None:
                return in_commit
            if self._listed is None:
                self._listed = listed_commit_times(self._listing)
        elif self._listed is None:
            self._listed = {record.version: record.timestamp for record in self.delta_log.commit_records()}
        timestamp = self._listed.get(version)
        if timestamp is not None:
            return timestamp
        if in_commit is not None:
            return in_commit
        io = self.delta_log.io
        path = delta_file(io.log_path, version)
        for status in io.store.list_from(path):
            if status.path.rstrip("/").rsplit("/", 1)[-1] == path.rsplit("/", 1)[-1]:
                return status.modification_time
            break
        raise DataLossError(
            f"commit {version} of table {self.delta_log.table_path} disappeared while reading it",
            table=self.delta_log.table_path,
        )


@dataclass(frozen=True)
class ChangePlan:
    """The reads of a change range and the table description to read them with.

    ``metadata``/``protocol`` are those of the version whose schema the read uses
    (:func:`replay.cdc.schema_checks.batch_read_version`: the end version for tables with column
    mapping, else the latest version), ``read_version`` that version.
    """

    table_path: str
    reads: list[ChangeRead]
    metadata: Metadata
    protocol: Protocol
    read_version: int = -1

    def reader(self, conf: Mapping[str, str] | None = None) -> TableReader:
        return TableReader.for_metadata(self.table_path, self.metadata, self.protocol, conf)


def plan_changes(
    delta_log: TableLog,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = False,
    listing: LogListing | None = None,
) -> ChangePlan:
    """Plan the reads of versions ``[start, end]``, checking they can all be read with one schema.

    Raises :class:`ChangeDataFeedNotEnabledError` when CDF is off at ``start`` or turned off in
    the range, and :class:`~replay.protocol.errors.IncompatibleSchemaChangeError` (Delta's
    ``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE`` / ``..._DATA_SCHEMA``) when a schema
    change in the range, or the start schema, cannot be read with the read schema; both before
    any data is read, in Delta's order (by version). The table description at ``start`` comes
    from the start commit when it carries both metadata and protocol (version 0 always does),
    else from the commits before it back to a checkpoint and that checkpoint's protocol and
    metadata; later descriptions come from the commits read, and the latest version's (needed
    only when ``end`` is not the latest version) from the commits after ``end``. No file state is
    replayed and every log file is read at most once. The log is listed once (or not at all when
    ``listing``, the call's :func:`changes_listing`, is given).
    """
    table = delta_log.table_path
    io = delta_log.io
    if listing is None or listing.listed_from > max(start - LOOK_BACK, 0):
        listing = changes_listing(io, start)
    changes = iter(iter_commits(io, start, end, fail_on_data_loss=fail_on_data_loss, listing=listing))
    first = next(changes, None)
    start_actions = first[1] if first is not None and first[0] == start else None
    metadata, protocol = _description_in(start_actions or ())
    if metadata is None or protocol is None:
        metadata, protocol = _description_at_start(delta_log, listing, start, start_actions)
    if not is_cdf_enabled(metadata):
        raise missing_change_data_error(start, start, end, table)
    start_metadata = metadata
    metadata_changes: list[tuple[int, Metadata]] = []
    timestamps = CommitTimestamps(delta_log, listing)
    reads: list[ChangeRead] = []
    last_read = start
    contiguous = start_actions is not None
    for version, actions in itertools.chain([first] if first is not None else [], changes):
        if version > end:
            break
        contiguous = contiguous and version == last_read
        last_read = version + 1
        commit_metadata, commit_protocol = _description_in(actions)
        if commit_metadata is not None:
            if version > start:
                metadata_changes.append((version, commit_metadata))
            metadata = commit_metadata
        protocol = commit_protocol or protocol
        files = filter_cdc_actions(actions, version)
        if files:
            reads.extend(plan_commit_reads(version, timestamps.of(version, actions), files))
    read_version, read_metadata, read_protocol = last_read - 1, metadata, protocol
    if last_read <= (listing.latest_version if listing.latest_version is not None else -1):
        known = KnownDescription(last_read - 1, protocol, metadata) if contiguous else None
        latest_version, latest = _latest_description(delta_log, listing, known)
        read_version = batch_read_version(
            start_metadata,
            end=metadata,
            end_version=end,
            latest=latest.metadata,
            latest_version=latest_version,
            conf=delta_log.io.conf,
        )
        if read_version == latest_version:
            read_metadata, read_protocol = latest.metadata, latest.protocol
    widening = bool(set(read_protocol.writer_features or ()) & TYPE_WIDENING_FEATURES)
    check = BatchSchemaCheck(start, end, read_metadata, read_version, table, type_widening=widening)
    for version, commit_metadata in metadata_changes:
        if not is_cdf_enabled(commit_metadata):
            raise missing_change_data_error(version, start, end, table)
        check.check_schema_change(commit_metadata, version)
    check.check_start(start_metadata)
    return ChangePlan(table, reads, read_metadata, read_protocol, read_version)


def _description_at_start(
    delta_log: TableLog, listing: LogListing, start: int, start_actions: Sequence[Action] | None
) -> tuple[Metadata, Protocol]:
    """The metadata and protocol at ``start`` (whose commit's actions the caller may have read),
    from the change read's listing: only the commits before it back to a checkpoint, and that
    checkpoint's protocol and metadata, are read."""
    io = delta_log.io
    segment = segment_in_listing(io, listing, start)
    if segment is None:
        snapshot = delta_log.snapshot(start)
        return snapshot.metadata, snapshot.protocol
    config = load_table_configuration(io, segment, newest_actions=start_actions)
    return config.metadata, config.protocol


def _latest_description(
    delta_log: TableLog, listing: LogListing, known: KnownDescription | None
) -> tuple[int, TableConfiguration]:
    """The latest version of the change read's listing and its configuration (checked readable).

    ``known`` (the description at the last version the read walked) spares reading the commits up
    to it and the checkpoint: only the commits after it are read.
    """
    io = delta_log.io
    assert listing.latest_version is not None
    segment = segment_in_listing(io, listing, listing.latest_version)
    if segment is None:
        latest = delta_log.update()
        return latest.version, latest.config
    return segment.version, load_table_configuration(io, segment, known=known)


def change_read_snapshot(delta_log: TableLog, start: int, end: int) -> Snapshot:
    """The snapshot whose schema a batch change read of ``[start, end]`` uses (as :func:`plan_changes`).

    The latest snapshot, or the end version's for tables with column mapping (in Delta's
    default ``endVersion`` schema mode). Loads the start version only when neither the end nor
    the latest version uses column mapping.
    """
    latest = delta_log.update()
    if end >= latest.version:
        return latest
    end_snapshot = delta_log.snapshot(end)
    mapped = any(m.column_mapping_mode != "none" for m in (latest.metadata, end_snapshot.metadata))
    start_metadata = end_snapshot.metadata if mapped else delta_log.snapshot(start).metadata
    version = batch_read_version(
        start_metadata,
        end=end_snapshot.metadata,
        end_version=end,
        latest=latest.metadata,
        latest_version=latest.version,
        conf=delta_log.io.conf,
    )
    return end_snapshot if version == end else latest


def _description_in(actions: Sequence[Action]) -> tuple[Metadata | None, Protocol | None]:
    """The last metadata and protocol actions of one commit (``None`` where it has none)."""
    metadata = protocol = None
    for action in actions:
        if isinstance(action, Metadata):
            metadata = action
        elif isinstance(action, Protocol):
            protocol = action
    return metadata, protocol
