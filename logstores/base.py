"""The LogStore contract: how Delta's transaction log talks to storage.

A ``LogStore`` reads and writes the small files under ``_delta_log``. Every implementation
must guarantee, for the paths it serves:

1. **Mutual exclusion**: of several writers creating the same file with ``overwrite=False``,
   exactly one succeeds; the others get :class:`FileExistsError`.
2. **Atomic visibility**: where :meth:`LogStore.is_partial_write_visible` is ``False``, a
   reader sees either no file or the whole file, never part of it.
3. **Consistent listing**: once a write returned, every later :meth:`LogStore.list_from` of
   the directory shows the file.

Every request a store sends to a remote service is bounded in time (see
:mod:`logstores.timeouts`): a store never blocks forever, it raises a
:class:`~logstores.errors.LogStoreError` naming the endpoint and the path.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import IO, Self

from logstores.errors import BinaryAccessUnsupportedError

DEFAULT_TEMP_FILE_AGE_S = 3600.0
"""How old a temp file must be before :meth:`LogStore.delete_stale_temp_files` takes it for abandoned."""


@dataclass(frozen=True, slots=True)
class FileStatus:
    """One entry of a directory listing.

    ``path`` is fully qualified (scheme included), ``modification_time`` is in milliseconds
    since the epoch, ``size`` in bytes (0 for directories).
    """

    path: str
    size: int
    modification_time: int
    is_dir: bool = False

    @property
    def name(self) -> str:
        """The last segment of :attr:`path`."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]


class LineIterator(Iterator[str]):
    """Lazy iterator over the lines of a binary stream, closeable and a context manager.

    Nothing is read before the first ``next()``. Lines are decoded as UTF-8 and trimmed like
    Java's ``String.trim()`` (characters up to U+0020 at both ends). The stream is closed at
    the end of the data, on :meth:`close`, or when leaving a ``with`` block.
    """

    __slots__ = ("_closed", "_opener", "_stream")

    def __init__(self, opener: Callable[[], IO[bytes]]) -> None:
        self._opener = opener
        self._stream: IO[bytes] | None = None
        self._closed = False

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> str:
        if self._closed:
            raise StopIteration
        if self._stream is None:
            self._stream = self._opener()
        raw = self._stream.readline()
        if not raw:
            self.close()
            raise StopIteration
        return _java_trim(raw.decode("utf-8"))

    def close(self) -> None:
        """Release the underlying stream; later ``next()`` calls stop the iteration."""
        self._closed = True
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_JAVA_WHITESPACE = "".join(chr(c) for c in range(0x21))


def _java_trim(line: str) -> str:
    return line.strip(_JAVA_WHITESPACE)


def encode_actions(actions: Iterable[str]) -> bytes:
    """Serialise actions the way every Delta store does: each one followed by ``\\n``, UTF-8."""
    return "".join(f"{action}\n" for action in actions).encode("utf-8")


