"""Delta log replay, snapshots, time travel, commits, checkpoints and the change data feed.

Everything here reaches storage only through the :class:`logstores.LogStore` that
:func:`logstores.create_log_store` returns for the table's configuration.
"""

from replay.actions import (
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
from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.errors import (
    ChangeDataFeedNotEnabledError,
    ConcurrentModificationError,
    CorruptLogError,
    DataLossError,
    DeltaError,
    MissingProtocolOrMetadataError,
    MissingVersionsError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedTableFeatureError,
    VersionNotFoundError,
)
from replay.log_replay import InMemoryLogReplay
from replay.snapshot import Snapshot
from replay.write import delete_files, write_table

__all__ = [
    "Action",
    "AddCDCFile",
    "AddFile",
    "ChangeDataFeedNotEnabledError",
    "CheckpointMetadata",
    "CommitInfo",
    "ConcurrentModificationError",
    "CorruptLogError",
    "DataLossError",
    "DeletionVectorDescriptor",
    "DeltaError",
    "DeltaLog",
    "DomainMetadata",
    "Format",
    "InMemoryLogReplay",
    "Metadata",
    "MissingProtocolOrMetadataError",
    "MissingVersionsError",
    "Protocol",
    "RemoveFile",
    "SetTransaction",
    "Sidecar",
    "Snapshot",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "UnsupportedTableFeatureError",
    "VersionNotFoundError",
    "delete_files",
    "parse_action",
    "parse_actions",
    "table_changes",
    "write_table",
]
