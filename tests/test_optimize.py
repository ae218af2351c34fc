"""OPTIMIZE (compaction) and REORG (deletion-vector purge): Delta's bin-packing rules, commits with
``dataChange=false`` under snapshot isolation, Delta's commitInfo, concurrency, and delta-rs."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import deltalake
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import AddFile, DeletionVectorDescriptor, DeltaLog, DeltaTable, table_changes, write_table
from replay.cli.main import main as cli_main
from replay.data.deletion_vector_writer import DeletionVectorWriter
from replay.maintenance.optimize import OptimizeArgumentError, OptimizeMode, plan_optimize, run_job
from replay.maintenance.optimize_plan import CompactionLimits, InvalidOptimizeSettingError, plan_bins
from replay.maintenance.optimize_rewrite import write_spec
from replay.protocol.errors import (
    ConcurrentDeleteReadException,
    DeltaError,
)
from replay.protocol.predicates import InvalidFilterError
from replay.txn.data_writer import DataFileWriter
from replay.txn.transaction import Transaction
from replay.txn.write import delete_files

DELTARS_KEYS = [
    "numFilesAdded",
    "numFilesRemoved",
    "filesAdded",
    "filesRemoved",
    "partitionsOptimized",
    "numBatches",
    "totalConsideredFiles",
    "totalFilesSkipped",
    "preserveInsertionOrder",
    "plannerStrategy",
    "preservedStableOrder",
    "maxBinSpanFiles",
]


def small_files(path: str, partitions: int = 2, files: int = 6, rows: int = 50, **options: object) -> None:
    """``files`` appends of ``rows`` rows spread over ``partitions`` values of ``p``."""
    for index in range(files):
        start = index * rows
        ids = list(range(start, start + rows))
        table = pa.table({"p": [i % partitions for i in ids], "id": ids, "text": [f"row {i}" for i in ids]})
        write_table(path, table, partition_by=["p"], **options)  # type: ignore[arg-type]


def rows(path: str) -> list[tuple[int, int, str]]:
    table = DeltaTable(path).to_pyarrow_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in ("p", "id", "text")), strict=True))


def rust_rows(path: str) -> list[tuple[int, int, str]]:
    """The rows as delta-rs reads them (through its query engine, which applies deletion vectors)."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
    table = pa.table(query.execute("select p, id, text from t").read_all())
    table = table.cast(pa.schema([("p", pa.int64()), ("id", pa.int64()), ("text", pa.string())]))
    return sorted(zip(*(table.column(c).to_pylist() for c in ("p", "id", "text")), strict=True))


def last_commit(path: str) -> list[dict]:
    log = Path(path, "_delta_log")
    newest = max(log.glob("*.json"))
    return [orjson.loads(line) for line in newest.read_bytes().splitlines()]


def files_per_partition(path: str) -> Counter[str]:
    return Counter(str(add.partition_values.get("p")) for add in DeltaTable(path).snapshot.files())


def parquet_files_on_disk(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts}


def delete_with_dv(path: str, doomed: Callable[[int], bool]) -> int:
    """Delete the rows whose ``id`` is ``doomed`` with deletion vectors (as Delta's DELETE does)."""
    log = DeltaLog.for_table(path)
    snapshot = log.update()
    actions = []
    with DeletionVectorWriter.for_table(path, snapshot.metadata.configuration) as writer:
        for file in snapshot.files():
            ids = pq.read_table(Path(path, file.path), columns=["id"]).column("id").to_pylist()
            hit = [row for row, value in enumerate(ids) if doomed(value)]
            if hit:
                actions += writer.update(file, hit).actions()
    return log.commit(actions, operation="DELETE", read_version=snapshot.version)


