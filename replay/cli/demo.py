"""``deltalog demo``: build a small table and show the whole product working on it.

Creates a table with the change data feed on, commits appends and a whole-file delete through
the LogStore the configuration resolves, writes a checkpoint, prints the snapshot, history and
change feed, then reads the same table and its change feed from a local SparkSession through the
``deltalog`` data source, including a streaming read with ``availableNow``, and writes to it from
Spark: an append, and an overwrite of one partition with ``replaceWhere``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from logstores import explain_log_store
from replay import CheckpointResult
from replay.cli import output

if TYPE_CHECKING:  # pyspark is imported when the Spark part runs
    from pyspark.sql import SparkSession

DEMO_MARKER = "deltalog.demo"
"""Table property that marks a table written by the demo (so a rerun may replace it)."""


def _batch(ids: range, city: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "city": pa.array([city] * len(ids), pa.string()),
            "amount": pa.array([round(i * 1.25, 2) for i in ids], pa.float64()),
        }
    )


def prepare_directory(directory: str) -> Path:
    """The demo directory, emptied if it holds an earlier demo table; refuses other content."""
    path = Path(directory).expanduser().resolve()
    if path.exists() and any(path.iterdir()):
        log = path / "_delta_log"
        if not (log.is_dir() and _is_demo_table(path)):
            raise FileExistsError(f"{path} exists and is not an earlier demo table; choose another DIR")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _is_demo_table(path: Path) -> bool:
    first_commit = path / "_delta_log" / f"{0:020d}.json"
    return first_commit.is_file() and DEMO_MARKER in first_commit.read_text(encoding="utf-8")


def build_demo_table(uri: str, conf: Mapping[str, str]) -> CheckpointResult:
    """Commit the demo's versions: 0-2 appends, 3 a whole-file delete, then a checkpoint."""
    from replay import DeltaLog, delete_files, write_table

    write_table(
        uri,
        _batch(range(0, 5), "Lisbon"),
        partition_by=["city"],
        conf=conf,
        configuration={"delta.enableChangeDataFeed": "true", DEMO_MARKER: "true"},
    )
    write_table(uri, _batch(range(5, 10), "Oslo"), conf=conf)
    write_table(uri, _batch(range(10, 13), "Lima"), conf=conf)
    log = DeltaLog.for_table(uri, conf)
    oslo = [f.path for f in log.snapshot().files() if f.partition_values.get("city") == "Oslo"]
    delete_files(uri, oslo, conf=conf)
    return log.checkpoint()


def run_demo(directory: str, conf: Mapping[str, str], *, with_spark: bool = True) -> None:
    """Run the whole demo in ``directory`` (created; an earlier demo table there is replaced)."""
    from replay import DeltaLog, table_changes

    path = prepare_directory(directory)
    uri = str(path)
    choice = explain_log_store(uri, conf)
    print(f"Table: {uri}")
    print(f"LogStore: {choice.class_name} ({choice.reason})\n")
    checkpoint = build_demo_table(uri, conf)
    print(f"Committed versions 0-{checkpoint.version} and a checkpoint at version {checkpoint.version}\n")

    log = DeltaLog.for_table(uri, conf)
    output.emit_snapshot(log.snapshot(), as_json=False, with_files=True)
    output.emit_history(log.history(), as_json=False)
    print("\nChange data feed, versions 0 to latest:")
    output.emit_changes(table_changes(log, starting_version=0), as_json=False)
    if with_spark:
        _spark_part(uri, conf)


def _spark_part(uri: str, conf: Mapping[str, str]) -> None:

    from pyspark.sql import SparkSession

    from replay.spark import register
    from replay.spark.session import local_session

    own_session = SparkSession.getActiveSession() is None
    spark = local_session("deltalog-demo", conf)
    try:
        register(spark)
        print("\nPySpark: spark.read.format('deltalog').load(uri)")
        spark.read.format("deltalog").load(uri).orderBy("id").show(truncate=False)
        print("PySpark: the change feed from version 0 (readChangeFeed=true)")
        (
            spark.read.format("deltalog")
            .option("readChangeFeed", "true")
            .option("startingVersion", 0)
            .load(uri)
            .orderBy("_commit_version", "id")
            .show(truncate=False)
        )
        print("PySpark: streaming the change feed with availableNow, one file per micro-batch")
        with tempfile.TemporaryDirectory(prefix="deltalog-demo-checkpoint-") as checkpoint:
            query = (
                spark.readStream.format("deltalog")
                .option("readChangeFeed", "true")
                .option("startingVersion", 0)
                .option("maxFilesPerTrigger", 1)
                .load(uri)
                .writeStream.format("memory")
                .queryName("deltalog_demo_changes")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
            rows = spark.sql("SELECT count(*) AS n FROM deltalog_demo_changes").collect()[0]["n"]
            print(f"{len(batches)} micro-batches delivered {rows} change rows")
        _spark_writes(spark, uri, conf)
    finally:
        if own_session:
            spark.stop()


def _spark_writes(spark: SparkSession, uri: str, conf: Mapping[str, str]) -> None:
    from replay import DeltaLog, table_changes

    schema = "id long, city string, amount double"
    print("\nPySpark: df.write.format('deltalog').mode('append').save(uri)")
    porto = spark.createDataFrame([(13, "Porto", 16.25), (14, "Porto", 17.5)], schema)
    porto.write.format("deltalog").mode("append").save(uri)
    print("PySpark: .mode('overwrite').option('replaceWhere', \"city = 'Lima'\") replaces one partition")
    lima = spark.createDataFrame([(10, "Lima", 20.0)], schema)
    lima.write.format("deltalog").mode("overwrite").option("replaceWhere", "city = 'Lima'").save(uri)
    log = DeltaLog.for_table(uri, conf)
    version = log.latest_version()
    print(f"Spark committed versions {version - 1}-{version} through the LogStore; their change feed:")
    output.emit_changes(table_changes(log, starting_version=version - 1), as_json=False)
    spark.read.format("deltalog").load(uri).orderBy("id").show(truncate=False)
