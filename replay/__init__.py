"""Delta log replay, snapshots, time travel, commits, checkpoints and the change data feed.

Everything here reaches storage only through the :class:`logstores.LogStore` that
:func:`logstores.create_log_store` returns for the table's configuration. The layers, bottom up:
``protocol`` (pure), ``log``, ``data``, ``state``, then ``txn`` and ``cdc``, the ``DeltaLog``
facade, and ``spark`` and ``cli`` on top (see docs/architecture.md).
"""

# First of all, the process-wide pyarrow settings (see each module): Arrow's buffers come from
# jemalloc (chosen before pyarrow is imported), and pyarrow must not import pandas for the library.
import replay.protocol.memory_pool  # isort: skip
import replay.protocol.lazy_pandas  # noqa: F401
from logstores import __version__
from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.deltalake_writes import write_deltalake
from replay.log.log_replay import InMemoryLogReplay
from replay.log.table_io import TableIO
from replay.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    Sidecar,
    parse_action,
    parse_actions,
)
from replay.protocol.errors import (
    AppendOnlyTableError,
    ChangeDataFeedNotEnabledError,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationError,
    ConcurrentTransactionException,
    CorruptLogError,
    DataLossError,
    DeltaError,
    IncompatibleSchemaChangeError,
    InvalidTableSchemaError,
    MetadataChangedException,
    MissingProtocolOrMetadataError,
    MissingVersionsError,
    ProtocolChangedException,
    TableAlreadyExistsError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedTableFeatureError,
    VersionNotFoundError,
)
from replay.protocol.iceberg_compat import IcebergCompatError
from replay.protocol.identity_columns import IdentityColumnError
from replay.protocol.isolation import IsolationLevel
from replay.protocol.table_config import TableConfiguration
from replay.state.snapshot import Snapshot
from replay.table import DeltaTable
from replay.txn.checkpoint_writer import CheckpointResult
from replay.txn.commit_properties import CommitProperties, commit_properties
from replay.txn.committer import Committer, FileSystemCommitter
from replay.txn.constraint_checks import InvariantViolationError
from replay.txn.transaction import CommitOutcome, Transaction
from replay.txn.write import delete_files, write_table

__all__ = [
    "Action",
    "AddCDCFile",
    "AddFile",
    "AppendOnlyTableError",
    "ChangeDataFeedNotEnabledError",
    "CheckpointMetadata",
    "CheckpointResult",
    "CommitInfo",
    "CommitOutcome",
    "CommitProperties",
    "Committer",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentModificationError",
    "ConcurrentTransactionException",
    "CorruptLogError",
    "DataLossError",
    "DeletionVectorDescriptor",
    "DeltaError",
    "DeltaLog",
    "DeltaTable",
    "DomainMetadata",
    "FileSystemCommitter",
    "Format",
    "IcebergCompatError",
    "IdentityColumnError",
    "InMemoryLogReplay",
    "IncompatibleSchemaChangeError",
    "InvalidTableSchemaError",
    "InvariantViolationError",
    "IsolationLevel",
    "Metadata",
    "MetadataChangedException",
    "MissingProtocolOrMetadataError",
    "MissingVersionsError",
    "Protocol",
    "ProtocolChangedException",
    "RemoveFile",
    "SetTransaction",
    "Sidecar",
    "Snapshot",
    "TableAlreadyExistsError",
    "TableConfiguration",
    "TableIO",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "Transaction",
    "UnsupportedTableFeatureError",
    "VersionNotFoundError",
    "__version__",
    "commit_properties",
    "delete_files",
    "parse_action",
    "parse_actions",
    "table_changes",
    "write_deltalake",
    "write_table",
]
