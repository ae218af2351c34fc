"""Delta Lake's LogStore contract and stores for local, memory, HDFS-like and cloud storage."""

from logstores._version import __version__
from logstores.base import FileStatus, LineIterator, LogStore
from logstores.delegating import DelegatingLogStore, StoreChoice, log_store_scheme_conf_key
from logstores.errors import (
    AccessDeniedError,
    BinaryAccessUnsupportedError,
    BucketNotFoundError,
    ConditionalWriteUnsupportedError,
    EndpointUnreachableError,
    LogStoreConfError,
    LogStoreError,
    RequestTimeoutError,
)
from logstores.filesystem import FileSystemLogStore, local_path, open_filesystem
from logstores.hdfs import HDFSLogStore
from logstores.local import LocalLogStore
from logstores.memory import MemoryLogStore
from logstores.provider import (
    LOG_STORE_CLASS_KEY,
    check_log_store_conf,
    create_log_store,
    explain_log_store,
)
from logstores.registry import KNOWN_LOG_STORES, load_log_store_class

__all__ = [
    "KNOWN_LOG_STORES",
    "LOG_STORE_CLASS_KEY",
    "AccessDeniedError",
    "AzureLogStore",
    "BinaryAccessUnsupportedError",
    "BucketNotFoundError",
    "ConditionalWriteUnsupportedError",
    "DelegatingLogStore",
    "EndpointUnreachableError",
    "FileStatus",
    "FileSystemLogStore",
    "GCSLogStore",
    "HDFSLogStore",
    "LineIterator",
    "LocalLogStore",
    "LogStore",
    "LogStoreConfError",
    "LogStoreError",
    "MemoryLogStore",
    "RequestTimeoutError",
    "S3DynamoDBLogStore",
    "S3LogStore",
    "S3SingleDriverLogStore",
    "StoreChoice",
    "__version__",
    "check_log_store_conf",
    "create_log_store",
    "explain_log_store",
    "load_log_store_class",
    "local_path",
    "log_store_scheme_conf_key",
    "open_filesystem",
]

_CLOUD_STORES = {
    "S3LogStore": "logstores.s3",
    "S3SingleDriverLogStore": "logstores.s3",
    "S3DynamoDBLogStore": "logstores.s3_dynamodb",
    "GCSLogStore": "logstores.gcs",
    "AzureLogStore": "logstores.azure",
}


def __getattr__(name: str) -> type[LogStore]:
    """Cloud stores are imported on first access, so their SDKs stay optional."""
    module = _CLOUD_STORES.get(name)
    if module is None:
        raise AttributeError(f"module 'logstores' has no attribute {name!r}")
    return load_log_store_class(f"{module}:{name}")
