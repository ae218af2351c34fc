"""Committers: how a transaction's commit file is published, and the ``commitInfo`` it starts with.

A :class:`Committer` writes the lines of version ``N`` so that of several writers of ``N`` exactly
one succeeds and the others get :class:`FileExistsError` (the LogStore's put-if-absent, Delta's
``logStore.write(N.json, actions, overwrite=false)``). :class:`FileSystemCommitter` does exactly
that and is the default; another committer (a catalog, a commit coordinator) plugs in through
:class:`~replay.txn.transaction.Transaction`'s ``committer``. The transaction owns the rest:
conflict checks between attempts, retries, post-commit work.

Also here: the ``commitInfo`` of a commit (:func:`commit_info`, with Delta's field order) and the
monotonic in-commit timestamps of tables that enable them (:class:`InCommitTimestamps`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from logstores import __version__
from replay.log.commit_files import read_commit
from replay.log.table_io import TableIO
from replay.protocol.actions import Action, CommitInfo
from replay.protocol.errors import VersionNotFoundError
from replay.protocol.filenames import delta_file
from replay.protocol.isolation import IsolationLevel

DEFAULT_MAX_ATTEMPTS = 10_000
"""How many versions a commit tries before giving up (Delta's ``maxCommitAttempts`` is larger)."""


class Committer(Protocol):
    """Publishes commit files. Of concurrent ``commit`` calls for one version exactly one may succeed."""

    def commit(self, io: TableIO, version: int, lines: Sequence[str]) -> None:
        """Make ``lines`` version ``version`` of the table, atomically.

        Raises :class:`FileExistsError` if the version exists (another writer won it); any other
        error leaves it unknown whether the version was written.
        """
        ...


class FileSystemCommitter:
    """Commits by creating ``_delta_log/<version>.json`` with the table's LogStore (put-if-absent)."""

    def commit(self, io: TableIO, version: int, lines: Sequence[str]) -> None:
        io.store.write(delta_file(io.log_path, version), lines, overwrite=False)

    def __repr__(self) -> str:
        return "FileSystemCommitter()"


def engine_info() -> str:
    """``engineInfo`` of every commit this library writes, e.g. ``delta-logstores/0.1.0``."""
    return f"delta-logstores/{__version__}"


def encode_operation_parameters(parameters: Mapping[str, Any] | None) -> dict[str, str | None]:
    """Delta's ``operationParameters`` form: strings and nulls as they are, other values as JSON."""
    encoded: dict[str, str | None] = {}
    for key, value in (parameters or {}).items():
        if value is None or isinstance(value, str):
            encoded[str(key)] = value
        else:
            encoded[str(key)] = orjson.dumps(value).decode()
    return encoded


COMMIT_INFO_FIELDS = frozenset(
    {
        "inCommitTimestamp",
        "timestamp",
        "operation",
        "operationParameters",
        "readVersion",
        "isolationLevel",
        "isBlindAppend",
        "operationMetrics",
        "userMetadata",
        "engineInfo",
        "txnId",
    }
)
"""The ``commitInfo`` fields :func:`commit_info` writes (custom metadata may add others)."""


@dataclass(frozen=True)
class OperationInfo:
    """What a commit says about itself in ``commitInfo`` besides its timestamps."""

    operation: str = "WRITE"
    parameters: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    user_metadata: str | None = None
    custom: Mapping[str, Any] = field(default_factory=dict)
    """Extra ``commitInfo`` fields (deltalake's ``custom_metadata``), none of Delta's own."""


def commit_info(
    info: OperationInfo,
    *,
    now: int,
    in_commit_timestamp: int | None,
    read_version: int,
    isolation_level: IsolationLevel,
    blind_append: bool,
    txn_id: str,
) -> CommitInfo:
    """The ``commitInfo`` of a commit, its fields in Delta's order."""
    values: dict[str, Any] = {}
    if in_commit_timestamp is not None:
        values["inCommitTimestamp"] = in_commit_timestamp
    values["timestamp"] = now
    values["operation"] = info.operation
    values["operationParameters"] = encode_operation_parameters(info.parameters)
    if read_version >= 0:
        values["readVersion"] = read_version
    values["isolationLevel"] = isolation_level.value
    values["isBlindAppend"] = blind_append
    if info.metrics:
        values["operationMetrics"] = {str(key): str(value) for key, value in info.metrics.items()}
    if info.user_metadata is not None:
        values["userMetadata"] = info.user_metadata
    values["engineInfo"] = engine_info()
    values["txnId"] = txn_id
    values.update(info.custom)
    return CommitInfo(values)


def now_ms() -> int:
    return int(time.time() * 1000)


def commit_info_of(actions: Iterable[Action]) -> CommitInfo | None:
    return next((action for action in actions if isinstance(action, CommitInfo)), None)


class InCommitTimestamps:
    """Whether commits carry ``inCommitTimestamp``, and monotonic values for them.

    ``enabled`` is the table's setting after the commit; ``None`` (a blind commit whose base is
    unknown) decides from the previous commit, which carries one exactly when they are enabled.
    A commit's timestamp is at least one millisecond after the previous commit's.
    """

    def __init__(self, io: TableIO, enabled: bool | None) -> None:
        self._io = io
        self._enabled = enabled
        self._known: dict[int, CommitInfo | None] = {}

    def remember(self, version: int, actions: Iterable[Action]) -> None:
        """Note the ``commitInfo`` of ``version`` (a winning commit already read)."""
        self._known[version] = commit_info_of(actions)

    def value(self, version: int, now: int) -> int | None:
        """The in-commit timestamp for ``version`` (``None`` if the table does not use them)."""
        previous = self._previous(version) if version > 0 and self._enabled is not False else None
        if self._enabled is None:
            self._enabled = previous is not None and previous.in_commit_timestamp is not None
        if not self._enabled:
            return None
        if previous is None or previous.in_commit_timestamp is None:
            return now
        return max(now, previous.in_commit_timestamp + 1)

    def _previous(self, version: int) -> CommitInfo | None:
        if version - 1 not in self._known:
            try:
                self.remember(version - 1, read_commit(self._io, version - 1))
            except VersionNotFoundError:
                self._known[version - 1] = None
        return self._known[version - 1]
