"""Listing the files under a table's root for VACUUM, without the directories Delta hides.

Delta's ``DeltaTableUtils.isHiddenDirectory`` decides which names VACUUM never looks into or
deletes: a name starting with ``_`` or ``.`` is hidden (``_delta_log``, ``.part-*.crc`` files,
``_SUCCESS``), except ``_change_data`` (change data files are collected like data files),
``_delta_index`` and partition directories ``<partition column>=<value>``; ``metadata`` is hidden
on tables that publish Iceberg metadata. The rule applies to every name on the way down, files and
directories alike.

The listing is streamed: directory by directory, each directory's entries become Arrow columns
(relative path, size, modification time) at once, so no listing is held as Python objects longer
than one directory; several directories are listed at once. Object stores are listed with the
filesystem's ``ls`` of one directory, which carries sizes and times. Local directories are read
with ``os.scandir`` for names only: VACUUM needs the size and time of the files nothing
references, and reads them with :func:`stat_local` (most files of a table are referenced).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from fsspec import AbstractFileSystem

from logstores import open_filesystem
from logstores.filesystem import modification_time_ms, uri_scheme
from replay.log.concurrency import REMOTE_THREADS, Work, default_threads, executor, map_concurrently

LISTING_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), False),
        pa.field("size", pa.int64(), False),
        pa.field("modification_time", pa.int64(), False),
    ]
)
"""One listed file: its path relative to the table root (as stored, not URL-encoded), its size
and modification time in milliseconds since the epoch."""
LOCAL_SCHEMES = ("file", "")


def is_hidden(name: str, partition_columns: Sequence[str], iceberg_metadata_hidden: bool = False) -> bool:
    """Delta's ``isHiddenDirectory`` for one file or directory name."""
    if iceberg_metadata_hidden and name == "metadata":
        return True
    return (
        name.startswith((".", "_"))
        and not name.startswith(("_delta_index", "_change_data"))
        and not any(name.startswith(f"{column}=") for column in partition_columns)
    )


@dataclass
class DirectoryListing:
    """The files of one directory (an Arrow batch) and its subdirectories (relative paths)."""

    files: pa.RecordBatch
    subdirectories: list[str] = field(default_factory=list)


def _batch(paths: list[str], sizes: list[int] | None, times: list[int] | None) -> pa.RecordBatch:
    """One directory's files; ``None`` sizes and times: not read yet (local disk)."""
    count = len(paths)
    return pa.record_batch(
        [
            pa.array(paths, pa.string()),
            pa.array(sizes, pa.int64()) if sizes is not None else pa.nulls(count, pa.int64()),
            pa.array(times, pa.int64()) if times is not None else pa.nulls(count, pa.int64()),
        ],
        schema=LISTING_SCHEMA,
    )


STAT_BATCH = 2000
CACHED_STAT_NS = 20_000
"""Nanoseconds per file, at most, that the first batch of ``stat`` s took when the kernel answered
them from its cache: then threads only add their own cost (a cached ``stat`` takes microseconds,
and a thread switch about as much), and the rest are read on the calling thread too."""


