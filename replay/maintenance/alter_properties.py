"""ALTER TABLE ... SET / UNSET TBLPROPERTIES, table features and protocol upgrades, as Delta does them.

Setting properties (Delta's ``AlterTableSetPropertiesDeltaCommand``): keys are checked and spelled
as Delta spells them (an unknown ``delta.*`` key is ``DELTA_UNKNOWN_CONFIGURATION`` unless
arbitrary properties are allowed), values are parsed, CHECK constraints must go through
ADD CONSTRAINT, ``comment`` is the table's description, and the protocol properties
``delta.minReaderVersion``, ``delta.minWriterVersion`` and ``delta.feature.<name>=supported`` upgrade
the protocol instead of being stored. The protocol then grows to what the new properties need
(``delta.enableChangeDataFeed`` needs writer 4 or the ``changeDataFeed`` feature,
``delta.enableDeletionVectors`` reader 3 / writer 7 with ``deletionVectors``, ...; see
:mod:`replay.protocol.table_features`); it is never downgraded. Enabling in-commit timestamps
records where they start (the transaction adds Delta's enablement properties).

Unsetting (``AlterTableUnsetPropertiesDeltaCommand``) removes keys; a missing one is
``DELTA_UNSET_NON_EXISTENT_PROPERTY`` unless ``raise_if_not_exists=False`` (Delta's IF EXISTS).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import orjson

from replay.log.table_io import TableIO
from replay.maintenance.alter_commit import commit_alter
from replay.maintenance.row_tracking_backfill import backfill_row_ids, protocol_parameters
from replay.protocol.actions import Metadata, Protocol
from replay.protocol.column_mapping import is_mapped
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.table_features import (
    FEATURE_PROPERTY_PREFIX,
    MIN_READER_VERSION_KEY,
    MIN_WRITER_VERSION_KEY,
    InvalidTableFeatureError,
    check_feature_status,
    protocol_with,
    protocol_with_versions,
    table_feature,
)
from replay.protocol.table_properties import (
    ALLOW_ARBITRARY_PROPERTIES_KEY,
    COLUMN_MAPPING_MODE,
    ENABLE_ROW_TRACKING,
    InvalidTablePropertyError,
    canonical_property_key,
    check_property_keys,
    check_table_properties,
    parse_bool,
    with_row_tracking_columns,
)
from replay.state.snapshot import Snapshot
from replay.txn.transaction import Transaction

CONSTRAINT_PREFIX = "delta.constraints."
COMMENT_KEY = "comment"


def _arbitrary_allowed(io: TableIO) -> bool:
    value = io.conf.get(ALLOW_ARBITRARY_PROPERTIES_KEY)
    return value is not None and parse_bool(value)


def _version(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidTableFeatureError(
            f"[DELTA_PROTOCOL_PROPERTY_NOT_INT] Protocol property {key} needs to be an integer. Found {value}"
        ) from None


def set_table_properties(
    io: TableIO, snapshot: Snapshot, properties: Mapping[str, str], *, raise_if_not_exists: bool = True
) -> int:
    """Set table properties (see the module docs); returns the committed version.

    ``raise_if_not_exists=False`` (or Spark's
    ``spark.databricks.delta.allowArbitraryProperties.enabled``) accepts ``delta.*`` keys Delta
    does not define. Raises :class:`InvalidTablePropertyError` naming the key (unknown key, bad
    value, a CHECK constraint), :class:`InvalidTableFeatureError` (unknown feature, bad status,
    protocol downgrade), :class:`~replay.protocol.errors.UnsupportedTableFeatureError` for what
    this library cannot write and for a column mapping change other than turning it on (``none``
    to ``name``), and Delta's conflict exceptions.
    """
    given = {str(key): str(value) for key, value in properties.items()}
    checked = check_property_keys(given, allow_arbitrary=not raise_if_not_exists or _arbitrary_allowed(io))
    metadata, protocol = _altered(io, snapshot, checked)  # every check, before anything is committed
    if _starts_row_tracking(snapshot.metadata.configuration or {}, metadata.configuration or {}):
        snapshot = backfill_row_ids(io, snapshot)  # every file gets row ids first (commits)
        metadata, protocol = _altered(io, snapshot, checked)
    return commit_alter(io, snapshot, "SET TBLPROPERTIES", {"properties": given}, metadata, protocol=protocol)


def _altered(io: TableIO, snapshot: Snapshot, checked: Mapping[str, str]) -> tuple[Metadata, Protocol]:
    """The metadata and protocol ``snapshot``'s table has with the properties ``checked`` set."""
    metadata = snapshot.metadata
    configuration = dict(metadata.configuration or {})
    description = metadata.description
    reader: int | None = None
    writer: int | None = None
    features: list[str] = []
    for key, value in checked.items():
        if key.lower().startswith(CONSTRAINT_PREFIX):
            raise InvalidTablePropertyError(
                f"[DELTA_ADD_CONSTRAINTS] Cannot set {key}: please use ALTER TABLE ADD CONSTRAINT to add "
                "CHECK constraints (DeltaTable.alter.add_constraint)."
            )
        if key == MIN_READER_VERSION_KEY:
            reader = _version(key, value)
        elif key == MIN_WRITER_VERSION_KEY:
            writer = _version(key, value)
        elif key.startswith(FEATURE_PROPERTY_PREFIX):
            check_feature_status(key, value)
            features.append(table_feature(key[len(FEATURE_PROPERTY_PREFIX) :]).name)
        elif key.lower() == COMMENT_KEY:
            description = value
        else:
            configuration[key] = value
    check_table_properties(configuration)
    _check_column_mapping_change(metadata.configuration or {}, configuration, io.shown_path)
    configuration = with_row_tracking_columns(configuration)
    protocol = protocol_with_versions(snapshot.protocol, reader, writer)
    if features:
        protocol = protocol_with(protocol, features, table_features=True)
    if is_mapped(configuration) and not is_mapped(metadata.configuration or {}):
        # Column mapping turned on: every field gets an id, and its name as its physical name
        # (the files written so far name the columns that way), as Delta does it.
        schema = metadata.schema
        changed = metadata.with_schema(
            schema, keep_names=True, configuration=configuration, description=description
        )
    else:
        changed = dataclasses.replace(metadata, configuration=configuration, description=description)
    return changed, protocol


