"""``TableIO``: everything below the ``DeltaLog`` facade needs to reach one table's storage.

A small immutable value (like pyiceberg's ``FileIO`` together with a table location): the
LogStore the configuration resolves, the table and log URIs, the configuration itself (storage
settings for data files too) and how many reads may overlap. It is handed to every function
that does I/O; nothing below the facade creates stores or reads configuration on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field

from logstores import LogStore, LogStoreConfError, create_log_store
from logstores.conf import ConfLike, to_conf_dict
from logstores.delta_rs_options import with_storage_options
from logstores.filesystem import uri_scheme
from logstores.redaction import redact_url, refuse_userinfo_secret
from replay.log.concurrency import Work, default_threads, executor

READ_THREADS_KEY = "delta.logstores.replay.readThreads"
"""Conf key: how many log files are read at once (default: by storage, see :mod:`concurrency`)."""
LOCAL_SCHEMES = frozenset({"", "file", "memory"})


def normalize_table_uri(table_uri: str) -> str:
    """The table root as a URI without trailing slash: local paths become ``file:///abs/path``."""
    scheme = uri_scheme(table_uri)
    if scheme == "":
        return "file://" + os.path.abspath(os.path.expanduser(table_uri))
    if scheme == "file":
        rest = table_uri[5:]
        if rest.startswith("//"):
            rest = rest[2:]
            rest = rest[rest.find("/") :] if not rest.startswith("/") else rest
        return "file://" + os.path.normpath(rest)
    return table_uri.rstrip("/")


def _positive_int(key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise LogStoreConfError(f"{key} must be a positive integer, got {value!r}")
    return number


@dataclass(frozen=True)
class TableIO:
    """How to reach one table: its store, URIs, configuration and read concurrency."""

    store: LogStore
    table_path: str
    conf: Mapping[str, str] = field(default_factory=dict)
    read_threads: int = 1

    @classmethod
    def for_table(
        cls, table_uri: str, conf: ConfLike | None = None, store: LogStore | None = None
    ) -> TableIO:
        """The IO of ``table_uri``: ``store``, or the store ``create_log_store(conf)`` resolves.

        ``conf`` may hold delta-rs's storage options among its settings (``AWS_ENDPOINT_URL``, ...:
        :func:`logstores.delta_rs_options.with_storage_options`).

        Raises :class:`logstores.LogStoreConfError` for an invalid configuration, and for a URI
        carrying credentials in its userinfo (``s3a://KEY:SECRET@bucket/t``), refused before
        anything can show it.
        """
        refuse_userinfo_secret(table_uri)
        settings = to_conf_dict(with_storage_options(table_uri, to_conf_dict(conf), None))
        table_path = normalize_table_uri(table_uri)
        local = uri_scheme(table_path) in LOCAL_SCHEMES
        configured = settings.get(READ_THREADS_KEY)
        threads = (
            _positive_int(READ_THREADS_KEY, configured) if configured else default_threads(Work.LOG, local)
        )
        return cls(
            store=store if store is not None else create_log_store(settings),
            table_path=table_path,
            conf=settings,
            read_threads=threads,
        )

    @property
    def log_path(self) -> str:
        return f"{self.table_path}/_delta_log"

    @property
    def shown_path(self) -> str:
        """The table URI as errors, logs and ``repr`` show it (:func:`logstores.redaction.redact_url`)."""
        return redact_url(self.table_path)

    @property
    def is_local(self) -> bool:
        return uri_scheme(self.table_path) in LOCAL_SCHEMES

    @property
    def window(self) -> int:
        """How many read tasks may run ahead of the one being consumed."""
        return max(2, 2 * self.read_threads)

    def executor(self) -> Executor | None:
        """The shared pool for log reads of this table (``None``: read inline)."""
        return executor(Work.LOG, self.read_threads)

    def __repr__(self) -> str:
        return f"TableIO({self.shown_path!r}, store={type(self.store).__name__})"
