"""The change data feed (CDF): Delta's ``CDCReader`` and ``DeltaSourceCDCSupport`` in Python.

Batch: :func:`table_changes` returns every row changed between two versions with
``_change_type`` (``insert``, ``delete``, ``update_preimage``, ``update_postimage``),
``_commit_version`` and ``_commit_timestamp``. Per commit, the rows come from its ``cdc``
files if it has any (their ``_change_type`` is kept as written); otherwise ``add``/``remove``
actions with ``dataChange`` become ``insert``/``delete`` rows of their files, except for a
no-op MERGE. A file removed and re-added in one commit with different deletion vectors yields
exactly the rows whose DV membership changed.

Streaming: commits are turned into :class:`IndexedFile` sequences (each version bracketed by
``BASE_INDEX``/``END_INDEX`` placeholders), positions are :class:`DeltaSourceOffset` values with
Delta's JSON form, and :class:`AdmissionLimits` decide how much one micro-batch takes without
ever splitting a commit that carries ``cdc`` files or deletion vectors. :class:`DeltaSource`
ties this together for the PySpark stream reader; everything here is plain Python + pyarrow.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import orjson
import pyarrow as pa

from replay.actions import AddCDCFile, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from replay.data import RowFilter, TableReader, map_concurrently
from replay.deletion_vectors import read_deletion_vector
from replay.delta_log import to_timestamp_ms
from replay.errors import ChangeDataFeedNotEnabledError, DataLossError, DeltaError, VersionNotFoundError

logger = logging.getLogger(__name__)

FileAction = AddFile | RemoveFile | AddCDCFile

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

ENABLE_CDF_PROPERTY = "delta.enableChangeDataFeed"
DEFAULT_MAX_FILES_PER_TRIGGER = 1000
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


# -- errors -----------------------------------------------------------------------------------
def _in_table(message: str, table: str | None) -> str:
    """Delta's message, followed by the table it is about."""
    return f"{message} (table {table})" if table else message


class InvalidCDCRangeError(DeltaError, ValueError):
    """The requested change range is invalid (no start, or end before start)."""


class InvalidSourceOffsetError(DeltaError, ValueError):
    """A stored streaming offset cannot be used (bad format, other table, moved back)."""


class UnsupportedSourceChangeError(DeltaError):
    """A plain (non-CDF) stream met a commit that updates or deletes data."""


def missing_change_data_error(
    version: int, start: int, end: int, table: str | None
) -> ChangeDataFeedNotEnabledError:
    """Delta's ``DELTA_MISSING_CHANGE_DATA`` for ``version`` of the range ``[start, end]``."""
    message = _in_table(
        f"[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [{start} , {end}] as change "
        f"data was not\nrecorded for version [{version}]. If you've enabled change data feed on this "
        "table,\nuse `DESCRIBE HISTORY` to see when it was first enabled.\nOtherwise, to start "
        "recording change data, use `ALTER TABLE table_name SET TBLPROPERTIES\n"
        "(delta.enableChangeDataFeed=true)`.",
        table,
    )
    return ChangeDataFeedNotEnabledError(message, table=table)


def stream_data_loss_error(expected: int, seen: int, table: str | None) -> DataLossError:
    """Delta's ``DELTA_MISSING_FILES_UNEXPECTED_VERSION``: a stream found commits missing."""
    message = _in_table(
        f"[DELTA_MISSING_FILES_UNEXPECTED_VERSION] The stream from your Delta table was expecting process "
        f"data from version {expected},\nbut the earliest available version in the _delta_log directory is "
        f"{seen}. The files\nin the transaction log may have been deleted due to log cleanup. In order to "
        "avoid losing\ndata, we recommend that you restart your stream with a new checkpoint location and "
        "to\nincrease your delta.logRetentionDuration setting, if you have explicitly set it below 30\n"
        "days.\nIf you would like to ignore the missed data and continue your stream from where it left\n"
        'off, you can set the .option("failOnDataLoss", "false") as part\nof your readStream statement.',
        table,
    )
    return DataLossError(message, table=table)


def end_before_start_error(start: int, end: int, table: str | None) -> InvalidCDCRangeError:
    """Delta's ``DELTA_INVALID_CDC_RANGE``."""
    message = _in_table(
        f"[DELTA_INVALID_CDC_RANGE] CDC range from start {start} to end {end} was invalid. "
        "End cannot be before start.",
        table,
    )
    return InvalidCDCRangeError(message, table=table)


