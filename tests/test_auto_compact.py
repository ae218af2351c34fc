"""Auto compaction (Delta's ``AutoCompact`` hook): after writes to a table with
``delta.autoOptimize.autoCompact=true``, partitions with enough small files are compacted in an
``OPTIMIZE`` commit with ``auto=true``; the writer's commit never fails because of it."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from replay import DeltaLog, DeltaTable, write_table
from replay.maintenance import auto_compact as auto_compact_module
from replay.maintenance.optimize_plan import InvalidOptimizeSettingError
from replay.maintenance.optimize_rewrite import write_spec
from replay.txn.data_writer import DataFileWriter
from replay.txn.post_commit import registered_post_commit_hooks
from replay.txn.transaction import Transaction
from tests.paths import REPO_ROOT

AUTO = {"delta.autoOptimize.autoCompact": "true"}
FEW_FILES = {"spark.databricks.delta.autoCompact.minNumFiles": "4"}


def append(
    path: str, part: int, index: int, conf: dict[str, str] | None = None, **options: object
) -> int | None:
    table = pa.table({"p": [part] * 5, "id": [index * 10 + i for i in range(5)]})
    return write_table(path, table, partition_by=["p"], conf=conf, **options)  # type: ignore[arg-type]


def operations(path: str) -> list[str]:
    return [entry["operation"] for entry in reversed(DeltaLog.for_table(path).history())]


def files_per_partition(path: str) -> Counter[str]:
    return Counter(str(a.partition_values.get("p")) for a in DeltaLog.for_table(path).update().files())


def test_writes_trigger_a_compaction_of_the_partitions_they_touched(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    append(path, 0, 0, FEW_FILES, configuration=AUTO)
    for index in range(1, 3):
        append(path, 0, index, FEW_FILES)
    for index in range(3):
        append(path, 1, 10 + index, FEW_FILES)
    assert files_per_partition(path) == {"0": 3, "1": 3}  # below the 4 small files needed
    assert append(path, 0, 3, FEW_FILES) == 6  # the writer gets its own version back ...
    # ... and the hook compacted partition 0 (4 small files), not partition 1 (not written to)
    assert operations(path)[-2:] == ["WRITE", "OPTIMIZE"]
    assert files_per_partition(path) == {"0": 1, "1": 3}
    info = DeltaLog.for_table(path).history(1)[0]
    assert info["operationParameters"]["auto"] == "true"
    assert info["operationParameters"]["predicate"] == '["p = 0"]'
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == sorted(
        [i * 10 + j for i in (0, 1, 2, 3, 10, 11, 12) for j in range(5)]
    )


def test_the_hook_result_is_the_compaction_metrics(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for index in range(3):
        append(path, 0, index, configuration=AUTO)
    log = DeltaLog.for_table(path, FEW_FILES)
    snapshot = log.update()
    writer = DataFileWriter(write_spec(snapshot))
    writer.write(pa.table({"p": [0], "id": [99]}))
    txn = Transaction(log.io, snapshot, operation="WRITE")
    txn.add_actions(written.add for written in writer.close())
    assert txn.commit() == 3
    assert txn.post_commit is not None and txn.post_commit.hook_errors == {}
    metrics = txn.post_commit.hooks["Auto Compact"]
    assert isinstance(metrics, dict)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"], metrics["partitionsOptimized"]) == (4, 1, 1)
    assert log.update().version == 4


def test_no_compaction_without_the_property_or_with_the_session_turning_it_off(tmp_path: Path) -> None:
    plain = str(tmp_path / "plain")
    for index in range(5):
        append(plain, 0, index, FEW_FILES)
    assert "OPTIMIZE" not in operations(plain)
    off = str(tmp_path / "off")
    session_off = {**FEW_FILES, "spark.databricks.delta.autoCompact.enabled": "false"}
    for index in range(5):
        append(off, 0, index, session_off, configuration=AUTO)
    assert "OPTIMIZE" not in operations(off)
    session_on = {**FEW_FILES, "spark.databricks.delta.autoCompact.enabled": "true"}
    append(plain, 0, 9, session_on)  # the session turns it on for a table without the property
    assert operations(plain)[-1] == "OPTIMIZE"
    with pytest.raises(InvalidOptimizeSettingError, match="DELTA_INVALID_AUTO_COMPACT_TYPE"):
        auto_compact_module.auto_compact_enabled(
            DeltaLog.for_table(plain).update().config,
            {"spark.databricks.delta.autoCompact.enabled": "sometimes"},
        )


def test_delta_defaults_need_fifty_small_files(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = pa.table({"p": [0] * 49, "id": range(49)})
    write_table(path, table, partition_by=["p"], max_rows_per_file=1, configuration=AUTO)
    assert files_per_partition(path) == {"0": 49} and "OPTIMIZE" not in operations(path)
    append(path, 0, 100)
    assert operations(path)[-1] == "OPTIMIZE" and files_per_partition(path) == {"0": 1}
    assert DeltaTable(path).to_pyarrow_table().num_rows == 54


def test_a_failing_compaction_never_fails_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "t")
    for index in range(3):
        append(path, 0, index, FEW_FILES, configuration=AUTO)

    def broken(*args: object, **kwargs: object) -> object:
        raise OSError("disk on fire")

    monkeypatch.setattr(auto_compact_module, "run_job", broken)
    with caplog.at_level(logging.WARNING, logger="replay.txn.post_commit"):
        assert append(path, 0, 3, FEW_FILES) == 3
    assert (
        "[DELTA_POST_COMMIT_HOOK_FAILED] Committing to the Delta table version 3 succeeded but error "
        "while executing post-commit hook Auto Compact: OSError: disk on fire" in caplog.text
    )
    assert operations(path)[-1] == "WRITE" and DeltaTable(path).to_pyarrow_table().num_rows == 20


def test_the_hook_is_registered_whatever_module_a_process_imports(tmp_path: Path) -> None:
    assert "Auto Compact" in registered_post_commit_hooks()
    path = str(tmp_path / "t")
    for index in range(3):
        append(path, 0, index, FEW_FILES, configuration=AUTO)
    script = (
        "import sys, pyarrow as pa\n"
        "from replay.txn.write import write_table\n"
        "write_table(sys.argv[1], pa.table({'p': [0], 'id': [7]}), conf=dict([sys.argv[2].split('=')]))\n"
    )
    ((key, value),) = FEW_FILES.items()
    subprocess.run(
        [sys.executable, "-c", script, path, f"{key}={value}"], check=True, cwd=REPO_ROOT, timeout=120
    )
    assert operations(path)[-2:] == ["WRITE", "OPTIMIZE"]


def test_a_clustered_table_is_clustered_by_its_auto_compaction(tmp_path: Path) -> None:
    """As Delta's: the small files of a clustered table trigger it, and it rewrites them along
    the clustering columns into one ZCube, recorded as an auto OPTIMIZE with the columns."""
    path = str(tmp_path / "t")
    ids = [[7, 3, 9, 1], [8, 2, 6, 0], [5, 11, 4, 10]]
    for index, batch in enumerate(ids):
        rows = pa.table({"id": pa.array(batch, pa.int64()), "v": [f"v{i}" for i in batch]})
        options: dict[str, object] = {"cluster_by": ["id"], "configuration": AUTO} if index == 0 else {}
        write_table(path, rows, mode="append", conf=FEW_FILES, **options)  # type: ignore[arg-type]
    assert operations(path)[-1] == "WRITE"  # three small files: below the four needed
    rows = pa.table({"id": pa.array([13, 12], pa.int64()), "v": ["v13", "v12"]})
    write_table(path, rows, mode="append", conf=FEW_FILES)
    assert operations(path)[-2:] == ["WRITE", "OPTIMIZE"]
    info = DeltaLog.for_table(path).history(1)[0]
    assert info["operationParameters"]["auto"] == "true"
    assert info["operationParameters"]["clusterBy"] == '["id"]'
    (clustered,) = DeltaLog.for_table(path).update().files()
    assert clustered.clustering_provider == "liquid"
    assert (clustered.tags or {}).get("ZCUBE_ZORDER_BY") == '["id"]'
    table = DeltaTable(path).to_pyarrow_table()
    assert sorted(table["id"].to_pylist()) == list(range(14))