def _starts_row_tracking(before: Mapping[str, str], after: Mapping[str, str]) -> bool:
    return ENABLE_ROW_TRACKING.value_in(after) and not ENABLE_ROW_TRACKING.value_in(before)


def _check_column_mapping_change(before: Mapping[str, str], after: Mapping[str, str], table: str) -> None:
    """Delta's rule: column mapping may only be turned on, from ``none`` to ``name``."""
    old, new = COLUMN_MAPPING_MODE.value_in(before), COLUMN_MAPPING_MODE.value_in(after)
    if old != new and not (old == "none" and new == "name"):
        raise UnsupportedTableFeatureError(
            f"[DELTA_UNSUPPORTED_COLUMN_MAPPING_MODE_CHANGE] Changing column mapping mode from '{old}' to "
            f"'{new}' is not supported (table {table}).",
            table=table,
            features=["columnMapping"],
        )


def unset_table_properties(
    io: TableIO, snapshot: Snapshot, keys: Iterable[str], *, raise_if_not_exists: bool = True
) -> int:
    """Remove table properties; returns the committed version. Raises
    :class:`InvalidTablePropertyError` with Delta's ``DELTA_UNSET_NON_EXISTENT_PROPERTY`` for a key
    the table does not have (unless ``raise_if_not_exists=False``), and for CHECK constraints
    and protocol properties, which other operations remove."""
    given = [str(key) for key in keys]
    metadata = snapshot.metadata
    configuration = dict(metadata.configuration or {})
    description = metadata.description
    for key in given:
        normalized = canonical_property_key(key)
        lowered = normalized.lower()
        if lowered.startswith(CONSTRAINT_PREFIX):
            raise InvalidTablePropertyError(
                f"Cannot unset {key}: please use ALTER TABLE DROP CONSTRAINT to remove CHECK constraints "
                "(DeltaTable.alter.drop_constraint)."
            )
        if lowered.startswith(FEATURE_PROPERTY_PREFIX) or normalized in (
            MIN_READER_VERSION_KEY,
            MIN_WRITER_VERSION_KEY,
        ):
            raise InvalidTablePropertyError(
                f"Cannot unset {key}: protocol versions and table features are not table properties and "
                "are never downgraded here."
            )
        if lowered == COMMENT_KEY:
            description = None
        elif normalized in configuration:
            del configuration[normalized]
        elif raise_if_not_exists:
            raise InvalidTablePropertyError(
                f"[DELTA_UNSET_NON_EXISTENT_PROPERTY] Attempted to unset non-existent property '{key}' in "
                f"table {io.shown_path}"
            )
    _check_column_mapping_change(metadata.configuration or {}, configuration, io.shown_path)
    changed = dataclasses.replace(metadata, configuration=configuration, description=description)
    return commit_alter(
        io,
        snapshot,
        "UNSET TBLPROPERTIES",
        {"properties": given, "ifExists": not raise_if_not_exists},
        changed,
    )