# -- commit filtering -------------------------------------------------------------------------
def is_cdf_enabled(metadata: Metadata) -> bool:
    """Whether ``delta.enableChangeDataFeed`` is ``true`` in ``metadata``."""
    return str((metadata.configuration or {}).get(ENABLE_CDF_PROPERTY, "false")).strip().lower() == "true"


def should_skip_file_actions(commit_info: CommitInfo | None) -> bool:
    """A MERGE whose metrics say it inserted, updated and deleted 0 rows produces no changes."""
    if commit_info is None or commit_info.operation != "MERGE":
        return False
    metrics = commit_info.operation_metrics
    return all(
        metrics.get(name) == "0"
        for name in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    )


def filter_cdc_actions(actions: Sequence[Any], version: int) -> list[FileAction]:
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


# -- indexed files and offsets ----------------------------------------------------------------
BASE_INDEX = -100
"""Position before every file of a version."""
METADATA_CHANGE_INDEX = -20
POST_METADATA_CHANGE_INDEX = -19
END_INDEX = _LONG_MAX - 100
"""Position after every file of a version (never serialised)."""


@dataclass(frozen=True, slots=True)
class IndexedFile:
    """One position in the stream: a file action of ``version`` at ``index``, or a placeholder.

    Placeholders (``BASE_INDEX``/``END_INDEX``) carry no file. ``is_last`` marks the last file
    of its version; ``should_skip`` files are never emitted.
    """

    version: int
    index: int
    add: AddFile | None = None
    remove: RemoveFile | None = None
    cdc: AddCDCFile | None = None
    is_last: bool = False
    should_skip: bool = False

    @property
    def file_action(self) -> FileAction | None:
        return self.add or self.remove or self.cdc

    @property
    def has_file_action(self) -> bool:
        return self.file_action is not None

    @property
    def size(self) -> int:
        """Bytes this entry counts against ``maxBytesPerTrigger`` (0 for placeholders)."""
        action = self.file_action
        return int(getattr(action, "size", 0) or 0) if action is not None else 0

    @property
    def has_deletion_vector(self) -> bool:
        action = self.add or self.remove
        return action is not None and action.deletion_vector is not None


def index_commit(
    version: int, file_actions: Sequence[FileAction], should_skip: bool = False
) -> list[IndexedFile]:
    """A commit's filtered file actions as indexed entries between BASE and END placeholders."""
    entries = [IndexedFile(version, BASE_INDEX)]
    last = len(file_actions) - 1
    for index, action in enumerate(file_actions):
        entries.append(_indexed(version, index, action, index == last, should_skip))
    entries.append(IndexedFile(version, END_INDEX))
    return entries


def index_snapshot(version: int, adds: Iterable[AddFile]) -> list[IndexedFile]:
    """The initial snapshot of a stream: adds sorted by (modificationTime, path), ``dataChange`` on."""
    ordered = sorted(adds, key=lambda add: (add.modification_time, add.path))
    forced = [add if add.data_change else replace(add, data_change=True) for add in ordered]
    return index_commit(version, forced)


def _indexed(version: int, index: int, action: FileAction, is_last: bool, should_skip: bool) -> IndexedFile:
    if isinstance(action, AddFile):
        return IndexedFile(version, index, add=action, is_last=is_last, should_skip=should_skip)
    if isinstance(action, RemoveFile):
        return IndexedFile(version, index, remove=action, is_last=is_last, should_skip=should_skip)
    return IndexedFile(version, index, cdc=action, is_last=is_last, should_skip=should_skip)


