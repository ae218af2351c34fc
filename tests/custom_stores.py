"""User-written stores used by the provider tests (importable by dotted path)."""

from __future__ import annotations

from logstores import MemoryLogStore


class CustomLogStore(MemoryLogStore):
    """A third-party store: anything constructible from one conf mapping."""


class NotAStore:
    """A class that is not a LogStore."""

    def __init__(self, conf: object = None) -> None:
        self.conf = conf
