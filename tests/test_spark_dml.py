"""DELETE, UPDATE and MERGE from Spark (``replay.spark.DeltaTable``) against the Python DML.

Every shared case of :mod:`tests.dml_cases` runs through both front ends on copies of one table,
copy-on-write and with deletion vectors: the rows, the change feed and the commit (operation,
parameters, Delta's metrics) must be the same, and delta-rs reads what Spark wrote. The cases
run a few at a time from threads (one Spark job each at a time), so the whole set costs a few
Spark queries' time. Then Delta's errors, what a failure leaves behind, and ``Column`` arguments.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay import AppendOnlyTableError, DeltaLog, DeltaTable, write_table
from replay.dml.errors import MultipleSourceRowMatchError
from replay.protocol.errors import TableNotFoundError
from replay.protocol.sql import ExpressionError
from replay.spark import DeltaTable as SparkTable
from replay.spark import dml_jobs, dml_merge
from replay.spark.dml_scan import SparkTarget, file_ids
from replay.spark.dml_tasks import DELETE, ClauseEffect, TaskSpec
from replay.txn.constraint_checks import InvariantViolationError
from tests.dml_cases import (
    CDF,
    DELETE_CASES,
    DV_CDF,
    MERGE_CASES,
    MERGE_CONDITION,
    MERGE_SOURCE,
    MERGE_TARGET,
    ROWS,
    UPDATE_CASES,
    commit_summary,
    files_under,
    latest_version,
    our_changes,
    our_rows,
    python_merge,
    row_lineage,
    rust_changes,
    rust_rows,
    spark_merge,
)

pytestmark = pytest.mark.spark

LAYOUT_METRICS = {
    "numAddedFiles",
    "numAddedBytes",
    "numAddedChangeFiles",
    "numTargetFilesAdded",
    "numTargetBytesAdded",
    "numTargetChangeFilesAdded",
}
"""Metrics that count the files the writers made: one set of files per Spark task, one per
process in Python. Everything else must be equal."""


@dataclass(frozen=True)
class Case:
    name: str
    data: pa.Table
    partition_by: list[str] | None
    configuration: dict[str, str]
    python: Callable[[str], Any]
    spark: Callable[[Any, str], Any]


def _mode(index: int) -> tuple[dict[str, str], str]:
    """Cases alternate between copy-on-write and deletion vectors (the Python tests show both modes
    give the same rows, changes and counts on every case)."""
    return (CDF, "cow") if index % 2 == 0 else (DV_CDF, "dv")


def _cases() -> list[Case]:
    cases = []
    for i, (partition_by, predicate) in enumerate(DELETE_CASES):
        configuration, mode = _mode(i)
        cases.append(
            Case(
                f"delete-{i}-{mode}",
                ROWS,
                partition_by,
                configuration,
                lambda uri, p=predicate: DeltaTable(uri).delete(p),
                lambda spark, uri, p=predicate: SparkTable.forPath(spark, uri).delete(p),
            )
        )
    for i, (partition_by, updates, predicate) in enumerate(UPDATE_CASES):
        configuration, mode = _mode(i + 1)
        cases.append(
            Case(
                f"update-{i}-{mode}",
                ROWS,
                partition_by,
                configuration,
                lambda uri, u=updates, p=predicate: DeltaTable(uri).update(u, predicate=p),
                lambda spark, uri, u=updates, p=predicate: SparkTable.forPath(spark, uri).update(p, u),
            )
        )
    for i, (name, specs) in enumerate(MERGE_CASES.items()):
        configuration, mode = _mode(i)
        cases.append(
            Case(
                f"merge-{name}-{mode}",
                MERGE_TARGET,
                ["p"] if i % 4 < 2 else None,
                configuration,
                lambda uri, s=specs: python_merge(
                    DeltaTable(uri).merge(MERGE_SOURCE, MERGE_CONDITION, source_alias="s", target_alias="t"),
                    s,
                ).execute(),
                lambda spark, uri, s=specs: spark_merge(
                    SparkTable.forPath(spark, uri)
                    .alias("t")
                    .merge(spark.createDataFrame(MERGE_SOURCE).alias("s"), MERGE_CONDITION),
                    s,
                ).execute(),
            )
        )
    return cases


def _summary(uri: str, version: int | None = None) -> dict[str, Any]:
    """The commit's summary (the latest one's without ``version``), the writers' layout left out."""
    summary = commit_summary(uri, version)
    summary["operationMetrics"] = {
        k: v for k, v in summary["operationMetrics"].items() if k not in LAYOUT_METRICS
    }
    return summary


