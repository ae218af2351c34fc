"""Iceberg compatibility (writer features ``icebergCompatV1`` / ``icebergCompatV2``): the rules a
writer keeps on a table whose log Delta's UniForm converts to Iceberg metadata. Pure: no I/O.

A version is enabled by ``delta.enableIcebergCompatV<n>=true``. As Delta's ``IcebergCompat``
(the protocol's "Writer Requirements for IcebergCompatV1/V2"), on such a table:

* column mapping is on (``name`` or ``id``; a new table gets ``name`` unless it says otherwise),
  and its data files carry Parquet field ids, ``icebergCompatV2`` also for the implicit
  ``element`` / ``key`` / ``value`` fields of arrays and maps: ids kept under
  ``parquet.field.nested.ids`` on the nearest struct field (given by
  :func:`~replay.protocol.column_mapping.mapped_schema` to new fields, on from
  ``delta.columnMapping.maxColumnId``);
* data files also hold the partition columns' values, after the data columns, and under V2 their
  ``add`` is tagged ``ICEBERG_COMPAT_VERSION=2`` (:func:`file_tags`), as Delta tags them;
* every ``add`` has ``numRecords`` in its statistics;
* deletion vectors are off, one version at most is enabled, V1 allows no array, map or void
  column and V2 only Iceberg's types;
* a partitioned table keeps its partition columns, and a table moves to V2 only by a rewrite
  (Delta's ``REORG ... UPGRADE UNIFORM``), not by a property change.

UniForm itself (``delta.universalFormat.enabledFormats`` naming ``iceberg``) needs one of the
versions. Delta writes the Iceberg metadata after its own commits; this library does not, so the
Iceberg view of a table lags behind the commits made here until Delta next converts it (or a
``MSCK REPAIR TABLE ... SYNC METADATA``): a commit here logs that once per table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.protocol.errors import DeltaError
from replay.protocol.schema import ArrayType, MapType, PrimitiveType, StructType, nested_types
from replay.protocol.table_properties import (
    COLUMN_MAPPING_MODE,
    ENABLE_DELETION_VECTORS,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    iceberg_compat_version,
    iceberg_compat_versions,
)

logger = logging.getLogger(__name__)

UNIVERSAL_FORMAT_KEY = "delta.universalFormat.enabledFormats"
VERSION_TAG = "ICEBERG_COMPAT_VERSION"
"""The ``add`` tag Delta gives the files it writes under IcebergCompatV2 (``"2"``); its REORG
... UPGRADE UNIFORM rewrites the files without it."""
_CHANGES_WITHOUT_REWRITE = {0: {0, 1}, 1: {0, 1}, 2: {0, 1, 2}}
"""The versions a table may move to by a property change, by the version it has (0: none)."""
_V2_TYPES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "date"}
    | {"timestamp", "timestamp_ntz"}
)
_warned_tables: set[str] = set()


class IcebergCompatError(DeltaError, ValueError):
    """A table or commit breaks a rule of the IcebergCompat version the table enables;
    ``error_class`` is Delta's (``DELTA_ICEBERG_COMPAT_VIOLATION.<rule>`` and the like)."""

    def __init__(self, message: str, *, error_class: str, version: int | None, table: str | None) -> None:
        super().__init__(message, table=table)
        self.error_class = error_class
        self.version = version


def publishes_iceberg(configuration: Mapping[str, str]) -> bool:
    """Whether UniForm publishes the table as Iceberg (``delta.universalFormat.enabledFormats``)."""
    formats = configuration.get(UNIVERSAL_FORMAT_KEY, "").split(",")
    return "iceberg" in {name.strip().lower() for name in formats}


def file_tags(version: int | None) -> dict[str, str]:
    """The tags of the ``add`` of a data file written under IcebergCompat ``version``."""
    return {VERSION_TAG: "2"} if version == 2 else {}


def new_table_configuration(configuration: Mapping[str, str]) -> dict[str, str]:
    """The configuration a new table is created with: column mapping ``name`` when it enables an
    IcebergCompat version and sets no mapping mode, as Delta sets it on CREATE."""
    if iceberg_compat_version(configuration) is None or COLUMN_MAPPING_MODE.key in configuration:
        return dict(configuration)
    return {**configuration, COLUMN_MAPPING_MODE.key: "name"}


