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
