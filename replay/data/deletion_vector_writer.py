"""Writing deletion vectors: Delta's DV files, their descriptors and the actions of a DV update.

A DML operation (DELETE, UPDATE, MERGE) that marks rows deleted instead of rewriting files
writes one deletion vector (DV) per touched data file and commits, per file, a ``remove`` of the
file with its old DV and an ``add`` of the same file with the new one. This module does what
Delta's ``DeletionVectorWriter`` / ``DeletionVectorStore`` and ``AddFile.removeRows`` do:

* :class:`DeletionVectorWriter` packs DVs into files ``[<prefix>/]deletion_vector_<uuid>.bin``
  under the table: a format version byte (1), then per DV ``<size: int32 BE> <bitmap> <CRC-32 of
  the bitmap: int32 BE>``; a DV's descriptor has storage type ``u``, the prefix + Z85 UUID, the
  offset of its size field (1 for the first), the bitmap's size and its cardinality. A file is
  written with one PUT when it reaches the target size (Delta's packing target, 2 MiB) or at
  :meth:`~DeletionVectorWriter.close`. The random prefix is used when the table sets
  ``delta.randomizeFilePrefixes`` (``delta.randomPrefixLength`` alphanumeric characters, a new
  one per file), as Delta does.
* :meth:`DeletionVectorWriter.update` unions a file's current DV with newly deleted rows and
  writes the result (:class:`DeletionVectorUpdate`), which knows its commit actions.
* :func:`remove_rows` builds those actions as Delta does: the ``add`` keeps the file's metadata
  and statistics (``numRecords`` stays the physical row count; ``tightBounds`` becomes false and
  the null count of all-null columns becomes physical), the ``remove`` carries the old DV and
  statistics reduced to ``numRecords``.

Delta writes DVs inline (storage type ``i``) only in tests and sharing, never in DML:
:func:`inline_descriptor` exists for such uses and is not the writer's default.
"""

from __future__ import annotations

import contextlib
import logging
import random
import string
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import TracebackType
from typing import Any

import numpy as np
import orjson

from logstores import open_filesystem
from replay.data.deletion_vectors import (
    DV_FILE_FORMAT_VERSION,
    DV_FILE_NAME_CORE,
    check_row_indexes,
    dv_location,
    encode_uuid,
    frame_for_file,
    read_deletion_vector,
    z85_encode,
)
from replay.data.roaring_bitmap import row_index_array, serialize_bitmap
from replay.protocol.actions import AddFile, DeletionVectorDescriptor, RemoveFile
from replay.protocol.table_properties import random_prefix_length

logger = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 2 * 1024 * 1024
"""Bytes of DVs packed into one file before another is started (Delta's packing target size)."""
_PREFIX_ALPHABET = string.digits + string.ascii_letters
_random = random.Random()


class DeletionVectorWriterClosedError(RuntimeError):
    """A DV was added to a writer that was closed or discarded."""


def inline_descriptor(row_indexes: Iterable[int] | np.ndarray) -> DeletionVectorDescriptor:
    """An inline (``i``) DV of ``row_indexes``, Z85-encoded the way Delta's ``inlineInLog`` does."""
    values = row_index_array(row_indexes)
    data = serialize_bitmap(values)
    return DeletionVectorDescriptor("i", z85_encode(data), None, len(data), len(values))


@dataclass
class _PendingFile:
    """One DV file being assembled in memory."""

    prefix: str
    file_id: uuid.UUID = field(default_factory=uuid.uuid4)
    chunks: list[bytes] = field(default_factory=lambda: [bytes([DV_FILE_FORMAT_VERSION])])
    size: int = 1

    @property
    def relative_path(self) -> str:
        name = f"{DV_FILE_NAME_CORE}_{self.file_id}.bin"
        return f"{self.prefix}/{name}" if self.prefix else name

    @cached_property
    def encoded(self) -> str:
        """The descriptor's ``pathOrInlineDv``: prefix + Z85 of the UUID."""
        return self.prefix + encode_uuid(self.file_id)

    def append(self, frame: bytes) -> int:
        """Add a framed DV; returns its offset."""
        offset = self.size
        self.chunks.append(frame)
        self.size += len(frame)
        return offset


