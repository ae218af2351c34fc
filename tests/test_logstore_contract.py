"""The LogStore contract (Delta's LogStoreSuite), run against every store through the public
:class:`logstores.testing.LogStoreContract`: the same suite a custom store's author runs."""

from __future__ import annotations

from typing import ClassVar

import pytest

from logstores import LogStore
from logstores.testing import LogStoreContract
from tests.store_cases import StoreUnderTest


class StoreCase(LogStoreContract):
    """The contract for the store of the fixture :attr:`store_fixture` (of ``tests.store_cases`` or
    ``tests.cloud_servers``)."""

    store_fixture: ClassVar[str]

    @pytest.fixture
    def case(self, request: pytest.FixtureRequest) -> StoreUnderTest:
        return request.getfixturevalue(self.store_fixture)

    @pytest.fixture
    def log_store(self, case: StoreUnderTest) -> LogStore:
        return case.store

    @pytest.fixture
    def log_root(self, case: StoreUnderTest) -> str:
        return case.root


class TestLocalLogStore(StoreCase):
    store_fixture = "local_store"
    writes_need_parent_directory = True


class TestMemoryLogStore(StoreCase):
    store_fixture = "memory_store"
    writes_need_parent_directory = False
    exclusive_across_processes = False  # its files live in one process


class TestHDFSLogStore(StoreCase):
    store_fixture = "hdfs_store"
    writes_need_parent_directory = True


class TestS3LogStore(StoreCase):
    store_fixture = "s3_store"
    writes_need_parent_directory = False


class TestS3SingleDriverLogStore(StoreCase):
    store_fixture = "s3_single_driver_store"
    writes_need_parent_directory = False
    exclusive_across_processes = False  # as in Delta: one writing process per table


class TestS3DynamoDBLogStore(StoreCase):
    store_fixture = "s3_dynamodb_store"
    writes_need_parent_directory = False


class TestGCSLogStore(StoreCase):
    store_fixture = "gcs_store"
    writes_need_parent_directory = False


class TestAzureLogStore(StoreCase):
    store_fixture = "azure_store"
    writes_need_parent_directory = False
