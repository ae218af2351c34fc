"""Writes that add data: the plan decided before any file is written, and the commit that ends them.

One home for the rules of a data-writing commit, shared by ``write_table`` and the Spark batch and
streaming writers, with Delta's option names and errors:

* **table creation**: the first write creates the table with the data's schema (all nullable),
  ``partition_by`` and the ``delta.*`` table properties, under the smallest protocol that supports
  them (:func:`new_table_protocol`);
* **schema**: later writes merge into the table schema (:mod:`replay.txn.schema_merge`); a
  difference needs ``merge_schema`` (the schema evolves) or, when overwriting,
  ``overwrite_schema`` (schema and partitioning are replaced); otherwise Delta's mismatch error.
  Missing columns are written as nulls;
* **what an overwrite removes**: every file, the files of the partitions ``replace_where`` selects
  (a predicate on partition columns, which every written row must satisfy), or, with
  ``partition_overwrite_mode="dynamic"``, the files of the partitions the write touches. The
  commit conflicts like Delta's: an append is blind, an overwrite read the whole table or the
  partitions it replaces;
* **idempotent writes**: with ``txn_app_id`` and ``txn_version`` the commit carries a
  ``SetTransaction``, and a write whose version the application already committed is skipped.

:func:`plan_write` runs where the write starts (the Spark driver); the :class:`WritePlan` is
picklable and carries a :class:`~replay.txn.write_spec.FileWriteSpec` for the tasks that write
files. :func:`commit_write` commits the files once, then runs the post-commit hooks.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from replay.log.table_io import TableIO
from replay.protocol.actions import DomainMetadata, Metadata, Protocol
from replay.protocol.clustering_columns import (
    clustering_column_name,
    clustering_domain,
    domain_columns,
    logical_paths,
    resolve_clustering_columns,
)
from replay.protocol.column_names import check_column_names
from replay.protocol.errors import DeltaError, TableNotFoundError
from replay.protocol.iceberg_compat import new_table_configuration
from replay.protocol.naming import split_column_path
from replay.protocol.schema import PrimitiveType, StructType
from replay.protocol.sql_predicate import SqlPredicate, parse_predicate
from replay.protocol.table_config import CLUSTERING, TableConfiguration
from replay.protocol.table_features import metadata_features, protocol_with
from replay.protocol.table_properties import (
    canonical_property_key,
    changed_properties,
    check_table_properties,
    with_row_tracking_columns,
)
from replay.protocol.type_widening import with_type_changes
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.schema_merge import (
    SchemaMismatchError,
    as_nullable,
    check_duplicate_columns,
    merge_schemas,
    scala_type_name,
    schema_mismatch_error,
)
from replay.txn.statistics import indexed_paths
from replay.txn.write_spec import FileWriteSpec

logger = logging.getLogger(__name__)

WRITE_MODES = ("append", "overwrite")
PARTITION_OVERWRITE_MODES = ("static", "dynamic")


class InvalidWriteOptionError(DeltaError, ValueError):
    """Write options that cannot be used together or have invalid values (Delta's wording)."""


# -- options ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WriteOptions:
    """How to write, with Delta's semantics (the DataFrameWriter option names are in brackets).

    ``mode``: ``append`` or ``overwrite``. ``partition_by`` (``partitionBy``): partition columns of
    a new table; for an existing table they must match unless the schema is overwritten.
    ``merge_schema`` (``mergeSchema``), ``overwrite_schema`` (``overwriteSchema``, overwrite only,
    not with ``replace_where``). ``replace_where`` (``replaceWhere``) and
    ``partition_overwrite_mode`` (``partitionOverwriteMode``) apply to overwrites.
    ``txn_app_id``/``txn_version`` (``txnAppId``/``txnVersion``) make the write idempotent.
    ``user_metadata`` (``userMetadata``) goes into ``commitInfo``. ``max_records_per_file``
    (``maxRecordsPerFile``, 0 or less: no limit); ``target_file_size``: bytes after which a file
    is closed (deltalake's; none by default). ``configuration``: table properties of a new
    table (for an existing table a different value is refused). ``allow_implicit_casts``: values
    of another primitive type are cast to the table's type (as SQL inserts do) instead of failing
    the schema check. ``cluster_by`` (``clusterBy``): the clustering columns of a new, clustered
    table (Delta's ``CLUSTER BY``); for an existing table they must be its own. ``name`` and
    ``description``: the metadata's, for a new table.
    """

    mode: str = "append"
    partition_by: tuple[str, ...] | None = None
    merge_schema: bool = False
    overwrite_schema: bool = False
    replace_where: str | None = None
    partition_overwrite_mode: str = "static"
    txn_app_id: str | None = None
    txn_version: int | None = None
    user_metadata: str | None = None
    max_records_per_file: int | None = None
    target_file_size: int | None = None
    configuration: Mapping[str, str] = field(default_factory=dict)
    allow_implicit_casts: bool = False
    cluster_by: tuple[str, ...] | None = None
    name: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in WRITE_MODES:
            raise InvalidWriteOptionError(f"mode must be one of {', '.join(WRITE_MODES)}, not {self.mode!r}")
        if self.partition_overwrite_mode not in PARTITION_OVERWRITE_MODES:
            raise InvalidWriteOptionError(
                f"[DELTA_ILLEGAL_OPTION] Invalid value '{self.partition_overwrite_mode}' for option "
                "'partitionOverwriteMode', must be 'static' or 'dynamic'"
            )
        if (self.txn_app_id is None) != (self.txn_version is None):
            raise InvalidWriteOptionError(
                "[DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS] Invalid options for idempotent Dataframe "
                "writes: Both txnVersion and txnAppId must be specified for idempotent data writes"
            )
        if self.txn_version is not None and self.txn_version < 0:
            raise InvalidWriteOptionError(
                "[DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS] Invalid options for idempotent Dataframe "
                f"writes: txnVersion must be a non-negative integer, got {self.txn_version}"
            )
        if self.overwrite and self.dynamic_requested and self.replace_where is not None:
            raise InvalidWriteOptionError(
                "[DELTA_REPLACE_WHERE_WITH_DYNAMIC_PARTITION_OVERWRITE] A 'replaceWhere' expression and "
                "'partitionOverwriteMode'='dynamic' cannot both be set in the DataFrameWriter options."
            )
        if self.overwrite and self.dynamic_requested and self.overwrite_schema:
            raise InvalidWriteOptionError(
                "[DELTA_OVERWRITE_SCHEMA_WITH_DYNAMIC_PARTITION_OVERWRITE] 'overwriteSchema' cannot be "
                "used in dynamic partition overwrite mode."
            )

    @property
    def overwrite(self) -> bool:
        return self.mode == "overwrite"

    @property
    def dynamic_requested(self) -> bool:
        return self.partition_overwrite_mode == "dynamic"

    @property
    def can_overwrite_schema(self) -> bool:
        """Delta's rule: ``overwriteSchema`` counts only for overwrites without ``replaceWhere``."""
        return self.overwrite_schema and self.overwrite and self.replace_where is None


# -- table creation -----------------------------------------------------------------------------
def new_table_protocol(configuration: Mapping[str, str], schema_string: str) -> Protocol:
    """The smallest protocol that supports the table properties and types of a new table.

    Legacy versions where they suffice (writer 2, 3 for CHECK constraints (``delta.constraints.*``),
    4 for the change data feed, reader 2 / writer 5 for column mapping); table features
    (reader 3 / writer 7) once ``timestamp_ntz``, in-commit timestamps or deletion vectors are
    needed (see :func:`replay.protocol.table_features.protocol_with`).
    """
    return protocol_with(Protocol(1, 2), metadata_features(configuration, schema_string))


def protocol_for_schema(protocol: Protocol, schema_string: str) -> Protocol:
    """``protocol``, upgraded to table features with ``timestampNtz`` if the schema needs it."""
    return protocol_with(protocol, [f for f in metadata_features({}, schema_string) if f == "timestampNtz"])


def _check_property_options(snapshot: Snapshot, options: WriteOptions, table: str) -> None:
    """Table properties in a write's options apply when the write creates the table; for an
    existing table, Delta (and deltalake) ignore them. Rather than ignore a change silently, this
    writer refuses it, naming the property and how to change it."""
    requested = {canonical_property_key(str(k)): str(v) for k, v in options.configuration.items()}
    current = snapshot.metadata.configuration or {}
    changed = changed_properties(current, requested)
    if changed:
        key = changed[0]
        raise InvalidWriteOptionError(
            f"Cannot change table property {key} of existing table {table} with a write option (the table "
            f"has {current.get(key)!r}, the write asks for {requested[key]!r}): table properties given to a "
            "write apply only when it creates the table. Change them with "
            f"DeltaTable(...).alter.set_table_properties({{{key!r}: {requested[key]!r}}}) or "
            f"`deltalog alter URI --set {key}={requested[key]}` (Delta's ALTER TABLE ... SET TBLPROPERTIES)."
        )


def _resolve_columns(names: Sequence[str], schema: StructType, table: str) -> list[str]:
    """``names`` spelled as in ``schema`` (case-insensitive); Delta's error for an unknown one."""
    by_lower = {name.lower(): name for name in schema.field_names}
    resolved = []
    for name in names:
        if name.lower() not in by_lower:
            raise SchemaMismatchError(
                f"[DELTA_PARTITION_COLUMN_NOT_FOUND] Partition column {name} not found in schema "
                f"[{', '.join(schema.field_names)}] (table {table})"
            )
        resolved.append(by_lower[name.lower()])
    return resolved


def _check_partitioning(partition_columns: list[str], schema: StructType, table: str) -> None:
    for name in partition_columns:
        data_type = schema.field(name).type
        if not isinstance(data_type, PrimitiveType) or data_type.name in ("void", "variant"):
            raise SchemaMismatchError(
                f"[DELTA_INVALID_PARTITION_COLUMN_TYPE] Using column {name} of type "
                f"{scala_type_name(data_type)} as a partition column is not supported."
            )
    if partition_columns and len(partition_columns) == len(schema.fields):
        raise SchemaMismatchError(
            "[DELTA_NON_PARTITION_COLUMN_ABSENT] Data written into Delta needs to contain at least one "
            f"non-partitioned column. (table {table}, partition columns {partition_columns})"
        )


# -- the plan -----------------------------------------------------------------------------------
def latest_snapshot(io: TableIO) -> Snapshot | None:
    """The table's latest snapshot, or ``None`` when there is no table yet (a write creates it).

    Only the table's description is replayed (protocol, metadata, app transactions, domains); the
    files when first used (an overwrite): an append to a big table never replays its files."""
    try:
        return load_snapshot(io, files=False)
    except TableNotFoundError:
        return None


@dataclass(frozen=True)
class WritePlan:
    """Everything a data-writing commit decided before its files are written (picklable)."""

    table_path: str
    options: WriteOptions
    read_version: int
    """The version the write read (-1: it creates the table)."""
    protocol: Protocol
    metadata: Metadata
    """Protocol and metadata in force after the commit."""
    commit_protocol: bool
    commit_metadata: bool
    spec: FileWriteSpec
    committed_txn_version: int | None = None
    """The version the write's application id had committed when the write read the table."""
    txn_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """The ``txnId`` its commit carries: whoever holds the plan can tell whether it committed."""
    domains: tuple[DomainMetadata, ...] = ()
    """Domain metadata the commit sets (a new clustered table's ``delta.clustering``)."""

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def config(self) -> TableConfiguration:
        """The table configuration after the commit."""
        return TableConfiguration(self.protocol, self.metadata, self.table_path)

    @property
    def already_committed(self) -> bool:
        """An idempotent write whose (app id, version) the table has already seen: nothing to do."""
        version = self.options.txn_version
        committed = self.committed_txn_version
        return version is not None and committed is not None and committed >= version

    @property
    def dynamic_overwrite(self) -> bool:
        return self.options.overwrite and self.options.dynamic_requested and bool(self.partition_columns)

    @property
    def full_overwrite(self) -> bool:
        return self.options.overwrite and self.options.replace_where is None and not self.dynamic_overwrite

    def for_transaction(self, app_id: str, version: int, committed: int | None) -> WritePlan:
        """This plan as an idempotent write of ``(app_id, version)`` (a streaming micro-batch)."""
        options = replace(self.options, txn_app_id=app_id, txn_version=version)
        return replace(self, options=options, committed_txn_version=committed)


def plan_write(
    io: TableIO, snapshot: Snapshot | None, data_schema: StructType, options: WriteOptions
) -> WritePlan:
    """Decide a write of data with ``data_schema`` into the table (``snapshot``: its latest
    state, ``None`` for a new table). Raises :class:`SchemaMismatchError`,
    :class:`~replay.protocol.sql_predicate.PredicateError`, :class:`InvalidWriteOptionError`,
    :class:`UnsupportedTableFeatureError`, :class:`~replay.protocol.column_names.InvalidColumnNameError`
    (a new or changed schema naming a column Delta refuses) and Delta's append-only error before
    anything is written.
    """
    table = io.table_path
    check_duplicate_columns(data_schema)
    domains: tuple[DomainMetadata, ...] = ()
    if snapshot is None:
        protocol, metadata = _new_table(data_schema, options, table)
        if options.cluster_by is not None:
            protocol, domains = _clustered(protocol, metadata, options.cluster_by, table)
        read_version, commit_protocol, commit_metadata, committed = -1, True, True, None
    else:
        snapshot.config.check_writable()
        _check_property_options(snapshot, options, table)
        _check_clustering_option(snapshot, options, table)
        protocol, metadata, commit_metadata = _existing_table(snapshot, data_schema, options, table)
        protocol = protocol_for_schema(protocol, metadata.schema_string or "")
        commit_protocol = protocol != snapshot.protocol
        read_version = snapshot.version
        committed = snapshot.set_transactions.get(options.txn_app_id) if options.txn_app_id else None
    if commit_metadata:
        check_column_names(metadata, io.shown_path)
    replace_where = replace_where_predicate(options, metadata, table)
    config = TableConfiguration(protocol, metadata, table)
    config.check_commit(
        removes_data=options.overwrite and snapshot is not None,
        previous=snapshot.config if snapshot is not None else None,
    )
    spec = file_write_spec(
        io,
        config,
        max_records_per_file=options.max_records_per_file,
        target_file_size=options.target_file_size,
        replace_where=replace_where.text if replace_where is not None else None,
    )
    return WritePlan(
        table,
        options,
        read_version,
        protocol,
        metadata,
        commit_protocol,
        commit_metadata,
        spec,
        committed,
        domains=domains,
    )


def _clustered(
    protocol: Protocol, metadata: Metadata, columns: Sequence[str], table: str
) -> tuple[Protocol, tuple[DomainMetadata, ...]]:
    """A new table's protocol and domains clustered by ``columns``, checked as Delta checks them."""
    config = TableConfiguration(protocol, metadata, table)
    covered = indexed_paths(metadata.arrow_schema, config.num_indexed_cols, config.stats_columns)
    paths = resolve_clustering_columns(
        metadata.schema, columns, partition_columns=metadata.partition_columns, covered=covered, table=table
    )
    domain = clustering_domain(metadata.schema, paths, config.column_mapping_mode != "none")
    return protocol_with(protocol, ["domainMetadata", CLUSTERING]), (domain,)


def _check_clustering_option(snapshot: Snapshot, options: WriteOptions, table: str) -> None:
    """A write's ``cluster_by`` to an existing table must name its clustering columns."""
    if options.cluster_by is None:
        return
    mapped = snapshot.config.column_mapping_mode != "none"
    current = logical_paths(snapshot.schema, domain_columns(snapshot.domain_metadata), mapped, table)
    given = [tuple(part.lower() for part in split_column_path(c) or (c,)) for c in options.cluster_by]
    if given != [tuple(part.lower() for part in path) for path in current]:
        raise InvalidWriteOptionError(
            "[DELTA_CLUSTERING_COLUMNS_MISMATCH] The provided clustering columns do not match the existing "
            f"table's (table {table}): provided {list(options.cluster_by)}, existing "
            f"{[clustering_column_name(path) for path in current]}; ALTER TABLE ... CLUSTER BY changes them"
        )


def file_write_spec(
    io: TableIO,
    config: TableConfiguration,
    *,
    max_records_per_file: int | None = None,
    target_file_size: int | None = None,
    replace_where: str | None = None,
) -> FileWriteSpec:
    """How data files of a table in ``config`` are written: its columns and partitioning, the
    statistics it collects, and the rules every written row must satisfy (the table's CHECK
    constraints, NOT NULL fields, invariants and generated columns, a ``replaceWhere``). The one
    place a writer's :class:`FileWriteSpec` comes from: ``write_table``, the Spark writers, and the
    row-level and maintenance operations. The constraints are bound here once, so an expression
    this library cannot evaluate fails the write before any file is written
    (:class:`UnsupportedTableFeatureError` naming the constraint); the spec carries their texts."""
    spec = replace(
        FileWriteSpec.of_table(io.table_path, config, io.conf),
        max_records_per_file=max_records_per_file
        if max_records_per_file and max_records_per_file > 0
        else None,
        target_file_size=target_file_size if target_file_size and target_file_size > 0 else None,
        replace_where=replace_where,
        constraints=config.constraints,
        write_time=datetime.datetime.now(datetime.UTC),
    )
    spec.compile_constraints()
    return spec


def _new_table(data_schema: StructType, options: WriteOptions, table: str) -> tuple[Protocol, Metadata]:
    schema = as_nullable(data_schema)
    partition_columns = _resolve_columns(options.partition_by or (), schema, table)
    _check_partitioning(partition_columns, schema, table)
    configuration = {canonical_property_key(str(k)): str(v) for k, v in options.configuration.items()}
    check_table_properties(configuration)
    configuration = with_row_tracking_columns(new_table_configuration(configuration))
    metadata = Metadata(
        id=str(uuid.uuid4()),
        name=options.name,
        description=options.description,
        partition_columns=partition_columns,
        configuration=configuration,
        created_time=int(time.time() * 1000),
    ).with_schema(schema)  # under column mapping, every column gets its id and physical name
    schema_string = metadata.schema_string or ""
    return new_table_protocol(metadata.configuration, schema_string), metadata


def _existing_table(
    snapshot: Snapshot, data_schema: StructType, options: WriteOptions, table: str
) -> tuple[Protocol, Metadata, bool]:
    """(protocol, metadata after the write, whether the metadata changes)."""
    metadata = snapshot.metadata
    table_schema = metadata.schema
    existing = list(metadata.partition_columns)
    given = list(options.partition_by) if options.partition_by is not None else None
    if options.can_overwrite_schema:
        schema = as_nullable(data_schema)
        partition_columns = _resolve_columns(given if given is not None else existing, schema, table)
        _check_partitioning(partition_columns, schema, table)
        name = options.name or metadata.name
        description = options.description or metadata.description
        described = (name, description) != (metadata.name, metadata.description)
        if schema == table_schema and partition_columns == existing and not described:
            return snapshot.protocol, metadata, False
        changed = metadata.with_schema(schema, partition_columns=partition_columns)
        return snapshot.protocol, replace(changed, name=name, description=description), True
    partitioning_differs = given is not None and [c.lower() for c in given] != [c.lower() for c in existing]
    widen = snapshot.config.type_widening_enabled and options.merge_schema
    try:
        merged = merge_schemas(
            table_schema, data_schema, allow_implicit_casts=options.allow_implicit_casts, widen=widen
        )
    except SchemaMismatchError:
        if partitioning_differs:
            raise _mismatch(metadata, data_schema, options, given, existing) from None
        raise
    if partitioning_differs or (merged != table_schema and not options.merge_schema):
        raise _mismatch(metadata, data_schema, options, given if partitioning_differs else None, existing)
    if merged == table_schema:
        return snapshot.protocol, metadata, False
    if snapshot.config.type_widening_enabled:  # every type change recorded (delta.typeChanges)
        merged = with_type_changes(table_schema, merged)
    return snapshot.protocol, metadata.with_schema(merged), True


def _mismatch(
    metadata: Metadata,
    data_schema: StructType,
    options: WriteOptions,
    given: list[str] | None,
    existing: list[str],
) -> SchemaMismatchError:
    return schema_mismatch_error(
        metadata.id,
        metadata.schema,
        data_schema,
        partitioning=(given, existing) if given is not None else None,
        overwrite_hint=options.overwrite,
    )


def replace_where_predicate(options: WriteOptions, metadata: Metadata, table: str) -> SqlPredicate | None:
    if not options.overwrite or options.replace_where is None:
        return None
    predicate = parse_predicate(options.replace_where).resolve(metadata.schema.field_names)
    partition_columns = list(metadata.partition_columns)
    for column in predicate.columns:
        if column not in partition_columns:
            raise SchemaMismatchError(
                f"[DELTA_NON_PARTITION_COLUMN_REFERENCE] Predicate references non-partition column "
                f"'{column}'. Only the partition columns may be referenced: [{', '.join(partition_columns)}]"
                f" (replaceWhere on table {table})"
            )
    return predicate
