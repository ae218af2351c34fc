"""What the S3, GCS and Azure stores share: verified put-if-absent and fast, clear failures.

**Ambiguous commits.** A conditional write can fail *after* the service applied it: the
response is lost to a timeout or a reset connection, or the service answers 5xx, and the SDK's
own retry then meets the object it just created and reports a precondition failure. Every
conditional put therefore carries a random *commit token* in the object's metadata. When a put
fails with a precondition failure or an ambiguous error, the store re-reads the object:

* the object carries our token -> our write landed, the commit succeeded;
* the object has no token (written by another client, e.g. Delta on the JVM) and the put was
  ambiguous -> identical bytes count as our commit, anything else as a conflict;
* the object carries another token -> :class:`FileExistsError` (another writer won);
* the object is absent -> the put is retried (up to :data:`MAX_PUT_ATTEMPTS` times).

**Endpoints and time.** A custom endpoint (emulator, S3-compatible service) is probed with one
TCP connect when a store first uses it, so an unreachable endpoint fails within the connect
timeout with an :class:`~logstores.errors.EndpointUnreachableError` naming it, instead of after
the SDKs' retry schedules. Every request is bounded by the store's
:class:`~logstores.timeouts.RequestBounds`; a request that gets no answer in any attempt raises
:class:`~logstores.errors.RequestTimeoutError` naming the endpoint (``host:port``) and the path.

**Reads.** No read sends a HEAD where a GET will do: a log file is read with one GET
(:meth:`ObjectStoreLogStore.read_bytes`, also behind :meth:`~ObjectStoreLogStore.read_as_iterator`),
and :meth:`ObjectStoreLogStore.open_file` uses the size from the listing, so a checkpoint up to
:data:`SINGLE_GET_LIMIT` bytes costs one GET and a larger one ranged GETs (:class:`SizedObjectFile`).

**Temporary objects.** Writers that die can leave probe and temp objects under
``_delta_log/.tmp/``; :meth:`ObjectStoreLogStore.delete_stale_temp_files` removes old ones.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, ClassVar, NoReturn

from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from logstores.base import DEFAULT_TEMP_FILE_AGE_S, FileStatus, LineIterator
from logstores.errors import EndpointUnreachableError, LogStoreError, RequestTimeoutError
from logstores.filesystem import FileSystemLogStore, Location
from logstores.redaction import redact_url, scrub
from logstores.timeouts import endpoint_address

logger = logging.getLogger(__name__)

COMMIT_TOKEN_KEY = "delta-commit-token"
"""Object metadata key holding the writer's commit token."""

MAX_PUT_ATTEMPTS = 3
SINGLE_GET_LIMIT = 64 * 1024 * 1024
"""Files up to this size are opened by :meth:`ObjectStoreLogStore.open_file` with one whole GET."""
SIZED_READ_BLOCK = 8 * 1024 * 1024
"""Bytes per ranged GET of a larger file (:class:`SizedObjectFile`)."""
TEMP_DIR = ".tmp"
"""The directory under ``_delta_log`` holding temp and probe objects of the object stores."""


class AmbiguousWriteError(LogStoreError):
    """A write request may or may not have been applied (timeout, reset connection, 5xx)."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object as read back after a failed put: its commit token (if any) and bytes."""

    token: str | None
    data: bytes


def put_if_absent_verified(
    display: str,
    data: bytes,
    put_once: Callable[[str], None],
    read_back: Callable[[], StoredObject | None],
) -> None:
    """Create an object with ``data`` unless it exists, resolving ambiguous outcomes.

    ``put_once(token)`` sends one conditional put carrying ``token`` in the object metadata; it
    raises :class:`FileExistsError` on a precondition failure and :class:`AmbiguousWriteError`
    when the outcome is unknown. ``read_back()`` returns the stored object or ``None``.
    Raises :class:`FileExistsError` naming ``display`` when another writer's object is there,
    and :class:`LogStoreError` if the outcome is still unknown after :data:`MAX_PUT_ATTEMPTS`.
    """
    token = uuid.uuid4().hex
    ambiguous: AmbiguousWriteError | None = None
    last: OSError | None = None
    for _ in range(MAX_PUT_ATTEMPTS):
        try:
            put_once(token)
            return
        except FileExistsError as exc:
            last = exc  # possibly our own earlier attempt, applied but unanswered
        except AmbiguousWriteError as exc:
            ambiguous = last = exc
            logger.warning("the write of %s may not have been applied (%s); re-reading it", display, exc)
        stored = read_back()
        if stored is None:
            continue
        if stored.token == token or (stored.token is None and ambiguous is not None and stored.data == data):
            logger.info("the write of %s had been applied by an earlier attempt", display)
            return
        raise FileExistsError(display)
    raise LogStoreError(
        f"could not tell whether {display} was written: {MAX_PUT_ATTEMPTS} attempts failed, last: {last!r}"
    ) from last


