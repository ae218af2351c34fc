"""User-written stores used by the provider tests (importable by dotted path)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable, Iterator, Mapping

from logstores import FileStatus, LineIterator, LogStore, MemoryLogStore


class CustomLogStore(MemoryLogStore):
    """A third-party store: anything constructible from one conf mapping."""


class NotAStore:
    """A class that is not a LogStore."""

    def __init__(self, conf: object = None) -> None:
        self.conf = conf


class TextOnlyLogStore(LogStore):
    """A store implementing only Delta's text contract (lines in, lines out), kept in a dict."""

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self.files: dict[str, list[str]] = {}
        self.raw: dict[str, bytes] = {}  # files put there by other means (a binary upload)
        self._lock = threading.Lock()

    def read_as_iterator(self, path: str) -> LineIterator:
        if path in self.raw:
            data = self.raw[path]
        elif path in self.files:
            data = "".join(f"{line}\n" for line in self.files[path]).encode("utf-8")
        else:
            raise FileNotFoundError(path)
        return LineIterator(lambda: io.BytesIO(data))

    def write(self, path: str, actions: Iterable[str], overwrite: bool = False) -> None:
        with self._lock:
            if not overwrite and path in self.files:
                raise FileExistsError(path)
            self.files[path] = list(actions)

    def list_from(self, path: str) -> Iterator[FileStatus]:
        parent, name = path.rsplit("/", 1)
        for candidate in sorted(self.files):
            directory, file_name = candidate.rsplit("/", 1)
            if directory == parent and file_name >= name:
                yield FileStatus(candidate, len("\n".join(self.files[candidate])), 0)

    def is_partial_write_visible(self, path: str) -> bool:
        return False

    def resolve_path_on_physical_storage(self, path: str) -> str:
        return path
