"""OPTIMIZE of a clustered table clusters, incrementally, as Delta's liquid clustering does.

New files and the files of small ZCubes are rewritten together as one ZCube, ordered along the
Hilbert curve of the clustering columns, each file tagged with ``clusteringProvider: liquid`` and
the ZCube's tags; a lone ZCube is not rewritten again, nor are files clustered by other columns
or ZCubes past the minimum cube size; ``full=True`` reclusters everything. Delta's errors for a
partition filter or ZORDER BY, and delta-rs reads every result.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay import DeltaLog, DeltaTable, write_table
from replay.cli.main import main as cli_main
from replay.maintenance.clustering import (
    CLUSTERING_PROVIDER,
    ZCUBE_COLUMNS_TAG,
    ZCUBE_ID_TAG,
    ClusteringError,
    CubeSizes,
    cluster_candidates,
)
from replay.maintenance.hilbert import hilbert_transposed
from replay.maintenance.zorder import interleave_bits
from replay.protocol.actions import AddFile, DomainMetadata, Protocol
from replay.protocol.clustering_columns import ClusteringColumnError
from replay.spark import DeltaTable as SparkTable
from replay.spark import sql
from replay.spark.table_info import clustering_columns
from replay.txn.write_plan import InvalidWriteOptionError
from tests.dml_cases import our_rows, row_lineage, rust_rows

MIN_CUBE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.threshold"


def cluster_by(uri: str, *columns: list[str]) -> None:
    """Make the table at ``uri`` clustered by ``columns`` (paths), as Delta's ALTER TABLE CLUSTER BY."""
    log = DeltaLog.for_table(uri)
    protocol = log.update().protocol
    features = {"domainMetadata", "clustering", *(protocol.writer_features or [])}
    upgraded = Protocol(3, 7, list(protocol.reader_features or []), sorted(features))
    domain = DomainMetadata("delta.clustering", orjson.dumps({"clusteringColumns": list(columns)}).decode())
    log.commit([upgraded, domain], operation="CLUSTER BY")


def append(uri: str, ids: range) -> None:
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i % 7}" for i in ids]})
    write_table(uri, rows, mode="append", max_rows_per_file=50)


def cubes(uri: str) -> dict[str, list[AddFile]]:
    found: dict[str, list[AddFile]] = {}
    for add in DeltaTable(uri).snapshot.files():
        found.setdefault((add.tags or {}).get(ZCUBE_ID_TAG, ""), []).append(add)
    return found


def test_optimize_clusters_what_is_new_and_leaves_a_lone_cube_alone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": [f"v{i % 7}" for i in range(100)]})
    write_table(uri, rows, max_rows_per_file=25, configuration={"delta.enableRowTracking": "true"})
    cluster_by(uri, ["id"])
    lineage = row_lineage(uri)
    metrics = DeltaTable(uri).optimize.compact()
    assert metrics["numFilesRemoved"] == 4
    found = cubes(uri)
    assert "" not in found and len(found) == 1  # every file clustered, in one ZCube
    for add in DeltaTable(uri).snapshot.files():
        assert add.clustering_provider == CLUSTERING_PROVIDER and not add.data_change
        assert (add.tags or {})[ZCUBE_COLUMNS_TAG] == '["id"]'
    entry = DeltaTable(uri).history(1)[0]
    assert entry["operation"] == "OPTIMIZE"
    assert entry["operationParameters"]["clusterBy"] == '["id"]'
    assert entry["operationParameters"]["zOrderBy"] == "[]"
    assert row_lineage(uri) == lineage  # rows keep their ids
    version = DeltaTable(uri).version()
    assert DeltaTable(uri).optimize.compact()["numFilesRemoved"] == 0  # a lone cube, nothing new
    assert DeltaTable(uri).version() == version

    append(uri, range(100, 200))  # new files merge into the small cube: one cube again
    DeltaTable(uri).optimize.compact()
    assert len(cubes(uri)) == 1 and "" not in cubes(uri)
    assert our_rows(uri) == rust_rows(uri)
    assert sorted(r["id"] for r in our_rows(uri)) == list(range(200))


