"""Typed errors of log replay, time travel, commits and the change data feed.

Every error derives from :class:`DeltaError`; its message names the table and the versions
involved, and the same facts are available as attributes for programmatic use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Self


class DeltaError(Exception):
    """Base of every replay error. ``table`` is the table (or log) URI the error is about."""

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


class TableNotFoundError(DeltaError):
    """No Delta table at the path: the ``_delta_log`` directory is missing or holds no commits."""

    @classmethod
    def no_commits(cls, table: str, log_path: str) -> TableNotFoundError:
        """The error for a table whose log ``log_path`` is missing or has no commit file."""
        return cls(
            f"[DELTA_MISSING_DELTA_TABLE] {table} is not a Delta table: no commit files in {log_path}",
            table=table,
        )


class TableAlreadyExistsError(DeltaError):
    """A write that must create a table (mode ``error``) found one at the path (``DELTA_PATH_EXISTS``)."""

    @classmethod
    def at(cls, table: str) -> TableAlreadyExistsError:
        return cls(
            f"[DELTA_PATH_EXISTS] Cannot write to already existent path {table} without setting "
            "OVERWRITE = 'true'.",
            table=table,
        )


class VersionNotFoundError(DeltaError):
    """The requested version is before the earliest recoverable version or after the latest one."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        earliest: int | None = None,
        latest: int | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.version = version
        self.earliest = earliest
        self.latest = latest


class MissingVersionsError(DeltaError):
    """The log has a gap: commits between a checkpoint (or version 0) and the target are missing.

    ``versions`` are the versions found, ``missing`` the versions needed but absent (may be empty
    when the problem is a duplicate or a wrong start).
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        versions: Sequence[int] = (),
        missing: Sequence[int] = (),
    ) -> None:
        super().__init__(message, table=table)
        self.versions = list(versions)
        self.missing = list(missing)


class CorruptLogError(DeltaError):
    """A log file cannot be parsed. ``path`` is the file, ``line`` the 1-based line (if known)."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        path: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.path = path
        self.line = line


class MissingProtocolOrMetadataError(DeltaError):
    """Replay finished without a protocol or without a metadata action (``missing`` says which)."""

    def __init__(
        self, message: str, *, table: str | None = None, version: int | None = None, missing: str = ""
    ) -> None:
        super().__init__(message, table=table)
        self.version = version
        self.missing = missing


class InvalidTableSchemaError(DeltaError, ValueError):
    """A table's ``metaData`` has no ``schemaString``, or one that is not a Delta schema."""


class UnsupportedTableFeatureError(DeltaError):
    """The table needs a reader version or reader features this library does not implement."""

    def __init__(self, message: str, *, table: str | None = None, features: Sequence[str] = ()) -> None:
        super().__init__(message, table=table)
        self.features = list(features)


class AppendOnlyTableError(DeltaError):
    """A commit would remove data from a table with ``delta.appendOnly`` set."""


class ConcurrentModificationError(DeltaError):
    """A commit lost the race to a logically conflicting commit at ``winning_version``.

    The subclasses are Delta's conflict exceptions (same names and messages): which rule of
    Delta's conflict checker the winning commit broke. ``winning_operation`` is the winner's
    ``commitInfo.operation`` when it has one.
    """

    error_class = "DELTA_CONCURRENT_WRITE"
    delta_name = "ConcurrentWriteException"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        winning_version: int | None = None,
        winning_operation: str | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.winning_version = winning_version
        self.winning_operation = winning_operation

    @classmethod
    def conflict(
        cls,
        description: str,
        *,
        table: str,
        winning_version: int,
        winning_commit: Mapping[str, object] | None = None,
    ) -> Self:
        """Delta's message: the error class and Java name, what the winner did (naming its
        version, operation and the table on the first line), then the winning ``commitInfo``."""
        operation = winning_commit.get("operation") if winning_commit else None
        shown = f"version {winning_version} of table {table}" + (
            f", operation {operation}" if operation else ""
        )
        first = description.replace("{winner}", f"a concurrent update ({shown})")
        lines = [f"[{cls.error_class}] {cls.delta_name}: {first} Please try the operation again."]
        if winning_commit is not None:
            info = {**winning_commit, "version": winning_version}
            lines.append(f"Conflicting commit: {json.dumps(info, separators=(',', ':'), default=str)}")
        lines.append(f"Refer to {CONCURRENCY_CONTROL_DOCS} for more details.")
        return cls(
            "\n".join(lines),
            table=table,
            winning_version=winning_version,
            winning_operation=str(operation) if operation is not None else None,
        )


CONCURRENCY_CONTROL_DOCS = "https://docs.delta.io/latest/concurrency-control.html"


class ConcurrentAppendException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """Files were added that this transaction's reads could have matched."""

    error_class = "DELTA_CONCURRENT_APPEND"
    delta_name = "ConcurrentAppendException"


class ConcurrentDeleteReadException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """A file this transaction read was removed by the winner."""

    error_class = "DELTA_CONCURRENT_DELETE_READ"
    delta_name = "ConcurrentDeleteReadException"


class ConcurrentDeleteDeleteException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """A file this transaction removes was removed by the winner too."""

    error_class = "DELTA_CONCURRENT_DELETE_DELETE"
    delta_name = "ConcurrentDeleteDeleteException"


class MetadataChangedException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """The winner changed the table's metadata (schema, partitioning, properties)."""

    error_class = "DELTA_METADATA_CHANGED"
    delta_name = "MetadataChangedException"


class ProtocolChangedException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """The winner changed the protocol while this transaction changes it too (or created the table)."""

    error_class = "DELTA_PROTOCOL_CHANGED"
    delta_name = "ProtocolChangedException"


class ConcurrentTransactionException(ConcurrentModificationError):  # noqa: N818 - Delta's name
    """The winner committed for an application id (or a metadata domain) this transaction depends on."""

    error_class = "DELTA_CONCURRENT_TRANSACTION"
    delta_name = "ConcurrentTransactionException"


class TimestampOutOfRangeError(DeltaError):
    """No commit is active at the timestamp (before the earliest or after the latest commit)."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        timestamp: int | None = None,
        earliest: int | None = None,
        latest: int | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.timestamp = timestamp
        self.earliest = earliest
        self.latest = latest


class ChangeDataFeedNotEnabledError(DeltaError):
    """The change data feed was requested for versions where ``delta.enableChangeDataFeed`` is off."""


class DataLossError(DeltaError):
    """Commits needed by a change or streaming read were deleted (log retention)."""


class IncompatibleSchemaChangeError(DeltaError):
    """A change feed or stream read crosses a schema change its read schema cannot read.

    ``version`` is the version whose schema (or schema change) is incompatible, ``read_version``
    the version whose schema the read uses (``None`` when not known), so that a caller can read
    the versions before and after the change separately.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        read_version: int | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.version = version
        self.read_version = read_version
