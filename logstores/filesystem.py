"""The shared base of every store built on an fsspec filesystem."""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import IO, Any, ClassVar
from urllib.parse import urlsplit

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from logstores.base import DEFAULT_TEMP_FILE_AGE_S, FileStatus, LineIterator, LogStore, encode_actions
from logstores.errors import LogStoreConfError, LogStoreError
from logstores.log_files import is_temp_file_name, temp_file_name
from logstores.options import fsspec_protocol, storage_options
from logstores.redaction import redact, refuse_userinfo_secret
from logstores.timeouts import RequestBounds, fsspec_timeout_options, request_bounds

logger = logging.getLogger(__name__)


def uri_scheme(path: str) -> str:
    """The lower-cased URI scheme of ``path``; ``""`` for plain local paths (and drive letters)."""
    scheme = urlsplit(path).scheme.lower() if "://" in path or path.startswith("file:") else ""
    return "" if len(scheme) == 1 else scheme


def filesystem_class(scheme: str, path: str | None = None, *, log: bool = False) -> type[AbstractFileSystem]:
    """The fsspec filesystem class serving the URI scheme ``scheme`` (``path`` is named in errors).

    Raises :class:`LogStoreConfError` naming the scheme, and saying how to register a filesystem
    for it, when fsspec knows none (fsspec's own error is a bare ``Protocol not known``); for a
    log file (``log``) it also names the setting of a store that needs no fsspec filesystem.
    """
    protocol = fsspec_protocol(scheme)
    if protocol in ("gs", "gcs"):
        return _gcs_json_api_class()
    try:
        return fsspec.get_filesystem_class(protocol)
    except ValueError:  # fsspec raises it only for an unknown protocol
        pass
    where = f" (path {path})" if path else ""
    alternative = (
        f"; or set spark.delta.logStore.{scheme}.impl to a LogStore that does not use fsspec"
        if log
        else " (data files are always read and written through fsspec)"
    )
    raise LogStoreConfError(
        f"No filesystem is registered for the URI scheme '{scheme}'{where}: fsspec knows no protocol "
        f"'{protocol}'. Register an fsspec filesystem for it with "
        f"fsspec.register_implementation('{protocol}', 'your_package.YourFileSystem') in every process "
        f"that uses it, or under the entry-point group 'fsspec.specs' of an installed package "
        f"({protocol} = your_package:YourFileSystem) so Spark's Python workers find it too{alternative}"
    )


def _gcs_json_api_class() -> type[AbstractFileSystem]:
    """gcsfs's JSON-API filesystem, as the GCS store uses: fsspec's entry for ``gs`` is whatever
    ``gcsfs.GCSFileSystem`` was when gcsfs was first imported, which, unless
    ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` was ``false`` then, probes every bucket's type over gRPC
    first (a minute against an emulator)."""
    try:
        from gcsfs.core import GCSFileSystem
    except ImportError:
        return fsspec.get_filesystem_class("gs")  # fsspec's own error: what to install
    return GCSFileSystem


def open_filesystem(uri: str, conf: Mapping[str, str] | None = None) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem serving ``uri`` under ``conf``, and ``uri`` as that filesystem's path.

    Storage options come from :func:`logstores.options.storage_options`, so data files are
    reached with the same settings as the log. Raises :class:`LogStoreConfError` for a scheme
    fsspec does not know (see :func:`filesystem_class`).
    """
    scheme = uri_scheme(uri)
    fs = filesystem_class(scheme, uri)(**storage_options(scheme, conf or {}))
    return fs, _strip(fs, uri, scheme)


def local_path(uri: str) -> str | None:
    """The path of ``uri`` on this machine when the filesystem serving it is the local one, else
    ``None``; unlike :func:`open_filesystem`, no filesystem is made (a data file read per file
    asks this first)."""
    scheme = uri_scheme(uri)
    if scheme not in ("", "file", "local"):
        return None
    fs_class = filesystem_class(scheme, uri)
    if not issubclass(fs_class, LocalFileSystem):
        return None
    return str(fs_class._strip_protocol(_protocol_form(uri, scheme)))


def _protocol_form(uri: str, scheme: str) -> str:
    """``uri`` with its scheme as fsspec's protocol name."""
    if scheme and fsspec_protocol(scheme) != scheme:
        return fsspec_protocol(scheme) + uri[len(scheme) :]
    return uri