def check_endpoint_reachable(endpoint: str, service: str, settings: str, timeout_s: float) -> None:
    """Raise :class:`EndpointUnreachableError` naming ``endpoint`` if no TCP connection opens in time."""
    host, _, port = endpoint_address(endpoint).rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EndpointUnreachableError(
            f"cannot reach the {service} endpoint {redact_url(endpoint)} ({host}:{port}): {reason} "
            f"(set by {settings})"
        ) from None


class ObjectStoreLogStore(FileSystemLogStore):
    """Base of the cloud stores: whole-object writes and a reachability probe per endpoint."""

    partial_write_visible = False
    service: ClassVar[str] = "object store"
    endpoint_settings: ClassVar[str] = "the storage options"
    """The configuration keys that choose the endpoint, named in connection errors."""

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self._probed: set[str] = set()
        self._probe_lock = threading.Lock()

    def filesystem_options(self, scheme: str) -> dict[str, Any]:
        """The mapped options, with fsspec's listing cache off (listings must be current)."""
        options = super().filesystem_options(scheme)
        options.setdefault("use_listings_cache", False)
        return options

    def custom_endpoint(self, fs: AbstractFileSystem) -> str | None:
        """The explicitly configured endpoint ``fs`` talks to, if any."""
        return None

    sdk_errors: ClassVar[tuple[type[BaseException], ...]] = (OSError,)
    """The exceptions of this store's SDK that :meth:`_translated` turns into clear ones."""
    timeout_errors: ClassVar[tuple[type[BaseException], ...]] = (TimeoutError,)
    """SDK exceptions meaning that a request got no answer in time (after the SDK's retries)."""
    unreachable_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """SDK exceptions meaning that no connection could be made to the endpoint."""

    @contextlib.contextmanager
    def _translated(self, location: Location) -> Iterator[None]:
        """Re-raise SDK errors as clear ones naming the path, bucket or endpoint."""
        try:
            yield
        except self.sdk_errors as exc:
            if self._already_clear(exc):
                raise
            if isinstance(exc, self.timeout_errors):
                raise self.timeout_error(location, exc) from exc
            if isinstance(exc, self.unreachable_errors):
                raise self.unreachable_error(location, exc) from exc
            self._raise_translated(exc, location)

    def endpoint_url(self, fs: AbstractFileSystem) -> str | None:
        """The URL of the endpoint ``fs`` talks to (the custom one, else the SDK's default if known)."""
        return self.custom_endpoint(fs)

    def endpoint_address(self, fs: AbstractFileSystem) -> str:
        """``host:port`` of the endpoint ``fs`` talks to, for error messages."""
        return endpoint_address(self.endpoint_url(fs), default=f"the default {self.service} endpoint")

    def timeout_error(self, location: Location, exc: BaseException) -> RequestTimeoutError:
        """The error for a request on ``location`` that timed out in every attempt."""
        return RequestTimeoutError(
            f"{self.service} request for {location.qualify(location.path)} to "
            f"{self.endpoint_address(location.fs)} timed out ({self.request_bounds.describe()}; "
            f"set delta.logstores.requestTimeoutMs to change): {scrub(str(exc) or type(exc).__name__)}"
        )

    def unreachable_error(self, location: Location, exc: BaseException) -> EndpointUnreachableError:
        """The error for a request on ``location`` whose endpoint refused or dropped every connection."""
        return EndpointUnreachableError(
            f"cannot reach the {self.service} endpoint {self.endpoint_address(location.fs)} for "
            f"{location.qualify(location.path)}: {scrub(str(exc) or type(exc).__name__)} "
            f"(set by {self.endpoint_settings})"
        )

    def _already_clear(self, exc: BaseException) -> bool:
        """Whether ``exc`` already says what happened (raised unchanged by :meth:`_translated`)."""
        return isinstance(exc, LogStoreError | FileExistsError)

    def _raise_translated(self, exc: BaseException, location: Location) -> NoReturn:
        """Raise the clear form of the SDK error ``exc`` (per store; the default re-raises it)."""
        raise exc

    def filesystem(self, path: str) -> AbstractFileSystem:
        fs = super().filesystem(path)
        endpoint = self.custom_endpoint(fs)
        if endpoint and endpoint not in self._probed:
            with self._probe_lock:
                if endpoint not in self._probed:
                    check_endpoint_reachable(
                        endpoint, self.service, self.endpoint_settings, self.request_bounds.connect_timeout_s
                    )
                    self._probed.add(endpoint)
        return fs

    # -- reading -----------------------------------------------------------------------------
    def read_as_iterator(self, path: str) -> LineIterator:
        """The lines of the object, fetched with one GET (no HEAD) when the first line is asked for."""
        return LineIterator(lambda: io.BytesIO(self.read_bytes(path)))

    def read_bytes(self, path: str) -> bytes:
        location = self.locate(path)
        with self._translated(location):
            return self._get_bytes(location)

    def _get_bytes(self, location: Location) -> bytes:
        """The whole object with one GET (no HEAD); :class:`FileNotFoundError` if it is missing."""
        return location.fs.cat_file(location.path)

    def open_input(self, path: str) -> IO[bytes]:
        location = self.locate(path)
        with self._translated(location):
            return location.fs.open(location.path, "rb")

    def open_file(self, status: FileStatus) -> IO[bytes]:
        """One GET for a file up to :data:`SINGLE_GET_LIMIT` bytes, else ranged GETs; never a HEAD."""
        if status.size <= SINGLE_GET_LIMIT:
            return io.BytesIO(self.read_bytes(status.path))
        location = self.locate(status.path)
        return SizedObjectFile(location.fs, location.path, status.size, lambda: self._translated(location))

    # -- temporary objects -------------------------------------------------------------------
    def delete_stale_temp_files(
        self, log_path: str, older_than_s: float = DEFAULT_TEMP_FILE_AGE_S
    ) -> list[str]:
        """Also removes old objects under ``_delta_log/.tmp/`` (temp files and probes of dead writers)."""
        removed = super().delete_stale_temp_files(log_path, older_than_s)
        temp_dir = f"{log_path.rstrip('/')}/{TEMP_DIR}"
        for status in self._stale_entries(f"{temp_dir}/", older_than_s):
            if self._may_delete_temp_object(status):
                self.delete(status.path)
                removed.append(status.path)
        return removed

    def _may_delete_temp_object(self, status: FileStatus) -> bool:
        """Whether an old object under ``.tmp/`` is garbage (stores whose protocol needs some say no)."""
        return True


class SizedObjectFile(AbstractBufferedFile):
    """A read-only, seekable object of known size whose bytes come from ranged GETs.

    The filesystems' own file objects ask the service for the size first (a HEAD, or adlfs's
    blob properties) even when it is known. Reads are buffered in blocks of
    :data:`SIZED_READ_BLOCK` bytes (fsspec's read-ahead cache); SDK errors are translated in the
    context ``translated()`` returns (the store's :meth:`ObjectStoreLogStore._translated`).
    """

    def __init__(
        self,
        fs: AbstractFileSystem,
        path: str,
        size: int,
        translated: Callable[[], contextlib.AbstractContextManager[None]],
    ) -> None:
        super().__init__(fs, path, mode="rb", block_size=SIZED_READ_BLOCK, cache_type="readahead", size=size)
        self._translated_errors = translated

    def _fetch_range(self, start: int, end: int) -> bytes:
        with self._translated_errors():
            return self.fs.cat_file(self.path, start=start, end=end)
