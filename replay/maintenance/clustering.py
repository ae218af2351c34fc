"""Liquid clustering: OPTIMIZE of a clustered table (Delta's ``CLUSTER BY``), incremental as Delta's.

A clustered table (the ``clustering`` writer feature) names its clustering columns in the
``delta.clustering`` domain (:mod:`replay.protocol.clustering_columns`). OPTIMIZE on it clusters
rather than compacts, as Delta's ``ClusteringStrategy`` does:

* **which files** (:func:`cluster_candidates`): files never clustered, and files clustered by the
  same columns (``clusteringProvider`` ``liquid`` and a ``ZCUBE_ZORDER_BY`` tag naming them)
  whose *ZCube* (the files one clustering run wrote, ``ZCUBE_ID``) is still smaller than
  ``...mergeStrategy.minCubeSize.threshold`` (100 GiB); files clustered by other columns are
  left as they are, and a lone ZCube with nothing new to merge is not rewritten again.
  ``full`` (Delta's ``OPTIMIZE ... FULL``) takes every file;
* **how they are grouped**: in that order (unclustered files first, then by ZCube), into
  ZCubes of up to ``...minCubeSize.targetCubeSize`` (150 GiB);
* **how a ZCube is written**: its rows ordered along the Hilbert curve of the clustering
  columns' range ids (:mod:`replay.maintenance.hilbert`; one column: its ranges in order) and
  cut into ``max(1, size // target file size)`` files by
  :class:`~replay.maintenance.zorder.ZOrderRewriter`; every file it writes gets
  ``clusteringProvider: liquid`` and the ZCube's tags (:class:`ClusteringRewriter`).

A partition filter or ``ZORDER BY`` on a clustered table is Delta's
``DELTA_CLUSTERING_WITH_PARTITION_PREDICATE`` / ``DELTA_CLUSTERING_WITH_ZORDER_BY``.
Everything but the rewriter is pure.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from replay.maintenance.optimize_plan import (
    GIB,
    Bin,
    CompactionLimits,
    OptimizeMode,
    OptimizePlan,
    session_setting,
)
from replay.maintenance.optimize_rewrite import RewrittenBin
from replay.maintenance.zorder import ZOrderRewriter
from replay.protocol.actions import AddFile
from replay.protocol.clustering_columns import (
    ClusteringColumnError,
    clustering_column_name,
    domain_columns,
    logical_paths,
)
from replay.protocol.table_config import CLUSTERING
from replay.protocol.table_properties import parse_byte_size
from replay.state.scan import Filter
from replay.state.snapshot import Snapshot
from replay.txn.write_spec import FileWriteSpec

CLUSTERING_PROVIDER = "liquid"
ZCUBE_ID_TAG = "ZCUBE_ID"
ZCUBE_COLUMNS_TAG = "ZCUBE_ZORDER_BY"
MIN_CUBE_SIZE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.threshold"
TARGET_CUBE_SIZE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.targetCubeSize"
DEFAULT_MIN_CUBE_SIZE = 100 * GIB
"""Delta's default: 100 times the default target file size."""


class ClusteringError(ClusteringColumnError):
    """An OPTIMIZE argument Delta refuses on a clustered table (a partition filter, ZORDER BY)."""


def partition_predicate_error(predicates: str) -> ClusteringError:
    return ClusteringError(
        "[DELTA_CLUSTERING_WITH_PARTITION_PREDICATE] OPTIMIZE command for Delta table with Liquid "
        f"clustering doesn't support partition predicates. Please remove the predicates: {predicates}."
    )


def zorder_error(columns: Sequence[str]) -> ClusteringError:
    return ClusteringError(
        "[DELTA_CLUSTERING_WITH_ZORDER_BY] OPTIMIZE command for Delta table with Liquid clustering "
        f"cannot specify ZORDER BY. Please remove ZORDER BY ({', '.join(columns)})."
    )


