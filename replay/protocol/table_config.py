"""``TableConfiguration``: a table's protocol and metadata, and every rule that follows from them.

The one home of table-level rules: which table properties are in force (parsed once, through
:mod:`replay.protocol.table_properties`), whether this library can read the table, whether it
can write data to it, whether a commit may be made (Delta's writer protocol checks and
``delta.appendOnly``, applied by every commit path), and the retention cut-offs of tombstones
and transactions. A snapshot is a log
segment plus one of these (Delta Kernel's ``TableConfiguration``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from replay.protocol.actions import Metadata, Protocol
from replay.protocol.constraints import TableConstraints, table_constraints
from replay.protocol.errors import AppendOnlyTableError, UnsupportedTableFeatureError
from replay.protocol.iceberg_compat import check_table as check_iceberg_compat
from replay.protocol.identity_columns import identity_columns
from replay.protocol.isolation import IsolationLevel
from replay.protocol.schema_evolution import changed_types
from replay.protocol.table_properties import (
    APPEND_ONLY,
    AUTO_COMPACT,
    CHECKPOINT_INTERVAL,
    COLUMN_MAPPING_MODE,
    DATA_SKIPPING_NUM_INDEXED_COLS,
    DATA_SKIPPING_STATS_COLUMNS,
    DATA_SKIPPING_STRING_PREFIX_LENGTH,
    DELETED_FILE_RETENTION,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_EXPIRED_LOG_CLEANUP,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    ENABLE_TYPE_WIDENING,
    IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION,
    ISOLATION_LEVEL,
    LOG_RETENTION,
    MATERIALIZED_ROW_COMMIT_VERSION_KEY,
    MATERIALIZED_ROW_ID_KEY,
    SET_TRANSACTION_RETENTION,
    TARGET_FILE_SIZE,
)
from replay.protocol.type_widening import unsupported_type_changes

SUPPORTED_READER_VERSION = 3
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
    }
)
"""Reader features whose tables this library reads correctly."""

SUPPORTED_WRITER_VERSION = 7
SUPPORTED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "inCommitTimestamp",
        "timestampNtz",
        "deletionVectors",
        "domainMetadata",
        "vacuumProtocolCheck",
        "columnMapping",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "clustering",
        "rowTracking",
        "identityColumns",
        "icebergCompatV1",
        "icebergCompatV2",
    }
)
"""Writer features whose tables this library can write to: it enforces invariants, CHECK
constraints and NOT NULL columns on every written row, computes or checks generated columns and
generates identity columns' values; on a table with type widening it keeps ``delta.typeChanges``
and changes no column's type; under IcebergCompat it keeps the rules of
:mod:`replay.protocol.iceberg_compat` (Delta writes the Iceberg metadata itself)."""
TYPE_WIDENING_FEATURES = frozenset({"typeWidening", "typeWidening-preview"})
CLUSTERING = "clustering"
"""A clustered table (CLUSTER BY): written to (its ``delta.clustering`` domain kept, statistics as
the table configures them, which Delta makes cover the clustering columns); not clustered here."""

SUPPORTED_READER_VERSIONS = tuple(range(1, SUPPORTED_READER_VERSION + 1))
SUPPORTED_WRITER_VERSIONS = tuple(range(1, SUPPORTED_WRITER_VERSION + 1))


def invalid_protocol_version_error(protocol: Protocol, table: str) -> UnsupportedTableFeatureError:
    """Delta's ``DELTA_INVALID_PROTOCOL_VERSION`` for a table whose protocol versions are too new."""
    readers = ", ".join(map(str, SUPPORTED_READER_VERSIONS))
    writers = ", ".join(map(str, SUPPORTED_WRITER_VERSIONS))
    return UnsupportedTableFeatureError(
        f'[DELTA_INVALID_PROTOCOL_VERSION] Unsupported Delta protocol version: table "{table}" requires '
        f"reader version {protocol.min_reader_version} and writer version {protocol.min_writer_version}, "
        f"but this library supports reader versions {readers} and writer versions {writers}. Please "
        "upgrade to a newer release.",
        table=table,
    )


