"""A clustered table's clustering columns (Delta's ``CLUSTER BY``): where they are kept, and which
columns may be clustering columns. Pure.

The ``clustering`` writer feature's table lists its clustering columns in the ``delta.clustering``
domain, ``{"clusteringColumns": [["physical", "path"], ...]}`` (physical names under column
mapping). A table gets them at creation (a write's ``cluster_by``) or from ALTER TABLE ... CLUSTER
BY, with Delta's checks (:func:`resolve_clustering_columns`): no partitioning, at most
:data:`MAX_CLUSTERING_COLUMNS`, each a column of the schema, of an ordered type, that statistics
cover.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import orjson

from replay.protocol.actions import DomainMetadata
from replay.protocol.column_mapping import stored_name
from replay.protocol.errors import DeltaError
from replay.protocol.schema import PrimitiveType, StructType
from replay.protocol.schema_evolution import explode, fields_along, resolve_path, type_name
from replay.protocol.sql.syntax import quote_if_needed

CLUSTERING_DOMAIN = "delta.clustering"
MAX_CLUSTERING_COLUMNS = 4
"""Delta's ``clusteredTable.numClusteringColumnsLimit``."""
UNORDERED_TYPES = frozenset({"void", "variant", "binary", "boolean"})
"""Primitive types whose statistics hold no bounds, so data skipping cannot use them."""


class ClusteringColumnError(DeltaError, ValueError):
    """Clustering columns Delta refuses, or a clustering column the schema does not have."""


def clustering_column_name(path: Sequence[str]) -> str:
    """A clustering column as Delta names it (``clusterBy``, ``ZCUBE_ZORDER_BY``): its parts, each
    backquoted where needed, joined by dots."""
    return ".".join(quote_if_needed(part) for part in path)


def domain_columns(domains: Mapping[str, DomainMetadata]) -> list[list[str]]:
    """The clustering columns as the ``delta.clustering`` domain lists them: physical paths."""
    domain = domains.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed or not domain.configuration:
        return []
    listed = orjson.loads(domain.configuration).get("clusteringColumns") or []
    return [[str(part) for part in path] if isinstance(path, list) else [str(path)] for path in listed]


def logical_paths(
    schema: StructType, physical: Sequence[Sequence[str]], mapped: bool, table: str
) -> list[tuple[str, ...]]:
    """``physical`` paths (the domain's) as logical paths of ``schema``; raises
    :class:`ClusteringColumnError` naming a column the schema does not have."""
    fields = dict(explode(schema, physical=mapped))
    paths = []
    for path in physical:
        along = [fields.get(tuple(path[:depth])) for depth in range(1, len(path) + 1)]
        if not along or any(found is None for found in along):
            raise ClusteringColumnError(
                f"Cannot cluster table {table}: its clustering column {clustering_column_name(path)} "
                "is not a column of its schema"
            )
        paths.append(tuple(found.name for found in along if found is not None))
    return paths


def clustering_column_names(
    schema: StructType, domains: Mapping[str, DomainMetadata], mapped: bool
) -> list[str]:
    """A table's clustering columns as Delta names them (DESCRIBE DETAIL, CLUSTER BY's parameters):
    logical paths, dotted; the domain's physical paths when a column is no longer in ``schema``."""
    physical = domain_columns(domains)
    try:
        paths = logical_paths(schema, physical, mapped, "")
    except ClusteringColumnError:
        return [clustering_column_name(path) for path in physical]
    return [clustering_column_name(path) for path in paths]


def clustering_domain(schema: StructType, paths: Sequence[Sequence[str]], mapped: bool) -> DomainMetadata:
    """The ``delta.clustering`` domain naming ``paths`` (logical paths of ``schema``)."""
    physical = [[stored_name(f, mapped) for f in fields_along(schema, path)] for path in paths]
    return DomainMetadata(CLUSTERING_DOMAIN, orjson.dumps({"clusteringColumns": physical}).decode())


def resolve_clustering_columns(
    schema: StructType,
    columns: Sequence[str],
    *,
    partition_columns: Sequence[str],
    covered: Collection[tuple[str, ...]],
    table: str,
) -> list[tuple[str, ...]]:
    """``columns`` (``a``, ``s.f``) as paths in the schema's spelling, checked as Delta checks
    clustering columns (see the module docstring); ``covered``: the leaf paths statistics cover.
    Raises :class:`ClusteringColumnError` with Delta's error class."""
    if partition_columns:
        raise ClusteringColumnError(
            "[DELTA_CLUSTER_BY_WITH_PARTITIONED_BY] Clustering and partitioning cannot both be specified "
            f"(table {table}, partition columns {list(partition_columns)})."
        )
    if len(columns) > MAX_CLUSTERING_COLUMNS:
        raise ClusteringColumnError(
            f"[DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS] CLUSTER BY supports up to {MAX_CLUSTERING_COLUMNS} "
            f"clustering columns, but the table has {len(columns)} clustering columns. Please remove the "
            f"extra clustering columns (table {table})."
        )
    paths = []
    for column in columns:
        resolved = resolve_path(schema, column)
        if resolved is None:
            raise ClusteringColumnError(
                f"[DELTA_COLUMN_NOT_FOUND] Unable to find the column `{column}` given "
                f"[{', '.join(schema.field_names)}] (table {table})"
            )
        paths.append(tuple(resolved))
    unsupported = []
    for path in paths:
        data_type = fields_along(schema, path)[-1].type
        if not isinstance(data_type, PrimitiveType) or data_type.name in UNORDERED_TYPES:
            unsupported.append(f"{clustering_column_name(path)} : {type_name(data_type)}")
    if unsupported:
        raise ClusteringColumnError(
            "[DELTA_CLUSTERING_COLUMNS_DATATYPE_NOT_SUPPORTED] CLUSTER BY is not supported because the "
            f"following column(s): {', '.join(unsupported)} don't support data skipping (table {table})."
        )
    lowered = {tuple(part.lower() for part in path) for path in covered}
    missing = [path for path in paths if tuple(part.lower() for part in path) not in lowered]
    if missing:
        raise ClusteringColumnError(
            "[DELTA_CLUSTERING_COLUMN_MISSING_STATS] Liquid clustering requires clustering columns to "
            f"have stats. Couldn't find clustering column(s) "
            f"'{', '.join(clustering_column_name(path) for path in missing)}' in stats schema "
            f"(table {table}: statistics cover the first delta.dataSkippingNumIndexedCols columns, or "
            "those delta.dataSkippingStatsColumns names)."
        )
    return paths