@dataclass(frozen=True, slots=True)
class DeltaSourceOffset:
    """A position of a Delta streaming source: ``(reservoir_version, index)`` in one table.

    ``is_initial_snapshot`` (JSON ``isStartingVersion``) means the position is inside the initial
    snapshot taken at ``reservoir_version``. Offsets order by ``(reservoir_version, index)``.
    """

    reservoir_id: str
    reservoir_version: int
    index: int
    is_initial_snapshot: bool

    VERSION_1: ClassVar[int] = 1
    VERSION_3: ClassVar[int] = 3

    def __post_init__(self) -> None:
        if self.index == END_INDEX:
            raise ValueError("END_INDEX is a placeholder and never an offset")

    @property
    def key(self) -> tuple[int, int]:
        return self.reservoir_version, self.index

    def __lt__(self, other: DeltaSourceOffset) -> bool:
        return self.key < other.key

    def __le__(self, other: DeltaSourceOffset) -> bool:
        return self.key <= other.key

    def to_dict(self) -> dict[str, Any]:
        """The JSON object Delta stores (fixed key order; BASE_INDEX written as -1 in format 1)."""
        if self.index in (METADATA_CHANGE_INDEX, POST_METADATA_CHANGE_INDEX):
            source_version, index = self.VERSION_3, self.index
        else:
            source_version, index = self.VERSION_1, (-1 if self.index == BASE_INDEX else self.index)
        return {
            "sourceVersion": source_version,
            "reservoirId": self.reservoir_id,
            "reservoirVersion": self.reservoir_version,
            "index": index,
            "isStartingVersion": self.is_initial_snapshot,
        }

    def json(self) -> str:
        return orjson.dumps(self.to_dict()).decode("utf-8")

    @classmethod
    def from_json(
        cls, text: str | bytes | Mapping[str, Any], reservoir_id: str | None = None
    ) -> DeltaSourceOffset:
        """Parse a stored offset, checking its format version and, if given, the table id.

        Raises :class:`InvalidSourceOffsetError` with Delta's error texts.
        """
        if isinstance(text, Mapping):
            data: Any = dict(text)
        else:
            try:
                data = orjson.loads(text)
            except orjson.JSONDecodeError:
                data = None
        if not isinstance(data, dict):
            raise InvalidSourceOffsetError(
                "[DELTA_INVALID_SOURCE_OFFSET_FORMAT] The stored source offset format is invalid"
            )
        source_version = data.get("sourceVersion")
        if not isinstance(source_version, int) or source_version in (0, 2) or source_version < 0:
            raise InvalidSourceOffsetError(
                f"[DELTA_INVALID_SOURCE_VERSION] sourceVersion({source_version}) is invalid"
            )
        if source_version > cls.VERSION_3:
            raise InvalidSourceOffsetError(
                "[DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION] Unsupported format. Expected version should be "
                f"smaller than or equal to {cls.VERSION_3} but was {source_version}. Please upgrade to newer "
                "version of Delta."
            )
        try:
            offset_id = str(data["reservoirId"])
            version = int(data["reservoirVersion"])
            index = int(data["index"])
            initial = bool(data["isStartingVersion"])
        except (KeyError, TypeError, ValueError):
            raise InvalidSourceOffsetError(
                "[DELTA_INVALID_SOURCE_OFFSET_FORMAT] The stored source offset format is invalid"
            ) from None
        if source_version < cls.VERSION_3 and index == -1:
            index = BASE_INDEX
        if reservoir_id is not None and offset_id != reservoir_id:
            raise InvalidSourceOffsetError(
                "[DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE] The streaming query was reading from an "
                f"unexpected Delta table (id = '{reservoir_id}'). It used to read from another Delta table "
                f"(id = '{offset_id}') according to checkpoint. This may happen when you changed the code to "
                "read from a new table or you deleted and re-created a table. Please revert your change or "
                "delete your streaming query checkpoint to restart from scratch."
            )
        return cls(offset_id, version, index, initial)

    @staticmethod
    def validate_offsets(previous: DeltaSourceOffset, current: DeltaSourceOffset) -> None:
        """Refuse a successor offset that moves backwards (Delta's ``validateOffsets``)."""
        if not previous.is_initial_snapshot and current.is_initial_snapshot:
            raise InvalidSourceOffsetError(
                "Found invalid offsets: 'isInitialSnapshot' flipped incorrectly. "
                f"Previous: {previous}, Current: {current}"
            )
        if previous.reservoir_version > current.reservoir_version:
            raise InvalidSourceOffsetError(
                "Found invalid offsets: 'reservoirVersion' moved back. "
                f"Previous: {previous}, Current: {current}"
            )
        if previous.reservoir_version == current.reservoir_version and previous.index > current.index:
            raise InvalidSourceOffsetError(
                f"Found invalid offsets. 'index' moved back. Previous: {previous}, Current: {current}"
            )


def offset_after(reservoir_id: str, last: IndexedFile, previous: DeltaSourceOffset) -> DeltaSourceOffset:
    """The offset after admitting ``last`` (Delta's ``buildOffsetFromIndexedFile``)."""
    if last.index == END_INDEX:
        return DeltaSourceOffset(reservoir_id, last.version + 1, BASE_INDEX, False)
    initial = previous.is_initial_snapshot and last.version == previous.reservoir_version
    return DeltaSourceOffset(reservoir_id, last.version, last.index, initial)


