"""Delta's table properties (``delta.*`` keys of ``metaData.configuration``): each parsed once, here.

Every property is a :class:`TableProperty` with Delta's key, default and parser, as in Delta's
``DeltaConfigs``. Code anywhere reads a property with ``PROPERTY.value_in(configuration)``, or
through :class:`~replay.protocol.table_config.TableConfiguration`; nothing else parses
``delta.*`` strings. A value that does not parse raises :class:`InvalidTablePropertyError`
naming the key and the value, when the property is read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from replay.protocol.errors import DeltaError
from replay.protocol.isolation import DEFAULT_ISOLATION_LEVEL, IsolationLevel
from replay.protocol.naming import split_column_path, split_outside_backquotes

T = TypeVar("T")


class InvalidTablePropertyError(DeltaError, ValueError):
    """A table property has a value Delta would refuse (the message names the key and value)."""


_INTERVAL_UNITS_MS = {
    "week": 7 * 86_400_000,
    "day": 86_400_000,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1000,
    "millisecond": 1,
    "microsecond": 0.001,
    "month": 30 * 86_400_000,
    "year": 365 * 86_400_000,
}
_INTERVAL_RE = re.compile(r"(-?\d+)\s*([a-z]+?)s?\b")


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta interval such as ``interval 1 week`` or ``interval 2 days 3 hours``.

    Raises :class:`ValueError` naming the text when it holds no known unit.
    """
    total = 0.0
    matched = False
    for amount, unit in _INTERVAL_RE.findall(text.lower().removeprefix("interval").strip()):
        if unit not in _INTERVAL_UNITS_MS:
            raise ValueError(f"unknown unit {unit!r} in interval {text!r}")
        total += int(amount) * _INTERVAL_UNITS_MS[unit]
        matched = True
    if not matched:
        raise ValueError(f"not an interval: {text!r}")
    return int(total)