def stat_local(root: str, paths: list[str]) -> pa.Table:
    """Size and modification time of the local files ``paths`` (relative to ``root``); files
    gone meanwhile are left out. The first batch is read on the calling thread: when its ``stat``
    calls were answered from the kernel's cache (:data:`CACHED_STAT_NS`), so are the others;
    otherwise (a cold cache, a network file system) the rest are read on several threads, as
    ``stat`` releases the GIL while it waits."""
    batches = [paths[start : start + STAT_BATCH] for start in range(0, len(paths), STAT_BATCH)]
    if not batches:
        return LISTING_SCHEMA.empty_table()

    def read(batch: list[str]) -> pa.RecordBatch:
        found: list[str] = []
        sizes: list[int] = []
        times: list[int] = []
        for path in batch:
            try:
                stat = os.stat(f"{root}/{path}", follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append(path)
            sizes.append(stat.st_size)
            times.append(stat.st_mtime_ns // 1_000_000)
        return _batch(found, sizes, times)

    started = time.perf_counter_ns()
    first = read(batches[0])
    cached = time.perf_counter_ns() - started <= CACHED_STAT_NS * len(batches[0])
    if cached:
        rest = [read(batch) for batch in batches[1:]]
    else:
        rest = map_concurrently(read, batches[1:], Work.DATA, default_threads(Work.DATA, True))
    return pa.Table.from_batches([first, *rest], schema=LISTING_SCHEMA)


class TableListing:
    """The visible files and directories under the table at ``table_path`` (see the module docs).

    Iterating yields one Arrow batch per directory; :attr:`directories` holds the relative paths
    of the visible directories seen so far (the root excluded). On local disk the batches carry
    names only (null sizes and times): :func:`stat_local` reads them for the files that matter.
    """

    def __init__(
        self,
        table_path: str,
        conf: dict[str, str],
        partition_columns: Sequence[str],
        *,
        iceberg_metadata_hidden: bool = False,
    ) -> None:
        self.table_path = table_path.rstrip("/")
        self.partition_columns = list(partition_columns)
        self.iceberg_metadata_hidden = iceberg_metadata_hidden
        self.directories: list[str] = []
        self.fs: AbstractFileSystem
        self.fs, self.root = open_filesystem(self.table_path, conf)
        self.root = self.root.rstrip("/")
        self.is_local = uri_scheme(self.table_path) in LOCAL_SCHEMES

    def _hidden(self, name: str) -> bool:
        return is_hidden(name, self.partition_columns, self.iceberg_metadata_hidden)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        list_one = self._list_local if self.is_local else self._list_remote
        threads = default_threads(Work.DATA, True) if self.is_local else REMOTE_THREADS
        pool = executor(Work.DATA, threads)
        pending: list[str] = [""]
        while pending:
            if pool is None or len(pending) == 1:
                results = [list_one(relative) for relative in pending]
            else:
                futures: list[Future[DirectoryListing]] = [pool.submit(list_one, r) for r in pending]
                results = [future.result() for future in futures]
            pending = []
            for listing in results:
                self.directories += listing.subdirectories
                pending += listing.subdirectories
                if listing.files.num_rows:
                    yield listing.files

    # -- local disk ------------------------------------------------------------------------------
    def _list_local(self, relative: str) -> DirectoryListing:
        """Names only: sizes and modification times are read later, for the files that need them
        (:func:`stat_local`); the directory entries' types need no ``stat``."""
        directory = f"{self.root}/{relative}" if relative else self.root
        prefix = f"{relative}/" if relative else ""
        paths: list[str] = []
        subdirectories: list[str] = []
        try:
            entries = os.scandir(directory)
        except FileNotFoundError:  # removed since its parent was listed
            return DirectoryListing(_batch([], None, None))
        with entries:
            for entry in entries:
                if self._hidden(entry.name):
                    continue
                try:
                    is_directory = entry.is_dir(follow_symlinks=False)
                except FileNotFoundError:  # deleted while listing
                    continue
                if is_directory:
                    subdirectories.append(prefix + entry.name)
                else:
                    paths.append(prefix + entry.name)
        return DirectoryListing(_batch(paths, None, None), subdirectories)

    # -- object stores and other filesystems -------------------------------------------------------
    def _list_remote(self, relative: str) -> DirectoryListing:
        directory = f"{self.root}/{relative}" if relative else self.root
        prefix = f"{relative}/" if relative else ""
        self.fs.invalidate_cache(directory)
        try:
            infos: list[dict[str, Any]] = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return DirectoryListing(_batch([], [], []))
        paths: list[str] = []
        sizes: list[int] = []
        times: list[int] = []
        subdirectories: list[str] = []
        for info in infos:
            full = str(info["name"]).rstrip("/")
            name = full.rsplit("/", 1)[-1]
            if not name or full == directory or self._hidden(name):  # some stores list the directory itself
                continue
            if info.get("type") == "directory":
                subdirectories.append(prefix + name)
                continue
            paths.append(prefix + name)
            sizes.append(int(info.get("size") or 0))
            times.append(modification_time_ms(info))
        del infos
        return DirectoryListing(_batch(paths, sizes, times), subdirectories)