def check_readable(protocol: Protocol, table: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if this library cannot read a table with ``protocol``.

    Delta's ``DELTA_INVALID_PROTOCOL_VERSION`` for a reader version above 3 and
    ``DELTA_UNSUPPORTED_FEATURES_FOR_READ`` for reader features this library does not implement.
    """
    if protocol.min_reader_version > SUPPORTED_READER_VERSION:
        raise invalid_protocol_version_error(protocol, table)
    if protocol.min_reader_version == SUPPORTED_READER_VERSION:
        unsupported = sorted(set(protocol.reader_features or ()) - SUPPORTED_READER_FEATURES)
        if unsupported:
            raise UnsupportedTableFeatureError(
                f'[DELTA_UNSUPPORTED_FEATURES_FOR_READ] Unsupported Delta read feature: table "{table}" '
                "requires reader table feature(s) that are unsupported by this library: "
                f"{', '.join(unsupported)}.",
                table=table,
                features=unsupported,
            )


def check_protocol_writable(protocol: Protocol, table: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if this library may not commit with ``protocol``.

    Delta's ``DELTA_INVALID_PROTOCOL_VERSION`` for a writer version above 7 and
    ``DELTA_UNSUPPORTED_FEATURES_FOR_WRITE`` for writer features this library does not know
    (features it knows but does not implement are refused by :func:`check_writable` only where
    the table uses them).
    """
    if protocol.min_writer_version > SUPPORTED_WRITER_VERSION:
        raise invalid_protocol_version_error(protocol, table)
    if protocol.min_writer_version == SUPPORTED_WRITER_VERSION:
        unsupported = sorted(set(protocol.writer_features or ()) - SUPPORTED_WRITER_FEATURES)
        if unsupported:
            raise UnsupportedTableFeatureError(
                f'[DELTA_UNSUPPORTED_FEATURES_FOR_WRITE] Unsupported Delta write feature: table "{table}" '
                "requires writer table feature(s) that are unsupported by this library: "
                f"{', '.join(unsupported)}.",
                table=table,
                features=unsupported,
            )


def check_writable(protocol: Protocol, metadata: Metadata, table: str) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if this library cannot write data files to the
    table (:func:`check_protocol_writable`), and
    :class:`~replay.protocol.identity_columns.IdentityColumnError` for an identity column whose
    definition is not Delta's (not a ``long``, no start, a step of 0)."""
    check_protocol_writable(protocol, table)
    if protocol.supports_writer_feature("identityColumns"):
        identity_columns(metadata.schema)


def append_only_error(table: str) -> AppendOnlyTableError:
    """Delta's ``DELTA_CANNOT_MODIFY_APPEND_ONLY``."""
    return AppendOnlyTableError(
        "[DELTA_CANNOT_MODIFY_APPEND_ONLY] This table is configured to only allow appends. If you would "
        f"like to permit updates or deletes, use 'ALTER TABLE {table} SET TBLPROPERTIES "
        f"({APPEND_ONLY.key}=false)'.",
        table=table,
    )


@dataclass(frozen=True)
class TableConfiguration:
    """The protocol and metadata of one table version, with the rules that follow from them."""

    protocol: Protocol
    metadata: Metadata
    table: str = ""

    @property
    def configuration(self) -> dict[str, str]:
        return self.metadata.configuration or {}

    # -- table properties --------------------------------------------------------------------
    @cached_property
    def in_commit_timestamps_enabled(self) -> bool:
        return ENABLE_IN_COMMIT_TIMESTAMPS.value_in(self.configuration)

    @cached_property
    def in_commit_timestamps_since(self) -> int | None:
        """The first version whose commits carry in-commit timestamps (``None``: not enabled)."""
        if not self.in_commit_timestamps_enabled:
            return None
        return IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION.value_in(self.configuration) or 0

    @cached_property
    def change_data_feed_enabled(self) -> bool:
        return ENABLE_CHANGE_DATA_FEED.value_in(self.configuration)

    @cached_property
    def append_only(self) -> bool:
        return APPEND_ONLY.value_in(self.configuration)

    @cached_property
    def checkpoint_interval(self) -> int:
        return CHECKPOINT_INTERVAL.value_in(self.configuration)

    @cached_property
    def log_retention_ms(self) -> int:
        return LOG_RETENTION.value_in(self.configuration)

    @cached_property
    def expired_log_cleanup_enabled(self) -> bool:
        return ENABLE_EXPIRED_LOG_CLEANUP.value_in(self.configuration)

    @cached_property
    def deleted_file_retention_ms(self) -> int:
        return DELETED_FILE_RETENTION.value_in(self.configuration)

    @cached_property
    def set_transaction_retention_ms(self) -> int | None:
        return SET_TRANSACTION_RETENTION.value_in(self.configuration)

    @cached_property
    def num_indexed_cols(self) -> int:
        return DATA_SKIPPING_NUM_INDEXED_COLS.value_in(self.configuration)

    @cached_property
    def stats_columns(self) -> tuple[tuple[str, ...], ...] | None:
        """The columns file statistics cover when the table names them
        (``delta.dataSkippingStatsColumns``, replacing :attr:`num_indexed_cols`)."""
        return DATA_SKIPPING_STATS_COLUMNS.value_in(self.configuration)

    @cached_property
    def row_tracking_enabled(self) -> bool:
        """Whether row ids must survive rewrites: ``delta.enableRowTracking`` on a table whose
        protocol has the ``rowTracking`` feature (:mod:`replay.txn.row_tracking`)."""
        return self.protocol.has_writer_feature("rowTracking") and ENABLE_ROW_TRACKING.value_in(
            self.configuration
        )

    @cached_property
    def materialized_row_tracking_columns(self) -> tuple[str, str] | None:
        """The names of the hidden columns that keep rows' row ids and row commit versions when
        their files are rewritten (``delta.rowTracking.materializedRowIdColumnName`` and
        ``...RowCommitVersionColumnName``) when :attr:`row_tracking_enabled`, else ``None``.
        Raises :class:`UnsupportedTableFeatureError` naming the property a table with row
        tracking enabled lacks."""
        if not self.row_tracking_enabled:
            return None
        names = []
        for key in (MATERIALIZED_ROW_ID_KEY, MATERIALIZED_ROW_COMMIT_VERSION_KEY):
            name = self.configuration.get(key)
            if not name:
                raise UnsupportedTableFeatureError(
                    f"Cannot keep the row ids of table {self.table}: it has row tracking enabled but "
                    f"no {key} property naming the column that keeps them",
                    table=self.table,
                    features=["rowTracking"],
                )
            names.append(name)
        return names[0], names[1]

    @cached_property
    def isolation_level(self) -> IsolationLevel:
        """The isolation level of commits that change data (``delta.isolationLevel``)."""
        return ISOLATION_LEVEL.value_in(self.configuration)

    @cached_property
    def string_prefix_length(self) -> int:
        """How many characters of string minima and maxima the file statistics keep."""
        return DATA_SKIPPING_STRING_PREFIX_LENGTH.value_in(self.configuration)

    @cached_property
    def constraints(self) -> TableConstraints:
        """What every written row must satisfy: CHECK constraints, NOT NULL fields, invariants,
        generated columns (:mod:`replay.protocol.constraints`)."""
        return table_constraints(self.protocol, self.metadata)

    @cached_property
    def column_mapping_mode(self) -> str:
        return COLUMN_MAPPING_MODE.value_in(self.configuration)

    @cached_property
    def target_file_size(self) -> int | None:
        """``delta.targetFileSize`` in bytes (``None``: unset)."""
        return TARGET_FILE_SIZE.value_in(self.configuration)

    @cached_property
    def auto_compact(self) -> bool:
        """``delta.autoOptimize.autoCompact``."""
        return AUTO_COMPACT.value_in(self.configuration)

    def min_file_retention_timestamp(self, now_ms: int) -> int:
        """Tombstones deleted at or before this time (ms) are expired."""
        return now_ms - self.deleted_file_retention_ms

    def min_set_transaction_retention_timestamp(self, now_ms: int) -> int | None:
        """Transactions last updated at or before this time (ms) are expired (``None``: never)."""
        retention = self.set_transaction_retention_ms
        return None if retention is None else now_ms - retention

    # -- what this library can do with the table ----------------------------------------------
    def check_readable(self) -> None:
        """Raise :class:`UnsupportedTableFeatureError` if this library cannot read the table."""
        check_readable(self.protocol, self.table)

    def check_writable(self) -> None:
        """Raise :class:`UnsupportedTableFeatureError` if this library cannot write data to the table."""
        check_writable(self.protocol, self.metadata, self.table)

    def updated(
        self, protocol: Protocol | None = None, metadata: Metadata | None = None
    ) -> TableConfiguration:
        """The configuration after a commit that sets ``protocol`` and/or ``metadata``."""
        if protocol is None and metadata is None:
            return self
        return TableConfiguration(protocol or self.protocol, metadata or self.metadata, self.table)

    def check_commit(self, *, removes_data: bool, previous: TableConfiguration | None = None) -> None:
        """Delta's writer checks for a commit that leaves the table in this configuration.

        ``previous`` is the configuration the commit was made from (``None`` for a new table).
        Raises :class:`UnsupportedTableFeatureError` when this library cannot read the table or
        commit to it, before or after (Delta's ``DELTA_INVALID_PROTOCOL_VERSION``,
        ``DELTA_UNSUPPORTED_FEATURES_FOR_READ`` / ``..._FOR_WRITE``), and
        :class:`AppendOnlyTableError` (``DELTA_CANNOT_MODIFY_APPEND_ONLY``) when the commit
        removes data (``remove`` with ``dataChange``) from a ``delta.appendOnly`` table;
        :class:`~replay.protocol.iceberg_compat.IcebergCompatError` when it breaks the rules of
        the IcebergCompat version the table enables.
        """
        for config in (previous, self) if previous is not None else (self,):
            check_readable(config.protocol, self.table)
            check_protocol_writable(config.protocol, self.table)
        if removes_data and (self.append_only or (previous is not None and previous.append_only)):
            raise append_only_error(self.table)
        if previous is not None and previous.metadata.schema_string != self.metadata.schema_string:
            self._check_type_changes(previous)
        before = previous.metadata if previous is not None else None
        check_iceberg_compat(self.protocol, self.metadata, before, self.table)

    def _check_type_changes(self, previous: TableConfiguration) -> None:
        """On a table that supports type widening, a column's type may change only to a wider one
        and only where type widening is on (the ``typeWidening`` feature and
        ``delta.enableTypeWidening``), recorded in ``delta.typeChanges``
        (:mod:`replay.protocol.type_widening`); the preview feature's changes, which name the
        version they were made in, are not written here."""
        features = set(self.protocol.writer_features or ()) | set(previous.protocol.writer_features or ())
        if not features & TYPE_WIDENING_FEATURES:
            return
        changed = changed_types(previous.metadata.schema, self.metadata.schema)
        if not changed:
            return
        problems = unsupported_type_changes(previous.metadata.schema, self.metadata.schema)
        if self.type_widening_enabled and not problems:
            return
        path, before, after = changed[0]
        shown = problems[0] if problems else f"{'.'.join(path)}: {before} -> {after}"
        raise UnsupportedTableFeatureError(
            f"Cannot change the type of column {shown} of table {self.table}: a type change needs type "
            "widening enabled (the typeWidening feature and delta.enableTypeWidening=true), a wider type, "
            "and the change recorded in delta.typeChanges",
            table=self.table,
            features=sorted(features & TYPE_WIDENING_FEATURES),
        )

    @cached_property
    def type_widening_enabled(self) -> bool:
        """Whether columns may widen here: the stable ``typeWidening`` feature and
        ``delta.enableTypeWidening`` (:mod:`replay.protocol.type_widening`)."""
        return self.protocol.has_writer_feature("typeWidening") and ENABLE_TYPE_WIDENING.value_in(
            self.configuration
        )