# -- compaction rules -------------------------------------------------------------------------------
def test_compaction_packs_each_partition_into_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    before = rows(path)
    table = DeltaTable(path)
    metrics = table.optimize.compact()
    assert list(metrics) == DELTARS_KEYS
    assert metrics["numFilesAdded"] == 2 and metrics["numFilesRemoved"] == 12
    assert metrics["partitionsOptimized"] == 2 and metrics["numBatches"] == 2
    assert (metrics["totalConsideredFiles"], metrics["totalFilesSkipped"]) == (12, 0)
    assert json.loads(str(metrics["filesRemoved"]))["totalFiles"] == 12
    assert table.version() == 6  # the object moved to the version it committed
    assert files_per_partition(path) == {"0": 1, "1": 1}
    assert rows(path) == before == rust_rows(path)
    info, *actions = last_commit(path)
    commit = info["commitInfo"]
    assert commit["operation"] == "OPTIMIZE"
    assert commit["operationParameters"] == {
        "predicate": "[]",
        "zOrderBy": "[]",
        "clusterBy": "[]",
        "auto": "false",
    }
    assert commit["isolationLevel"] == "SnapshotIsolation" and commit["isBlindAppend"] is False
    assert set(commit["operationMetrics"]) == {
        "numAddedFiles", "numRemovedFiles", "numAddedBytes", "numRemovedBytes", "minFileSize",
        "p25FileSize", "p50FileSize", "p75FileSize", "maxFileSize", "numDeletionVectorsRemoved",
    }  # fmt: skip
    assert commit["operationMetrics"]["numRemovedFiles"] == "12"
    kinds = Counter(next(iter(action)) for action in actions)
    assert kinds == {"add": 2, "remove": 12}
    assert all(next(iter(a.values()))["dataChange"] is False for a in actions)
    removes = [a["remove"] for a in actions if "remove" in a]
    assert all(r["extendedFileMetadata"] and r["size"] > 0 and r["stats"] for r in removes)
    assert all(json.loads(a["add"]["stats"])["numRecords"] == 150 for a in actions if "add" in a)
    # a second run finds nothing to do and commits nothing
    again = table.optimize.compact()
    assert (again["numFilesAdded"], again["numFilesRemoved"], again["totalFilesSkipped"]) == (0, 0, 2)
    assert table.version() == 6


