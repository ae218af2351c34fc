"""LogStore over fsspec's in-memory filesystem (``memory://``), for tests and demos."""

from __future__ import annotations

import threading

from logstores.filesystem import FileSystemLogStore, Location

_MEMORY_LOCK = threading.Lock()


class MemoryLogStore(FileSystemLogStore):
    """Process-local, thread-safe store with object-store semantics.

    Files are published whole (fsspec's memory files appear on close), parent directories are
    implicit, and put-if-absent is a check-and-set under one process-wide lock.
    """

    partial_write_visible = False

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        with _MEMORY_LOCK:
            if location.fs.exists(location.path):
                raise FileExistsError(location.qualify(location.path))
            location.fs.pipe_file(location.path, data)

    def _overwrite(self, location: Location, data: bytes) -> None:
        with _MEMORY_LOCK:
            location.fs.pipe_file(location.path, data)
