"""Deletion vectors as a reader applies them: row filters, and many DVs read with few requests.

A :class:`RowFilter` is the rows of one data file to drop (its deletion vector) or to keep.

An operation that reads many files with deletion vectors (a scan, the target files of a DML)
finds their DVs packed into a few DV files: Delta's writers, this library's included, put all the
DVs of one operation into one file. Reading each DV on its own costs one request per data file.
:func:`read_deletion_vectors` reads, for each DV file, the one byte range that covers the DVs
wanted (several DV files at once), unless that range is larger than :data:`COALESCE_BYTES`
(those DVs are read one by one). :class:`DeletionVectorCache` keeps what was read for the
reader of one operation; the DV at a given file and offset never changes, so a cached one is
always right. Read, a DV takes 8 bytes per deleted row: work over many files goes in runs
(:func:`dv_batches`) whose DVs together hold at most :data:`BATCH_ROWS` rows, each run's DVs read
together, used and let go before the next run's are read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from logstores import open_filesystem
from replay.data.deletion_vector_errors import DeletionVectorNotFoundError
from replay.data.deletion_vectors import (
    DeletionVectorDescriptorLike,
    check_row_indexes,
    decode_inline,
    dv_file_path,
    frame_range,
    parse_framed,
    read_deletion_vector,
)
from replay.log.concurrency import Work, map_concurrently
from replay.protocol.paths import dv_unique_id

COALESCE_BYTES = 8 * 1024 * 1024
"""The largest byte range of one DV file read with one request for the DVs inside it."""
BATCH_ROWS = 4 * 1024 * 1024
"""The most deleted rows (8 bytes each once read) in the DVs of one run of :func:`dv_batches`."""

T = TypeVar("T")


@dataclass(frozen=True)
class RowFilter:
    """Which rows of a file to keep by 0-based row index.

    ``keep=False``: drop ``indexes`` (a deletion vector); ``keep=True``: keep only ``indexes``.
    ``source`` names the deletion vector(s) the indexes come from, for errors.
    """

    indexes: np.ndarray
    keep: bool = False
    source: str = "deletion vector"

    def mask(self, num_rows: int, data_file: str) -> pa.Array:
        """A boolean mask of the rows to keep in ``data_file``, which has ``num_rows`` rows.

        Raises :class:`~replay.data.deletion_vector_errors.CorruptDeletionVectorError` if an index
        is not a row of the file (:func:`~replay.data.deletion_vectors.check_row_indexes`).
        """
        check_row_indexes(self.indexes, num_rows, data_file, self.source)
        hits = np.zeros(num_rows, dtype=bool)
        hits[self.indexes.astype(np.int64)] = True
        return pa.array(hits if self.keep else ~hits)


def dv_key(descriptor: DeletionVectorDescriptorLike) -> str:
    """The identity of a DV (storage type, path or inline data, offset)."""
    return dv_unique_id(descriptor.storage_type, descriptor.path_or_inline_dv, descriptor.offset)


def file_deletion_vectors(file: object) -> list[DeletionVectorDescriptorLike]:
    """The deletion vector of a file action (``add``, ``remove``), as a list: empty without one."""
    descriptor = getattr(file, "deletion_vector", None)
    return [] if descriptor is None else [descriptor]


def dv_batches(
    items: Sequence[T],
    descriptors: Callable[[T], Iterable[DeletionVectorDescriptorLike]] = file_deletion_vectors,
    max_rows: int | None = None,
) -> Iterator[Sequence[T]]:
    """``items`` in consecutive runs whose DVs (``descriptors`` of each item; by default a file
    action's own) delete at most ``max_rows`` rows together (default :data:`BATCH_ROWS`), by
    their cardinality: one run when they all fit, and a run of its own for an item over the
    limit alone."""
    limit = BATCH_ROWS if max_rows is None else max_rows
    start, rows = 0, 0
    for index, item in enumerate(items):
        size = sum(descriptor.cardinality for descriptor in descriptors(item))
        if index > start and rows + size > limit:
            yield items[start:index]
            start, rows = index, 0
        rows += size
    if start < len(items):
        yield items[start:]


def read_deletion_vectors(
    descriptors: Sequence[DeletionVectorDescriptorLike],
    table_path: str,
    conf: Mapping[str, str] | None,
    threads: int,
) -> dict[str, np.ndarray]:
    """The deleted row indexes of each DV of ``descriptors``, by :func:`dv_key`, read and
    verified as :func:`~replay.data.deletion_vectors.read_deletion_vector` does, with one request
    per DV file (see the module docstring), ``threads`` DV files at a time."""
    found: dict[str, np.ndarray] = {}
    by_file: dict[str, dict[str, DeletionVectorDescriptorLike]] = {}
    for descriptor in descriptors:
        key = dv_key(descriptor)
        path = dv_file_path(descriptor, table_path)
        if path is None:
            found[key] = decode_inline(descriptor)
        else:
            by_file.setdefault(path, {})[key] = descriptor

    def read(item: tuple[str, dict[str, DeletionVectorDescriptorLike]]) -> dict[str, np.ndarray]:
        return _read_file(item[0], item[1], table_path, conf)

    for values in map_concurrently(read, list(by_file.items()), Work.DATA, threads):
        found.update(values)
    return found


def _read_file(
    path: str,
    wanted: Mapping[str, DeletionVectorDescriptorLike],
    table_path: str,
    conf: Mapping[str, str] | None,
) -> dict[str, np.ndarray]:
    """The DVs ``wanted`` of the DV file at ``path`` (one request, or one per DV when there is one
    or they are far apart)."""
    ranges = {key: frame_range(descriptor) for key, descriptor in wanted.items()}
    low = min(start for start, _ in ranges.values())
    high = max(end for _, end in ranges.values())
    if len(wanted) == 1 or high - low > COALESCE_BYTES:
        return {key: read_deletion_vector(descriptor, table_path, conf) for key, descriptor in wanted.items()}
    fs, fs_path = open_filesystem(path, conf)
    try:
        data = fs.cat_file(fs_path, start=low, end=high)
    except FileNotFoundError:
        raise DeletionVectorNotFoundError(f"Deletion vector file {path} does not exist") from None
    return {
        key: parse_framed(data[start - low : end - low], wanted[key], path)
        for key, (start, end) in ranges.items()
    }


class DeletionVectorCache:
    """DVs read ahead for one reader
    (:meth:`replay.data.reader.TableReader.prefetch_deletion_vectors`), safe to share between
    threads. It is never pickled with its contents: a task elsewhere reads what it
    needs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, np.ndarray] = {}

    def get(self, descriptor: DeletionVectorDescriptorLike) -> np.ndarray | None:
        with self._lock:
            return self._values.get(dv_key(descriptor))

    def missing(self, files: Iterable[object]) -> list[DeletionVectorDescriptorLike]:
        """The DVs of file actions ``files`` not kept here."""
        wanted = [descriptor for file in files for descriptor in file_deletion_vectors(file)]
        with self._lock:
            return [d for d in wanted if dv_key(d) not in self._values]

    def update(self, values: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            self._values.update(values)

    def forget(self, files: Iterable[object]) -> None:
        """Let go of the DVs of file actions ``files`` (a later use reads them again)."""
        keys = [dv_key(descriptor) for file in files for descriptor in file_deletion_vectors(file)]
        with self._lock:
            for key in keys:
                self._values.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._values = {}
