"""Delta's table features and the protocol a table's configuration and schema need: the one home.

A table feature is a capability readers and/or writers must understand. Protocols below writer
version 7 name no features: each legacy version implies a fixed set (writer 2: ``appendOnly`` and
``invariants``, 3: ``checkConstraints``, 4: ``changeDataFeed`` and ``generatedColumns``, 5:
``columnMapping``, 6: ``identityColumns``; reader 2: ``columnMapping``). Writer 7 lists its writer
features and reader 3 its reader features (Delta's ``TableFeatureSupport``).

:func:`metadata_features` is what a table's metadata needs (a property such as
``delta.enableChangeDataFeed=true``, CHECK constraints, a ``timestamp_ntz`` column), and
:func:`protocol_with` the smallest upgrade of a protocol that supports more features, as Delta's
``Protocol.merge`` computes it: legacy versions where every missing feature is a legacy one, table
features otherwise, keeping every feature the table already had (the legacy versions' implied
features become listed features). Protocols are never downgraded here. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replay.protocol.actions import Metadata, Protocol
from replay.protocol.errors import DeltaError, UnsupportedTableFeatureError
from replay.protocol.table_properties import (
    APPEND_ONLY,
    CHECKPOINT_POLICY,
    COLUMN_MAPPING_MODE,
    ENABLE_CHANGE_DATA_FEED,
    ENABLE_DELETION_VECTORS,
    ENABLE_ICEBERG_COMPAT_V1,
    ENABLE_ICEBERG_COMPAT_V2,
    ENABLE_IN_COMMIT_TIMESTAMPS,
    ENABLE_ROW_TRACKING,
    ENABLE_TYPE_WIDENING,
)

TABLE_FEATURES_READER_VERSION = 3
TABLE_FEATURES_WRITER_VERSION = 7
FEATURE_PROPERTY_PREFIX = "delta.feature."
"""``delta.feature.<name> = supported`` adds a feature to a table's protocol (never stored)."""
MIN_READER_VERSION_KEY = "delta.minReaderVersion"
MIN_WRITER_VERSION_KEY = "delta.minWriterVersion"
FEATURE_STATUSES = ("supported", "enabled")


class InvalidTableFeatureError(DeltaError, ValueError):
    """A table feature name or status, or protocol versions, that Delta would refuse."""


@dataclass(frozen=True)
class TableFeature:
    """One of Delta's table features: the protocol versions it needs and what it depends on."""

    name: str
    min_reader_version: int
    min_writer_version: int
    reader_writer: bool = False
    """Readers must understand it too (listed in ``readerFeatures`` under reader version 3)."""
    legacy: bool = False
    """Implied by a legacy protocol version (introduced before table features)."""
    requires: tuple[str, ...] = ()


_FEATURES = (
    TableFeature("appendOnly", 1, 2, legacy=True),
    TableFeature("invariants", 1, 2, legacy=True),
    TableFeature("checkConstraints", 1, 3, legacy=True),
    TableFeature("changeDataFeed", 1, 4, legacy=True),
    TableFeature("generatedColumns", 1, 4, legacy=True),
    TableFeature("columnMapping", 2, 5, reader_writer=True, legacy=True),
    TableFeature("identityColumns", 1, 6, legacy=True),
    TableFeature("inCommitTimestamp", 1, 7),
    TableFeature("timestampNtz", 3, 7, reader_writer=True),
    TableFeature("deletionVectors", 3, 7, reader_writer=True),
    TableFeature("domainMetadata", 1, 7),
    TableFeature("rowTracking", 1, 7, requires=("domainMetadata",)),
    TableFeature("clustering", 1, 7, requires=("domainMetadata",)),
    TableFeature("v2Checkpoint", 3, 7, reader_writer=True),
    TableFeature("vacuumProtocolCheck", 3, 7, reader_writer=True),
    TableFeature("checkpointProtection", 1, 7),
    TableFeature("typeWidening", 3, 7, reader_writer=True),
    TableFeature("typeWidening-preview", 3, 7, reader_writer=True),
    TableFeature("variantType", 3, 7, reader_writer=True),
    TableFeature("variantType-preview", 3, 7, reader_writer=True),
    TableFeature("icebergCompatV1", 1, 7, requires=("columnMapping",)),
    TableFeature("icebergCompatV2", 1, 7, requires=("columnMapping",)),
    TableFeature("allowColumnDefaults", 1, 7),
)
FEATURES: dict[str, TableFeature] = {feature.name: feature for feature in _FEATURES}
"""Every feature Delta defines that this library knows, in the order protocols list them."""
_BY_LOWER = {name.lower(): feature for name, feature in FEATURES.items()}
_ORDER = {name: index for index, name in enumerate(FEATURES)}