def test_shared_cases_give_what_the_python_dml_gives(spark: Any, tmp_path: Path) -> None:
    cases = _cases()
    pairs = []
    for case in cases:
        python, on_spark = tmp_path / case.name / "python", tmp_path / case.name / "spark"
        write_table(
            str(python),
            case.data,
            partition_by=case.partition_by,
            configuration=case.configuration,
            max_rows_per_file=4,
        )
        shutil.copytree(python, on_spark)
        case.python(str(python))
        pairs.append((case, str(python), str(on_spark)))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda pair: pair[0].spark(spark, pair[2]).collect(), pairs))
    assert all(len(result) == 1 for result in results)
    for case, python, on_spark in pairs:
        assert latest_version(on_spark) == latest_version(python), case.name
        assert our_rows(on_spark) == our_rows(python) == rust_rows(on_spark), case.name
        if latest_version(python) == 0:
            continue
        assert _summary(on_spark) == _summary(python), case.name
        assert our_changes(on_spark, 1) == our_changes(python, 1) == rust_changes(on_spark, 1), case.name


def test_the_result_dataframes_are_deltas(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, MERGE_TARGET, configuration=CDF, max_rows_per_file=4)
    table = SparkTable.forPath(spark, uri)
    source = spark.createDataFrame(MERGE_SOURCE).alias("s")
    merged = spark_merge(
        table.alias("t").merge(source, MERGE_CONDITION), MERGE_CASES["conditional"]
    ).execute()
    assert merged.columns == [
        "num_affected_rows",
        "num_updated_rows",
        "num_deleted_rows",
        "num_inserted_rows",
    ]
    metrics = DeltaLog.for_table(uri).history(1)[0]["operationMetrics"]
    updated, deleted, inserted = (
        int(metrics[f"numTargetRows{k}"]) for k in ("Updated", "Deleted", "Inserted")
    )
    assert merged.collect()[0].asDict() == {
        "num_affected_rows": updated + deleted + inserted,
        "num_updated_rows": updated,
        "num_deleted_rows": deleted,
        "num_inserted_rows": inserted,
    }
    assert table.delete("id > 100").collect()[0].num_affected_rows == 0
    assert table.update("id = 1", {"v": "v + 1"}).collect()[0].num_affected_rows == 1


def test_sources_too_large_to_broadcast_join_with_a_shuffle(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dml_merge, "BROADCAST_ROWS", 0)
    monkeypatch.setattr(dml_merge, "KEY_RANGE_ROWS", 0)  # and no key ranges to prune by
    names = ("merge-upsert-", "merge-conditional-", "merge-by-source-dv", "merge-insert-only-")
    cases = [case for case in _cases() if case.name.startswith(names)]
    assert len(cases) == 4
    for case in cases:
        python, on_spark = tmp_path / case.name / "python", tmp_path / case.name / "spark"
        write_table(str(python), case.data, partition_by=case.partition_by, configuration=case.configuration)
        shutil.copytree(python, on_spark)
        case.python(str(python))
        case.spark(spark, str(on_spark)).collect()
        assert our_rows(str(on_spark)) == our_rows(str(python)), case.name
        assert _summary(str(on_spark)) == _summary(str(python)), case.name
        assert our_changes(str(on_spark), 1) == our_changes(str(python), 1), case.name


def _generated_table(path: str) -> None:
    """A table whose ``g`` is generated as ``v * 2``, with change data."""
    import dataclasses
    import json

    from replay import Protocol

    write_table(path, pa.table({"id": [1, 2, 3], "v": [10, 20, 30], "g": [20, 40, 60]}), configuration=CDF)
    log = DeltaLog.for_table(path)
    snapshot = log.update()
    schema = json.loads(snapshot.metadata.schema_string or "")
    schema["fields"][2]["metadata"] = {"delta.generationExpression": "v * 2"}
    metadata = dataclasses.replace(snapshot.metadata, schema_string=json.dumps(schema))
    log.commit([Protocol(1, 4), metadata], "SET TBLPROPERTIES", read_version=snapshot.version)