def check_table(protocol: Protocol, metadata: Metadata, previous: Metadata | None, table: str) -> None:
    """Raise :class:`IcebergCompatError` when a commit would leave the table (``protocol`` and
    ``metadata``, made from ``previous``; ``None`` when it creates the table) breaking the rules
    of the version it enables, or UniForm without one."""
    configuration = metadata.configuration or {}
    versions = iceberg_compat_versions(configuration)
    if publishes_iceberg(configuration) and not versions:
        raise IcebergCompatError(
            "[DELTA_UNIVERSAL_FORMAT_VIOLATION] The validation of Universal Format (iceberg) has failed: "
            f"table {table} sets {UNIVERSAL_FORMAT_KEY}=iceberg, which needs "
            f"{ENABLE_ICEBERG_COMPAT_V2.key}=true (or {ENABLE_ICEBERG_COMPAT_V1.key}=true).",
            error_class="DELTA_UNIVERSAL_FORMAT_VIOLATION",
            version=None,
            table=table,
        )
    if not versions:
        return
    version = versions[-1]

    def violation(rule: str, detail: str) -> IcebergCompatError:
        return IcebergCompatError(
            f"[DELTA_ICEBERG_COMPAT_VIOLATION.{rule}] The validation of IcebergCompatV{version} has "
            f"failed for table {table}: {detail}",
            error_class=f"DELTA_ICEBERG_COMPAT_VIOLATION.{rule}",
            version=version,
            table=table,
        )

    if len(versions) > 1:
        raise violation(
            "VERSION_MUTUAL_EXCLUSIVE",
            "Only one IcebergCompat version can be enabled, please explicitly disable all other "
            "IcebergCompat versions that are not needed.",
        )
    for feature in (f"icebergCompatV{version}", "columnMapping"):
        if not protocol.supports_writer_feature(feature):
            raise violation(
                "MISSING_REQUIRED_TABLE_FEATURE",
                f"IcebergCompatV{version} requires feature {feature} to be supported and enabled.",
            )
    mode = COLUMN_MAPPING_MODE.value_in(configuration)
    if mode not in {"name", "id"}:
        raise violation(
            "WRONG_REQUIRED_TABLE_PROPERTY",
            f"IcebergCompatV{version} requires table property '{COLUMN_MAPPING_MODE.key}' to be set to "
            f"'name'. Current value: '{mode}'.",
        )
    if ENABLE_DELETION_VECTORS.value_in(configuration) and protocol.supports_writer_feature(
        "deletionVectors"
    ):
        raise violation(
            "DELETION_VECTORS_SHOULD_BE_DISABLED",
            f"IcebergCompatV{version} requires Deletion Vectors to be disabled on the table first "
            f"({ENABLE_DELETION_VECTORS.key}=false). Then run `REORG PURGE` command to purge the "
            "Deletion Vectors on the table.",
        )
    unsupported = _unsupported_type(metadata.schema, version)
    if unsupported is not None:
        column, shown = unsupported
        raise violation(
            "UNSUPPORTED_DATA_TYPE",
            f"IcebergCompatV{version} does not support the data type {shown} in your schema "
            f"(column {column}).",
        )
    if previous is None:
        return
    before, after = list(previous.partition_columns), list(metadata.partition_columns)
    if before and before != after:
        raise violation(
            "REPLACE_TABLE_CHANGE_PARTITION_NAMES",
            f"IcebergCompatV{version} doesn't support replacing partitioned tables with a "
            f"differently-named partition spec. Prev Partition Spec: {before}. New Partition Spec: "
            f"{after}.",
        )
    old = iceberg_compat_version(previous.configuration or {}) or 0
    if version not in _CHANGES_WITHOUT_REWRITE.get(old, set()):
        raise violation(
            "CHANGE_VERSION_NEED_REWRITE",
            f"Changing to IcebergCompatV{version} requires rewriting the table. Please run "
            f"`REORG TABLE APPLY (UPGRADE UNIFORM ('ICEBERG_COMPAT_VERSION = {version}'))` with Delta.",
        )


def check_adds(adds: Iterable[AddFile], configuration: Mapping[str, str], table: str) -> None:
    """Raise :class:`IcebergCompatError` for an ``add`` without ``numRecords`` on a table that
    enables IcebergCompat; note once per table that its Iceberg metadata is not regenerated here."""
    version = iceberg_compat_version(configuration)
    if version is None:
        return
    for add in adds:
        if add.num_records is None:
            raise IcebergCompatError(
                f"IcebergCompatV{version} requires all AddFiles to contain the numRecords statistic. "
                f"AddFile {add.path} of table {table} is missing this statistic. Stats: {add.stats}",
                error_class="DELTA_ICEBERG_COMPAT_VIOLATION",
                version=version,
                table=table,
            )
    if publishes_iceberg(configuration) and table not in _warned_tables:
        _warned_tables.add(table)
        logger.warning(
            "table %s publishes Iceberg metadata (UniForm), which Delta writes after its own commits "
            "only: the Iceberg view lags behind commits made here until Delta converts the table again",
            table,
        )


def _unsupported_type(schema: StructType, version: int) -> tuple[str, str] | None:
    """The first top-level column of ``schema`` holding a type IcebergCompatV``version`` does
    not allow, and that type (``None``: none)."""
    for struct_field in schema.fields:
        for data_type in nested_types(struct_field.type):
            if version == 1 and isinstance(data_type, ArrayType | MapType):
                return struct_field.name, "array" if isinstance(data_type, ArrayType) else "map"
            if isinstance(data_type, PrimitiveType) and not _allows(version, data_type):
                return struct_field.name, data_type.name
    return None


def _allows(version: int, data_type: PrimitiveType) -> bool:
    if version == 1:
        return data_type.name != "void"
    return data_type.is_decimal or data_type.name in _V2_TYPES