def test_large_cubes_and_cubes_of_other_columns_are_left_alone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    append(uri, range(100))
    cluster_by(uri, ["id"])
    DeltaTable(uri).optimize.compact()
    first = set(cubes(uri))
    append(uri, range(100, 150))
    big = DeltaTable(uri, conf={MIN_CUBE_KEY: "1"})  # every cube counts as large
    big.optimize.compact()
    after = cubes(uri)
    assert first <= set(after) and len(after) == 2  # the old cube stays, the new files form one

    cluster_by(uri, ["v"], ["id"])  # new clustering columns: cubes of the old ones stay
    append(uri, range(150, 160))
    DeltaTable(uri).optimize.compact()
    by_columns = {(adds[0].tags or {}).get(ZCUBE_COLUMNS_TAG) for adds in cubes(uri).values()}
    assert by_columns == {'["id"]', '["v","id"]'}
    assert set(after) <= set(cubes(uri))

    DeltaTable(uri).optimize.compact(full=True)  # FULL: everything, by the current columns
    assert len(cubes(uri)) == 1
    assert DeltaTable(uri).history(1)[0]["operationParameters"]["isFull"] == "true"
    assert sorted(r["id"] for r in rust_rows(uri)) == list(range(160))


def test_two_columns_cluster_along_the_hilbert_curve_so_both_skip(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rng = np.random.default_rng(7)
    count = 40_000
    rows = pa.table({"x": rng.integers(0, 1_000_000, count), "y": rng.integers(0, 1_000_000, count)})
    write_table(uri, rows, max_rows_per_file=2_500)
    cluster_by(uri, ["x"], ["y"])
    size = sum(add.size for add in DeltaTable(uri).snapshot.files())
    DeltaTable(uri).optimize.compact(target_size=size // 16)
    files = DeltaTable(uri).snapshot.files()
    assert len(files) >= 12

    def touched(column: str, low: int, high: int) -> int:
        bounds = [orjson.loads(add.stats or "{}") for add in files]
        return sum(1 for s in bounds if s["minValues"][column] <= high and s["maxValues"][column] >= low)

    for column in ("x", "y"):  # a stripe of 1/16 of either column: a few files, not all
        assert touched(column, 500_000, 562_500) <= len(files) // 2
    assert DeltaTable(uri).to_pyarrow_table().num_rows == count


def test_nested_clustering_columns_and_clear_errors(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table(
        {
            "id": pa.array(range(40), pa.int64()),
            "s": pa.array([{"a": i % 5, "b": str(i)} for i in range(40)]),
        }
    )
    write_table(uri, rows, max_rows_per_file=10)
    cluster_by(uri, ["s", "a"])
    version = DeltaTable(uri).version()
    with pytest.raises(ClusteringError, match=r"^\[DELTA_CLUSTERING_WITH_ZORDER_BY\].*\(id\)"):
        DeltaTable(uri).optimize.z_order(["id"])
    with pytest.raises(ClusteringError, match=r"^\[DELTA_CLUSTERING_WITH_PARTITION_PREDICATE\]"):
        DeltaTable(uri).optimize.compact(partition_filters="id > 3")
    assert DeltaTable(uri).version() == version
    DeltaTable(uri).optimize.compact()
    assert {(a.tags or {})[ZCUBE_COLUMNS_TAG] for a in DeltaTable(uri).snapshot.files()} == {'["s.a"]'}
    assert our_rows(uri) == rust_rows(uri)

    cluster_by(uri, ["gone"])
    with pytest.raises(ClusteringColumnError, match="gone"):
        DeltaTable(uri).optimize.compact()


def test_alter_cluster_by_makes_a_table_clustered_and_checks_like_delta(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table(
        {
            "id": pa.array(range(30), pa.int64()),
            "v": [f"v{i % 4}" for i in range(30)],
            "s": pa.array([{"a": i % 3} for i in range(30)]),
            "flag": [i % 2 == 0 for i in range(30)],
            "late": pa.array(range(30), pa.int64()),
        }
    )
    write_table(uri, rows, max_rows_per_file=10, configuration={"delta.dataSkippingNumIndexedCols": "4"})
    plain = str(tmp_path / "plain")
    write_table(plain, rows.select(["id"]))
    table = DeltaTable(uri)
    version = table.version()
    refusals = {
        "DELTA_CLUSTER_BY_INVALID_NUM_COLUMNS": ["id", "v", "s.a", "late", "id"],
        "DELTA_COLUMN_NOT_FOUND": ["nothing"],
        "DELTA_CLUSTERING_COLUMNS_DATATYPE_NOT_SUPPORTED": ["flag"],
        "DELTA_CLUSTERING_COLUMN_MISSING_STATS": ["late"],
    }
    for error, columns in refusals.items():
        with pytest.raises(ClusteringColumnError, match=rf"^\[{error}\]"):
            table.alter.cluster_by(columns)
    assert DeltaTable(uri).version() == version  # nothing committed
    table.alter.cluster_by(["ID"])
    snapshot = DeltaTable(uri).snapshot
    assert {"clustering", "domainMetadata"} <= set(snapshot.protocol.writer_features or [])
    assert orjson.loads(snapshot.domain_metadata["delta.clustering"].configuration) == {
        "clusteringColumns": [["id"]]
    }
    assert cli_main(["alter", uri, "--cluster-by", "v,s.a"]) == 0
    entry = DeltaTable(uri).history(1)[0]
    assert entry["operation"] == "CLUSTER BY"
    assert entry["operationParameters"] == {"oldClusteringColumns": "id", "newClusteringColumns": "v,s.a"}
    DeltaTable(uri).optimize.compact()
    assert {(a.tags or {})[ZCUBE_COLUMNS_TAG] for a in DeltaTable(uri).snapshot.files()} == {'["v","s.a"]'}
    DeltaTable(uri).alter.cluster_by(None)  # CLUSTER BY NONE: OPTIMIZE compacts again
    for attempt in (
        lambda: DeltaTable(uri).optimize.compact(full=True),
        lambda: DeltaTable(plain).optimize.compact(full=True),
    ):
        with pytest.raises(ClusteringError, match=r"^\[DELTA_OPTIMIZE_FULL_NOT_SUPPORTED\]"):
            attempt()
    with pytest.raises(ClusteringError, match="DELTA_CLUSTERING_WITH_ZORDER_BY"):  # clustered, no columns
        DeltaTable(uri).optimize.z_order(["id"])
    append(uri, range(30, 40))
    assert DeltaTable(uri).optimize.compact()["numFilesRemoved"] == 2  # compacted, not clustered
    assert [a.clustering_provider for a in DeltaTable(uri).snapshot.files()] == [None]
    assert our_rows(uri) == rust_rows(uri)

    mapped = str(tmp_path / "m")
    write_table(mapped, rows.select(["id", "v"]), configuration={"delta.columnMapping.mode": "name"})
    DeltaTable(mapped).alter.cluster_by(["v"])
    domain = orjson.loads(DeltaTable(mapped).snapshot.domain_metadata["delta.clustering"].configuration)
    assert domain["clusteringColumns"][0][0].startswith("col-")  # the physical name
    assert clustering_columns(DeltaTable(mapped).snapshot) == ["v"]  # DESCRIBE DETAIL: the logical name
    DeltaTable(mapped).optimize.compact(full=True)
    assert DeltaTable(mapped).history(1)[0]["operationParameters"]["clusterBy"] == '["v"]'
    partitioned = str(tmp_path / "p")
    write_table(partitioned, rows.select(["id", "v"]), partition_by=["v"])
    with pytest.raises(
        ClusteringColumnError, match="DELTA_ALTER_TABLE_CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED"
    ):
        DeltaTable(partitioned).alter.cluster_by(["id"])


def test_a_write_creates_a_clustered_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    rows = pa.table({"id": pa.array(range(40), pa.int64()), "v": [f"v{i % 3}" for i in range(40)]})
    with pytest.raises(ClusteringColumnError, match=r"^\[DELTA_CLUSTER_BY_WITH_PARTITIONED_BY\]"):
        write_table(uri, rows, partition_by=["v"], cluster_by=["id"])
    with pytest.raises(ClusteringColumnError, match=r"^\[DELTA_COLUMN_NOT_FOUND\].*`nothing`"):
        write_table(uri, rows, cluster_by=["nothing"])
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.parquet"))
    write_table(uri, rows, cluster_by=["v", "id"], max_rows_per_file=10)
    snapshot = DeltaTable(uri).snapshot
    assert {"clustering", "domainMetadata"} <= set(snapshot.protocol.writer_features or [])
    domain = orjson.loads(snapshot.domain_metadata["delta.clustering"].configuration)
    assert domain == {"clusteringColumns": [["v"], ["id"]]}
    write_table(uri, rows.slice(0, 5), mode="append", cluster_by=["V", "ID"])  # its own columns: fine
    with pytest.raises(InvalidWriteOptionError, match="DELTA_CLUSTERING_COLUMNS_MISMATCH"):
        write_table(uri, rows.slice(0, 5), mode="append", cluster_by=["id"])
    DeltaTable(uri).optimize.compact()
    assert len(cubes(uri)) == 1 and "" not in cubes(uri)
    assert our_rows(uri) == rust_rows(uri)


@pytest.mark.spark
def test_spark_clusters_on_the_executors_and_takes_full(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    append(uri, range(120))
    sql(spark, f"ALTER TABLE delta.`{uri}` CLUSTER BY (v, id)")
    table = SparkTable.forPath(spark, uri)
    metrics = table.optimize().executeCompaction().collect()[0]["metrics"]
    assert metrics["numFilesRemoved"] == 3
    assert len(cubes(uri)) == 1 and "" not in cubes(uri)
    assert DeltaTable(uri).history(1)[0]["operationParameters"]["clusterBy"] == '["v","id"]'
    assert table.detail().collect()[0]["clusteringColumns"] == ["v", "id"]
    before = set(cubes(uri))
    sql(spark, f"OPTIMIZE delta.`{uri}` FULL")
    assert len(cubes(uri)) == 1 and set(cubes(uri)) != before
    with pytest.raises(ClusteringError, match="DELTA_CLUSTERING_WITH_ZORDER_BY"):
        sql(spark, f"OPTIMIZE delta.`{uri}` ZORDER BY (id)")
    with pytest.raises(ClusteringError, match=r"DELTA_CLUSTERING_WITH_PARTITION_PREDICATE.*id > 3"):
        table.optimize().where("id > 3").executeCompaction()
    assert sorted(r["id"] for r in rust_rows(uri)) == list(range(120))
    created = str(tmp_path / "created")  # the Spark writer's clusterBy option
    rows = spark.createDataFrame(rust_rows(uri))
    rows.write.format("deltalog").mode("append").option("clusterBy", "id").save(created)
    domain = DeltaTable(created).snapshot.domain_metadata["delta.clustering"]
    assert orjson.loads(domain.configuration) == {"clusteringColumns": [["id"]]}


# -- the rules, as properties -----------------------------------------------------------------------
def _file(index: int, size: int, cube: str | None, columns: str = '["id"]') -> AddFile:
    tags = {ZCUBE_ID_TAG: cube, ZCUBE_COLUMNS_TAG: columns} if cube else None
    provider = CLUSTERING_PROVIDER if cube else None
    return AddFile(f"f{index}", size=size, modification_time=index, tags=tags, clustering_provider=provider)


@given(
    st.lists(st.tuples(st.integers(1, 100), st.sampled_from([None, "a", "b", "c"])), max_size=20),
    st.integers(1, 400),
)
def test_candidates_follow_deltas_rule(files: list[tuple[int, str | None]], min_cube: int) -> None:
    adds = [_file(i, size, cube) for i, (size, cube) in enumerate(files)]
    chosen = cluster_candidates(adds, ["id"], CubeSizes(min_cube, min_cube))
    fresh = [a for a in adds if a.tags is None]
    sizes: dict[str, int] = {}
    for add in adds:
        if add.tags:
            sizes[add.tags[ZCUBE_ID_TAG]] = sizes.get(add.tags[ZCUBE_ID_TAG], 0) + add.size
    small = {cube for cube, total in sizes.items() if total < min_cube}
    expected = {a.path for a in fresh} | {a.path for a in adds if a.tags and a.tags[ZCUBE_ID_TAG] in small}
    if not fresh and len(small) <= 1:
        expected = set()
    assert {a.path for a in chosen} == expected
    assert [a.tags is None for a in chosen] == sorted((a.tags is None for a in chosen), reverse=True)
    other = [_file(99, 1, "z", '["v"]')]
    assert cluster_candidates(adds + other, ["id"], CubeSizes(min_cube, min_cube)) == chosen


@pytest.mark.parametrize("dims, bits", [(2, 3), (3, 2), (4, 2)])
def test_the_hilbert_curve_visits_every_point_once_each_step_to_a_neighbour(dims: int, bits: int) -> None:
    points = np.array(list(itertools.product(range(1 << bits), repeat=dims)), dtype=np.uint32)
    words = hilbert_transposed([points[:, i] for i in range(dims)], bits)
    packed = interleave_bits(words, bits)
    index = [int.from_bytes(row.tobytes(), "big") >> (packed.shape[1] * 8 - bits * dims) for row in packed]
    assert sorted(index) == list(range(len(points)))
    walk = points[np.argsort(index)].astype(np.int64)
    assert (np.abs(np.diff(walk, axis=0)).sum(axis=1) == 1).all()