# -- the clustering columns ----------------------------------------------------------------------
def clustering_paths(snapshot: Snapshot) -> list[tuple[str, ...]]:
    """The clustering columns of ``snapshot``'s table as logical paths (none for a table that is
    not clustered, or clustered ``BY NONE``). Raises
    :class:`~replay.protocol.clustering_columns.ClusteringColumnError` naming a column the schema
    does not have."""
    mapped = snapshot.config.column_mapping_mode != "none"
    physical = domain_columns(snapshot.domain_metadata)
    return logical_paths(snapshot.schema, physical, mapped, snapshot.io.shown_path)


def clustered_optimize(
    snapshot: Snapshot, zorder_columns: Sequence[str], partition_filters: Filter | str | None, *, full: bool
) -> list[tuple[str, ...]]:
    """The clustering columns an OPTIMIZE of ``snapshot``'s table clusters by (none: it compacts),
    after Delta's checks: on a clustered table no ``ZORDER BY`` and no partition filter, and
    ``FULL`` only on a clustered table with clustering columns
    (``DELTA_OPTIMIZE_FULL_NOT_SUPPORTED``)."""
    clustered = snapshot.protocol.has_writer_feature(CLUSTERING)
    if clustered and zorder_columns:
        raise zorder_error(zorder_columns)
    if clustered and partition_filters is not None:
        raise partition_predicate_error(str(partition_filters))
    paths = clustering_paths(snapshot) if clustered else []
    if full and not paths:
        raise ClusteringError(
            "[DELTA_OPTIMIZE_FULL_NOT_SUPPORTED] OPTIMIZE FULL is only supported for clustered tables "
            f"with non-empty clustering columns (table {snapshot.io.shown_path})."
        )
    return paths