def add_features(
    io: TableIO,
    snapshot: Snapshot,
    features: Sequence[str],
    *,
    allow_protocol_versions_increase: bool = False,
) -> int:
    """Add table features to the protocol (Delta's ``delta.feature.<name> = supported``, committed
    as SET TBLPROPERTIES); returns the version. Moving the protocol to table features (writer 7,
    or reader 3 for a reader-writer feature) needs ``allow_protocol_versions_increase`` (deltalake's
    rule); otherwise :class:`InvalidTableFeatureError` names the features."""
    names = [table_feature(name).name for name in features]
    current = snapshot.protocol
    upgraded = protocol_with(current, names, table_features=True)
    raised = (upgraded.min_reader_version, upgraded.min_writer_version) != (
        current.min_reader_version,
        current.min_writer_version,
    )
    if raised and not allow_protocol_versions_increase:
        raise InvalidTableFeatureError(
            f"Adding table feature(s) {', '.join(names)} to table {io.shown_path} raises its protocol from "
            f"({current.min_reader_version},{current.min_writer_version}) to "
            f"({upgraded.min_reader_version},{upgraded.min_writer_version}): pass "
            "allow_protocol_versions_increase=True to allow it"
        )
    return set_table_properties(
        io, snapshot, {f"{FEATURE_PROPERTY_PREFIX}{name}": "supported" for name in names}
    )


def upgrade_protocol(io: TableIO, snapshot: Snapshot, reader_version: int, writer_version: int) -> int:
    """Raise the protocol versions (Delta's ``DeltaTable.upgradeTableProtocol``, operation
    UPGRADE PROTOCOL); the features the old versions implied stay supported. Raises
    :class:`InvalidTableFeatureError` for a downgrade or an unknown version."""
    protocol = protocol_with_versions(snapshot.protocol, reader_version, writer_version)
    txn = Transaction(io, snapshot, operation="UPGRADE PROTOCOL")
    if protocol != snapshot.protocol:
        txn.add_actions([protocol])
    txn.operation_parameters = {"newProtocol": orjson.dumps(protocol_parameters(protocol)).decode()}
    return txn.commit()


def set_table_name(io: TableIO, snapshot: Snapshot, name: str) -> int:
    """Set the table's name (deltalake's UPDATE TABLE METADATA; Delta names tables in a catalog)."""
    changed = dataclasses.replace(snapshot.metadata, name=name)
    update = orjson.dumps({"name": name, "description": None}).decode()
    return commit_alter(io, snapshot, "UPDATE TABLE METADATA", {"metadataUpdate": update}, changed)


def set_table_description(io: TableIO, snapshot: Snapshot, description: str) -> int:
    """Set the table's description (Delta's ``comment`` table property)."""
    return set_table_properties(io, snapshot, {COMMENT_KEY: description})