def table_feature(name: str) -> TableFeature:
    """The feature called ``name`` (any case). Raises :class:`InvalidTableFeatureError` with Delta's
    ``DELTA_UNSUPPORTED_FEATURES_IN_CONFIG`` for a name Delta does not know."""
    found = _BY_LOWER.get(name.strip().lower())
    if found is None:
        raise InvalidTableFeatureError(
            "[DELTA_UNSUPPORTED_FEATURES_IN_CONFIG] Table features configured in the following Spark "
            "configs or Delta table properties are not recognized by this version of Delta Lake: "
            f"{FEATURE_PROPERTY_PREFIX}{name}."
        )
    return found


def check_feature_status(key: str, value: str) -> None:
    """``delta.feature.<name>`` takes ``supported`` or ``enabled`` (Delta's
    ``DELTA_UNSUPPORTED_FEATURE_STATUS`` otherwise)."""
    if value.strip().lower() not in FEATURE_STATUSES:
        name = key[len(FEATURE_PROPERTY_PREFIX) :]
        raise InvalidTableFeatureError(
            f"[DELTA_UNSUPPORTED_FEATURE_STATUS] Expecting the status for table feature {name} to be "
            f'"supported", but got "{value}".'
        )


# -- what a protocol supports ---------------------------------------------------------------------
def uses_table_features(protocol: Protocol) -> bool:
    return protocol.min_writer_version >= TABLE_FEATURES_WRITER_VERSION


def implied_features(reader_version: int, writer_version: int) -> list[str]:
    """The features a legacy protocol ``(reader, writer)`` implies (none for table features)."""
    if writer_version >= TABLE_FEATURES_WRITER_VERSION:
        return []
    return [
        f.name
        for f in _FEATURES
        if f.legacy
        and f.min_writer_version <= writer_version
        and f.min_reader_version <= max(reader_version, 1)
    ]


def supported_features(protocol: Protocol) -> list[str]:
    """Every feature ``protocol`` supports: the listed ones under writer version 7 (which implies
    none), else those its legacy versions imply (Delta's ``implicitlyAndExplicitlySupportedFeatures``)."""
    if uses_table_features(protocol):
        return list(dict.fromkeys([*(protocol.writer_features or ()), *(protocol.reader_features or ())]))
    return implied_features(protocol.min_reader_version, protocol.min_writer_version)


def dependency_closure(names: Iterable[str]) -> list[str]:
    """``names`` and every feature they depend on, transitively (Delta's ``getDependencyClosure``)."""
    result: list[str] = []
    pending = list(names)
    while pending:
        name = pending.pop(0)
        if name in result:
            continue
        result.append(name)
        feature = FEATURES.get(name)
        pending.extend(feature.requires if feature is not None else ())
    return result


# -- what metadata needs --------------------------------------------------------------------------
def metadata_features(configuration: Mapping[str, str], schema_string: str) -> list[str]:
    """The features a table's properties and schema need (Delta's features automatically enabled by
    metadata), dependencies included, in protocol order."""
    needed = {
        "appendOnly": APPEND_ONLY.value_in(configuration),
        "invariants": "delta.invariants" in schema_string,
        "checkConstraints": any(key.startswith("delta.constraints.") for key in configuration),
        "changeDataFeed": ENABLE_CHANGE_DATA_FEED.value_in(configuration),
        "generatedColumns": "delta.generationExpression" in schema_string,
        "columnMapping": COLUMN_MAPPING_MODE.value_in(configuration) != "none",
        "identityColumns": "delta.identity." in schema_string,
        "inCommitTimestamp": ENABLE_IN_COMMIT_TIMESTAMPS.value_in(configuration),
        "timestampNtz": '"timestamp_ntz"' in schema_string,
        "deletionVectors": ENABLE_DELETION_VECTORS.value_in(configuration),
        "rowTracking": ENABLE_ROW_TRACKING.value_in(configuration),
        "v2Checkpoint": CHECKPOINT_POLICY.value_in(configuration) == "v2",
        "typeWidening": ENABLE_TYPE_WIDENING.value_in(configuration),
        "variantType": '"variant"' in schema_string,
        "icebergCompatV1": ENABLE_ICEBERG_COMPAT_V1.value_in(configuration),
        "icebergCompatV2": ENABLE_ICEBERG_COMPAT_V2.value_in(configuration),
    }
    return _ordered(dependency_closure(name for name, used in needed.items() if used))


def features_of_metadata(metadata: Metadata) -> list[str]:
    return metadata_features(metadata.configuration or {}, metadata.schema_string or "")


# -- upgrades --------------------------------------------------------------------------------------
def protocol_with(current: Protocol, features: Iterable[str], *, table_features: bool = False) -> Protocol:
    """The smallest upgrade of ``current`` that supports ``features`` (``current`` itself if it
    already does), as Delta's ``Protocol.merge``: every feature ``current`` supports is kept (a
    legacy protocol's implied features become listed ones once it moves to table features), legacy
    versions are raised while only legacy features are missing, and a missing non-legacy feature
    moves the protocol to writer 7 (and reader 3 for a reader-writer feature).
    ``table_features=True`` moves to table features even for legacy features (Delta's
    ``delta.feature.<name>`` properties)."""
    wanted = dependency_closure(features)
    have = supported_features(current)
    missing = [name for name in wanted if name not in have]
    if not missing and not (table_features and wanted and not uses_table_features(current)):
        return current
    needs = [FEATURES[name] for name in missing if name in FEATURES]
    reader = max([current.min_reader_version, *(f.min_reader_version for f in needs)])
    writer = max([current.min_writer_version, *(f.min_writer_version for f in needs)])
    if not table_features and writer < TABLE_FEATURES_WRITER_VERSION:
        return Protocol(min_reader_version=reader, min_writer_version=writer)
    return _table_features_protocol(current, have, missing, reader)