@dataclass
class AdmissionLimits:
    """How much one micro-batch may take (``maxFilesPerTrigger`` / ``maxBytesPerTrigger``).

    With neither set a batch takes up to 1000 files; with only ``max_bytes`` files are not
    limited. A file is admitted while capacity remains before taking it (so at least one file,
    however large, per batch); a group (:meth:`admit_all`) is admitted whole if nothing was
    admitted yet or if both budgets cover it. Budgets shrink either way.
    """

    max_files: int | None = None
    max_bytes: int | None = None
    files_to_take: int = field(init=False)
    bytes_to_take: int = field(init=False)
    admitted_any: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.max_files is not None:
            self.files_to_take = self.max_files
        else:
            self.files_to_take = DEFAULT_MAX_FILES_PER_TRIGGER if self.max_bytes is None else _INT_MAX - 8
        self.bytes_to_take = self.max_bytes if self.max_bytes is not None else _LONG_MAX

    @classmethod
    def unlimited(cls) -> AdmissionLimits:
        return cls(max_files=_INT_MAX, max_bytes=_LONG_MAX)

    @property
    def has_capacity(self) -> bool:
        return self.files_to_take > 0 and self.bytes_to_take > 0

    def admit(self, entry: IndexedFile) -> bool:
        """Admit one entry; placeholders always pass and cost nothing."""
        if not entry.has_file_action:
            return True
        admitted = self.has_capacity
        self.files_to_take -= 1
        self.bytes_to_take -= entry.size
        self.admitted_any = self.admitted_any or admitted
        return admitted

    def admit_all(self, entries: Sequence[IndexedFile]) -> bool:
        """Admit a group that must not be split (all or nothing)."""
        files = [entry for entry in entries if entry.has_file_action]
        if not files:
            return True
        size = sum(entry.size for entry in files)
        admitted = not self.admitted_any or (self.files_to_take >= len(files) and self.bytes_to_take >= size)
        self.files_to_take -= len(files)
        self.bytes_to_take -= size
        self.admitted_any = self.admitted_any or admitted
        return admitted


def admit_version(
    entries: Sequence[IndexedFile],
    from_version: int,
    from_index: int,
    *,
    is_initial_snapshot: bool,
    limits: AdmissionLimits | None,
    end_offset: DeltaSourceOffset | None,
    exclude_regex: re.Pattern[str] | None = None,
) -> list[IndexedFile]:
    """The entries of one version that a batch takes (Delta's ``IndexedChangeFileSeq.filterFiles``).

    Valid entries lie after ``(from_version, from_index)`` and not after ``end_offset``, are not
    skipped and do not match ``exclude_regex``. Commits with ``cdc`` files or deletion vectors
    are admitted all-or-nothing; others (and the initial snapshot) file by file.
    """

    def valid(entry: IndexedFile) -> bool:
        if entry.should_skip:
            return False
        if (entry.version, entry.index) <= (from_version, from_index):
            return False
        if end_offset is not None and (entry.version, entry.index) > end_offset.key:
            return False
        action = entry.file_action
        return not (action is not None and exclude_regex is not None and exclude_regex.search(action.path))

    candidates = [entry for entry in entries if valid(entry)]
    if limits is None:
        return candidates
    grouped = not is_initial_snapshot and any(
        entry.cdc is not None or entry.has_deletion_vector for entry in entries
    )
    if grouped:
        return candidates if limits.admit_all(candidates) else []
    taken: list[IndexedFile] = []
    for entry in candidates:
        if not limits.admit(entry):
            break
        taken.append(entry)
    return taken


def select_changes(
    versions: Iterable[tuple[int, list[IndexedFile]]],
    from_version: int,
    from_index: int,
    *,
    is_initial_snapshot: bool,
    limits: AdmissionLimits | None,
    end_offset: DeltaSourceOffset | None,
    exclude_regex: re.Pattern[str] | None = None,
) -> Iterator[tuple[int, list[IndexedFile]]]:
    """Admit indexed versions in order until the limits are used up or ``end_offset`` is passed.

    Pure: works on any ``(version, entries)`` sequence. The initial snapshot, if any, must be
    the first item, at ``from_version``.
    """
    for version, entries in versions:
        if limits is not None and not limits.has_capacity:
            return
        if end_offset is not None and version > end_offset.reservoir_version:
            return
        initial = is_initial_snapshot and version == from_version
        yield (
            version,
            admit_version(
                entries,
                from_version,
                from_index,
                is_initial_snapshot=initial,
                limits=limits,
                end_offset=end_offset,
                exclude_regex=exclude_regex,
            ),
        )