def test_generated_columns_evolution_and_default_aliases_are_the_python_dmls(
    spark: Any, tmp_path: Path
) -> None:
    python, on_spark = str(tmp_path / "python"), str(tmp_path / "spark")
    _generated_table(python)
    shutil.copytree(python, on_spark)
    source = pa.table({"id": pa.array([2, 9], pa.int64()), "v": pa.array([5, 7], pa.int64())})
    DeltaTable(python).update({"v": "v + 1"}, predicate="id = 1")
    SparkTable.forPath(spark, on_spark).update("id = 1", {"v": "v + 1"})
    python_merge(DeltaTable(python).merge(source, "target.id = source.id"), MERGE_CASES["upsert"]).execute()
    merged = SparkTable.forPath(spark, on_spark).merge(spark.createDataFrame(source), "target.id = source.id")
    spark_merge(merged, MERGE_CASES["upsert"]).execute()  # no aliases: target and source
    DeltaTable(python).delete("id = 3")
    SparkTable.forPath(spark, on_spark).alias("t").delete("t.id = 3")
    wider = pa.table(
        {"id": pa.array([1, 10], pa.int64()), "v": pa.array([1, 2], pa.int64()), "extra": ["a", "b"]}
    )
    python_merge(
        DeltaTable(python).merge(wider, "t.id = s.id", "s", "t", merge_schema=True), MERGE_CASES["upsert"]
    ).execute()
    evolving = (
        SparkTable.forPath(spark, on_spark)
        .alias("t")
        .merge(spark.createDataFrame(wider).alias("s"), "t.id = s.id")
    )
    spark_merge(evolving.withSchemaEvolution(), MERGE_CASES["upsert"]).execute()
    assert our_rows(on_spark) == our_rows(python)
    assert sorted((r["id"], r["g"]) for r in our_rows(on_spark)) == [(1, 2), (2, 10), (9, 14), (10, 4)]
    assert our_changes(on_spark, 2) == our_changes(python, 2)
    for version in range(2, latest_version(python) + 1):
        ours, theirs = _summary(on_spark, version), _summary(python, version)
        if ours["operation"] == "DELETE":  # the predicate as written: with the Spark side's alias
            assert ours["operationParameters"].pop("predicate") == '["t.id = 3"]'
            theirs["operationParameters"].pop("predicate")
        assert ours == theirs
    assert DeltaLog.for_table(on_spark).update().schema == DeltaLog.for_table(python).update().schema


def test_rows_keep_their_row_ids_as_in_the_python_dml(spark: Any, tmp_path: Path) -> None:
    """Row tracking enabled, copy-on-write: the executors keep the ids of the rows they copy,
    update and compact, and number inserted rows after the mark, exactly as the Python DML does."""
    python, on_spark = str(tmp_path / "python"), str(tmp_path / "spark")
    rows = pa.table({"id": pa.array(range(8), pa.int64()), "v": pa.array(range(8), pa.int64())})
    write_table(python, rows, configuration={"delta.enableRowTracking": "true"})
    shutil.copytree(python, on_spark)
    source = pa.table({"id": pa.array([2, 9], pa.int64()), "v": pa.array([20, 90], pa.int64())})
    DeltaTable(python).update({"v": "v + 1"}, predicate="id = 1")
    SparkTable.forPath(spark, on_spark).update("id = 1", {"v": "v + 1"})
    python_merge(DeltaTable(python).merge(source, "target.id = source.id"), MERGE_CASES["upsert"]).execute()
    merged = SparkTable.forPath(spark, on_spark).merge(spark.createDataFrame(source), "target.id = source.id")
    spark_merge(merged, MERGE_CASES["upsert"]).execute()
    DeltaTable(python).delete("id = 5")
    SparkTable.forPath(spark, on_spark).delete("id = 5")
    expected = row_lineage(python)
    assert expected[1] == (1, 1) and expected[2] == (2, 2) and expected[3] == (3, 0)
    assert row_lineage(on_spark) == expected
    SparkTable.forPath(spark, on_spark).optimize().executeCompaction()  # and so do OPTIMIZE's tasks
    assert len(DeltaTable(on_spark).snapshot.files()) == 1
    assert row_lineage(on_spark) == expected
    assert our_rows(on_spark) == our_rows(python) == rust_rows(on_spark)