def _table_features_protocol(current: Protocol, have: list[str], added: list[str], reader: int) -> Protocol:
    """A writer-7 protocol listing ``have`` (what ``current`` supports, its own order first) and
    ``added``; reader version 3 with reader features once a listed reader-writer feature needs it or
    ``reader`` asks for it."""
    writer_list = list(current.writer_features or ()) if uses_table_features(current) else []
    writer_list += [name for name in have if name not in writer_list]
    writer_list += [name for name in _ordered(added) if name not in writer_list]
    reader_writer = [n for n in writer_list if (f := FEATURES.get(n)) is not None and f.reader_writer]
    if any(FEATURES[n].min_reader_version >= TABLE_FEATURES_READER_VERSION for n in reader_writer):
        reader = TABLE_FEATURES_READER_VERSION
    if reader < TABLE_FEATURES_READER_VERSION:
        return Protocol(reader, TABLE_FEATURES_WRITER_VERSION, None, writer_list)
    reader_list = list(current.reader_features or ()) if current.min_reader_version >= 3 else []
    reader_list += [name for name in reader_writer if name not in reader_list]
    return Protocol(TABLE_FEATURES_READER_VERSION, TABLE_FEATURES_WRITER_VERSION, reader_list, writer_list)


def protocol_for_metadata(current: Protocol, metadata: Metadata) -> Protocol:
    """``current`` upgraded to support every feature ``metadata`` needs (:func:`metadata_features`)."""
    return protocol_with(current, features_of_metadata(metadata))


def protocol_with_versions(current: Protocol, reader: int | None, writer: int | None) -> Protocol:
    """``current`` raised to explicit protocol versions (``delta.minReaderVersion`` /
    ``delta.minWriterVersion``): the implied features are kept, moving to table features lists
    them. Raises :class:`InvalidTableFeatureError` (Delta's ``DELTA_INVALID_PROTOCOL_DOWNGRADE``)
    for a version below the current one, or a version Delta does not know."""
    new_reader = current.min_reader_version if reader is None else reader
    new_writer = current.min_writer_version if writer is None else writer
    for key, value, limit in (
        (MIN_READER_VERSION_KEY, new_reader, 3),
        (MIN_WRITER_VERSION_KEY, new_writer, 7),
    ):
        if not 1 <= value <= limit:
            raise InvalidTableFeatureError(
                f"{key} needs to be one of {', '.join(str(v) for v in range(1, limit + 1))}, got {value}"
            )
    if new_reader < current.min_reader_version or new_writer < current.min_writer_version:
        raise InvalidTableFeatureError(
            "[DELTA_INVALID_PROTOCOL_DOWNGRADE] Protocol version cannot be downgraded from "
            f"({current.min_reader_version},{current.min_writer_version}) to ({new_reader},{new_writer})"
        )
    if (new_reader, new_writer) == (current.min_reader_version, current.min_writer_version):
        return current
    if new_writer < TABLE_FEATURES_WRITER_VERSION:
        if new_reader >= TABLE_FEATURES_READER_VERSION:
            raise InvalidTableFeatureError(
                f"[DELTA_INVALID_PROTOCOL_VERSION] reader version {new_reader} needs writer version "
                f"{TABLE_FEATURES_WRITER_VERSION}, got {new_writer}"
            )
        return Protocol(min_reader_version=new_reader, min_writer_version=new_writer)
    return _table_features_protocol(current, supported_features(current), [], new_reader)


def merge_protocols(first: Protocol, second: Protocol) -> Protocol:
    """The smallest protocol supporting everything either supports (Delta's ``Protocol.merge``)."""
    merged = protocol_with_versions(
        first,
        max(first.min_reader_version, second.min_reader_version),
        max(first.min_writer_version, second.min_writer_version),
    )
    return protocol_with(merged, supported_features(second), table_features=uses_table_features(second))


def unsupported_feature_error(
    features: Iterable[str], table: str, action: str
) -> UnsupportedTableFeatureError:
    """The error for features this library cannot write (column mapping and the like)."""
    names = sorted(set(features))
    return UnsupportedTableFeatureError(
        f"Cannot {action} on table {table}: it needs table feature(s) this library cannot write: "
        f"{', '.join(names)}",
        table=table,
        features=names,
    )


def _ordered(names: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(names), key=lambda name: _ORDER.get(name, len(_ORDER)))
