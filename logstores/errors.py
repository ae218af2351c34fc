"""Exceptions raised by log stores and their configuration."""

from __future__ import annotations


class LogStoreConfError(ValueError):
    """A log store configuration problem.

    The message always names the offending configuration key(s) and value(s), or the
    class name that could not be loaded.
    """


class LogStoreError(OSError):
    """A storage operation failed for a reason other than a missing or existing file."""


class ConditionalWriteUnsupportedError(LogStoreError):
    """The storage service ignored or rejected a put-if-absent request it should honour."""


class EndpointUnreachableError(LogStoreError):
    """No connection could be made to a storage endpoint (refused, unresolvable, connect timeout).

    The message names the endpoint (``host:port``), the path being accessed when known and the
    settings that chose the endpoint.
    """


class RequestTimeoutError(LogStoreError):
    """A storage request got no answer in time in any of its bounded attempts.

    The message names the endpoint (``host:port``), the path and the timeout; see
    ``delta.logstores.requestTimeoutMs`` in ``docs/storage.md``.
    """


class BucketNotFoundError(LogStoreError, FileNotFoundError):
    """The bucket or container of a path does not exist.

    A :class:`FileNotFoundError`, so code that treats a missing file as absent still works, but
    distinct from a missing file or directory: callers that turn a missing log directory into
    "no table here" let this one through, so users see the bucket named.
    """

    def __init__(self, message: str, bucket: str = "") -> None:
        super().__init__(message)
        self.bucket = bucket

    @classmethod
    def of(cls, kind: str, bucket: str, path: str) -> BucketNotFoundError:
        """``S3 bucket 'b' does not exist (s3://b/t/_delta_log/...)``."""
        return cls(f"{kind} '{bucket}' does not exist ({path})", bucket)


class AccessDeniedError(LogStoreError, PermissionError):
    """The storage service refused the credentials (or found none) for a path, bucket or table.

    A :class:`PermissionError`, as the SDKs' own denials are. The message names what was accessed,
    the endpoint when known and the settings that hold the credentials, never their values.
    """


class BinaryAccessUnsupportedError(LogStoreError):
    """A store that implements only the text methods of ``LogStore`` met a binary file.

    Raised before anything is written: such a store never holds altered bytes.
    """

    def __init__(self, store_name: str, operation: str, path: str) -> None:
        super().__init__(
            f"{store_name} cannot {operation} {path} exactly: it implements only the text methods of "
            f"LogStore (read and write of lines). Override read_bytes, open_input and write_bytes in "
            f"{store_name}, or extend logstores.FileSystemLogStore, to store binary files such as "
            "Parquet checkpoints"
        )
        self.path = path