@dataclass(frozen=True)
class DeletionVectorUpdate:
    """The new deletion vector of one data file, after rows of it were deleted.

    ``descriptor`` is the file's DV now: a new one, the current one when no row was newly
    deleted, or ``None`` when every row is deleted (then no DV is written: the file is removed)
    or when there was nothing to delete. ``newly_deleted`` counts the rows this update deleted.
    """

    file: AddFile
    descriptor: DeletionVectorDescriptor | None
    newly_deleted: int
    all_deleted: bool = False
    num_records: int | None = None
    """The file's physical row count the update was checked against (``None``: unknown)."""

    @property
    def changed(self) -> bool:
        """Whether the file loses rows (and so needs actions in the commit)."""
        return self.newly_deleted > 0

    def actions(self, deletion_timestamp: int | None = None) -> list[AddFile | RemoveFile]:
        """The commit actions of this update, as Delta's DML writes them.

        None if nothing changed; the ``remove`` of the file when every row is deleted; else the
        re-added file with its new DV and the ``remove`` with its old one (:func:`remove_rows`).
        ``deletion_timestamp`` defaults to now (milliseconds).
        """
        if not self.changed:
            return []
        timestamp = _now_ms() if deletion_timestamp is None else deletion_timestamp
        if self.all_deleted or self.descriptor is None:
            return [_scanned(self.file).remove_with_timestamp(timestamp)]
        add, remove = remove_rows(
            self.file, self.descriptor, deletion_timestamp=timestamp, num_records=self.num_records
        )
        return [add, remove]


