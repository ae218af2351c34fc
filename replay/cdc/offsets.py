"""Positions and admission control of a Delta streaming source (pure).

A commit's filtered file actions become :class:`IndexedFile` entries bracketed by ``BASE_INDEX``
and ``END_INDEX`` placeholders; the initial snapshot of a stream is indexed the same way. A
position is a :class:`DeltaSourceOffset` with Delta's JSON form. :class:`AdmissionLimits`
(``maxFilesPerTrigger``/``maxBytesPerTrigger``) decide how much one micro-batch takes, never
splitting a commit that carries ``cdc`` files or deletion vectors (:func:`select_changes`).
Everything works on plain ``(version, entries)`` sequences; nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import orjson

from replay.protocol.actions import AddCDCFile, AddFile, FileAction, RemoveFile
from replay.protocol.errors import DeltaError

DEFAULT_MAX_FILES_PER_TRIGGER = 1000
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


class InvalidSourceOffsetError(DeltaError, ValueError):
    """A stored streaming offset cannot be used (bad format, other table, moved back)."""


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


@dataclass(frozen=True)
class BatchBounds:
    """Which entries a batch may take.

    Those after ``(from_version, from_index)``, not after ``end_offset``, not skipped and whose
    path does not match ``exclude_regex``.
    """

    from_version: int
    from_index: int
    end_offset: DeltaSourceOffset | None = None
    exclude_regex: re.Pattern[str] | None = None

    def allows(self, entry: IndexedFile) -> bool:
        if entry.should_skip or (entry.version, entry.index) <= (self.from_version, self.from_index):
            return False
        if self.end_offset is not None and (entry.version, entry.index) > self.end_offset.key:
            return False
        action = entry.file_action
        return action is None or self.exclude_regex is None or not self.exclude_regex.search(action.path)


def admit_version(
    entries: Sequence[IndexedFile],
    bounds: BatchBounds,
    *,
    is_initial_snapshot: bool,
    limits: AdmissionLimits | None,
) -> list[IndexedFile]:
    """The entries of one version that a batch takes (Delta's ``IndexedChangeFileSeq.filterFiles``).

    Entries outside ``bounds`` are dropped. Commits with ``cdc`` files or deletion vectors are
    admitted all-or-nothing; others (and the initial snapshot) file by file.
    """
    candidates = [entry for entry in entries if bounds.allows(entry)]
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
    bounds = BatchBounds(from_version, from_index, end_offset, exclude_regex)
    for version, entries in versions:
        if limits is not None and not limits.has_capacity:
            return
        if end_offset is not None and version > end_offset.reservoir_version:
            return
        initial = is_initial_snapshot and version == from_version
        yield version, admit_version(entries, bounds, is_initial_snapshot=initial, limits=limits)
