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

**Endpoints.** A custom endpoint (emulator, S3-compatible service) is probed with one TCP
connect when a store first uses it, so an unreachable endpoint fails within
:data:`CONNECT_TIMEOUT_S` with a :class:`~logstores.errors.LogStoreError` naming it, instead
of after the SDKs' retry schedules.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, ClassVar, NoReturn
from urllib.parse import urlsplit

from fsspec import AbstractFileSystem

from logstores.base import LineIterator
from logstores.errors import LogStoreError
from logstores.filesystem import FileSystemLogStore, Location

logger = logging.getLogger(__name__)

COMMIT_TOKEN_KEY = "delta-commit-token"
"""Object metadata key holding the writer's commit token."""

MAX_PUT_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 5.0


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


def check_endpoint_reachable(endpoint: str, service: str, settings: str) -> None:
    """Raise :class:`LogStoreError` naming ``endpoint`` if no TCP connection can be opened to it."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise LogStoreError(
            f"cannot reach the {service} endpoint {endpoint}: {reason} (set by {settings})"
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

    @contextlib.contextmanager
    def _translated(self, location: Location) -> Iterator[None]:
        """Re-raise SDK errors as clear ones naming the path, bucket or endpoint."""
        try:
            yield
        except self.sdk_errors as exc:
            if self._already_clear(exc):
                raise
            self._raise_translated(exc, location)

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
                    check_endpoint_reachable(endpoint, self.service, self.endpoint_settings)
                    self._probed.add(endpoint)
        return fs

    # -- reading -----------------------------------------------------------------------------
    def read_as_iterator(self, path: str) -> LineIterator:
        location = self.locate(path)

        def opener() -> IO[bytes]:
            with self._translated(location):
                return location.fs.open(location.path, "rb")

        return LineIterator(opener)

    def read_bytes(self, path: str) -> bytes:
        location = self.locate(path)
        with self._translated(location):
            return location.fs.cat_file(location.path)

    def open_input(self, path: str) -> IO[bytes]:
        location = self.locate(path)
        with self._translated(location):
            return location.fs.open(location.path, "rb")