# -- which files, in which ZCubes --------------------------------------------------------------
@dataclass(frozen=True)
class CubeSizes:
    """``min_cube``: a ZCube this large takes no more files; ``target``: the size a new one is
    filled up to."""

    min_cube: int = DEFAULT_MIN_CUBE_SIZE
    target: int = DEFAULT_MIN_CUBE_SIZE * 3 // 2

    @classmethod
    def from_conf(cls, conf: Mapping[str, str]) -> CubeSizes:
        smallest = session_setting(conf, MIN_CUBE_SIZE_KEY, parse_byte_size, DEFAULT_MIN_CUBE_SIZE)
        target = session_setting(conf, TARGET_CUBE_SIZE_KEY, parse_byte_size, smallest * 3 // 2)
        return cls(smallest, max(target, smallest))


def zcube_of(file: AddFile) -> tuple[str, str] | None:
    """The ZCube ``(id, columns as JSON)`` a clustering run put ``file`` in, if one did."""
    tags = file.tags or {}
    cube, columns = tags.get(ZCUBE_ID_TAG), tags.get(ZCUBE_COLUMNS_TAG)
    return (cube, columns) if cube is not None and columns is not None else None


def cluster_candidates(
    files: Sequence[AddFile], columns: Sequence[str], sizes: CubeSizes, *, full: bool = False
) -> list[AddFile]:
    """The files a clustering OPTIMIZE rewrites, in the order they are packed into ZCubes (see
    the module docstring); ``columns``: the clustering columns' names
    (:func:`clustering_column_name`)."""
    if full:
        return sorted(files, key=_cube_order)
    wanted = list(columns)
    kept = []
    for file in files:
        if file.clustering_provider not in (None, CLUSTERING_PROVIDER):
            continue
        cube = zcube_of(file)
        if cube is not None and _cube_columns(cube[1]) != wanted:
            continue  # clustered by other columns: left as it is
        kept.append(file)
    ordered = sorted(kept, key=_cube_order)
    fresh = [file for file in ordered if zcube_of(file) is None]
    cubes: dict[str, list[AddFile]] = {}
    for file in ordered:
        cube = zcube_of(file)
        if cube is not None:
            cubes.setdefault(cube[0], []).append(file)
    small = [members for members in cubes.values() if sum(f.size for f in members) < sizes.min_cube]
    if not fresh and len(small) <= 1:
        return []  # at most one ZCube and nothing new: already as clustered as it gets
    return fresh + [file for members in small for file in members]


def _cube_columns(tag: str) -> list[str] | None:
    """The columns a ``ZCUBE_ZORDER_BY`` tag names (``None`` for a tag that is no JSON list)."""
    try:
        value = orjson.loads(tag)
    except orjson.JSONDecodeError:
        return None
    return [str(name) for name in value] if isinstance(value, list) else None


def _cube_order(file: AddFile) -> tuple[bool, str, int, str]:
    cube = zcube_of(file)
    return (cube is not None, cube[0] if cube else "", file.modification_time, file.path)


def plan_clustering(
    files: Sequence[AddFile],
    columns: Sequence[str],
    limits: CompactionLimits,
    sizes: CubeSizes,
    *,
    full: bool,
) -> OptimizePlan:
    """The ZCubes (bins) of a clustering run over ``files`` (the table's active files)."""
    chosen = cluster_candidates(files, columns, sizes, full=full)
    bins: list[Bin] = []
    current: list[AddFile] = []
    size = 0
    for file in chosen:
        if current and size + file.size > sizes.target:
            bins.append(Bin({}, tuple(current)))
            current, size = [], 0
        current.append(file)
        size += file.size
    if current:
        bins.append(Bin({}, tuple(current)))
    return OptimizePlan(OptimizeMode.CLUSTER, limits, tuple(bins), len(files), ((),) if bins else ())


def clustering_run(
    snapshot: Snapshot,
    paths: Sequence[tuple[str, ...]],
    target_size: int | None,
    limits: CompactionLimits | None,
    *,
    full: bool,
    auto: bool = False,
) -> tuple[OptimizePlan, ClusteringRewriter, dict[str, object]]:
    """The plan, the rewriter and the ``OPTIMIZE`` parameters of a clustering run over
    ``snapshot``'s table, clustered by ``paths`` (``auto``: an auto compaction's run, which
    clusters as OPTIMIZE does, with ``limits`` of its own)."""
    conf = snapshot.io.conf
    limits = limits or CompactionLimits.for_run(OptimizeMode.COMPACT, snapshot.config, conf, target_size)
    names = [clustering_column_name(path) for path in paths]
    plan = plan_clustering(snapshot.files(), names, limits, CubeSizes.from_conf(conf), full=full)
    rewriter = ClusteringRewriter.for_snapshot(snapshot, paths, limits.max_file_size, int(time.time() * 1000))
    recorded: dict[str, object] = {"predicate": [], "zOrderBy": [], "clusterBy": names, "auto": auto}
    if full:
        recorded["isFull"] = True
    return plan, rewriter, recorded


# -- the rewrite ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusteringRewriter:
    """Writes each ZCube along the curve (a :class:`ZOrderRewriter` with the Hilbert curve) and
    tags its files as Delta tags a ZCube's (picklable; one bin per call)."""

    curve: ZOrderRewriter
    columns: tuple[str, ...]

    @classmethod
    def for_snapshot(
        cls, snapshot: Snapshot, paths: Sequence[tuple[str, ...]], max_file_size: int, deletion_timestamp: int
    ) -> ClusteringRewriter:
        hilbert = len(paths) > 1  # one column: its ranges in order
        curve = ZOrderRewriter.for_snapshot(
            snapshot, paths, max_file_size, deletion_timestamp, hilbert=hilbert
        )
        return cls(curve, tuple(clustering_column_name(path) for path in paths))

    @property
    def spec(self) -> FileWriteSpec:
        return self.curve.spec

    def with_read_ahead(self, files: int) -> ClusteringRewriter:
        return dataclasses.replace(self, curve=self.curve.with_read_ahead(files))

    def rewrite(self, work: Bin) -> RewrittenBin:
        rewritten = self.curve.rewrite(work)
        tags = {ZCUBE_ID_TAG: str(uuid.uuid4()), ZCUBE_COLUMNS_TAG: orjson.dumps(list(self.columns)).decode()}
        adds = tuple(
            dataclasses.replace(
                add, clustering_provider=CLUSTERING_PROVIDER, tags={**(add.tags or {}), **tags}
            )
            for add in rewritten.adds
        )
        return dataclasses.replace(rewritten, adds=adds)