def test_nothing_to_do_reports_as_deltalake_does(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    small_files(ours, partitions=2, files=1)  # one small file per partition: never rewritten alone
    shutil.copytree(ours, theirs)
    assert DeltaTable(ours).optimize.compact() == deltalake.DeltaTable(theirs).optimize.compact()
    assert DeltaTable(ours).version() == 0


def test_files_at_or_above_the_target_are_skipped(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=1, files=6)
    sizes = sorted(add.size for add in DeltaTable(path).snapshot.files())
    target = sizes[-1] * 3 + 1  # bins of three files; no file reaches it
    assert target <= sizes[0] * 4
    metrics = DeltaTable(path).optimize.compact(target_size=target)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (6, 2)
    big = sorted(add.size for add in DeltaTable(path).snapshot.files())
    # now both files are at or above a target below their size: skipped
    metrics = DeltaTable(path).optimize.compact(target_size=big[0])
    assert (metrics["numFilesRemoved"], metrics["totalFilesSkipped"]) == (0, 2)


def test_target_size_comes_from_the_table_property_then_the_session(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=1, files=6)
    size = max(add.size for add in DeltaTable(path).snapshot.files())
    log = DeltaLog.for_table(path)
    metadata = log.update().metadata
    configured = metadata.configuration | {"delta.targetFileSize": str(2 * size)}
    from dataclasses import replace

    log.commit([replace(metadata, configuration=configured)], operation="SET TBLPROPERTIES")
    metrics = DeltaTable(path).optimize.compact()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (6, 3)  # bins of two files
    other = str(tmp_path / "other")
    small_files(other, partitions=1, files=6)
    conf = {"spark.databricks.delta.optimize.maxFileSize": str(3 * size)}
    metrics = DeltaTable(other, conf=conf).optimize.compact()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (6, 2)  # bins of three files
    with pytest.raises(InvalidOptimizeSettingError, match=r"optimize\.maxFileSize"):
        DeltaTable(other, conf={"spark.databricks.delta.optimize.maxFileSize": "big"}).optimize.compact()
    with pytest.raises(InvalidOptimizeSettingError, match="target_size"):
        DeltaTable(other).optimize.compact(target_size=0)


def test_partition_filters_select_partitions_and_are_recorded(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=3)
    metrics = DeltaTable(path).optimize.compact(partition_filters=[("p", "=", "1")])
    assert (metrics["totalConsideredFiles"], metrics["numFilesRemoved"]) == (6, 6)
    assert files_per_partition(path) == {"0": 6, "1": 1, "2": 6}
    assert last_commit(path)[0]["commitInfo"]["operationParameters"]["predicate"] == "[\"p = '1'\"]"
    DeltaTable(path).optimize.compact(partition_filters="p >= 2")
    assert files_per_partition(path) == {"0": 6, "1": 1, "2": 1}
    assert last_commit(path)[0]["commitInfo"]["operationParameters"]["predicate"] == '["p >= 2"]'
    with pytest.raises(OptimizeArgumentError, match=r"DELTA_NON_PARTITION_COLUMN_REFERENCE.*'id'"):
        DeltaTable(path).optimize.compact(partition_filters=[("id", ">", 3)])
    with pytest.raises(InvalidFilterError):
        DeltaTable(path).optimize.compact(partition_filters=[("p", "~", 3)])


def test_several_commits_with_min_commit_interval(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=3)
    before = rows(path)
    table = DeltaTable(path)
    metrics = table.optimize.compact(min_commit_interval=0, max_concurrent_tasks=1)
    assert table.version() == 8  # one commit per bin
    assert metrics["numFilesRemoved"] == 18 and metrics["numBatches"] == 3
    history = table.history(3)
    assert [h["operation"] for h in history] == ["OPTIMIZE"] * 3
    assert sum(int(h["operationMetrics"]["numRemovedFiles"]) for h in history) == 18
    assert rows(path) == before
    other = str(tmp_path / "other")
    small_files(other, partitions=3)
    import datetime as dt

    DeltaTable(other).optimize.compact(min_commit_interval=dt.timedelta(hours=1))
    assert DeltaTable(other).version() == 6  # the interval never passed: one commit
    with pytest.raises(OptimizeArgumentError, match="min_commit_interval"):
        DeltaTable(other).optimize.compact(min_commit_interval=-1)
    with pytest.raises(OptimizeArgumentError, match="max_concurrent_tasks"):
        DeltaTable(other).optimize.compact(max_concurrent_tasks=0)


# -- deletion vectors ---------------------------------------------------------------------------------
def dv_table(path: str) -> None:
    small_files(path, partitions=2, files=4, configuration={"delta.enableDeletionVectors": "true"})
    delete_with_dv(path, lambda i: i % 5 == 0)


def test_compaction_drops_rows_deleted_by_deletion_vectors(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dv_table(path)
    expected = rows(path)
    assert all(i % 5 for _, i, _ in expected) and len(expected) == 160
    assert all(add.deletion_vector is not None for add in DeltaTable(path).snapshot.files())
    metrics = DeltaTable(path).optimize.compact()
    assert metrics["numFilesRemoved"] == 8
    files = DeltaTable(path).snapshot.files()
    assert len(files) == 2 and all(add.deletion_vector is None for add in files)
    assert sum(add.num_records or 0 for add in files) == 160
    assert rows(path) == expected == rust_rows(path)
    commit = last_commit(path)[0]["commitInfo"]
    assert commit["operationMetrics"]["numDeletionVectorsRemoved"] == "8"
    removes = [a["remove"] for a in last_commit(path)[1:] if "remove" in a]
    assert all(r["deletionVector"] for r in removes)  # the tombstones keep the DVs they removed


def test_a_single_file_with_a_deletion_vector_is_rewritten_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=1, files=1, configuration={"delta.enableDeletionVectors": "true"})
    delete_with_dv(path, lambda i: i < 5)  # 10% of the rows: above Delta's 5%
    metrics = DeltaTable(path).optimize.compact()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (1, 1)
    assert DeltaTable(path).snapshot.files()[0].deletion_vector is None
    assert [i for _, i, _ in rows(path)] == list(range(5, 50))


def test_purge_rewrites_only_files_with_deleted_rows_as_reorg(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=2, files=3, configuration={"delta.enableDeletionVectors": "true"})
    delete_with_dv(path, lambda i: i == 7)  # one row of one file (in partition 1)
    expected = rows(path)
    untouched = {a.path for a in DeltaTable(path).snapshot.files() if a.deletion_vector is None}
    table = DeltaTable(path)
    metrics = table.optimize.purge_deletion_vectors()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (1, 1)
    after = table.snapshot.files()
    assert untouched < {a.path for a in after} and all(a.deletion_vector is None for a in after)
    assert rows(path) == expected
    commit = last_commit(path)[0]["commitInfo"]
    assert commit["operation"] == "REORG"
    assert commit["operationParameters"] == {"predicate": "[]", "applyPurge": "true"}
    assert commit["operationMetrics"]["numDeletionVectorsRemoved"] == "1"
    assert table.optimize.purge_deletion_vectors()["numFilesRemoved"] == 0


# -- the change data feed -------------------------------------------------------------------------------
def test_the_change_data_feed_shows_nothing_for_a_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=2, files=3, configuration={"delta.enableChangeDataFeed": "true"})
    table = DeltaTable(path)
    table.optimize.compact()
    assert table.version() == 3
    assert table_changes(DeltaLog.for_table(path), 3, 3).num_rows == 0
    assert table.load_cdf(starting_version=3).num_rows == 0
    assert table.load_cdf(starting_version=0).num_rows == 150  # the inserts only
    theirs = pa.table(deltalake.DeltaTable(path).load_cdf(starting_version=3).read_all())
    assert theirs.num_rows == 0