def filter_and_index_delta_logs(
    delta_log: Any,
    start_version: int,
    *,
    fail_on_data_loss: bool = True,
    read_change_feed: bool = True,
    stream_options: StreamOptions | None = None,
) -> Iterator[tuple[int, list[IndexedFile]]]:
    """Every commit from ``start_version`` on, filtered and indexed for a streaming source.

    With ``read_change_feed``, :func:`filter_cdc_actions` selects the files (a no-op MERGE gives
    skipped entries); otherwise the plain source's rules apply (:func:`filter_append_actions`).
    """
    options = stream_options or StreamOptions()
    table = getattr(delta_log, "table_path", None)
    expected = start_version
    for version, actions in delta_log.get_changes(start_version, fail_on_data_loss=False):
        if version != expected and fail_on_data_loss:
            raise stream_data_loss_error(expected, version, table)
        expected = version + 1
        if read_change_feed:
            for action in actions:
                if isinstance(action, Metadata) and not is_cdf_enabled(action):
                    raise missing_change_data_error(version, start_version, version, table)
            files = filter_cdc_actions(actions, version)
        else:
            files = list(filter_append_actions(actions, version, options, table))
        yield version, index_commit(version, files)


def get_file_changes_for_cdc(  # noqa: PLR0917 - Delta's signature
    delta_log: Any,
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
) -> Iterator[tuple[int, list[IndexedFile]]]:
    """The entries a batch starting after ``(from_version, from_index)`` takes, per version.

    With ``is_starting_version`` the snapshot at ``from_version`` comes first (its files as
    inserts), followed by the commits after it; otherwise commits from ``from_version`` on.
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


# -- plain (non-CDF) streaming ----------------------------------------------------------------
@dataclass(frozen=True)
class StreamOptions:
    """Options of Delta's plain streaming source for commits that change existing data."""

    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False