def split_lines(data: bytes) -> list[str]:
    """Decode a log file's bytes into trimmed lines (the inverse of :func:`encode_actions`).

    Lines end at ``\\n`` only. Raises :class:`UnicodeDecodeError` if ``data`` is not UTF-8.
    """
    text = data.decode("utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    return [_java_trim(line) for line in text.split("\n")] if text else []


class LogStore(ABC):
    """Reads and writes Delta log files on one kind of storage.

    Every store is constructible from a single configuration mapping (Spark/Hadoop style
    string keys and values), so stores can be loaded by class name from configuration.
    Paths are URIs (``s3://bucket/t/_delta_log/00000000000000000000.json``) or local paths.
    """

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        self._conf: Mapping[str, str] = MappingProxyType(dict(conf or {}))

    @property
    def conf(self) -> Mapping[str, str]:
        """The read-only configuration this store was built from."""
        return self._conf

    # -- reading -------------------------------------------------------------------------
    def read(self, path: str) -> list[str]:
        """All lines of the file, without terminators and trimmed.

        Raises :class:`FileNotFoundError` if the file does not exist.
        """
        with self.read_as_iterator(path) as lines:
            return list(lines)

    @abstractmethod
    def read_as_iterator(self, path: str) -> LineIterator:
        """A lazy, closeable iterator over the file's lines (see :meth:`read`).

        The file need not be opened before the first line is requested; a missing file raises
        :class:`FileNotFoundError` at the latest on the first ``next()``.
        """

    # -- binary access (Parquet checkpoints) ------------------------------------------------
    # Every store built on FileSystemLogStore has exact binary access. A store that implements
    # only the text methods above gets these defaults: they serve log *text* files exactly (every
    # file written by ``write``) and refuse anything else loudly, never returning or storing
    # altered bytes.
    def read_bytes(self, path: str) -> bytes:
        """The whole file's exact bytes. Raises :class:`FileNotFoundError` if it does not exist.

        The default rebuilds a text file from :meth:`read` (exact for files :meth:`write` wrote)
        and raises :class:`BinaryAccessUnsupportedError` for a file that is not UTF-8 text.
        """
        try:
            return encode_actions(self.read(path))
        except UnicodeDecodeError:
            raise BinaryAccessUnsupportedError(type(self).__name__, "read", path) from None

    def open_input(self, path: str) -> IO[bytes]:
        """A readable, seekable binary stream of the file (used for Parquet checkpoints)."""
        return io.BytesIO(self.read_bytes(path))

    def open_file(self, status: FileStatus) -> IO[bytes]:
        """:meth:`open_input` of a file whose :class:`FileStatus` the caller has (from a listing).

        Like Hadoop's ``openFile().withFileStatus()``: a store may use ``status.size`` instead of
        asking the service for it, and choose how to fetch the file (object stores read small
        files with one GET and larger ones with ranged GETs, never a HEAD). ``status.size`` must be
        the file's current size (from a listing, or a sidecar action's ``sizeInBytes``); reads of
        a file whose size differs may fail or return a prefix. Replay opens every Parquet
        checkpoint and sidecar through this method. The default calls :meth:`open_input` with
        ``status.path``, so stores written before this method (text-only ones included) work as
        they are.
        """
        return self.open_input(status.path)

    # -- writing -------------------------------------------------------------------------
    @abstractmethod
    def write(self, path: str, actions: Iterable[str], overwrite: bool = False) -> None:
        """Write ``actions``, each followed by ``\\n``, as the file ``path`` (UTF-8).

        With ``overwrite=False`` this is an atomic put-if-absent: if the file exists,
        :class:`FileExistsError` naming the path is raised and nothing is changed; of concurrent
        writers of the same path exactly one succeeds. Where :meth:`is_partial_write_visible`
        is ``False`` no reader ever observes a partially written file.
        """

    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Write exactly ``data`` as the file ``path`` with the same guarantees as :meth:`write`.

        Used for Parquet checkpoints. The default stores ``data`` through :meth:`write` when it is
        text that :meth:`write` reproduces byte for byte (lines ending in ``\\n``), and raises
        :class:`BinaryAccessUnsupportedError` before writing anything otherwise.
        """
        try:
            lines = split_lines(data)
        except UnicodeDecodeError:
            raise BinaryAccessUnsupportedError(type(self).__name__, "write", path) from None
        if encode_actions(lines) != data:
            raise BinaryAccessUnsupportedError(type(self).__name__, "write", path)
        self.write(path, lines, overwrite=overwrite)

    def create_directories(self, path: str) -> None:
        """Make sure the directory ``path`` exists (a no-op on object stores)."""

    def delete(self, path: str) -> None:
        """Remove a file the caller owns (temp files, test clean-up). Missing files are ignored."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete {path}")

    def delete_stale_temp_files(
        self, log_path: str, older_than_s: float = DEFAULT_TEMP_FILE_AGE_S
    ) -> list[str]:
        """Remove the temp and probe files that writers which died left in the log directory ``log_path``.

        Only files of this store's own temp naming that were last modified at least
        ``older_than_s`` seconds ago are removed (a live writer's temp file is seconds old), and
        never one a commit still needs (an S3DynamoDBLogStore entry waiting for repair). Log cleanup
        calls this; it is safe to call at any time from any process. Returns the paths removed;
        a missing directory removes nothing. The default store has no temp files.
        """
        return []

    # -- listing -------------------------------------------------------------------------
    @abstractmethod
    def list_from(self, path: str) -> Iterator[FileStatus]:
        """Entries of ``path``'s parent directory whose name is ``>=`` ``path``'s name.

        Sorted by name; directories are included; ``path`` itself need not exist. Raises
        :class:`FileNotFoundError` if the parent directory does not exist.
        """

    # -- properties ----------------------------------------------------------------------
    @abstractmethod
    def is_partial_write_visible(self, path: str) -> bool:
        """Whether a reader could observe a half-written file at ``path`` on this storage."""

    @abstractmethod
    def resolve_path_on_physical_storage(self, path: str) -> str:
        """The fully qualified URI of ``path`` (scheme and authority included)."""

    def invalidate_cache(self) -> None:
        """Drop any cached listings or file metadata. The default store caches nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
