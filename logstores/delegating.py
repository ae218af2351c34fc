"""A store that routes every call to a per-scheme store, as Delta's ``DelegatingLogStore``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO

from logstores.base import DEFAULT_TEMP_FILE_AGE_S, FileStatus, LineIterator, LogStore
from logstores.conf import get_delta_conf
from logstores.filesystem import uri_scheme
from logstores.registry import DEFAULT_SCHEME_STORE, SCHEME_DEFAULTS, load_log_store_class

logger = logging.getLogger(__name__)


def log_store_scheme_conf_key(scheme: str) -> str:
    """The conf key choosing the store for a scheme: ``spark.delta.logStore.<scheme>.impl``."""
    return f"spark.delta.logStore.{scheme}.impl"


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """Which store class serves a path, and what chose it (a conf entry or a default)."""

    store_class: type[LogStore]
    reason: str

    @property
    def class_name(self) -> str:
        return f"{self.store_class.__module__}.{self.store_class.__qualname__}"


def store_scheme(path: str) -> str:
    """The scheme that chooses ``path``'s store: its URI scheme, ``file`` for a bare local path.

    Delta qualifies every path before choosing a store, so a path without a scheme is a ``file``
    path there and here: ``spark.delta.logStore.file.impl`` serves it.
    """
    return uri_scheme(path) or "file"


def choose_store_for_scheme(scheme: str, conf: Mapping[str, str]) -> StoreChoice:
    """Delta's resolution order for one scheme: the scheme key, the built-in default, HDFS.

    The empty scheme (a bare local path) is ``file``.
    """
    scheme = scheme.lower() or "file"
    key = log_store_scheme_conf_key(scheme)
    configured = get_delta_conf(conf, key)
    if configured is not None:
        spelled = key if key in conf else key.removeprefix("spark.")
        return StoreChoice(load_log_store_class(configured, key=spelled), f"{spelled} = {configured}")
    alias = SCHEME_DEFAULTS.get(scheme)
    if alias is not None:
        return StoreChoice(load_log_store_class(alias), f"default for scheme '{scheme}'")
    return StoreChoice(load_log_store_class(DEFAULT_SCHEME_STORE), f"default for other schemes ('{scheme}')")


class DelegatingLogStore(LogStore):
    """Routes each call by the path's lower-cased URI scheme.

    The store for a scheme comes from ``spark.delta.logStore.<scheme>.impl`` (or the key
    without ``spark.``; bare local paths use the ``file`` key), else from the built-in
    defaults (:data:`logstores.registry.SCHEME_DEFAULTS`),
    else :class:`~logstores.hdfs.HDFSLogStore`. One store instance per scheme, created on first
    use and cached; every instance gets this store's whole configuration.
    """

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self._delegates: dict[str, LogStore] = {}
        self._lock = threading.Lock()

    def choice_for(self, path: str) -> StoreChoice:
        """Which class serves ``path`` and why, without creating the store."""
        return choose_store_for_scheme(store_scheme(path), self.conf)

    def get_delegate(self, path: str) -> LogStore:
        """The store serving ``path``'s scheme (bare local paths are ``file`` paths)."""
        scheme = store_scheme(path)
        with self._lock:
            store = self._delegates.get(scheme)
            if store is None:
                choice = choose_store_for_scheme(scheme, self.conf)
                store = self._delegates[scheme] = choice.store_class(self.conf)
                logger.info(
                    "LogStore %s is used for scheme %r (%s)", choice.class_name, scheme, choice.reason
                )
            return store

    def read(self, path: str) -> list[str]:
        return self.get_delegate(path).read(path)

    def read_as_iterator(self, path: str) -> LineIterator:
        return self.get_delegate(path).read_as_iterator(path)

    def read_bytes(self, path: str) -> bytes:
        return self.get_delegate(path).read_bytes(path)

    def open_input(self, path: str) -> IO[bytes]:
        return self.get_delegate(path).open_input(path)

    def open_file(self, status: FileStatus) -> IO[bytes]:
        return self.get_delegate(status.path).open_file(status)

    def write(self, path: str, actions: Iterable[str], overwrite: bool = False) -> None:
        self.get_delegate(path).write(path, actions, overwrite=overwrite)

    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        self.get_delegate(path).write_bytes(path, data, overwrite=overwrite)

    def create_directories(self, path: str) -> None:
        self.get_delegate(path).create_directories(path)

    def delete(self, path: str) -> None:
        self.get_delegate(path).delete(path)

    def delete_stale_temp_files(
        self, log_path: str, older_than_s: float = DEFAULT_TEMP_FILE_AGE_S
    ) -> list[str]:
        return self.get_delegate(log_path).delete_stale_temp_files(log_path, older_than_s)

    def list_from(self, path: str) -> Iterator[FileStatus]:
        return self.get_delegate(path).list_from(path)

    def is_partial_write_visible(self, path: str) -> bool:
        return self.get_delegate(path).is_partial_write_visible(path)

    def resolve_path_on_physical_storage(self, path: str) -> str:
        return self.get_delegate(path).resolve_path_on_physical_storage(path)

    def invalidate_cache(self) -> None:
        with self._lock:
            delegates = list(self._delegates.values())
        for store in delegates:
            store.invalidate_cache()

    def __repr__(self) -> str:
        with self._lock:
            routes = ", ".join(f"{scheme}: {store!r}" for scheme, store in self._delegates.items())
        return f"DelegatingLogStore({{{routes}}})"