# -- concurrency ------------------------------------------------------------------------------------------
def test_an_append_concurrent_with_a_compaction_commits_in_either_order(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    snapshot = DeltaLog.for_table(path).update()
    job = plan_optimize(snapshot, OptimizeMode.COMPACT)
    write_table(path, pa.table({"p": [0], "id": [1000], "text": ["late"]}))  # wins version 6
    result = run_job(snapshot.io, snapshot, job)
    assert result.versions == (7,)
    assert len(rows(path)) == 301 and files_per_partition(path) == {"0": 2, "1": 1}
    # the other order: the append read version 7, the compaction commits 8, the append 9
    append_base = DeltaLog.for_table(path).update()
    DeltaTable(path).optimize.compact()
    writer = DataFileWriter(write_spec(append_base))
    writer.write(pa.table({"p": [1], "id": [1001], "text": ["x"]}))
    txn = Transaction(append_base.io, append_base, operation="WRITE")
    txn.add_actions(w.add for w in writer.close())
    assert txn.commit() == 9
    assert len(rows(path)) == 302 and files_per_partition(path) == {"0": 1, "1": 2}


def test_a_delete_of_a_file_being_compacted_fails_the_compaction(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    snapshot = DeltaLog.for_table(path).update()
    job = plan_optimize(snapshot, OptimizeMode.COMPACT)
    victim = job.plan.bins[0].files[0]
    on_disk = parquet_files_on_disk(path)
    assert delete_files(path, [victim.path]) == 6
    expected = rows(path)
    with pytest.raises(ConcurrentDeleteReadException) as caught:
        run_job(snapshot.io, snapshot, job)
    assert caught.value.winning_version == 6
    assert DeltaLog.for_table(path).update().version == 6
    assert rows(path) == expected  # nothing lost, nothing twice
    assert parquet_files_on_disk(path) == on_disk  # the compaction's files were deleted


def test_a_delete_that_read_files_a_compaction_replaced_fails(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    log = DeltaLog.for_table(path)
    base = log.update()
    victim = base.files()[0]
    DeltaTable(path).optimize.compact()
    delete = Transaction(base.io, base, operation="DELETE")
    delete.read_files([victim])
    delete.add_actions([victim.remove_with_timestamp(int(time.time() * 1000))])
    with pytest.raises(ConcurrentDeleteReadException):
        delete.commit()
    assert len(rows(path)) == 300


def test_a_failed_rewrite_leaves_no_files_behind(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=4)
    snapshot = DeltaLog.for_table(path).update()
    job = plan_optimize(snapshot, OptimizeMode.COMPACT)
    on_disk = parquet_files_on_disk(path)
    broken = job.plan.bins[-1].files[2].path
    Path(path, broken).unlink()  # the last bin cannot be read
    on_disk -= {broken}
    with pytest.raises(DeltaError, match="does not exist"):
        run_job(snapshot.io, snapshot, job, max_concurrent_tasks=2)
    assert parquet_files_on_disk(path) == on_disk
    assert DeltaLog.for_table(path).update().version == 5
    with pytest.raises(DeltaError, match="does not exist"):
        DeltaTable(path).optimize.compact(min_commit_interval=0, max_concurrent_tasks=1)
    # bins before the broken one were committed one by one; their files are in the table
    assert DeltaLog.for_table(path).update().version == 8
    active = {a.path for a in DeltaTable(path).snapshot.files()} - {broken}
    assert parquet_files_on_disk(path) - active == {a.path for b in job.plan.bins[:-1] for a in b.files}


# -- compared with delta-rs ------------------------------------------------------------
def test_compaction_matches_deltalake(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    small_files(ours, partitions=4, files=10, rows=200)
    shutil.copytree(ours, theirs)
    expected = rows(ours)
    mine = DeltaTable(ours).optimize.compact(target_size=64 * 1024 * 1024)
    rust = deltalake.DeltaTable(theirs).optimize.compact(target_size=64 * 1024 * 1024)
    assert list(mine) == list(rust)
    for key in ("numFilesAdded", "numFilesRemoved", "partitionsOptimized", "totalConsideredFiles"):
        assert mine[key] == rust[key], key
    assert files_per_partition(ours) == files_per_partition(theirs) == dict.fromkeys("0123", 1)
    assert rows(ours) == rust_rows(ours) == rows(theirs) == rust_rows(theirs) == expected


# -- the command line ------------------------------------------------------------------
def test_cli_optimize_prints_the_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "t")
    small_files(path, partitions=2)
    assert cli_main(["optimize", path, "--where", "p = 1", "--target-size", "64mb", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["numFilesRemoved"] == 6 and printed["numFilesAdded"] == 1
    assert printed["version"] == 6
    assert files_per_partition(path) == {"0": 6, "1": 1}
    assert cli_main(["optimize", path, "--zorder-by", "id"]) == 0
    out = capsys.readouterr().out
    assert "numFilesAdded" in out and "zOrder" in out
    assert cli_main(["optimize", path, "--where", "id = 1"]) == 2
    assert "DELTA_NON_PARTITION_COLUMN_REFERENCE" in capsys.readouterr().err
    assert cli_main(["optimize", path, "--target-size", "lots"]) == 1


# -- object stores -----------------------------------------------------------------------------------------
@pytest.mark.cloud
@pytest.mark.parametrize("service", ["s3", "gcs", "azure"])
def test_compaction_on_object_stores(request: pytest.FixtureRequest, service: str) -> None:
    if service == "s3":
        conf, root = dict(request.getfixturevalue("s3_conf")), f"s3a://{request.getfixturevalue('s3_bucket')}"
    elif service == "gcs":
        conf, root = (
            dict(request.getfixturevalue("gcs_conf")),
            f"gs://{request.getfixturevalue('gcs_bucket')}",
        )
    else:
        conf, root = (
            dict(request.getfixturevalue("azure_conf")),
            f"abfs://{request.getfixturevalue('azure_container')}",
        )
    path = f"{root}/table"
    for index in range(4):
        ids = list(range(index * 10, index * 10 + 10))
        table = pa.table({"p": [i % 2 for i in ids], "id": ids, "text": [f"row {i}" for i in ids]})
        write_table(path, table, partition_by=["p"], conf=conf)
    table = DeltaTable(path, conf=conf)
    expected = sorted(table.to_pyarrow_table()["id"].to_pylist())
    metrics = table.optimize.compact(max_concurrent_tasks=2)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (8, 2)
    assert table.version() == 4 and len(table.files()) == 2
    assert sorted(DeltaTable(path, conf=conf).to_pyarrow_table()["id"].to_pylist()) == expected
    assert DeltaTable(path, conf=conf).history(1)[0]["operation"] == "OPTIMIZE"
    metrics = table.optimize.z_order(["id"])
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (2, 2)
    assert sorted(DeltaTable(path, conf=conf).to_pyarrow_table()["id"].to_pylist()) == expected


def test_partition_filters_select_partitions_exactly(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
        for when in (0, 1):
            for _ in range(2):
                stamps = pa.array([when] * 3, pa.int64()).cast(pa.timestamp("us"))
                table = pa.table({"day": [day] * 3, "when": stamps, "id": range(3)})
                write_table(path, table, partition_by=["day", "when"])
    table = DeltaTable(path)
    metrics = table.optimize.compact(partition_filters="day >= '2024-01-02' and when > '1970-01-01 00:00:00'")
    assert (metrics["totalConsideredFiles"], metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (
        4,
        4,
        2,
    )
    counts = Counter((a.partition_values["day"], a.partition_values["when"]) for a in table.snapshot.files())
    assert sorted(key for key, count in counts.items() if count == 1) == [
        ("2024-01-02", "1970-01-01 00:00:00.000001"),
        ("2024-01-03", "1970-01-01 00:00:00.000001"),
    ]
    with pytest.raises(OptimizeArgumentError, match="Cannot tell which partitions"):
        table.optimize.compact(partition_filters=pc.field("day").cast(pa.int32()) > 3)


# -- the planner, on many inputs ----------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", None]), st.integers(1, 120), st.booleans(), st.integers(0, 3)),
        max_size=40,
    ),
    st.integers(20, 150),
)
def test_compaction_bins_follow_deltas_rules(
    specs: list[tuple[str | None, int, bool, int]], target: int
) -> None:
    files = []
    for index, (part, size, has_dv, deleted) in enumerate(specs):
        dv = (
            DeletionVectorDescriptor(storage_type="i", path_or_inline_dv="x", cardinality=deleted)
            if has_dv
            else None
        )
        stats = json.dumps({"numRecords": 10})
        files.append(AddFile(f"f{index}", {"p": part}, size, index, True, stats, deletion_vector=dv))
    limits = CompactionLimits(max_file_size=target, min_file_size=target)
    plan = plan_bins(files, OptimizeMode.COMPACT, limits)
    placed = [file for each in plan.bins for file in each.files]
    assert len(placed) == len({file.path for file in placed})  # no file twice
    for each in plan.bins:
        assert {file.partition_values["p"] for file in each.files} == {each.partition_values["p"]}
        assert [f.modification_time for f in each.files] == sorted(f.modification_time for f in each.files)
        assert len(each.files) > 1 or each.files[0].deletion_vector is not None
        assert each.size <= target or len(each.files) == 1
    for file in placed:  # only small files, or files with enough deleted rows
        ratio = file.deletion_vector.cardinality / 10 if file.deletion_vector else 0
        assert file.size < target or ratio > 0.05
    for part in ("a", "b", None):  # candidates that fit in one target together make one bin
        chosen = [
            f
            for f in files
            if f.partition_values["p"] == part
            and (f.size < target or (f.deletion_vector is not None and f.deletion_vector.cardinality > 0))
        ]
        if len(chosen) > 1 and sum(f.size for f in chosen) <= target:
            assert [b.files for b in plan.bins if b.partition_values["p"] == part] == [tuple(chosen)]


def test_files_of_older_schemas_are_compacted_with_their_missing_columns_as_nulls(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_table(path, pa.table({"p": [1, 1], "a": [1, 2]}), partition_by=["p"])
    write_table(path, pa.table({"p": [1], "a": [3]}))
    write_table(path, pa.table({"p": [1], "a": [4], "b": ["new"]}), merge_schema=True)
    expected = DeltaTable(path).to_pyarrow_table().sort_by("a")
    assert expected["b"].to_pylist() == [None, None, None, "new"]
    metrics = DeltaTable(path).optimize.compact()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (3, 1)
    assert DeltaTable(path).to_pyarrow_table().sort_by("a").equals(expected)
    assert rust_rows_of(path, "a, b") == [(1, None), (2, None), (3, None), (4, "new")]


@pytest.mark.parametrize("whole", [True, False], ids=["read-whole", "read-by-chunk"])
@pytest.mark.parametrize("read_ahead", [0, 1, 16])
def test_a_bin_reads_its_files_in_order_inline_or_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_ahead: int, whole: bool
) -> None:
    """Local runs with a bin per thread read inline, others read ahead on the data pool: both
    give each bin's rows in file order, deletion vectors applied, older files' columns as nulls,
    whether small files are read whole or chunk by chunk."""
    from replay.maintenance import optimize_rewrite
    from replay.maintenance.optimize_rewrite import read_in_order, table_reader

    if not whole:
        monkeypatch.setattr(optimize_rewrite, "WHOLE_READ_BYTES", 0)
    path = str(tmp_path / "t")
    dv_table(path)
    write_table(
        path,
        pa.table({"p": [0, 1], "id": [900, 901], "text": ["x", "y"], "extra": [1.5, None]}),
        merge_schema=True,
    )
    snapshot = DeltaLog.for_table(path).update()
    files = sorted(snapshot.files(), key=lambda add: (str(add.partition_values), add.path))
    reader = table_reader(snapshot)
    batches = list(read_in_order(reader, files, read_ahead=read_ahead, batch_rows=30))
    got = pa.concat_tables(batches).select(["p", "id", "text", "extra"]).to_pylist()
    expected = [row for add in files for row in reader.read_file(add, ["id", "text", "extra"]).to_pylist()]
    partitions = [
        int(add.partition_values["p"]) for add in files for _ in range(reader.read_file(add, ["id"]).num_rows)
    ]
    assert [row["p"] for row in got] == partitions
    assert [{k: v for k, v in row.items() if k != "p"} for row in got] == expected
    assert len(got) == 162 and all(row["id"] % 5 for row in got if row["id"] < 900)
    assert all(len({row["p"] for row in batch.to_pylist()}) == 1 for batch in batches)
    # each batch reaches the writer in one chunk per column, however many files it gathers
    assert all(column.num_chunks == 1 for batch in batches for column in batch.columns)
    # and gathers several files: each file holds one append's ids (50 a time), whatever their order
    assert any(len({row["id"] // 50 for row in batch.to_pylist()}) > 1 for batch in batches)


def test_a_local_run_with_a_bin_per_thread_reads_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay.maintenance import optimize_rewrite

    path = str(tmp_path / "t")
    small_files(path, partitions=4)
    expected = rows(path)
    pools: list[object] = []
    real = optimize_rewrite.executor

    def recording(work: object, threads: int) -> object:
        pool = real(work, threads)  # type: ignore[arg-type]
        pools.append(pool)
        return pool

    monkeypatch.setattr(optimize_rewrite, "executor", recording)
    snapshot = DeltaLog.for_table(path).update()
    run_job(snapshot.io, snapshot, plan_optimize(snapshot, OptimizeMode.COMPACT), max_concurrent_tasks=2)
    assert pools == [] and rows(path) == expected  # 4 bins for 2 threads: no read-ahead
    small_files(path, partitions=4)
    expected = rows(path)
    snapshot = DeltaLog.for_table(path).update()
    run_job(snapshot.io, snapshot, plan_optimize(snapshot, OptimizeMode.COMPACT), max_concurrent_tasks=8)
    assert len(pools) == 4 and all(pool is not None for pool in pools) and rows(path) == expected


def rust_rows_of(path: str, columns: str) -> list[tuple[object, ...]]:
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
    table = pa.table(query.execute(f"select {columns} from t").read_all())
    return sorted(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True))


def test_bins_and_rewriters_travel_to_other_processes(tmp_path: Path) -> None:
    """A Spark front end plans on the driver, rewrites bins in tasks and commits on the driver."""
    import multiprocessing
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from replay.maintenance.optimize import commit_rewritten

    path = str(tmp_path / "t")
    small_files(path)
    expected = rows(path)
    snapshot = DeltaLog.for_table(path).update()
    for mode, columns in ((OptimizeMode.COMPACT, ()), (OptimizeMode.ZORDER, ("id",))):
        job = plan_optimize(snapshot, mode, zorder_columns=columns)
        pickle.loads(pickle.dumps(job.plan.bins))
        pickle.loads(pickle.dumps(job.rewriter))
    job = plan_optimize(snapshot, OptimizeMode.COMPACT)
    with ProcessPoolExecutor(
        2, mp_context=multiprocessing.get_context("spawn")
    ) as tasks:  # no fork of threads
        rewritten = list(tasks.map(job.rewriter.rewrite, job.plan.bins))
    assert commit_rewritten(snapshot.io, snapshot, job, rewritten) == 6
    assert rows(path) == expected and files_per_partition(path) == {"0": 1, "1": 1}


def test_files_written_by_other_writers_keep_only_the_tables_columns_in_its_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose Parquet schema orders the columns its own way and keeps one the table does
    not have (another writer's file) is compacted to the table's columns, in the table's order,
    read as it is (not column by column through the table reader)."""
    from replay.data.reader import TableReader

    path = tmp_path / "t"
    write_table(str(path), pa.table({"id": [1, 2], "text": ["a", "b"]}))
    pq.write_table(pa.table({"text": ["c", "d"], "junk": [9.5, 9.5], "id": [3, 4]}), path / "other.parquet")
    snapshot = DeltaLog.for_table(str(path)).update()
    txn = Transaction(snapshot.io, snapshot, operation="WRITE")
    size = (path / "other.parquet").stat().st_size
    txn.add_actions([AddFile(path="other.parquet", size=size, modification_time=1)])
    txn.commit()
    with monkeypatch.context() as patch:
        patch.setattr(TableReader, "read_file", lambda *_: pytest.fail("read through the table reader"))
        metrics = DeltaTable(str(path)).optimize.compact()
    assert (metrics["numFilesAdded"], metrics["numFilesRemoved"]) == (1, 2)
    (live,) = DeltaLog.for_table(str(path)).update().files()
    assert pq.read_schema(path / live.path).names == ["id", "text"]
    expected = [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    ours = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    theirs = deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    assert sorted((row["id"], row["text"]) for row in ours) == expected
    assert sorted((row["id"], row["text"]) for row in theirs) == expected
