"""The Spark ``DeltaTable`` beyond row-level changes: Delta's history and detail DataFrames,
maintenance (vacuum, restore, protocol, features, properties), OPTIMIZE's builder, lazy
registration, every object store, and Spark Connect."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import DeltaLog, DeltaTable, table_changes, write_table
from replay.maintenance.restore import RestoreError
from replay.spark import DeltaTable as SparkTable
from replay.spark.optimize_builder import InvalidOptimizeFilterError, partition_filters
from tests.cloud_servers import service_root, unique_name
from tests.dml_cases import CDF, DV_CDF, MERGE_TARGET, ROWS, normalised, our_rows
from tests.paths import REPO_ROOT

HISTORY_COLUMNS = [
    "version",
    "timestamp",
    "userId",
    "userName",
    "operation",
    "operationParameters",
    "job",
    "notebook",
    "clusterId",
    "readVersion",
    "isolationLevel",
    "isBlindAppend",
    "operationMetrics",
    "userMetadata",
    "engineInfo",
]
DETAIL_COLUMNS = [
    "format",
    "id",
    "name",
    "description",
    "location",
    "createdAt",
    "lastModified",
    "partitionColumns",
    "clusteringColumns",
    "numFiles",
    "sizeInBytes",
    "properties",
    "minReaderVersion",
    "minWriterVersion",
    "tableFeatures",
]


# -- reading the table -------------------------------------------------------------------------------
@pytest.mark.spark
def test_history_and_detail_are_deltas_dataframes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["p"], configuration=CDF, max_rows_per_file=4)
    table = SparkTable.forPath(spark, uri)
    table.delete("id > 9")
    history = table.history()
    assert history.columns == HISTORY_COLUMNS
    rows = [row.asDict() for row in history.collect()]
    python = DeltaTable(uri).history()
    assert [r["version"] for r in rows] == [1, 0] and [r["operation"] for r in rows] == ["DELETE", "WRITE"]
    assert rows[0]["operationParameters"] == python[0]["operationParameters"]
    assert rows[0]["operationMetrics"] == python[0]["operationMetrics"]
    assert rows[0]["readVersion"] == 0 and rows[0]["isBlindAppend"] is False
    assert rows[0]["timestamp"] == dt.datetime.fromtimestamp(python[0]["timestamp"] / 1000, dt.UTC).replace(
        tzinfo=None
    )
    assert table.history(1).count() == 1
    detail = table.detail()
    assert detail.columns == DETAIL_COLUMNS
    row = detail.collect()[0].asDict()
    snapshot = DeltaLog.for_table(uri).update()
    assert row["format"] == "delta" and row["id"] == snapshot.metadata.id
    assert row["location"] == DeltaLog.for_table(uri).table_path
    assert row["partitionColumns"] == ["p"] and row["clusteringColumns"] == []
    assert row["numFiles"] == snapshot.num_files and row["sizeInBytes"] == sum(
        f.size for f in snapshot.files()
    )
    assert row["properties"] == CDF
    assert (row["minReaderVersion"], row["minWriterVersion"]) == (1, 4)
    assert row["tableFeatures"] == [
        "appendOnly",
        "changeDataFeed",
        "checkConstraints",
        "generatedColumns",
        "invariants",
    ]
    assert sorted(table.alias("t").toDF().select("t.id").collect(), key=repr) == sorted(
        [(r["id"],) for r in our_rows(uri)], key=repr
    )


# -- maintenance --------------------------------------------------------------------------------------
@pytest.mark.spark
def test_vacuum_restore_protocol_features_and_properties(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, configuration=CDF, max_rows_per_file=4)
    table = SparkTable.forPath(spark, uri)
    table.delete("id < 3")  # removes a file
    assert table.vacuum().count() == 0  # within the default retention: nothing deleted
    removed = {f.path for f in DeltaLog.for_table(uri).snapshot(0).files()} - set(DeltaTable(uri).files())
    assert all((Path(uri) / path).exists() for path in removed)
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    with pytest.raises(Exception, match="retention"):
        table.vacuum(0)
    spark.conf.set(check, "false")
    try:
        table.vacuum(0)
    finally:
        spark.conf.unset(check)
    assert not any((Path(uri) / path).exists() for path in removed)
    with pytest.raises(RestoreError):
        table.restoreToVersion(0)  # its files are gone
    table.update("id = 5", {"v": "'five'"})
    version = DeltaLog.for_table(uri).latest_version()
    restored = table.restoreToVersion(version - 1)
    assert restored.columns == [
        "table_size_after_restore",
        "num_of_files_after_restore",
        "num_removed_files",
        "num_restored_files",
        "removed_files_size",
        "restored_files_size",
    ]
    assert restored.collect()[0].num_restored_files == 1
    assert our_rows(uri) == normalised(DeltaLog.for_table(uri).snapshot(version - 1).to_arrow())
    moment = DeltaLog.for_table(uri).commit_timestamp(version)
    stamp = dt.datetime.fromtimestamp(moment / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    table.restoreToTimestamp(stamp)
    assert our_rows(uri) == normalised(DeltaLog.for_table(uri).snapshot(version).to_arrow())
    table.upgradeTableProtocol(1, 5)
    table.addFeatureSupport("deletionVectors")
    protocol = DeltaLog.for_table(uri).update().protocol
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert "deletionVectors" in (protocol.reader_features or [])
    table.setProperties({"delta.enableDeletionVectors": "true", "owner": "data"})
    assert DeltaLog.for_table(uri).update().metadata.configuration["owner"] == "data"
    table.unsetProperties(["owner"])
    table.unsetProperties(["nothing"], ifExists=True)
    assert "owner" not in DeltaLog.for_table(uri).update().metadata.configuration
    assert table.delete("id = 7").collect()[0].num_affected_rows == 1
    assert any(f.deletion_vector is not None for f in DeltaLog.for_table(uri).update().files())
    operations = [r.operation for r in table.history().collect()]
    assert operations[0] == "DELETE"
    assert {"RESTORE", "UPGRADE PROTOCOL", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES"} <= set(operations)


def test_optimize_where_takes_partition_equalities_only() -> None:
    assert partition_filters([], ["p"], "t") is None
    assert partition_filters(["p = 'a'", "q = 3 AND P = 'b'"], ["p", "q"], "t") == [
        ("p", "=", "a"),
        ("q", "=", "3"),
        ("p", "=", "b"),
    ]
    assert partition_filters(["d = DATE'2024-01-02'"], ["d"], "t") == [("d", "=", "2024-01-02")]
    for text in ("p > 'a'", "x = 1", "p = 'a' OR p = 'b'", "p IS NULL"):
        with pytest.raises(InvalidOptimizeFilterError, match="OPTIMIZE of table t takes only equalities"):
            partition_filters([text], ["p"], "t")


@pytest.mark.spark
def test_optimize_rewrites_each_bin_in_a_spark_task(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["p"], max_rows_per_file=1)
    table = SparkTable.forPath(spark, uri)
    before = our_rows(uri)
    context = spark.sparkContext
    context.setJobGroup("optimize-test", "OPTIMIZE")
    try:
        result = table.optimize().executeCompaction().collect()[0]
    finally:
        context.setJobGroup("", "")
    tracker = context.statusTracker()
    tasks = [
        stage.numTasks
        for job in tracker.getJobIdsForGroup("optimize-test")
        for stage_id in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
        if (stage := tracker.getStageInfo(stage_id)) is not None and "optimize_jobs" in stage.name
    ]
    bins = result.metrics.partitionsOptimized  # one bin per partition of more than one file
    assert bins >= 2 and tasks == [bins]  # each bin rewritten in a task of its own
    assert result.path == uri and result.metrics.numFilesAdded == bins
    assert result.metrics.numFilesRemoved == len(before) - (DeltaLog.for_table(uri).update().num_files - bins)
    assert our_rows(uri) == before == normalised(DeltaTable(uri).to_pyarrow_table())
    write_table(uri, ROWS, partition_by=["p"], mode="append", max_rows_per_file=1)
    result = table.optimize().where("p = 1").executeCompaction().collect()[0]
    assert result.metrics.numFilesAdded == 1 and result.metrics.partitionsOptimized == 1
    table.optimize().executeZOrderBy("id", "x")
    assert sorted(map(repr, our_rows(uri))) == sorted(map(repr, before + before))
    assert [r.operation for r in table.history(4).collect()] == ["OPTIMIZE", "OPTIMIZE", "WRITE", "OPTIMIZE"]


# -- object stores ------------------------------------------------------------------------------------
def _hadoop_conf(conf: dict[str, str]) -> dict[str, str]:
    """A store's Spark settings as ``forPath``'s ``hadoopConf`` (``spark.hadoop.`` left out)."""
    return {key.removeprefix("spark.hadoop."): value for key, value in conf.items()}


def _changes(
    uri: str, spark: Any | None, conf: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    write_table(uri, ROWS, partition_by=["p"], conf=conf, configuration=DV_CDF, max_rows_per_file=4)
    source = MERGE_TARGET.slice(0, 4).set_column(2, "p", pa.array([1, 1, 2, 0], pa.int32()))
    if spark is None:
        table = DeltaTable(uri, conf=conf)
        table.delete("id % 5 = 0")
        table.update({"v": "upper(v)"}, predicate="id > 6")
        (
            table.merge(source.select(["id", "p"]), "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update({"x": "t.x + 1"})
            .when_not_matched_insert({"id": "s.id", "p": "s.p"})
            .execute()
        )
    else:
        on_spark = SparkTable.forPath(spark, uri, _hadoop_conf(conf))
        on_spark.delete("id % 5 = 0")
        on_spark.update("id > 6", {"v": "upper(v)"})
        (
            on_spark.alias("t")
            .merge(spark.createDataFrame(source.select(["id", "p"])).alias("s"), "t.id = s.id")
            .whenMatchedUpdate(set={"x": "t.x + 1"})
            .whenNotMatchedInsert(values={"id": "s.id", "p": "s.p"})
            .execute()
        )
    rows = normalised(DeltaTable(uri, conf=conf).to_pyarrow_table())
    return rows, normalised(table_changes(DeltaLog.for_table(uri, conf), starting_version=1))


@pytest.mark.spark
@pytest.mark.cloud
@pytest.mark.parametrize("service", ["s3", "gcs", "azure"])
def test_row_level_changes_on_object_stores(
    spark: Any, request: pytest.FixtureRequest, tmp_path: Path, service: str
) -> None:
    root, _, conf_for = service_root(request, service)
    conf = conf_for()
    remote = _changes(f"{root}/{unique_name('table')}", spark, dict(conf))
    assert remote == _changes(str(tmp_path / "local"), None, {})
    assert {c["_change_type"] for c in remote[1]} == {
        "delete",
        "update_preimage",
        "update_postimage",
        "insert",
    }


# -- Spark Connect ------------------------------------------------------------------------------------
CONNECT_SCRIPT = """
import json, sys
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from replay.spark import DeltaTable

