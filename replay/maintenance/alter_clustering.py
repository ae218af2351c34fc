"""ALTER TABLE ... CLUSTER BY: choosing (or changing, or dropping) a table's clustering columns.

As Delta's ``AlterTableClusterByDeltaCommand``: a metadata-only commit (operation ``CLUSTER BY``,
parameters ``oldClusteringColumns`` / ``newClusteringColumns``) that gives the protocol the
``clustering`` and ``domainMetadata`` writer features and records the columns, by physical path,
in the ``delta.clustering`` domain; ``CLUSTER BY NONE`` (no columns) keeps the table clustered
with none. No file is rewritten: OPTIMIZE clusters what it finds
(:mod:`replay.maintenance.clustering`), leaving files clustered by earlier columns alone.

Delta's checks, before anything is committed: the table is not partitioned
(``DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED``), at most
:data:`MAX_CLUSTERING_COLUMNS` columns (``DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS``), each a column
of the schema (``DELTA_COLUMN_NOT_FOUND``) of a type with statistics
(``DELTA_CLUSTERING_COLUMNS_DATATYPE_NOT_SUPPORTED``) that statistics cover
(``DELTA_CLUSTERING_COLUMN_MISSING_STATS``).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from replay.log.table_io import TableIO
from replay.maintenance.alter_columns import ColumnChangeError, resolve_column, struct_at, type_name
from replay.maintenance.clustering import (
    CLUSTERING_DOMAIN,
    ClusteringError,
    clustering_column_name,
    clustering_paths,
    domain_columns,
)
from replay.protocol.actions import DomainMetadata
from replay.protocol.column_mapping import stored_name
from replay.protocol.schema import PrimitiveType, StructType
from replay.protocol.table_config import CLUSTERING
from replay.protocol.table_features import protocol_with
from replay.state.snapshot import Snapshot
from replay.txn.statistics import indexed_paths
from replay.txn.transaction import Transaction

OPERATION = "CLUSTER BY"
MAX_CLUSTERING_COLUMNS = 4
"""Delta's ``clusteredTable.numClusteringColumnsLimit``."""
UNORDERED_TYPES = frozenset({"void", "variant", "binary", "boolean"})
"""Primitive types whose statistics hold no bounds, so data skipping cannot use them."""


def cluster_by(io: TableIO, snapshot: Snapshot, columns: Sequence[str] | None) -> int:
    """Cluster the table by ``columns`` (``a``, ``s.f``; ``None`` or empty: ``CLUSTER BY NONE``);
    returns the version. Raises :class:`ColumnChangeError` with Delta's error for a partitioned
    table or a column that cannot cluster (see the module docstring)."""
    table = io.shown_path
    if snapshot.partition_columns:
        raise ColumnChangeError(
            "[DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED] ALTER TABLE CLUSTER BY "
            f"cannot be applied to a partitioned table (table {table}).",
            table=table,
        )
    given = list(columns or [])
    if len(given) > MAX_CLUSTERING_COLUMNS:
        raise ColumnChangeError(
            f"[DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS] CLUSTER BY supports up to {MAX_CLUSTERING_COLUMNS} "
            f"clustering columns, but the table has {len(given)} clustering columns. Please remove the "
            f"extra clustering columns (table {table}).",
            table=table,
        )
    schema = snapshot.schema
    paths = [tuple(resolve_column(schema, column, table)) for column in given]
    _check_clusterable(snapshot, paths, table)
    before = _current_names(snapshot)
    mapped = snapshot.config.column_mapping_mode != "none"
    physical = [_physical_path(schema, path, mapped) for path in paths]
    domain = DomainMetadata(CLUSTERING_DOMAIN, orjson.dumps({"clusteringColumns": physical}).decode())
    protocol = protocol_with(snapshot.protocol, ["domainMetadata", CLUSTERING])
    txn = Transaction(io, snapshot, operation=OPERATION)
    if protocol != snapshot.protocol:
        txn.add_actions([protocol])
    txn.add_actions([domain])
    txn.operation_parameters = {
        "oldClusteringColumns": ",".join(before),
        "newClusteringColumns": ",".join(clustering_column_name(path) for path in paths),
    }
    return txn.commit()


def _current_names(snapshot: Snapshot) -> list[str]:
    """The table's clustering columns now, as Delta names them (physical paths for columns the
    schema no longer has)."""
    if not snapshot.protocol.has_writer_feature(CLUSTERING):
        return []
    try:
        return [clustering_column_name(path) for path in clustering_paths(snapshot)]
    except ClusteringError:
        return [clustering_column_name(path) for path in domain_columns(snapshot)]


def _check_clusterable(snapshot: Snapshot, paths: Sequence[tuple[str, ...]], table: str) -> None:
    unsupported = []
    for path in paths:
        leaf = struct_at(snapshot.schema, path[:-1]).field(path[-1])
        if not isinstance(leaf.type, PrimitiveType) or leaf.type.name in UNORDERED_TYPES:
            unsupported.append(f"{clustering_column_name(path)} : {type_name(leaf.type)}")
    if unsupported:
        raise ColumnChangeError(
            "[DELTA_CLUSTERING_COLUMNS_DATATYPE_NOT_SUPPORTED] CLUSTER BY is not supported because the "
            f"following column(s): {', '.join(unsupported)} don't support data skipping (table {table}).",
            table=table,
        )
    config = snapshot.config
    covered = {
        tuple(part.lower() for part in leaf)
        for leaf in indexed_paths(
            snapshot.metadata.arrow_schema, config.num_indexed_cols, config.stats_columns
        )
    }
    missing = [path for path in paths if tuple(part.lower() for part in path) not in covered]
    if missing:
        raise ColumnChangeError(
            "[DELTA_CLUSTERING_COLUMN_MISSING_STATS] Liquid clustering requires clustering columns to "
            f"have stats. Couldn't find clustering column(s) "
            f"'{', '.join(clustering_column_name(path) for path in missing)}' in stats schema "
            f"(table {table}: statistics cover the first {config.num_indexed_cols} columns, "
            "delta.dataSkippingNumIndexedCols, or those delta.dataSkippingStatsColumns names).",
            table=table,
        )


def _physical_path(schema: StructType, path: Sequence[str], mapped: bool) -> list[str]:
    names = []
    fields = schema.fields
    for name in path:
        found = next(f for f in fields if f.name == name)
        names.append(stored_name(found, mapped))
        fields = found.type.fields if isinstance(found.type, StructType) else []
    return names