# -- errors and failures ------------------------------------------------------------------------------
def test_errors_are_the_python_dmls(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, MERGE_TARGET, configuration=DV_CDF, max_rows_per_file=4)
    table = SparkTable.forPath(spark, uri)
    before = files_under(uri)
    with pytest.raises(ExpressionError, match="nope") as spark_error:
        table.delete("nope > 1")
    with pytest.raises(ExpressionError) as python_error:
        DeltaTable(uri).delete("nope > 1")
    assert str(spark_error.value) == str(python_error.value)
    twice = spark.createDataFrame(pa.table({"id": pa.array([1, 1], pa.int64()), "v": [5, 6], "p": [1, 1]}))
    with pytest.raises(
        MultipleSourceRowMatchError, match="DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE"
    ):
        table.alias("t").merge(twice.alias("s"), "t.id = s.id").whenMatchedUpdateAll().execute()
    deleted = table.alias("t").merge(twice.alias("s"), "t.id = s.id").whenMatchedDelete().execute()
    assert deleted.collect()[0].num_deleted_rows == 1  # one unconditional delete: several matches are fine
    assert latest_version(uri) == 1
    with pytest.raises(
        TableNotFoundError, match=r"^\[DELTA_MISSING_DELTA_TABLE\] delta.`.*` is not a Delta table.$"
    ):
        SparkTable.forPath(spark, str(tmp_path / "none"))
    assert not SparkTable.isDeltaTable(spark, str(tmp_path / "none")) and SparkTable.isDeltaTable(spark, uri)
    with pytest.raises(TypeError, match="'condition' must be a Spark SQL Column or a string"):
        table.delete(1)
    with pytest.raises(ValueError, match="'set' cannot be None"):
        table.update("id = 1")
    assert all(f.startswith(("deletion_vector_", "_change_data/")) for f in files_under(uri) - before)