spark = SparkSession.builder.remote("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
try:
    table = DeltaTable.forPath(spark, sys.argv[1])  # registers the data source on the session
    out = {
        "delete": table.delete(F.col("id") > 8).collect()[0][0],
        "update": table.update(F.col("v").isNull(), {"v": F.col("id") * 100}).collect()[0][0],
    }
    source = spark.createDataFrame(pa.table({"id": pa.array([1, 3, 12], pa.int64()),
                                             "v": pa.array([5, 6, 7], pa.int64()),
                                             "p": pa.array([1, 0, 0], pa.int32())}))
    merged = (
        table.alias("t").merge(source.alias("s"), F.col("t.id") == F.col("s.id"))
        .whenMatchedUpdate(set={"v": F.col("s.v") + F.lit(1)})
        .whenNotMatchedInsertAll()
        .execute()
    )
    out["merge"] = merged.collect()[0].asDict()
    out["history"] = [row.operation for row in table.history().collect()]
    out["numFiles"] = table.detail().collect()[0].numFiles
    print("RESULT " + json.dumps(out))
finally:
    spark.stop()
"""


@pytest.mark.spark
@pytest.mark.own_spark
def test_the_api_works_over_spark_connect(tmp_path: Path) -> None:
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except Exception as exc:  # noqa: BLE001 - the client's packages are optional
        pytest.skip(f"Spark Connect's client packages are missing: {exc}")
    uri, python = str(tmp_path / "connect"), str(tmp_path / "python")
    for path in (uri, python):
        write_table(path, MERGE_TARGET, configuration=CDF, max_rows_per_file=4)
    script = tmp_path / "connect.py"
    script.write_text(CONNECT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), uri], capture_output=True, text=True, env=env, timeout=400, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-4000:]
    out = json.loads(lines[0].removeprefix("RESULT "))
    table = DeltaTable(python)
    assert out["delete"] == table.delete("id > 8")["numDeletedRows"]
    assert out["update"] == table.update({"v": "id * 100"}, predicate="v IS NULL")["numUpdatedRows"]
    source = pa.table(
        {
            "id": pa.array([1, 3, 12], pa.int64()),
            "v": pa.array([5, 6, 7], pa.int64()),
            "p": pa.array([1, 0, 0], pa.int32()),
        }
    )
    metrics = (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"v": "s.v + 1"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert out["merge"]["num_updated_rows"] == metrics["numTargetRowsUpdated"]
    assert out["merge"]["num_inserted_rows"] == metrics["numTargetRowsInserted"]
    assert out["history"] == ["MERGE", "UPDATE", "DELETE", "WRITE"]
    assert our_rows(uri) == our_rows(python)
    assert out["numFiles"] == DeltaLog.for_table(uri).update().num_files


def test_the_readme_uses_the_api_there_is() -> None:
    import re

    from replay.spark import DeltaMergeBuilder, DeltaOptimizeBuilder

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Changing rows from Spark\n", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, re.S)
    assert example.startswith("# from delta.tables import DeltaTable\nfrom replay.spark import DeltaTable\n")
    ours = {name for cls in (SparkTable, DeltaMergeBuilder, DeltaOptimizeBuilder) for name in dir(cls)}
    spark_api = {"alias", "show", "select"}  # DataFrame methods
    used = set(re.findall(r"\.([A-Za-z]+)\(", example)) | set(re.findall(r"`([a-z][A-Za-z]+)\(", section))
    assert used - ours - spark_api - {"col", "remote"} == set()


def test_spark_connect_columns_are_written_as_sql_the_grammar_reads() -> None:
    try:
        from pyspark.sql.connect import functions as F  # noqa: N812 - PySpark's convention
    except Exception as exc:  # noqa: BLE001 - the client's packages are optional
        pytest.skip(f"Spark Connect's client packages are missing: {exc}")
    from replay.protocol.sql import parse_expression
    from replay.spark.sql_text import UnsupportedColumnError, sql_of

    schema = pa.schema(
        [("a", pa.int64()), ("v", pa.string()), ("d", pa.date32()), ("ts", pa.timestamp("us", "UTC"))]
    )
    rows = pa.table(
        {
            "a": pa.array([1, 5], pa.int64()),
            "v": ["it's \\ x", "A"],
            "d": [dt.date(2024, 1, 2), dt.date(2024, 1, 3)],
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 2, pa.timestamp("us", "UTC")),
        }
    )
    cases = {
        "((a IN (1, 2)) AND (NOT (v IS NULL)))": F.col("a").isin(1, 2) & ~F.col("v").isNull(),
        "(v = 'it\\'s \\\\ x')": F.col("v") == F.lit("it's \\ x"),
        "(d = DATE '2024-01-02')": F.col("d") == F.lit(dt.date(2024, 1, 2)),
        "(ts < TIMESTAMP '2024-01-02 00:00:00+00:00')": F.col("ts")
        < F.lit(dt.datetime(2024, 1, 2, tzinfo=dt.UTC)),
        "CASE WHEN (a > 1) THEN 'x' ELSE v END": F.when(F.col("a") > 1, "x").otherwise(F.col("v")),
        "((upper(v)) LIKE 'A%')": F.expr("upper(v)").like("A%"),
        "CAST((a + 1) AS bigint)": (F.col("a") + 1).cast("bigint"),
    }
    for expected, column in cases.items():
        text = sql_of(column, None)
        assert text == expected
        parse_expression(text).bind(schema).evaluate(rows)
    assert parse_expression(sql_of(cases["(v = 'it\\'s \\\\ x')"], None)).bind(schema).evaluate(
        rows
    ).to_pylist() == [True, False]
    with pytest.raises(UnsupportedColumnError, match="pass the condition or value as a SQL string"):
        sql_of(F.udf(lambda x: x)(F.col("a")), None)
    with pytest.raises(TypeError, match="'condition' must be a Spark SQL Column or a string"):
        sql_of(1, None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters=".", codec="utf-8"), min_size=1),
        min_size=1,
        max_size=3,
    )
)
def test_set_keys_are_attribute_names(parts: list[str]) -> None:
    """A ``set``/``values`` key is read as Delta reads it: backquoted parts are unquoted (a
    doubled backquote is one), plain ones kept; a key that cannot be split back is kept whole."""
    from replay.dml.assignments import quote
    from replay.spark.sql_text import attribute_name

    assert attribute_name(".".join(quote(part) for part in parts)) == ".".join(parts)
    plain = [part for part in parts if "`" not in part]
    if plain:
        assert attribute_name(".".join(plain)) == ".".join(plain)
    assert attribute_name("`unclosed") == "`unclosed"