def filter_append_actions(
    actions: Sequence[Any], version: int, options: StreamOptions, table: str | None = None
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
    keep_dv: Any = None
    minus_dv: Any = None


def plan_commit_reads(version: int, timestamp_ms: int, files: Sequence[FileAction]) -> list[ChangeRead]:
    """The reads producing a commit's change rows from its filtered file actions (pure).

    ``cdc`` files are read as written. A path both removed and added pairs up: rows newly in
    the add's DV are ``delete``, rows only in the remove's DV are ``insert`` (Delta's DV diff).
    Other adds are ``insert`` rows and removes ``delete`` rows, minus their own DV.
    """
    reads: list[ChangeRead] = []
    adds = {f.path: f for f in files if isinstance(f, AddFile)}
    removes = {f.path: f for f in files if isinstance(f, RemoveFile)}
    for file in files:
        if isinstance(file, AddCDCFile):
            reads.append(ChangeRead(file, None, version, timestamp_ms))
        elif isinstance(file, AddFile):
            removed = removes.get(file.path)
            if removed is None:
                reads.append(ChangeRead(file, CDC_TYPE_INSERT, version, timestamp_ms))
            elif removed.deletion_vector is not None:
                reads.append(
                    ChangeRead(
                        file,
                        CDC_TYPE_INSERT,
                        version,
                        timestamp_ms,
                        removed.deletion_vector,
                        file.deletion_vector,
                    )
                )
        elif isinstance(file, RemoveFile):
            added = adds.get(file.path)
            if added is None:
                reads.append(ChangeRead(file, CDC_TYPE_DELETE, version, timestamp_ms))
            elif added.deletion_vector is not None:
                reads.append(
                    ChangeRead(
                        file,
                        CDC_TYPE_DELETE,
                        version,
                        timestamp_ms,
                        added.deletion_vector,
                        file.deletion_vector,
                    )
                )
    return reads


def change_schema(reader: TableReader, columns: Sequence[str] | None = None) -> pa.Schema:
    """The schema of change rows: the table's (or ``columns``) plus the three CDC columns."""
    base = reader.arrow_schema(columns)
    return pa.schema([f.with_nullable(True) for f in base] + list(CDC_COLUMNS))


def read_change(
    reader: TableReader,
    read: ChangeRead,
    columns: Sequence[str] | None = None,
    *,
    ignore_missing: bool = False,
) -> pa.Table:
    """The change rows of one :class:`ChangeRead`."""
    row_filter: RowFilter | bool | None = True
    if read.keep_dv is not None:
        keep = read_deletion_vector(read.keep_dv, reader.table_path, reader.conf)
        if read.minus_dv is not None:
            minus = read_deletion_vector(read.minus_dv, reader.table_path, reader.conf)
            keep = np.setdiff1d(keep, minus, assume_unique=True)
        row_filter = RowFilter(keep, keep=True)
    extra = (CDC_COLUMNS[0],) if read.change_type is None else ()
    table = reader.read_file(
        read.file, columns, row_filter=row_filter, extra_columns=extra, ignore_missing=ignore_missing
    )
    rows = table.num_rows
    if read.change_type is not None:
        table = table.append_column(CDC_COLUMNS[0], pa.repeat(pa.scalar(read.change_type, pa.string()), rows))
    table = table.append_column(CDC_COLUMNS[1], pa.repeat(pa.scalar(read.version, pa.int64()), rows))
    timestamp = pa.scalar(read.timestamp_ms * 1000, pa.timestamp("us", tz="UTC"))
    return table.append_column(CDC_COLUMNS[2], pa.repeat(timestamp, rows))


def read_changes(
    reader: TableReader,
    reads: Sequence[ChangeRead],
    columns: Sequence[str] | None = None,
    *,
    max_workers: int | None = None,
    ignore_missing: bool = False,
) -> pa.Table:
    """All change rows of ``reads`` (read concurrently, concatenated in order)."""
    schema = change_schema(reader, columns)
    tables = map_concurrently(
        lambda read: read_change(reader, read, columns, ignore_missing=ignore_missing),
        list(reads),
        max_workers or reader.concurrency,
    )
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([table.cast(schema) for table in tables])


# -- batch change data feed -------------------------------------------------------------------
TimestampLike = int | float | str | _dt.datetime | _dt.date


def starting_version_for_timestamp(
    delta_log: Any, timestamp_ms: int, *, allow_out_of_range: bool = False
) -> int:
    """The first version committed at or after ``timestamp_ms`` (streaming start semantics).

    A timestamp before the earliest commit gives the earliest version. One after the latest
    commit raises :class:`replay.errors.TimestampOutOfRangeError` unless ``allow_out_of_range``
    (then it gives latest + 1).
    """
    version = delta_log.version_at_timestamp(
        timestamp_ms, can_return_last_commit=True, can_return_earliest_commit=True
    )
    if delta_log.commit_timestamp(version) >= timestamp_ms:
        return version
    if version + 1 <= delta_log.latest_version() or allow_out_of_range:
        return version + 1
    # Let the time-travel lookup raise its "after the latest version" error.
    delta_log.version_at_timestamp(timestamp_ms)
    return version + 1


def resolve_change_range(
    delta_log: Any,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: TimestampLike | None = None,
    ending_timestamp: TimestampLike | None = None,
    *,
    allow_out_of_range: bool = False,
) -> tuple[int, int] | None:
    """The inclusive version range a change read covers, or ``None`` when it is empty.

    Versions win over timestamps. Raises :class:`InvalidCDCRangeError` (no start; end before
    start) and :class:`VersionNotFoundError` (start after the latest version) with Delta's texts.
    """
    table = getattr(delta_log, "table_path", None)
    latest = delta_log.latest_version()
    start_ts = end_ts = None
    if starting_version is not None:
        start = int(starting_version)
    elif starting_timestamp is not None:
        start_ts = to_timestamp_ms(starting_timestamp)
        start = starting_version_for_timestamp(delta_log, start_ts, allow_out_of_range=allow_out_of_range)
    else:
        raise InvalidCDCRangeError(
            _in_table(
                "[DELTA_NO_START_FOR_CDC_READ] No startingVersion or startingTimestamp provided for CDC "
                "read.",
                table,
            ),
            table=table,
        )
    if ending_version is not None:
        end = int(ending_version)
    elif ending_timestamp is not None:
        end_ts = to_timestamp_ms(ending_timestamp)
        end = delta_log.version_at_timestamp(end_ts, can_return_last_commit=allow_out_of_range)
    else:
        end = latest
    if start > latest:
        if allow_out_of_range:
            return None
        raise VersionNotFoundError(
            _in_table(
                f"[DELTA_CDC_START_VERSION_AFTER_LATEST] Start version {start} for change data feed exceeds "
                f"the latest table version {latest}.",
                table,
            ),
            table=table,
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
    delta_log: Any,
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
    snapshot's. Raises :class:`ChangeDataFeedNotEnabledError` if CDF is off at the start version
    or is turned off inside the range, :class:`InvalidCDCRangeError` /
    :class:`VersionNotFoundError` for bad ranges, :class:`DataLossError` if commits in the range
    are missing and ``fail_on_data_loss`` (by default they are skipped, like Delta's batch read),
    and :class:`replay.data.DataFileNotFoundError` for missing data files.
    """
    resolved = resolve_change_range(
        delta_log,
        starting_version,
        ending_version,
        starting_timestamp,
        ending_timestamp,
        allow_out_of_range=allow_out_of_range,
    )
    if resolved is None:
        latest = delta_log.update()
        reader = TableReader.for_metadata(
            delta_log.table_path, latest.metadata, latest.protocol, delta_log.conf
        )
        return change_schema(reader, columns).empty_table()
    plan = plan_changes(delta_log, *resolved, fail_on_data_loss=fail_on_data_loss)
    return read_changes(plan.reader(delta_log.conf), plan.reads, columns, max_workers=max_workers)


def commit_timestamps(delta_log: Any) -> dict[int, int]:
    """Version -> commit timestamp (ms) of every recreatable commit, listed once."""
    return {record.version: record.timestamp for record in delta_log.commit_records()}


def _unlisted_commit_timestamp(delta_log: Any, version: int, actions: Sequence[Any]) -> int:
    """The timestamp of a commit older than the earliest recreatable version.

    Its in-commit timestamp if it has one, else its file's modification time.
    """
    for action in actions:
        if isinstance(action, CommitInfo) and action.in_commit_timestamp is not None:
            return action.in_commit_timestamp
    from replay.filenames import delta_file

    path = delta_file(delta_log.log_path, version)
    for status in delta_log.store.list_from(path):
        if status.path.rstrip("/").rsplit("/", 1)[-1] == path.rsplit("/", 1)[-1]:
            return status.modification_time
        break
    raise DataLossError(f"commit {version} of table {delta_log.table_path} disappeared while reading it")


@dataclass(frozen=True)
class ChangePlan:
    """The reads of a change range and the table description to read them with.

    ``metadata``/``protocol`` are the latest table version's (Delta reads a batch change feed
    with the latest schema).
    """

    table_path: str
    reads: list[ChangeRead]
    metadata: Metadata
    protocol: Any

    def reader(self, conf: Mapping[str, str] | None = None) -> TableReader:
        return TableReader.for_metadata(self.table_path, self.metadata, self.protocol, conf)


def plan_changes(delta_log: Any, start: int, end: int, *, fail_on_data_loss: bool = False) -> ChangePlan:
    """Plan the reads of versions ``[start, end]``, checking CDF is on throughout the range.

    The table description at ``start`` comes from the start commit when it carries both
    metadata and protocol (version 0 always does), else from a snapshot; later metadata and
    protocol come from the commits read, so the latest snapshot is loaded only when ``end`` is
    not the latest version.
    """
    table = delta_log.table_path
    changes = iter(delta_log.get_changes(start, end, fail_on_data_loss=False))
    first = next(changes, None)
    metadata, protocol = (
        _description_in(first[1]) if first is not None and first[0] == start else (None, None)
    )
    if metadata is None or protocol is None:
        start_snapshot = delta_log.snapshot(start)
        metadata, protocol = start_snapshot.metadata, start_snapshot.protocol
    if not is_cdf_enabled(metadata):
        raise missing_change_data_error(start, start, end, table)
    timestamps = commit_timestamps(delta_log)
    reads: list[ChangeRead] = []
    expected = last_read = start
    for version, actions in itertools.chain([first] if first is not None else [], changes):
        if version > end:
            break
        if version != expected and fail_on_data_loss:
            raise DataLossError(
                f"Change data of table {table} for versions [{start} , {end}] is incomplete: commit "
                f"{expected} is missing (the log continues at {version})",
                table=table,
            )
        expected = last_read = version + 1
        commit_metadata, commit_protocol = _description_in(actions)
        if commit_metadata is not None:
            if not is_cdf_enabled(commit_metadata):
                raise missing_change_data_error(version, start, end, table)
            metadata = commit_metadata
        protocol = commit_protocol or protocol
        files = filter_cdc_actions(actions, version)
        if files:
            timestamp = timestamps.get(version)
            if timestamp is None:
                timestamp = _unlisted_commit_timestamp(delta_log, version, actions)
            reads.extend(plan_commit_reads(version, timestamp, files))
    if last_read <= delta_log.latest_version():
        latest = delta_log.update()
        metadata, protocol = latest.metadata, latest.protocol
    return ChangePlan(table, reads, metadata, protocol)


def _description_in(actions: Sequence[Any]) -> tuple[Metadata | None, Protocol | None]:
    """The last metadata and protocol actions of one commit (``None`` where it has none)."""
    metadata = protocol = None
    for action in actions:
        if isinstance(action, Metadata):
            metadata = action
        elif isinstance(action, Protocol):
            protocol = action
    return metadata, protocol


# -- streaming source -------------------------------------------------------------------------
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
        delta_log: Any,
        *,
        read_change_feed: bool = True,
        starting_version: int | str | None = None,
        starting_timestamp: TimestampLike | None = None,
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

    @property
    def table(self) -> str:
        return self.delta_log.table_path

    @property
    def table_id(self) -> str:
        """The table's id (``metaData.id``): the ``reservoirId`` of every offset."""
        if self._table_id is None:
            self._table_id = str(self.delta_log.update().metadata.id)
        return self._table_id

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
            if version > latest and not self.allow_out_of_range:
                earliest = self.delta_log.earliest_version()
                raise VersionNotFoundError(
                    _in_table(
                        f"[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version {version}. "
                        f"Available versions: [{earliest}, {latest}].",
                        self.table,
                    ),
                    table=self.table,
                    version=version,
                    earliest=earliest,
                    latest=latest,
                )
            return DeltaSourceOffset(self.table_id, version, BASE_INDEX, False)
        if self.starting_timestamp is not None:
            version = starting_version_for_timestamp(
                self.delta_log,
                to_timestamp_ms(self.starting_timestamp),
                allow_out_of_range=self.allow_out_of_range,
            )
            return DeltaSourceOffset(self.table_id, version, BASE_INDEX, False)
        return DeltaSourceOffset(self.table_id, latest, BASE_INDEX, True)

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
        )

    def latest_offset(
        self, start: DeltaSourceOffset, limits: AdmissionLimits | None, end: DeltaSourceOffset | None = None
    ) -> DeltaSourceOffset:
        """The end of the next batch after ``start`` (``start`` itself when nothing is new).

        ``end`` caps the result (``Trigger.AvailableNow`` freezes it when the query starts).
        """
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
        first version read or turned off by a commit in the batch.
        """
        DeltaSourceOffset.validate_offsets(start, end)
        reads: list[ChangeRead] = []
        timestamps: dict[int, int] | None = None
        checked = False
        for version, entries in self._changes(start, None, end):
            files = [entry.file_action for entry in entries if entry.file_action is not None]
            if self.read_change_feed and not checked and entries:
                self._check_cdf_enabled(version, start, end)
                checked = True
            if not files:
                continue
            if timestamps is None:
                timestamps = commit_timestamps(self.delta_log)
            timestamp = timestamps.get(version)
            if timestamp is None:
                timestamp = _unlisted_commit_timestamp(self.delta_log, version, [])
            if self.read_change_feed:
                reads.extend(plan_commit_reads(version, timestamp, files))
            else:
                reads.extend(ChangeRead(file, CDC_TYPE_INSERT, version, timestamp) for file in files)
        return reads

    def _check_cdf_enabled(self, version: int, start: DeltaSourceOffset, end: DeltaSourceOffset) -> None:
        metadata = self._metadata_by_version.get(version)
        if metadata is None:
            metadata = self.delta_log.snapshot(version).metadata
            self._metadata_by_version[version] = metadata
        if not is_cdf_enabled(metadata):
            raise missing_change_data_error(
                version, start.reservoir_version, end.reservoir_version, self.table
            )

    def reader(self) -> TableReader:
        """A reader of the table's data with the latest schema."""
        snapshot = self.delta_log.update()
        return TableReader.for_metadata(self.table, snapshot.metadata, snapshot.protocol, self.delta_log.conf)

    def read_batch(self, start: DeltaSourceOffset, end: DeltaSourceOffset) -> pa.Table:
        """The rows between two offsets (with CDC columns for the change feed)."""
        reader = self.reader()
        reads = self.batch_reads(start, end)
        if self.read_change_feed:
            return read_changes(reader, reads)
        return reader.read_files([read.file for read in reads])


__all__ = [
    "BASE_INDEX",
    "CDC_COLUMNS",
    "END_INDEX",
    "AdmissionLimits",
    "ChangePlan",
    "ChangeRead",
    "DeltaSource",
    "DeltaSourceOffset",
    "IndexedFile",
    "InvalidCDCRangeError",
    "InvalidSourceOffsetError",
    "StreamOptions",
    "UnsupportedSourceChangeError",
    "filter_and_index_delta_logs",
    "filter_cdc_actions",
    "get_file_changes_for_cdc",
    "plan_changes",
    "table_changes",
]
