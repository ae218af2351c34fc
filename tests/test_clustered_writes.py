"""Writing to clustered tables (the ``clustering`` writer feature, Delta's CLUSTER BY).

Appends and DELETE/UPDATE/MERGE (copy-on-write and with deletion vectors) work and keep the
``delta.clustering`` domain through commits and checkpoints; delta-rs reads the result.
REORG ... APPLY (PURGE) rewrites its files, and auto compaction leaves the table alone (OPTIMIZE
clusters it: ``test_liquid_clustering``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from replay import DeltaLog, DeltaTable, write_table
from replay.maintenance.clustering import ClusteringError
from replay.protocol.actions import DomainMetadata, Protocol
from tests.dml_cases import our_rows, rust_rows

CLUSTERING = DomainMetadata("delta.clustering", '{"clusteringColumns":[["id"]]}')


def clustered(tmp_path: Path, **configuration: str) -> str:
    """A table as Delta creates one with ``CLUSTER BY (id)``."""
    uri = str(tmp_path / "t")
    rows = pa.table({"id": pa.array(range(6), pa.int64()), "v": list("abcdef")})
    write_table(uri, rows, configuration=configuration or None, max_rows_per_file=2)
    log = DeltaLog.for_table(uri)
    protocol = log.update().protocol
    features = ["domainMetadata", "clustering", *(protocol.writer_features or [])]
    upgraded = Protocol(3, 7, list(protocol.reader_features or []), sorted(set(features)))
    log.commit([upgraded, CLUSTERING], operation="CLUSTER BY")
    return uri


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_row_changes_keep_the_clustering_domain(tmp_path: Path, deletion_vectors: bool) -> None:
    settings = {"delta.enableDeletionVectors": "true"} if deletion_vectors else {}
    uri = clustered(tmp_path, **settings)
    table = DeltaTable(uri)
    table.delete("id = 1")
    table.update({"v": "'changed'"}, predicate="id = 2")
    source = pa.table({"id": pa.array([3, 9], pa.int64()), "v": ["merged", "new"]})
    merger = table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    merger.when_matched_update_all().when_not_matched_insert_all().execute()
    write_table(uri, pa.table({"id": pa.array([10], pa.int64()), "v": ["appended"]}), mode="append")
    expected = {0: "a", 2: "changed", 3: "merged", 4: "e", 5: "f", 9: "new", 10: "appended"}
    assert {r["id"]: r["v"] for r in our_rows(uri)} == expected
    assert our_rows(uri) == rust_rows(uri)
    DeltaLog.for_table(uri).checkpoint()
    fresh = DeltaLog.for_table(uri).update()
    assert fresh.domain_metadata["delta.clustering"] == CLUSTERING
    assert "clustering" in (fresh.protocol.writer_features or [])


def test_purge_works_and_auto_compaction_clusters_the_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = clustered(tmp_path, **{"delta.enableDeletionVectors": "true"})
    version = DeltaTable(uri).version()
    with pytest.raises(ClusteringError, match="DELTA_CLUSTERING_WITH_ZORDER_BY"):
        DeltaTable(uri).optimize.z_order(["v"])
    assert DeltaTable(uri).version() == version
    DeltaTable(uri).delete("id = 0")  # a deletion vector to purge
    DeltaTable(uri).optimize.purge_deletion_vectors()
    assert all(f.deletion_vector is None for f in DeltaLog.for_table(uri).update().files())
    conf = {
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.databricks.delta.autoCompact.minNumFiles": "2",
    }
    caplog.set_level(logging.WARNING)
    for value in range(6):  # enough small files for auto compaction
        write_table(
            uri, pa.table({"id": pa.array([100 + value], pa.int64()), "v": ["x"]}), mode="append", conf=conf
        )
    history = DeltaLog.for_table(uri).history()
    automatic = [
        e for e in history if e["operation"] == "OPTIMIZE" and e["operationParameters"]["auto"] == "true"
    ]
    assert automatic and all(e["operationParameters"]["clusterBy"] != "[]" for e in automatic)  # clustered
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # nothing failed