def parse_bool(text: str) -> bool:
    """``true``/``false`` in any case, surrounding blanks ignored (Scala's ``toBoolean``)."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("expected 'true' or 'false'")
    return lowered == "true"


def parse_int(text: str) -> int:
    return int(text.strip())


def parse_positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError("must be positive")
    return value


def parse_non_negative_int(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("must not be negative")
    return value


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_BYTE_SIZE_RE = re.compile(r"(\d+)\s*([kmgtp]?)b?")


def parse_byte_size(text: str) -> int:
    """A size in bytes as Spark reads one (``byteStringAsBytes``): ``134217728``, ``128m``,
    ``128mb``, ``1g`` (binary multiples, any case). Must be positive."""
    match = _BYTE_SIZE_RE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError("expected a size such as 134217728, 128mb or 1g")
    value = int(match.group(1)) * _BYTE_UNITS[match.group(2)]
    if value <= 0:
        raise ValueError("must be positive")
    return value


def parse_column_mapping_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in ("none", "name", "id"):
        raise ValueError("expected 'none', 'name' or 'id'")
    return mode


@dataclass(frozen=True)
class TableProperty(Generic[T]):
    """One ``delta.*`` table property: its key, its value when unset, and how it is parsed."""

    key: str
    default: T
    parse: Callable[[str], T]

    def value_in(self, configuration: Mapping[str, str] | None) -> T:
        """The property's value in a table configuration (the default when unset).

        Raises :class:`InvalidTablePropertyError` naming the key and value if it does not parse.
        """
        raw = (configuration or {}).get(self.key)
        if raw is None:
            return self.default
        try:
            return self.parse(str(raw))
        except ValueError as exc:
            raise InvalidTablePropertyError(
                f"[DELTA_INVALID_TABLE_PROPERTY] Invalid value {raw!r} for table property {self.key}: {exc}"
            ) from None

    def is_set(self, configuration: Mapping[str, str] | None) -> bool:
        return self.key in (configuration or {})


def _optional(parse: Callable[[str], T]) -> Callable[[str], T | None]:
    return parse


APPEND_ONLY = TableProperty("delta.appendOnly", False, parse_bool)
ENABLE_CHANGE_DATA_FEED = TableProperty("delta.enableChangeDataFeed", False, parse_bool)
ENABLE_IN_COMMIT_TIMESTAMPS = TableProperty("delta.enableInCommitTimestamps", False, parse_bool)
IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION: TableProperty[int | None] = TableProperty(
    "delta.inCommitTimestampEnablementVersion", None, _optional(parse_int)
)
IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP: TableProperty[int | None] = TableProperty(
    "delta.inCommitTimestampEnablementTimestamp", None, _optional(parse_int)
)
CHECKPOINT_INTERVAL = TableProperty("delta.checkpointInterval", 10, parse_positive_int)
LOG_RETENTION = TableProperty("delta.logRetentionDuration", 30 * 86_400_000, parse_interval_ms)
DELETED_FILE_RETENTION = TableProperty(
    "delta.deletedFileRetentionDuration", 7 * 86_400_000, parse_interval_ms
)
SET_TRANSACTION_RETENTION: TableProperty[int | None] = TableProperty(
    "delta.setTransactionRetentionDuration", None, _optional(parse_interval_ms)
)
ENABLE_EXPIRED_LOG_CLEANUP = TableProperty("delta.enableExpiredLogCleanup", True, parse_bool)
DATA_SKIPPING_NUM_INDEXED_COLS = TableProperty("delta.dataSkippingNumIndexedCols", 32, parse_int)
DATA_SKIPPING_STRING_PREFIX_LENGTH = TableProperty(
    "delta.dataSkippingStringPrefixLength", 32, parse_non_negative_int
)
"""How many characters of a string column's minimum and maximum the statistics keep. Delta reads
this table property first and falls back to the session setting
``spark.databricks.io.skipping.stringPrefixLength`` (default 32); a table that does not set it
is written and pruned here with that default."""


def parse_column_paths(text: str) -> tuple[tuple[str, ...], ...]:
    """A comma-separated list of column paths (``a, s.b, `c d```), each split as Spark reads an
    attribute name (:func:`~replay.protocol.naming.split_column_path`); commas inside backquotes
    belong to the name."""
    paths: list[tuple[str, ...]] = []
    for raw in split_outside_backquotes(text, ","):
        item = raw.strip()
        if not item:
            continue
        parts = split_column_path(item)
        if parts is None:
            raise ValueError(f"not a column name: {item!r}")
        paths.append(parts)
    return tuple(paths)


DATA_SKIPPING_STATS_COLUMNS: TableProperty[tuple[tuple[str, ...], ...] | None] = TableProperty(
    "delta.dataSkippingStatsColumns", None, _optional(parse_column_paths)
)
"""The columns file statistics cover, replacing ``delta.dataSkippingNumIndexedCols`` when set (a
struct covers its fields)."""
COLUMN_MAPPING_MODE = TableProperty("delta.columnMapping.mode", "none", parse_column_mapping_mode)
ENABLE_DELETION_VECTORS = TableProperty("delta.enableDeletionVectors", False, parse_bool)
ISOLATION_LEVEL = TableProperty(
    "delta.isolationLevel", DEFAULT_ISOLATION_LEVEL, IsolationLevel.parse_table_level
)
RANDOMIZE_FILE_PREFIXES = TableProperty("delta.randomizeFilePrefixes", False, parse_bool)
RANDOM_PREFIX_LENGTH = TableProperty("delta.randomPrefixLength", 2, parse_positive_int)
TARGET_FILE_SIZE: TableProperty[int | None] = TableProperty(
    "delta.targetFileSize", None, _optional(parse_byte_size)
)
"""The size OPTIMIZE aims its files at. Unset, OPTIMIZE uses the session setting
``spark.databricks.delta.optimize.maxFileSize`` (Delta's default 1 GiB)."""
AUTO_COMPACT = TableProperty("delta.autoOptimize.autoCompact", False, parse_bool)
"""Compact small files after each write that adds files (Delta's auto compaction); the session
setting ``spark.databricks.delta.autoCompact.enabled`` overrides it."""


def random_prefix_length(configuration: Mapping[str, str] | None, *, partitioned_mapped: bool = False) -> int:
    """The length of the random directory prefix new files of a table go under (0: none), as
    Delta places them: ``delta.randomPrefixLength`` characters when ``delta.randomizeFilePrefixes``
    is true, and for the data files of a partitioned table with column mapping
    (``partitioned_mapped``), whose partition directories would otherwise name physical columns."""
    if RANDOMIZE_FILE_PREFIXES.value_in(configuration) or partitioned_mapped:
        return RANDOM_PREFIX_LENGTH.value_in(configuration)
    return 0


KNOWN_PROPERTIES: tuple[TableProperty, ...] = (
    APPEND_ONLY,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    IN_COMMIT_TIMESTAMP_ENABLEMENT_VERSION,
    IN_COMMIT_TIMESTAMP_ENABLEMENT_TIMESTAMP,
    CHECKPOINT_INTERVAL,
    LOG_RETENTION,
    DELETED_FILE_RETENTION,
    SET_TRANSACTION_RETENTION,
    ENABLE_EXPIRED_LOG_CLEANUP,
    DATA_SKIPPING_NUM_INDEXED_COLS,
    DATA_SKIPPING_STRING_PREFIX_LENGTH,
    DATA_SKIPPING_STATS_COLUMNS,
    COLUMN_MAPPING_MODE,
    ENABLE_DELETION_VECTORS,
    ISOLATION_LEVEL,
    RANDOMIZE_FILE_PREFIXES,
    RANDOM_PREFIX_LENGTH,
    TARGET_FILE_SIZE,
    AUTO_COMPACT,
)
"""Every property this library parses."""


# -- properties that enable table features this library does not write -----------------------------
def parse_checkpoint_policy(text: str) -> str:
    policy = text.strip().lower()
    if policy not in ("classic", "v2"):
        raise ValueError("can be one of the following: classic, v2")
    return policy


ENABLE_ROW_TRACKING = TableProperty("delta.enableRowTracking", False, parse_bool)
MATERIALIZED_ROW_ID_KEY = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_ROW_COMMIT_VERSION_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"


def with_row_tracking_columns(configuration: Mapping[str, str]) -> dict[str, str]:
    """``configuration`` with the names of the hidden columns Delta keeps row ids and row commit
    versions in (fresh ones, unless given) when it enables row tracking; as it is otherwise."""
    named = dict(configuration)
    if ENABLE_ROW_TRACKING.value_in(named):
        named.setdefault(MATERIALIZED_ROW_ID_KEY, f"_row-id-col-{uuid.uuid4()}")
        named.setdefault(MATERIALIZED_ROW_COMMIT_VERSION_KEY, f"_row-commit-version-col-{uuid.uuid4()}")
    return named


ENABLE_TYPE_WIDENING = TableProperty("delta.enableTypeWidening", False, parse_bool)
ENABLE_ICEBERG_COMPAT_V1 = TableProperty("delta.enableIcebergCompatV1", False, parse_bool)
ENABLE_ICEBERG_COMPAT_V2 = TableProperty("delta.enableIcebergCompatV2", False, parse_bool)
CHECKPOINT_POLICY = TableProperty("delta.checkpointPolicy", "classic", parse_checkpoint_policy)
ICEBERG_COMPAT_VERSIONS: tuple[tuple[int, TableProperty[bool]], ...] = (
    (1, ENABLE_ICEBERG_COMPAT_V1),
    (2, ENABLE_ICEBERG_COMPAT_V2),
)


def iceberg_compat_versions(configuration: Mapping[str, str]) -> list[int]:
    """The IcebergCompat versions ``configuration`` enables (one at most on a valid table;
    :mod:`replay.protocol.iceberg_compat` has their rules)."""
    return [version for version, prop in ICEBERG_COMPAT_VERSIONS if prop.value_in(configuration)]


def iceberg_compat_version(configuration: Mapping[str, str]) -> int | None:
    """The IcebergCompat version a table with ``configuration`` enables (``None``: none)."""
    versions = iceberg_compat_versions(configuration)
    return versions[-1] if versions else None


FEATURE_PROPERTIES: tuple[TableProperty, ...] = (
    ENABLE_ROW_TRACKING,
    ENABLE_TYPE_WIDENING,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    CHECKPOINT_POLICY,
)
"""Properties parsed only to know which table feature they enable (see
:mod:`replay.protocol.table_features`)."""


def check_table_properties(configuration: Mapping[str, str]) -> None:
    """Parse every known property set in ``configuration`` (a new table's), raising
    :class:`InvalidTablePropertyError` naming the first one whose value Delta would refuse."""
    for prop in (*KNOWN_PROPERTIES, *FEATURE_PROPERTIES):
        prop.value_in(configuration)


PASS_THROUGH_KEYS = (
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.checkpointRetentionDuration",
    "delta.minReaderVersion",
    "delta.minWriterVersion",
    "delta.tuneFileSizesForRewrites",
)
"""Delta table properties this library stores without interpreting them."""
OTHER_DELTA_KEYS = (
    "delta.autoOptimize",
    "delta.autoOptimize.autoCompact",
    "delta.autoOptimize.optimizeWrite",
    "delta.checkpointRetentionDuration",
    "delta.columnMapping.maxColumnId",
    "delta.compatibility.symlinkFormatManifest.enabled",
    "delta.coordinatedCommits.commitCoordinator-preview",
    "delta.coordinatedCommits.commitCoordinatorConf-preview",
    "delta.coordinatedCommits.tableConf-preview",
    "delta.dropFeatureTruncateHistory.retentionDuration",
    "delta.enableChangeDataCapture",
    "delta.enableFullRetentionRollback",
    "delta.enableVariantShredding",
    "delta.ignoreProtocolDefaults",
    "delta.parquet.compression.codec",
    MATERIALIZED_ROW_COMMIT_VERSION_KEY,
    MATERIALIZED_ROW_ID_KEY,
    "delta.sampleRetentionDuration",
    "delta.universalFormat.enabledFormats",
)
"""The other keys of Delta's ``DeltaConfigs``: a ``delta.*`` key in none of these lists is one Delta
refuses (``DELTA_UNKNOWN_CONFIGURATION``)."""
NOT_USER_CONFIGURABLE = frozenset({"delta.columnMapping.maxColumnId"})
ALLOW_ARBITRARY_PROPERTIES_KEY = "spark.databricks.delta.allowArbitraryProperties.enabled"
_CANONICAL_KEYS = {
    key.lower(): key
    for key in (
        *(p.key for p in (*KNOWN_PROPERTIES, *FEATURE_PROPERTIES)),
        *PASS_THROUGH_KEYS,
        *OTHER_DELTA_KEYS,
    )
}


def canonical_property_key(key: str) -> str:
    """Delta's spelling of a table property key given in any case (``delta.appendonly`` ->
    ``delta.appendOnly``); unknown keys are returned unchanged. Delta matches these keys
    case-insensitively, and Spark hands data source options over in lower case."""
    return _CANONICAL_KEYS.get(key.lower(), key)


class UnknownTablePropertyError(InvalidTablePropertyError):
    """A ``delta.*`` key Delta does not define, or one a user may not set."""


def check_property_keys(properties: Mapping[str, str], *, allow_arbitrary: bool = False) -> dict[str, str]:
    """``properties`` with Delta's spelling of each known key, checked as Delta's
    ``validateConfigurations`` does: an unknown ``delta.*`` key raises
    :class:`UnknownTablePropertyError` (``DELTA_UNKNOWN_CONFIGURATION``) unless
    ``allow_arbitrary`` (Spark's ``spark.databricks.delta.allowArbitraryProperties.enabled``), an
    internal one ``DELTA_CANNOT_MODIFY_TABLE_PROPERTY``. CHECK constraints
    (``delta.constraints.*``) and table features (``delta.feature.*``) pass; other keys are the
    user's own."""
    checked: dict[str, str] = {}
    for key, value in properties.items():
        lowered = key.lower()
        if lowered.startswith("delta.constraints."):
            checked[key] = value
        elif lowered.startswith("delta.feature."):
            checked[lowered] = value
        elif lowered.startswith("delta."):
            canonical = _CANONICAL_KEYS.get(lowered)
            if canonical in NOT_USER_CONFIGURABLE:
                raise UnknownTablePropertyError(
                    f"[DELTA_CANNOT_MODIFY_TABLE_PROPERTY] The Delta table configuration {canonical} cannot "
                    "be specified by the user"
                )
            if canonical is None:
                if not allow_arbitrary:
                    raise UnknownTablePropertyError(
                        f"[DELTA_UNKNOWN_CONFIGURATION] Unknown configuration was specified: {key}\nTo "
                        f"disable this check, set {ALLOW_ARBITRARY_PROPERTIES_KEY}=true in the Spark "
                        "session configuration."
                    )
                canonical = key
            checked[canonical] = value
        else:
            checked[key] = value
    return checked


def changed_properties(current: Mapping[str, str], requested: Mapping[str, str]) -> list[str]:
    """The keys of ``requested`` whose value differs from ``current``'s (a known property compares
    by its parsed value, so an unset property equals its default; others compare as text)."""
    known = {prop.key: prop for prop in (*KNOWN_PROPERTIES, *FEATURE_PROPERTIES)}
    changed = []
    for key, value in requested.items():
        prop = known.get(key)
        if prop is not None:
            if prop.value_in({key: value}) != prop.value_in(current):
                changed.append(key)
        elif current.get(key) != value:
            changed.append(key)
    return changed
