"""``TableAlterer``: deltalake's ``DeltaTable.alter`` over this library's ALTER operations.

Each method works on the table's latest version and makes one commit (ADD CONSTRAINT one per
constraint, as Delta does), through :mod:`~replay.maintenance.alter_properties`,
:mod:`~replay.maintenance.alter_columns` and :mod:`~replay.maintenance.alter_constraints`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from replay.log.table_io import TableIO
from replay.maintenance import (
    alter_clustering,
    alter_columns,
    alter_constraints,
    alter_mapped_columns,
    alter_properties,
)
from replay.state.snapshot import Snapshot

_DELTA_RS_FEATURE_NAMES = {
    "TimestampWithoutTimezone": "timestampNtz",
    "VariantTypePreview": "variantType-preview",
}
"""deltalake ``TableFeatures`` members whose Delta name is not their own name in camelCase."""


def feature_name(feature: Any) -> str:
    """A table feature given by Delta's name (any case) or as a deltalake ``TableFeatures`` member."""
    if isinstance(feature, str):
        return feature
    member = str(feature).rsplit(".", 1)[-1]
    return _DELTA_RS_FEATURE_NAMES.get(member, member)


class TableAlterer:
    """Changes to a table's properties, protocol, columns and constraints (see the module docs).

    ``latest`` returns the table's latest snapshot; ``committed`` is called with each committed
    version (the facade moves to it).
    """

    def __init__(
        self, io: TableIO, latest: Callable[[], Snapshot], committed: Callable[[int], None] | None = None
    ) -> None:
        self._io = io
        self._latest = latest
        self._committed = committed

    def _done(self, version: int) -> None:
        if self._committed is not None:
            self._committed(version)

    def set_table_properties(self, properties: Mapping[str, str], raise_if_not_exists: bool = True) -> None:
        """Set table properties (Delta's ALTER TABLE SET TBLPROPERTIES): ``delta.*`` properties
        are checked and may upgrade the protocol; ``delta.feature.<name>: supported`` adds a
        feature; ``raise_if_not_exists=False`` accepts ``delta.*`` keys Delta does not define."""
        self._done(
            alter_properties.set_table_properties(
                self._io, self._latest(), properties, raise_if_not_exists=raise_if_not_exists
            )
        )

    def unset_table_properties(self, keys: Iterable[str], raise_if_not_exists: bool = True) -> None:
        """Remove table properties (Delta's ALTER TABLE UNSET TBLPROPERTIES [IF EXISTS])."""
        self._done(
            alter_properties.unset_table_properties(
                self._io, self._latest(), list(keys), raise_if_not_exists=raise_if_not_exists
            )
        )

    def add_feature(self, feature: Any, allow_protocol_versions_increase: bool = False) -> None:
        """Add one table feature or a list of them to the protocol; a move to reader 3 / writer 7
        needs ``allow_protocol_versions_increase``."""
        features = feature if isinstance(feature, list | tuple) else [feature]
        self._done(
            alter_properties.add_features(
                self._io,
                self._latest(),
                [feature_name(f) for f in features],
                allow_protocol_versions_increase=allow_protocol_versions_increase,
            )
        )

    def upgrade_protocol(self, reader_version: int, writer_version: int) -> None:
        """Raise the protocol versions (Delta's ``upgradeTableProtocol``)."""
        self._done(
            alter_properties.upgrade_protocol(self._io, self._latest(), reader_version, writer_version)
        )

    def add_columns(self, fields: Any) -> None:
        """Add nullable columns (a field or a list: ``StructField``, ``pyarrow.Field`` or a
        deltalake ``Field``); a struct field with an existing struct column's name adds its fields
        to that struct."""
        columns = fields if isinstance(fields, list | tuple) else [fields]
        self._done(alter_columns.add_columns(self._io, self._latest(), columns))

    def set_column_metadata(self, column: str, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` into a column's metadata (``a.b`` for a struct field)."""
        self._done(alter_columns.set_column_metadata(self._io, self._latest(), column, metadata))

    def change_column_type(self, column: str, data_type: Any) -> None:
        """Widen a column's type (``a``, ``s.f``; ``data_type``: ``"bigint"``, ``"decimal(12,2)"``, a
        pyarrow type ...): Delta's ALTER TABLE ALTER COLUMN ... TYPE, on a table with type widening,
        recorded in ``delta.typeChanges``; no file is rewritten."""
        self._done(alter_columns.change_column_type(self._io, self._latest(), column, data_type))

    def rename_column(self, column: str, new_name: str) -> None:
        """Rename a column (``a.b`` for a struct field): Delta's ALTER TABLE RENAME COLUMN, a
        metadata-only change that needs column mapping (:mod:`replay.maintenance.alter_mapped_columns`)."""
        self._done(alter_mapped_columns.rename_column(self._io, self._latest(), column, new_name))

    def drop_columns(self, columns: str | Sequence[str], raise_if_not_exists: bool = True) -> None:
        """Drop columns (``a.b`` for a struct field): Delta's ALTER TABLE DROP COLUMNS [IF EXISTS],
        metadata-only, under column mapping."""
        given = [columns] if isinstance(columns, str) else list(columns)
        version = alter_mapped_columns.drop_columns(
            self._io, self._latest(), given, if_exists=not raise_if_not_exists
        )
        if version is not None:
            self._done(version)

    def cluster_by(self, columns: Sequence[str] | None) -> None:
        """Cluster the table by ``columns`` (``a``, ``s.f``; at most four; ``None``: ``CLUSTER BY
        NONE``): Delta's ALTER TABLE CLUSTER BY, a metadata-only commit; OPTIMIZE then clusters
        (:mod:`replay.maintenance.alter_clustering`)."""
        self._done(alter_clustering.cluster_by(self._io, self._latest(), columns))

    def add_constraint(self, constraints: Mapping[str, str]) -> None:
        """Add CHECK constraints ``{name: SQL expression}``, each checked against every row first,
        one commit each."""
        for name, expression in constraints.items():
            self._done(alter_constraints.add_constraint(self._io, self._latest(), name, expression))

    def drop_constraint(self, name: str, raise_if_not_exists: bool = True) -> None:
        """Drop a CHECK constraint (Delta's ALTER TABLE DROP CONSTRAINT [IF EXISTS])."""
        self._done(
            alter_constraints.drop_constraint(
                self._io, self._latest(), name, raise_if_not_exists=raise_if_not_exists
            )
        )

    def set_table_name(self, name: str) -> None:
        self._done(alter_properties.set_table_name(self._io, self._latest(), name))

    def set_table_description(self, description: str) -> None:
        self._done(alter_properties.set_table_description(self._io, self._latest(), description))