class DeletionVectorWriter:
    """Writes the DVs of one operation into DV files under ``table_path`` (see the module docstring).

    ``conf`` holds the storage settings (as for data files); ``prefix_length`` is the length of
    the random directory prefix of each file (:func:`random_prefix_length`, or use
    :meth:`for_table`). :meth:`add` and :meth:`update` return descriptors at once, but the files
    exist only after :meth:`close` (or the end of a ``with`` block): close before committing.
    :meth:`discard` deletes every file written (call it when the commit fails); leaving a ``with``
    block by an exception discards. Safe to use from several threads.
    """

    def __init__(
        self,
        table_path: str,
        conf: Mapping[str, str] | None = None,
        *,
        prefix_length: int = 0,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> None:
        if prefix_length < 0:
            raise ValueError(f"prefix_length must not be negative, got {prefix_length}")
        self.table_path = table_path.rstrip("/")
        self.conf = dict(conf or {})
        self.prefix_length = prefix_length
        self.target_file_size = target_file_size
        self._fs, root = open_filesystem(self.table_path, self.conf)
        self._root = root.rstrip("/")
        self._lock = threading.Lock()
        self._pending: _PendingFile | None = None
        self._written: list[str] = []
        self._closed = False
        self._discarded = False

    @classmethod
    def for_table(
        cls,
        table_path: str,
        configuration: Mapping[str, str] | None,
        conf: Mapping[str, str] | None = None,
        *,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> DeletionVectorWriter:
        """A writer for the table whose ``metaData.configuration`` is ``configuration``."""
        return cls(
            table_path,
            conf,
            prefix_length=random_prefix_length(configuration),
            target_file_size=target_file_size,
        )

    # -- adding DVs ---------------------------------------------------------------------------
    def add(
        self,
        row_indexes: Iterable[int] | np.ndarray,
        *,
        num_records: int | None = None,
        data_file: str = "the data file",
    ) -> DeletionVectorDescriptor:
        """Write a DV of exactly ``row_indexes`` (any order, duplicates ignored); its descriptor.

        With ``num_records`` (the data file's physical row count) an index at or past it raises
        :class:`~replay.data.deletion_vector_errors.CorruptDeletionVectorError` naming
        ``data_file``. Raises :class:`ValueError` for no rows, a negative index or one a DV
        cannot hold, :class:`DeletionVectorWriterClosedError` after :meth:`close`/:meth:`discard`.
        """
        values = row_index_array(row_indexes)
        if values.size == 0:
            raise ValueError(f"a deletion vector of {data_file} needs at least one row")
        if num_records is not None:
            check_row_indexes(values, num_records, data_file, "the new deletion vector")
        return self._append(serialize_bitmap(values), int(values.size))

    def update(
        self,
        file: AddFile,
        row_indexes: Iterable[int] | np.ndarray,
        *,
        num_records: int | None = None,
        current_rows: np.ndarray | None = None,
    ) -> DeletionVectorUpdate:
        """Delete ``row_indexes`` of ``file`` (an ``add`` of the snapshot) on top of its current DV.

        The current DV is read (``current_rows``: its rows, when the caller has already read
        them), united with the rows and written as a new DV unless nothing is newly deleted (the
        current descriptor is kept) or every row of the file is (no DV is written;
        :meth:`DeletionVectorUpdate.actions` removes the file). ``num_records`` is the file's
        physical row count, by default its ``numRecords`` statistic; rows at or past it raise
        :class:`~replay.data.deletion_vector_errors.CorruptDeletionVectorError`.
        """
        values = row_index_array(row_indexes)
        records = file.num_records if num_records is None else num_records
        if records is not None:
            check_row_indexes(values, records, file.path, "the rows to delete")
        previous = file.deletion_vector
        if previous is not None:
            current = (
                read_deletion_vector(previous, self.table_path, self.conf)
                if current_rows is None
                else current_rows
            )
            if records is not None:
                check_row_indexes(current, records, file.path, dv_location(previous, self.table_path))
            union = row_index_array(np.concatenate((current, values)))
        else:
            current, union = np.empty(0, dtype=np.uint64), values
        newly_deleted = int(union.size - current.size)
        if newly_deleted == 0:
            return DeletionVectorUpdate(file, previous, 0, num_records=records)
        if records is not None and union.size == records:
            return DeletionVectorUpdate(file, None, newly_deleted, all_deleted=True, num_records=records)
        descriptor = self._append(serialize_bitmap(union), int(union.size))
        return DeletionVectorUpdate(file, descriptor, newly_deleted, num_records=records)

    def _append(self, bitmap: bytes, cardinality: int) -> DeletionVectorDescriptor:
        frame = frame_for_file(bitmap)
        full: _PendingFile | None = None
        with self._lock:
            if self._closed:
                raise DeletionVectorWriterClosedError(
                    f"the deletion vector writer of {self.table_path} is closed"
                )
            pending = self._pending
            if pending is not None and pending.size > 1 and pending.size + len(frame) > self.target_file_size:
                full, pending = pending, None
            if pending is None:
                pending = self._pending = _PendingFile(self._new_prefix())
            offset = pending.append(frame)
            descriptor = DeletionVectorDescriptor("u", pending.encoded, offset, len(bitmap), cardinality)
        if full is not None:
            self._write(full)
        return descriptor

    def _new_prefix(self) -> str:
        return "".join(_random.choices(_PREFIX_ALPHABET, k=self.prefix_length))

    # -- files --------------------------------------------------------------------------------
    def _write(self, pending: _PendingFile) -> None:
        target = f"{self._root}/{pending.relative_path}"
        with self._lock:
            if self._discarded:
                return
            self._written.append(target)  # before the upload: a failed one may still have landed
        self._fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        self._fs.pipe_file(target, b"".join(pending.chunks))
        logger.debug("wrote deletion vector file %s (%d bytes)", target, pending.size)

    @property
    def written_files(self) -> list[str]:
        """The DV files written (or being written) so far, as storage paths of the file system."""
        with self._lock:
            return list(self._written)

    def close(self) -> list[str]:
        """Write the last file; returns every DV file written. Idempotent."""
        with self._lock:
            pending, self._pending = self._pending, None
            self._closed = True
        if pending is not None:
            self._write(pending)
        return self.written_files

    def discard(self) -> None:
        """Forget what is not written yet and delete every DV file written (missing ones ignored)."""
        with self._lock:
            self._pending = None
            self._closed = self._discarded = True
            written, self._written = self._written, []
        for target in written:
            try:
                self._fs.rm(target)
            except FileNotFoundError:
                continue
            except OSError as exc:  # the caller is already failing: report, do not mask its error
                logger.warning("could not delete deletion vector file %s (%s)", target, exc)

    def __enter__(self) -> DeletionVectorWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            with contextlib.suppress(Exception):
                self.discard()


# -- actions ----------------------------------------------------------------------------------
def remove_rows(
    file: AddFile,
    descriptor: DeletionVectorDescriptor,
    *,
    deletion_timestamp: int | None = None,
    num_records: int | None = None,
) -> tuple[AddFile, RemoveFile]:
    """The ``add`` of ``file`` with its new DV ``descriptor`` and the ``remove`` of it with its old one.

    As Delta's DML does (``AddFile.removeRows`` with the statistics of
    ``DMLWithDeletionVectorsHelper``): the ``add`` keeps path, partition values, size,
    modification time, tags and row ids, with ``dataChange`` true and the file's statistics made
    wide (:func:`wide_bounds_stats`); the ``remove`` (``deletion_timestamp``, default now) keeps the
    old DV and the statistics Delta's scan keeps, ``numRecords`` alone. A file without a
    ``numRecords`` statistic needs ``num_records`` (its physical row count): Delta requires that
    statistic on files with DVs. Commit the adds before the removes, as Delta does. Raises
    :class:`ValueError` if the new DV deletes fewer rows than the old one or ``numRecords`` is
    unknown.
    """
    previous = file.deletion_vector
    if previous is not None and descriptor.cardinality < previous.cardinality:
        raise ValueError(
            f"the new deletion vector of {file.path} deletes {descriptor.cardinality} rows, "
            f"fewer than the {previous.cardinality} of the current one"
        )
    timestamp = _now_ms() if deletion_timestamp is None else deletion_timestamp
    stats = wide_bounds_stats(file.stats, previous.cardinality if previous else 0, num_records)
    if stats is None:
        raise ValueError(f"data file {file.path} has no numRecords statistic: pass num_records")
    add = replace(file, deletion_vector=descriptor, data_change=True, stats=stats)
    return add, _scanned(file).remove_with_timestamp(timestamp)


def wide_bounds_stats(stats: str | None, old_cardinality: int, num_records: int | None = None) -> str | None:
    """A file's ``stats`` once a DV is added to it (Delta's ``updateStatsToWideBounds``).

    ``tightBounds`` becomes false; where the bounds were tight, a null count equal to the
    logical row count (``numRecords`` minus ``old_cardinality``, an all-null column) becomes the
    physical one; other statistics are kept, in Delta's order, null values dropped as Spark's
    ``to_json`` does. Without statistics, ``num_records`` gives ``{"numRecords": n,
    "tightBounds": false}``; ``None`` when neither is known.
    """
    parsed: dict[str, Any] = orjson.loads(stats) if stats else {}
    physical = parsed.get("numRecords")
    if physical is None:
        if num_records is None:
            return None
        parsed = {**parsed, "numRecords": num_records}
        physical = num_records
    logical = physical - old_cardinality

    def all_null_to_physical(count: Any) -> Any:
        return physical if count == logical else count

    out: dict[str, Any] = {}
    for key in ("numRecords", "minValues", "maxValues", "nullCount"):
        value = parsed.get(key)
        if value is None:
            continue
        if key == "nullCount" and parsed.get("tightBounds") is True:
            value = _map_leaves(value, all_null_to_physical)
        out[key] = _without_nulls(value)
    out["tightBounds"] = False
    return orjson.dumps(out).decode()


def _scanned(file: AddFile) -> AddFile:
    """``file`` as Delta's DML scan sees it: statistics reduced to ``numRecords``."""
    records = file.num_records
    return replace(file, stats=orjson.dumps({"numRecords": records} if records is not None else {}).decode())


def _map_leaves(value: Any, function: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {key: _map_leaves(item, function) for key, item in value.items()}
    return function(value)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value


def _now_ms() -> int:
    return int(time.time() * 1000)
