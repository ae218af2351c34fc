"""The stores every contract test runs against, as fixtures returning a fresh store and root.

Each fixture named in :data:`STORE_FIXTURES` returns a :class:`StoreUnderTest`: a store built
the way users build it and the URI of an empty directory the test may use.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from logstores import HDFSLogStore, LocalLogStore, LogStore, MemoryLogStore


@dataclass(frozen=True)
class StoreUnderTest:
    """A store and the root URI of an empty directory it may write under."""

    store: LogStore
    root: str
    has_directories: bool = False
    """True where writes need an existing parent directory (local disk, HDFS)."""

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def log_dir(self) -> str:
        """``<root>/_delta_log``, created."""
        log_dir = self.path("_delta_log")
        self.store.create_directories(log_dir)
        return log_dir


STORE_FIXTURES = ["local_store", "memory_store", "hdfs_store"]
"""Fixture names of every store under the contract suite; cloud stores are appended."""


@pytest.fixture
def local_store(tmp_path: Path) -> StoreUnderTest:
    return StoreUnderTest(LocalLogStore(), str(tmp_path), has_directories=True)


@pytest.fixture
def memory_store() -> StoreUnderTest:
    return StoreUnderTest(MemoryLogStore(), f"memory://contract-{uuid.uuid4().hex}")


@pytest.fixture
def hdfs_store(tmp_path: Path) -> StoreUnderTest:
    """The rename-based store over the local filesystem, addressed with ``file://`` URIs."""
    return StoreUnderTest(HDFSLogStore(), f"file://{tmp_path}", has_directories=True)


STORE_FIXTURES += ["s3_store", "s3_single_driver_store", "s3_dynamodb_store", "gcs_store", "azure_store"]
