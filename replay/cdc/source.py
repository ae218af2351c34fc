"""Delta's streaming source (``DeltaSource`` with ``DeltaSourceCDCSupport``): commits in, batches out.

:func:`filter_and_index_delta_logs` reads the commits after a version and indexes the files a
stream takes from each (the change feed's files, or a plain stream's appends);
:func:`get_file_changes_for_cdc` puts the initial snapshot first when the stream starts from
one and cuts the sequence by offset and admission limits (:mod:`replay.cdc.offsets`).
:class:`DeltaSource` ties this together for the PySpark stream reader: initial offset, next
offset under limits, and the rows between two offsets. The stream reads with the table's
schema when the source started; every schema it meets on the way goes through
:class:`~replay.cdc.schema_checks.StreamSchemaCheck` (Delta's check without a schema tracking
location: the stream stops at a schema change that schema cannot read).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from replay.cdc.batch import CommitTimestamps, starting_version_for_timestamp
from replay.cdc.change_actions import (
    CDC_TYPE_INSERT,
    ChangeRead,
    StreamOptions,
    filter_append_actions,
    filter_cdc_actions,
    is_cdf_enabled,
    missing_change_data_error,
    plan_commit_reads,
    table_error,
)
from replay.cdc.change_rows import read_changes
from replay.cdc.offsets import (
    BASE_INDEX,
    AdmissionLimits,
    DeltaSourceOffset,
    IndexedFile,
    index_commit,
    index_snapshot,
    offset_after,
    select_changes,
)
from replay.cdc.schema_checks import StreamSchemaCheck
from replay.data.reader import TableReader
from replay.protocol.actions import FileAction, Metadata
from replay.protocol.errors import DeltaError, UnsupportedTableFeatureError, VersionNotFoundError
from replay.protocol.timestamps import UTC, Timestamp, to_datetime, to_timestamp_ms
from replay.state.snapshot import Snapshot
from replay.state.table_log import TableLog

logger = logging.getLogger(__name__)


def filter_and_index_delta_logs(
    delta_log: TableLog,
    start_version: int,
    *,
    fail_on_data_loss: bool = True,
    read_change_feed: bool = True,
    stream_options: StreamOptions | None = None,
    schema_check: StreamSchemaCheck | None = None,
    end_offset: DeltaSourceOffset | None = None,
) -> Iterator[tuple[int, list[IndexedFile]]]:
    """Every commit from ``start_version`` on, filtered and indexed for a streaming source.

    With ``read_change_feed``, :func:`filter_cdc_actions` selects the files (a no-op MERGE gives
    skipped entries); otherwise the plain source's rules apply (:func:`filter_append_actions`).
    Each metadata action met goes through ``schema_check`` (Delta's
    ``checkReadIncompatibleSchemaChanges``), except in the version a batch ending at its
    ``BASE_INDEX`` (``end_offset``) does not read.
    """
    options = stream_options or StreamOptions()
    table = delta_log.table_path
    unread = (end_offset.reservoir_version, end_offset.index) if end_offset is not None else None
    for version, actions in delta_log.get_changes(start_version, fail_on_data_loss=fail_on_data_loss):
        for metadata in (a for a in actions if isinstance(a, Metadata) and unread != (version, BASE_INDEX)):
            if read_change_feed and not is_cdf_enabled(metadata):
                raise missing_change_data_error(version, start_version, version, table)
            if schema_check is not None:
                schema_check.check(metadata, version)
        if read_change_feed:
            files: list[FileAction] = filter_cdc_actions(actions, version)
        else:
            files = list(filter_append_actions(actions, version, options, table))
        yield version, index_commit(version, files)


def get_file_changes_for_cdc(  # noqa: PLR0917 - Delta's signature
    delta_log: TableLog,
    from_version: int,
    from_index: int,
    is_starting_version: bool,
    limits: AdmissionLimits | None,
    end_offset: DeltaSourceOffset | None,
    *,
    fail_on_data_loss: bool = True,
    exclude_regex: re.Pattern[str] | None = None,
    read_change_feed: bool = True,
    stream_options: StreamOptions | None = None,
    schema_check: StreamSchemaCheck | None = None,
) -> Iterator[tuple[int, list[IndexedFile]]]:
    """The entries a batch starting after ``(from_version, from_index)`` takes, per version.

    With ``is_starting_version`` the snapshot at ``from_version`` comes first (its files as
    inserts), followed by the commits after it; otherwise commits from ``from_version`` on.
    Schema changes in the commits read go through ``schema_check``.
    """

    def versions() -> Iterator[tuple[int, list[IndexedFile]]]:
        if is_starting_version:
            snapshot = delta_log.snapshot(from_version)
            yield from_version, index_snapshot(from_version, snapshot.files())
            start = from_version + 1
        else:
            start = from_version
        yield from filter_and_index_delta_logs(
            delta_log,
            start,
            fail_on_data_loss=fail_on_data_loss,
            read_change_feed=read_change_feed,
            stream_options=stream_options,
            schema_check=schema_check,
            end_offset=end_offset,
        )

    yield from select_changes(
        versions(),
        from_version,
        from_index,
        is_initial_snapshot=is_starting_version,
        limits=limits,
        end_offset=end_offset,
        exclude_regex=exclude_regex,
    )


class DeltaSource:
    """Driver-side logic of a Delta streaming source, plain (appends) or change feed.

    Offsets are :class:`DeltaSourceOffset`; :meth:`latest_offset` admits files under
    :class:`AdmissionLimits`, :meth:`batch_reads` lists what lies between two offsets. The
    first offset (:meth:`initial_offset`) is ``startingVersion`` (``"latest"``: the next commit),
    the first commit at/after ``startingTimestamp``, or else the snapshot of the latest version
    (emitted as inserts) followed by later commits.
    """

    def __init__(
        self,
        delta_log: TableLog,
        *,
        read_change_feed: bool = True,
        starting_version: int | str | None = None,
        starting_timestamp: Timestamp | None = None,
        fail_on_data_loss: bool = True,
        exclude_regex: str | None = None,
        stream_options: StreamOptions | None = None,
        allow_out_of_range: bool = False,
    ) -> None:
        if starting_version is not None and starting_timestamp is not None:
            raise ValueError("Please either provide 'startingVersion' or 'startingTimestamp'")
        self.delta_log = delta_log
        self.read_change_feed = read_change_feed
        self.starting_version = starting_version
        self.starting_timestamp = starting_timestamp
        self.fail_on_data_loss = fail_on_data_loss
        self.exclude_regex = re.compile(exclude_regex) if exclude_regex else None
        self.stream_options = stream_options or StreamOptions()
        self.allow_out_of_range = allow_out_of_range
        self._table_id: str | None = None
        self._metadata_by_version: dict[int, Metadata] = {}
        self._read_snapshot: Snapshot | None = None
        self._start_checked = False

    @property
    def table(self) -> str:
        return self.delta_log.table_path

    @property
    def table_id(self) -> str:
        """The table's id (``metaData.id``): the ``reservoirId`` of every offset."""
        if self._table_id is None:
            self._table_id = str(self.delta_log.update().metadata.id)
        return self._table_id

    @property
    def read_snapshot(self) -> Snapshot:
        """The table when the source started (first used): its schema is the one the stream reads."""
        if self._read_snapshot is None:
            self._read_snapshot = self.delta_log.update()
        return self._read_snapshot

    @property
    def schema_check(self) -> StreamSchemaCheck:
        """The check every schema the stream meets goes through (see :class:`StreamSchemaCheck`)."""
        snapshot = self.read_snapshot
        return StreamSchemaCheck(
            snapshot.metadata,
            snapshot.version,
            self.read_change_feed,
            starting_options=self.starting_version is not None or self.starting_timestamp is not None,
            table=self.table,
        )

    def _check_stream_start(self, version: int) -> None:
        """Once per source: the schema at the first version read must read with the stream's schema.

        Delta's ``checkReadIncompatibleSchemaChangeOnStreamStartOnce``: a schema change before the
        stream started is invisible to the per-commit checks. Skipped when the snapshot of that
        version cannot be loaded any more (the per-commit checks still run).
        """
        if self._start_checked:
            return
        check = self.schema_check
        if version != check.read_version:
            try:
                metadata = self._metadata_at(version)
            except DeltaError as exc:
                logger.warning("cannot check the schema of %s at version %d: %s", self.table, version, exc)
            else:
                check.check(metadata, version)
        self._start_checked = True

    def _metadata_at(self, version: int) -> Metadata:
        metadata = self._metadata_by_version.get(version)
        if metadata is None:
            metadata = self.delta_log.snapshot(version).metadata
            self._metadata_by_version[version] = metadata
        return metadata

    def parse_offset(self, value: str | Mapping[str, Any]) -> DeltaSourceOffset:
        """A stored offset, checked to belong to this table."""
        return DeltaSourceOffset.from_json(value, reservoir_id=self.table_id)

    def initial_offset(self) -> DeltaSourceOffset:
        """Where a new query starts (before anything is read)."""
        latest = self.delta_log.update().version
        if self.starting_version == "latest":
            return DeltaSourceOffset(self.table_id, latest + 1, BASE_INDEX, False)
        if self.starting_version is not None:
            version = int(self.starting_version)
            self._check_starting_version(version, latest)
            return DeltaSourceOffset(self.table_id, version, BASE_INDEX, False)
        if self.starting_timestamp is not None:
            moment = to_datetime(self.starting_timestamp)
            version = starting_version_for_timestamp(
                self.delta_log,
                to_timestamp_ms(moment),
                allow_out_of_range=self.allow_out_of_range,
                zone=moment.tzinfo or UTC,
            )
            return DeltaSourceOffset(self.table_id, version, BASE_INDEX, False)
        return DeltaSourceOffset(self.table_id, latest, BASE_INDEX, True)

    def _check_starting_version(self, version: int, latest: int) -> None:
        """Delta's check of ``startingVersion`` when a query starts (``DeltaSource.getStartingVersion``).

        First ``validateProtocolAt``: the snapshot at ``version`` is loaded, so a protocol this
        library cannot read fails the query (:class:`UnsupportedTableFeatureError`); a snapshot that
        loads ends the check. When it cannot be loaded for any other reason, the version must lie
        between the oldest commit file and the latest version (``checkVersionExists`` without
        ``mustBeRecreatable``; above the latest only with ``allow_out_of_range``), whatever
        ``fail_on_data_loss`` says; otherwise :class:`VersionNotFoundError` with Delta's text.
        """
        if version <= latest:
            try:
                if version != self.read_snapshot.version:
                    self._metadata_at(version)
                return
            except UnsupportedTableFeatureError:
                raise
            except (DeltaError, OSError) as exc:
                logger.info("no snapshot of %s at starting version %d (%s)", self.table, version, exc)
        earliest = self.delta_log.earliest_commit_version()
        if version < earliest or (version > latest and not self.allow_out_of_range):
            raise table_error(
                VersionNotFoundError,
                f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version {version}. "
                f"Available versions: [{earliest}, {latest}].",
                self.table,
                version=version,
                earliest=earliest,
                latest=latest,
            )

    def _changes(
        self, start: DeltaSourceOffset, limits: AdmissionLimits | None, end: DeltaSourceOffset | None
    ) -> Iterator[tuple[int, list[IndexedFile]]]:
        return get_file_changes_for_cdc(
            self.delta_log,
            start.reservoir_version,
            start.index,
            start.is_initial_snapshot,
            limits,
            end,
            fail_on_data_loss=self.fail_on_data_loss,
            exclude_regex=self.exclude_regex,
            read_change_feed=self.read_change_feed,
            stream_options=self.stream_options,
            schema_check=self.schema_check,
        )

    def latest_offset(
        self, start: DeltaSourceOffset, limits: AdmissionLimits | None, end: DeltaSourceOffset | None = None
    ) -> DeltaSourceOffset:
        """The end of the next batch after ``start`` (``start`` itself when nothing is new).

        ``end`` caps the result (``Trigger.AvailableNow`` freezes it when the query starts).
        Raises :class:`~replay.protocol.errors.IncompatibleSchemaChangeError` at a schema change
        the stream's schema cannot read (see :class:`StreamSchemaCheck`).
        """
        self._check_stream_start(start.reservoir_version)
        last: IndexedFile | None = None
        for _, entries in self._changes(start, limits, end):
            if entries:
                last = entries[-1]
        if last is None:
            return start
        return offset_after(self.table_id, last, start)

    def batch_reads(self, start: DeltaSourceOffset, end: DeltaSourceOffset) -> list[ChangeRead]:
        """The reads producing the rows after ``start`` up to and including ``end``.

        For the change feed, raises :class:`ChangeDataFeedNotEnabledError` if CDF is off at the
        first version read or turned off by a commit in the batch; raises
        :class:`~replay.protocol.errors.IncompatibleSchemaChangeError` at a schema change the
        stream's schema cannot read.
        """
        DeltaSourceOffset.validate_offsets(start, end)
        self._check_stream_start(start.reservoir_version)
        reads: list[ChangeRead] = []
        timestamps = CommitTimestamps(self.delta_log)
        checked = False
        for version, entries in self._changes(start, None, end):
            files = [entry.file_action for entry in entries if entry.file_action is not None]
            if self.read_change_feed and not checked and entries:
                self._check_cdf_enabled(version, start, end)
                checked = True
            if not files:
                continue
            timestamp = timestamps.of(version)
            if self.read_change_feed:
                reads.extend(plan_commit_reads(version, timestamp, files))
            else:
                reads.extend(ChangeRead(file, CDC_TYPE_INSERT, version, timestamp) for file in files)
        return reads

    def _check_cdf_enabled(self, version: int, start: DeltaSourceOffset, end: DeltaSourceOffset) -> None:
        if not is_cdf_enabled(self._metadata_at(version)):
            raise missing_change_data_error(
                version, start.reservoir_version, end.reservoir_version, self.table
            )

    def reader(self) -> TableReader:
        """A reader of the table's data with the stream's schema (the table's when the source started)."""
        snapshot = self.read_snapshot
        return TableReader.for_metadata(
            self.table, snapshot.metadata, snapshot.protocol, self.delta_log.io.conf
        )

    def read_batch(self, start: DeltaSourceOffset, end: DeltaSourceOffset) -> pa.Table:
        """The rows between two offsets (with CDC columns for the change feed)."""
        reader = self.reader()
        reads = self.batch_reads(start, end)
        if self.read_change_feed:
            return read_changes(reader, reads)
        return reader.read_files([read.file for read in reads])