def _strip(fs: AbstractFileSystem, uri: str, scheme: str) -> str:
    return fs._strip_protocol(_protocol_form(uri, scheme))


def modification_time_ms(info: Mapping[str, Any]) -> int:
    """Milliseconds since the epoch from an fsspec ``info`` dict of any backend."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created", "mtime_ns"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.UTC)
            return int(value.timestamp() * 1000)
        if isinstance(value, str):
            return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        if key == "mtime_ns":
            return int(value) // 1_000_000
        return int(float(value) * 1000)
    return 0


@dataclass(frozen=True, slots=True)
class Location:
    """A path resolved against its filesystem."""

    fs: AbstractFileSystem
    path: str  # the filesystem's own form (no protocol for object stores)
    scheme: str  # the scheme the caller used, kept so results come back in the same form

    def qualify(self, fs_path: str) -> str:
        """The fully qualified URI of another path on the same filesystem."""
        if isinstance(self.fs, LocalFileSystem):
            return "file://" + fs_path
        return f"{self.scheme}://{fs_path.lstrip('/')}"

    @property
    def parent(self) -> str:
        return self.fs._parent(self.path)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def directory(self) -> Location:
        """The directory holding this path, as a location of its own (with a trailing ``/``).

        A listing from a name reads that directory; its errors name the directory, not the name
        the listing starts from, which need not be a file (Delta lists from ``<version>.``).
        """
        return replace(self, path=self.parent.rstrip("/") + "/")


class PathLocks:
    """Process-wide locks by path (Delta's ``PathLock``), kept only while someone uses them.

    A lock exists while a thread holds it or waits for it, so the table never holds more entries
    than there are threads inside :meth:`hold`.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold the lock of ``key`` for the duration of the ``with`` block."""
        with self._guard:
            lock, users = self._locks.get(key) or (threading.Lock(), 0)
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


PATH_LOCKS = PathLocks()


def path_lock(key: str) -> contextlib.AbstractContextManager[None]:
    """Hold the process-wide lock of one path: ``with path_lock(uri): ...``."""
    return PATH_LOCKS.hold(key)


class FileSystemLogStore(LogStore):
    """Reads, lists and writes through fsspec; subclasses decide how put-if-absent is done.

    Subclasses implement :meth:`_put_if_absent` (the mutual-exclusion primitive) and may
    override :meth:`_overwrite`, :meth:`_list_dir` and :meth:`filesystem_options`.
    """

    partial_write_visible: ClassVar[bool] = True
    """What :meth:`is_partial_write_visible` answers for every path of this store."""

    timeout_service: ClassVar[str] = "fsspec"
    """Whose Hadoop timeout keys bound this store's requests (see :mod:`logstores.timeouts`)."""

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self.request_bounds: RequestBounds = request_bounds(self.conf, self.timeout_service)
        """Timeouts and attempts of every request this store sends."""
        self._filesystems: dict[str, AbstractFileSystem] = {}
        self._filesystems_lock = threading.Lock()

    # -- filesystem resolution -----------------------------------------------------------
    def filesystem_options(self, scheme: str) -> dict[str, Any]:
        """The fsspec storage options for ``scheme``; stores may add defaults of their own.

        Filesystems that accept timeouts get :attr:`request_bounds` unless the options set them.
        """
        options = storage_options(scheme, self.conf)
        for name, value in fsspec_timeout_options(fsspec_protocol(scheme), self.request_bounds).items():
            options.setdefault(name, value)
        return options

    def filesystem(self, path: str) -> AbstractFileSystem:
        """The fsspec filesystem serving ``path`` (one instance per scheme, cached).

        Raises :class:`LogStoreConfError` for a scheme fsspec does not know.
        """
        scheme = uri_scheme(path)
        with self._filesystems_lock:
            fs = self._filesystems.get(scheme)
            if fs is None:
                filesystem_class(scheme, path, log=True)  # a clear error for an unknown scheme
                options = self.filesystem_options(scheme)
                logger.debug("%s opens %s with %s", type(self).__name__, scheme or "file", redact(options))
                fs = self._filesystems[scheme] = self.new_filesystem(scheme, options)
            return fs

    def new_filesystem(self, scheme: str, options: dict[str, Any]) -> AbstractFileSystem:
        """Create the filesystem of ``scheme`` from ``options`` (stores may tune the SDK client here)."""
        return fsspec.filesystem(fsspec_protocol(scheme), **options)

    def locate(self, path: str) -> Location:
        """``path`` resolved to its filesystem and that filesystem's path form.

        Raises :class:`LogStoreConfError` for a path carrying credentials in its userinfo.
        """
        refuse_userinfo_secret(path)
        scheme = uri_scheme(path)
        fs = self.filesystem(path)
        return Location(fs, _strip(fs, path, scheme), scheme)

    # -- reading -------------------------------------------------------------------------
    def read_as_iterator(self, path: str) -> LineIterator:
        location = self.locate(path)
        return LineIterator(lambda: location.fs.open(location.path, "rb"))

    def read_bytes(self, path: str) -> bytes:
        location = self.locate(path)
        return location.fs.cat_file(location.path)

    def open_input(self, path: str) -> IO[bytes]:
        location = self.locate(path)
        return location.fs.open(location.path, "rb")

    # -- listing -------------------------------------------------------------------------
    def list_from(self, path: str) -> Iterator[FileStatus]:
        location = self.locate(path)
        start = location.name
        entries = [info for info in self._list_dir(location) if _name(info) >= start]
        entries.sort(key=_name)
        for info in entries:
            yield FileStatus(
                path=location.qualify(info["name"]),
                size=int(info.get("size") or 0),
                modification_time=modification_time_ms(info),
                is_dir=info.get("type") == "directory",
            )

    def _list_dir(self, location: Location) -> list[dict[str, Any]]:
        """Entries of ``location``'s parent whose names may be ``>=`` its name.

        Raises :class:`FileNotFoundError` naming the parent when it does not exist. Object
        stores override this to start the listing at the name instead of the prefix.
        """
        parent = location.parent
        try:
            return location.fs.ls(parent, detail=True)
        except FileNotFoundError:
            raise FileNotFoundError(f"No such file or directory: {location.qualify(parent)}") from None
        except NotADirectoryError:
            raise FileNotFoundError(f"Not a directory: {location.qualify(parent)}") from None

    # -- writing -------------------------------------------------------------------------
    def write(self, path: str, actions: Iterable[str], overwrite: bool = False) -> None:
        self.write_bytes(path, encode_actions(actions), overwrite=overwrite)

    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        location = self.locate(path)
        if overwrite:
            self._overwrite(location, data)
        else:
            self._put_if_absent(location, data)

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        """Create the file atomically if absent, else raise :class:`FileExistsError`."""
        raise NotImplementedError

    def _overwrite(self, location: Location, data: bytes) -> None:
        """Write the file whether or not it exists (direct write by default)."""
        location.fs.pipe_file(location.path, data)

    def write_with_rename(self, location: Location, data: bytes, overwrite: bool) -> None:
        """Delta's ``writeWithRename``: write a hidden temp file, then rename it into place.

        Safe only where rename-without-overwrite is atomic. The parent must exist (writes never
        create the log directory); the temp file is removed if the rename did not happen. On local
        disk the temp file is synced before it is published and the directory after.
        """
        fs = location.fs
        parent = location.parent
        if isinstance(fs, LocalFileSystem):
            publish_local_file(location, data, overwrite)
            return
        if not fs.isdir(parent):
            raise FileNotFoundError(f"No such file or directory: {location.qualify(parent)}")
        if not overwrite and fs.exists(location.path):
            raise FileExistsError(location.qualify(location.path))
        temp = f"{parent}/{temp_file_name(location.name, uuid.uuid4().hex)}"
        fs.pipe_file(temp, data)
        renamed = False
        try:
            if overwrite:
                fs.mv(temp, location.path)
            else:
                self._rename_no_overwrite(location, temp)
            renamed = True
        finally:
            if not renamed:
                _remove_quietly(fs, temp)

    def _rename_no_overwrite(self, location: Location, temp: str) -> None:
        """Move ``temp`` to ``location`` unless ``location`` exists (then FileExistsError)."""
        fs = location.fs
        with path_lock(location.qualify(location.path)):
            if fs.exists(location.path):
                raise FileExistsError(location.qualify(location.path))
            fs.mv(temp, location.path)

    def create_directories(self, path: str) -> None:
        location = self.locate(path)
        location.fs.makedirs(location.path, exist_ok=True)

    def delete(self, path: str) -> None:
        location = self.locate(path)
        _remove_quietly(location.fs, location.path)

    def delete_stale_temp_files(
        self, log_path: str, older_than_s: float = DEFAULT_TEMP_FILE_AGE_S
    ) -> list[str]:
        """Removes ``.<name>.<unique>.tmp`` files (of rename- and link-based writes) older than the bound."""
        removed = []
        for status in self._stale_entries(f"{log_path.rstrip('/')}/", older_than_s):
            if is_temp_file_name(status.name):
                self.delete(status.path)
                removed.append(status.path)
        return removed

    def _stale_entries(self, directory: str, older_than_s: float) -> list[FileStatus]:
        """Files of ``directory`` (ending in ``/``) whose names start with ``.`` or later, not touched
        for ``older_than_s`` seconds; none if the directory does not exist."""
        cutoff_ms = (time.time() - older_than_s) * 1000
        try:
            statuses = list(self.list_from(f"{directory}."))
        except FileNotFoundError:
            return []
        return [s for s in statuses if not s.is_dir and s.modification_time <= cutoff_ms]

    # -- properties ----------------------------------------------------------------------
    def is_partial_write_visible(self, path: str) -> bool:
        return self.partial_write_visible

    def resolve_path_on_physical_storage(self, path: str) -> str:
        location = self.locate(path)
        return location.qualify(location.path)

    def invalidate_cache(self) -> None:
        for fs in list(self._filesystems.values()):
            fs.invalidate_cache()

    def __repr__(self) -> str:
        options = {scheme or "file": redact(self.filesystem_options(scheme)) for scheme in self._filesystems}
        return f"{type(self).__name__}({options})" if options else f"{type(self).__name__}()"


def _name(info: Mapping[str, Any]) -> str:
    return str(info["name"]).rstrip("/").rsplit("/", 1)[-1]


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # best effort: a stray temp file is harmless
        logger.warning("could not remove %s: %s", path, exc)


def write_local_temp(location: Location, data: bytes) -> str:
    """Write ``data`` to a new hidden temp file beside ``location`` and sync it to disk; its path.

    The file is created as a plain ``open()`` would create it (mode 0666 less the umask and any
    default ACL), not 0600 like :func:`tempfile.mkstemp`. Raises :class:`FileNotFoundError`
    naming the parent if it does not exist.
    """
    parent = location.parent
    temp = os.path.join(parent, temp_file_name(location.name, uuid.uuid4().hex))
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file or directory: {location.qualify(parent)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return temp


def fsync_directory(path: str) -> None:
    """Make a directory's entries (a new or renamed file) durable; a no-op where that is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories; the data itself is synced
        pass
    finally:
        os.close(fd)


def publish_local_file(location: Location, data: bytes, overwrite: bool) -> None:
    """Write ``data`` as the local file ``location`` durably and atomically.

    The bytes go to a synced temp file, which is linked into place (put-if-absent: fails with
    :class:`FileExistsError` if the name exists) or renamed over the target (``overwrite``); then
    the directory is synced, so a write that returned survives a power loss.
    """
    temp = write_local_temp(location, data)
    display = location.qualify(location.path)
    if not overwrite:
        link_into_place(temp, location.path, display)
    else:
        try:
            os.replace(temp, location.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
    fsync_directory(location.parent)


def link_into_place(temp: str, target: str, display: str) -> None:
    """Atomically publish the local file ``temp`` as ``target``, failing if ``target`` exists.

    ``os.link`` is atomic and never replaces an existing name, which gives put-if-absent with
    whole-file visibility. The temp file is removed in every case.
    """
    try:
        os.link(temp, target)
    except FileExistsError:
        raise FileExistsError(display) from None
    except OSError as exc:
        raise LogStoreError(f"cannot create {display} with a hard link: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
