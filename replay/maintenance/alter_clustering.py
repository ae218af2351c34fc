"""ALTER TABLE ... CLUSTER BY: choosing (or changing, or dropping) a table's clustering columns.

As Delta's ``AlterTableClusterByDeltaCommand``: a metadata-only commit (operation ``CLUSTER BY``,
parameters ``oldClusteringColumns`` / ``newClusteringColumns``) that gives the protocol the
``clustering`` and ``domainMetadata`` writer features and records the columns, by physical path,
in the ``delta.clustering`` domain; ``CLUSTER BY NONE`` (no columns) keeps the table clustered
with none. No file is rewritten: OPTIMIZE clusters what it finds
(:mod:`replay.maintenance.clustering`), leaving files clustered by earlier columns alone. The
columns are checked as Delta checks them before anything is committed
(:func:`~replay.protocol.clustering_columns.resolve_clustering_columns`).
"""

from __future__ import annotations

from collections.abc import Sequence

from replay.log.table_io import TableIO
from replay.protocol.clustering_columns import (
    ClusteringColumnError,
    clustering_column_name,
    clustering_column_names,
    clustering_domain,
    resolve_clustering_columns,
)
from replay.protocol.table_config import CLUSTERING
from replay.protocol.table_features import protocol_with
from replay.state.snapshot import Snapshot
from replay.txn.statistics import indexed_paths
from replay.txn.transaction import Transaction

OPERATION = "CLUSTER BY"


def cluster_by(io: TableIO, snapshot: Snapshot, columns: Sequence[str] | None) -> int:
    """Cluster the table by ``columns`` (``a``, ``s.f``; ``None`` or empty: ``CLUSTER BY NONE``);
    returns the version. Raises :class:`ClusteringColumnError` with Delta's error for a
    partitioned table or a column that cannot cluster."""
    table = io.shown_path
    if snapshot.partition_columns:
        raise ClusteringColumnError(
            "[DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED] ALTER TABLE CLUSTER BY "
            f"cannot be applied to a partitioned table (table {table})."
        )
    config = snapshot.config
    covered = indexed_paths(snapshot.metadata.arrow_schema, config.num_indexed_cols, config.stats_columns)
    paths = resolve_clustering_columns(
        snapshot.schema, list(columns or []), partition_columns=(), covered=covered, table=table
    )
    before = _current_names(snapshot)
    domain = clustering_domain(snapshot.schema, paths, config.column_mapping_mode != "none")
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
    """The table's clustering columns now, as Delta names them."""
    if not snapshot.protocol.has_writer_feature(CLUSTERING):
        return []
    mapped = snapshot.config.column_mapping_mode != "none"
    return clustering_column_names(snapshot.schema, snapshot.domain_metadata, mapped)