def test_append_only_and_constraints_refuse_and_leave_nothing(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, MERGE_TARGET, configuration={"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyTableError, match="DELTA_CANNOT_MODIFY_APPEND_ONLY"):
        SparkTable.forPath(spark, uri).delete("id = 1")
    checked = str(tmp_path / "checked")
    write_table(checked, ROWS, partition_by=["p"], configuration=CDF, max_rows_per_file=2)
    DeltaTable(checked).alter.add_constraint({"small": "x < 10"})
    before, version = files_under(checked), latest_version(checked)
    with pytest.raises(InvariantViolationError, match="small"):
        SparkTable.forPath(spark, checked).update("id % 2 = 0", {"x": "x + 20"})
    assert files_under(checked) == before and latest_version(checked) == version


class _FilesWithOneMissing(tuple):  # type: ignore[type-arg]
    """The target files of a task spec, where looking up the one past the end waits a little (so
    that the other task finishes first) and then fails with an ``IndexError``, not a Delta error."""

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int) and index >= len(self):
            time.sleep(1.5)
        return super().__getitem__(index)


def test_a_failed_job_deletes_what_finished_tasks_wrote(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay.dml.context import dml_table
    from replay.protocol.arrow_actions import add_actions
    from replay.spark.dml_columns import decided, functions
    from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN

    uri = str(tmp_path / "t")
    write_table(uri, ROWS, configuration=DV_CDF, max_rows_per_file=2)
    before = files_under(uri)
    snapshot = DeltaLog.for_table(uri).update()
    files = {f.path: f for f in add_actions(snapshot.files_table())}
    F = functions()  # noqa: N806 - PySpark's convention
    rows = (
        SparkTarget(spark, uri)
        .scan(snapshot.version, files)
        .filter(F.col(ROW_COLUMN) == 0)  # a deletion vector for each file, none deletes a whole file
        .select(*decided(F.lit(DELETE), F.lit(0), []))
    )
    ids = file_ids(files)
    missing = rows.limit(1).withColumn(FILE_COLUMN, F.lit(len(ids)))  # its task handles it last
    rows = rows.unionByName(missing)
    table = dml_table(snapshot, removes_rows=True, change_data=False)
    spec = TaskSpec(
        table, _FilesWithOneMissing(files[path] for path in ids), (ClauseEffect(DELETE, "deleted"),)
    )
    deleted: list[Any] = []
    discard = dml_jobs.discard_written
    monkeypatch.setattr(dml_jobs, "discard_written", lambda t, w: (deleted.extend(w), discard(t, w)))
    coalesce = "spark.sql.adaptive.coalescePartitions.enabled"
    spark.conf.set(coalesce, "false")  # two tasks, whatever their size
    try:
        with pytest.raises(Exception, match="IndexError"):
            dml_jobs.run_changes(spark, rows, spec)
    finally:
        spark.conf.unset(coalesce)
    assert any(paths for _, paths in deleted)  # the task that finished had written deletion vectors
    assert files_under(uri) == before  # the failed task deleted its own, the driver the other's
    assert latest_version(uri) == 0


# -- Column arguments -----------------------------------------------------------------------------------
def test_columns_are_written_as_sql(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

    strings, columns = str(tmp_path / "strings"), str(tmp_path / "columns")
    for uri in (strings, columns):
        write_table(uri, MERGE_TARGET, configuration=CDF, max_rows_per_file=4)
    SparkTable.forPath(spark, strings).delete("id > 8")
    SparkTable.forPath(spark, columns).delete(F.col("id") > 8)
    SparkTable.forPath(spark, strings).update("v IS NULL", {"v": "id * 100"})
    SparkTable.forPath(spark, columns).update(F.col("v").isNull(), {"v": F.col("id") * 100})
    source = spark.createDataFrame(MERGE_SOURCE).alias("s")
    (
        SparkTable.forPath(spark, strings)
        .alias("t")
        .merge(source, "t.id = s.id")
        .whenMatchedUpdate("s.v > t.v", {"v": "s.v"})
        .whenNotMatchedInsert(values={"id": "s.id", "v": "s.v + 1", "p": "s.p"})
        .execute()
    )
    (
        SparkTable.forPath(spark, columns)
        .alias("t")
        .merge(source, F.col("t.id") == F.col("s.id"))
        .whenMatchedUpdate(F.col("s.v") > F.col("t.v"), {"v": F.col("s.v")})
        .whenNotMatchedInsert(values={"id": F.col("s.id"), "v": F.col("s.v") + 1, "p": "s.p"})
        .execute()
    )
    assert our_rows(strings) == our_rows(columns)
    assert our_changes(strings, 1) == our_changes(columns, 1)
    parameters = commit_summary(columns)["operationParameters"]
    assert parameters["predicate"] == '["(t.id = s.id)"]'
    assert commit_summary(columns, 1)["operationParameters"] == {"predicate": '["(id > CAST(8 AS BIGINT))"]'}


def test_a_mapped_table_is_written_with_physical_columns_from_spark(spark: Any, tmp_path: Path) -> None:
    from replay.spark import register
    from tests.test_column_mapping_writes import check_files, mapped_table, sample

    register(spark)
    uri = mapped_table(tmp_path, "id", **CDF)
    appended = sample().slice(0, 2).set_column(0, "id", pa.array([11, 12], pa.int64()))
    spark.createDataFrame(appended.select(["id", "a name", "part"]).to_pandas()).write.format(
        "deltalog"
    ).mode("append").save(uri)
    assert check_files(uri, 1) >= 1
    SparkTable.forPath(spark, uri).delete("id = 11")
    assert check_files(uri, 2) >= 1
    SparkTable.forPath(spark, uri).update("id = 12", {"`a name`": "'spark'"})
    assert check_files(uri, 3) >= 2
    rows = {r["id"]: r["a name"] for r in our_rows(uri)}
    assert rows == {1: "w", 2: "x", 3: "y", 4: None, 12: "spark"}
    assert our_rows(uri) == rust_rows(uri)
