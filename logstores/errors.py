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
