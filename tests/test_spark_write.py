"""Writing Delta tables from a real local Spark through the ``deltalog`` data source.

Round trips of every type on local disk and S3 (moto) checked with delta-rs and our reader, the
write options, conflicts with concurrent writers (also on S3 + DynamoDB), and the streaming sink's
exactly-once guarantee across restarts.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, RemoveFile, SetTransaction
from replay.protocol.errors import ConcurrentModificationError
from replay.spark import register
from replay.txn import write as write_module
from replay.txn.write import write_table
from tests.cloud_servers import MotoServer, dynamodb_settings, unique_name

pytestmark = pytest.mark.spark

FILE_NAME = re.compile(r"part-\d{5}-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-c\d{3}\.snappy\.parquet")
ALL_TYPES_SQL = """
SELECT id,
       CAST(id AS INT) AS i, CAST(id AS SMALLINT) AS sh, CAST(id % 100 AS TINYINT) AS b,
       CAST(id / 4 AS FLOAT) AS f, CASE WHEN id % 7 = 0 THEN NULL ELSE id / 3 END AS d,
       CAST(id * 1.5 AS DECIMAL(12, 3)) AS dec, CAST(id AS DECIMAL(30, 5)) AS big,
       CASE WHEN id % 5 = 0 THEN NULL ELSE concat('s', id, repeat('x', 40)) END AS str,
       id % 2 = 0 AS flag,
       date_add(DATE'2024-01-01', CAST(id AS INT)) AS day,
       TIMESTAMP'2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
       TIMESTAMP_NTZ'2024-01-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ntz,
       CAST(concat('b', id) AS BINARY) AS bin,
       array(CAST(id AS INT), NULL) AS arr,
       map('k', id) AS m,
       named_struct('x', CAST(id AS INT), 'y', concat('y', id)) AS st,
       CAST(id % 3 AS STRING) AS p,
       CAST(id % 2 AS INT) AS q
FROM range({start}, {end})
"""


@pytest.fixture(scope="module")
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def all_types(spark: Any, start: int, end: int, partitions: int = 2) -> Any:
    return spark.sql(ALL_TYPES_SQL.format(start=start, end=end)).repartition(partitions)


# -- comparing rows ----------------------------------------------------------------------------------
def norm(value: Any) -> Any:
    """A value in one form whichever engine produced it."""
    if hasattr(value, "asDict"):
        return {key: norm(item) for key, item in value.asDict().items()}
    if isinstance(value, dict):
        return {key: norm(item) for key, item in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            return {key: norm(item) for key, item in value}  # an Arrow map
        return [norm(item) for item in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def spark_rows(frame: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(norm(row[c]) for c in columns) for row in frame.collect()), key=repr)


def arrow_rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(norm(row[c]) for c in columns) for row in table.to_pylist()), key=repr)


def ours(uri: str, conf: dict[str, str] | None = None) -> pa.Table:
    return DeltaLog.for_table(uri, conf).snapshot().to_arrow()


def commit_info(log: DeltaLog, version: int) -> dict[str, Any]:
    line = log.store.read(f"{log.log_path}/{version:020d}.json")[0]
    return orjson.loads(line)["commitInfo"]


def local_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


# -- round trips -----------------------------------------------------------------------------------
def test_round_trip_of_every_type_partitioned_on_local_disk(deltalog: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    first = all_types(deltalog, 0, 60)
    columns = first.columns
    (
        first.write.format("deltalog")
        .mode("append")
        .option("partitionBy", "p, q")
        .option("delta.checkpointInterval", "1")
        .option("delta.dataSkippingNumIndexedCols", "5")
        .save(path)
    )
    second = all_types(deltalog, 60, 100)
    second.write.format("delta").mode("append").save(path)  # the alias, without Delta's jars
    expected = spark_rows(first, columns) + spark_rows(second, columns)
    expected.sort(key=repr)

    assert arrow_rows(DeltaTable(path).to_pyarrow_table(), columns) == expected
    assert arrow_rows(ours(path), columns) == expected
    assert spark_rows(deltalog.read.format("deltalog").load(path), columns) == expected

    log = DeltaLog.for_table(path)
    snapshot = log.snapshot()
    assert snapshot.version == 1 and snapshot.partition_columns == ["p", "q"]
    assert snapshot.metadata.configuration == {
        "delta.checkpointInterval": "1",
        "delta.dataSkippingNumIndexedCols": "5",
    }
    assert (snapshot.protocol.min_reader_version, snapshot.protocol.reader_features) == (3, ["timestampNtz"])
    assert all(f.nullable for f in snapshot.schema.fields)
    assert snapshot.log_segment.checkpoint is not None  # written by the post-commit hook
    assert snapshot.log_segment.checkpoint.version == 1
    for add in snapshot.files():
        directory, name = add.path.rsplit("/", 1)
        assert directory == f"p={add.partition_values['p']}/q={add.partition_values['q']}"
        assert FILE_NAME.fullmatch(name)
        stats = json.loads(add.stats or "{}")
        assert list(stats["nullCount"]) == ["id", "i", "sh", "b", "f"]  # the first 5 columns
        assert stats["numRecords"] > 0 and stats["minValues"]["id"] <= stats["maxValues"]["id"]
    info = commit_info(log, 0)
    assert info["operation"] == "WRITE" and info["isBlindAppend"] is True
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": '["p","q"]'}
    assert info["operationMetrics"]["numOutputRows"] == "60"


def test_round_trip_on_s3(deltalog: Any, moto_server: MotoServer) -> None:
    uri = f"s3a://{moto_server.create_bucket()}/table"
    conf = moto_server.s3a_conf()
    frame = all_types(deltalog, 0, 40)
    frame.write.format("deltalog").mode("append").options(**conf).option("partitionBy", "p").save(uri)
    storage = {
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    columns = frame.columns
    expected = spark_rows(frame, columns)
    deltars = DeltaTable(uri.replace("s3a://", "s3://"), storage_options=storage)
    assert arrow_rows(deltars.to_pyarrow_table(), columns) == expected
    assert arrow_rows(ours(uri, conf), columns) == expected
    assert deltars.metadata().partition_columns == ["p"]
    from logstores import open_filesystem

    fs, root = open_filesystem(uri, conf)
    for add in DeltaLog.for_table(uri, conf).snapshot().files():
        assert fs.size(f"{root}/{add.path}") == add.size


# -- options ---------------------------------------------------------------------------------------
def frame_of(spark: Any, rows: list[tuple[Any, ...]], schema: str = "id long, p string") -> Any:
    return spark.createDataFrame(rows, schema).coalesce(1)


def table_rows(path: str, *columns: str) -> list[tuple[Any, ...]]:
    table = ours(path)
    return sorted(tuple(row[c] for c in columns) for row in table.to_pylist())


def test_write_options(deltalog: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    log = DeltaLog.for_table(path)
    (
        frame_of(deltalog, [(1, "a"), (2, "b"), (3, "c")])
        .write.format("deltalog")
        .mode("append")
        .option("partitionBy", "p")
        .option("delta.enableChangeDataFeed", "true")
        .option("userMetadata", "first load")
        .save(path)
    )
    assert log.snapshot().metadata.configuration == {"delta.enableChangeDataFeed": "true"}
    assert commit_info(log, 0)["userMetadata"] == "first load"

    def write(
        rows: list[tuple[Any, ...]],
        mode: str = "overwrite",
        schema: str = "id long, p string",
        **options: str,
    ) -> None:
        frame_of(deltalog, rows, schema).write.format("deltalog").mode(mode).options(**options).save(path)

    write([(10, "a")], replaceWhere="p = 'a'")  # version 1
    assert table_rows(path, "id", "p") == [(2, "b"), (3, "c"), (10, "a")]
    before = local_files(Path(path))
    with pytest.raises(Exception, match=r"DELTA_REPLACE_WHERE_MISMATCH.*\n.*\n - p : z"):
        write([(11, "a"), (12, "z")], replaceWhere="p = 'a'")
    assert local_files(Path(path)) == before  # the failed task's and the others' files are gone
    write([(20, "b"), (40, "d")], partitionOverwriteMode="dynamic")  # version 2
    assert table_rows(path, "id", "p") == [(3, "c"), (10, "a"), (20, "b"), (40, "d")]

    with pytest.raises(
        Exception, match=r"(?s)_LEGACY_ERROR_TEMP_DELTA_0007.*Data schema:.*\|-- extra: string"
    ):
        write([(5, "c", "x")], "append", "id long, p string, extra string")
    write([(5, "c", "x")], "append", "id long, p string, extra string", mergeSchema="true")  # version 3
    assert log.snapshot().schema.field_names == ["id", "p", "extra"]
    with pytest.raises(
        Exception, match=r"DELTA_FAILED_TO_MERGE_FIELDS\] Failed to merge fields 'id' and 'id'"
    ):
        write([("x", "c")], "append", "id string, p string")

    write([(6, "e")], "append", txnAppId="job", txnVersion="7")  # version 4
    write([(6, "e")], "append", txnAppId="job", txnVersion="7")  # skipped: already committed
    assert log.update().version == 4 and log.snapshot().set_transactions == {"job": 7}
    write([(i, "f") for i in range(5)], "append", maxRecordsPerFile="2")  # version 5
    assert sorted(a.num_records for a in log.read_version(5) if isinstance(a, AddFile)) == [1, 2, 2]

    changes = table_changes(log, starting_version=1, ending_version=2)
    kinds = sorted(zip(changes["_change_type"].to_pylist(), changes["id"].to_pylist(), strict=True))
    assert kinds == [("delete", 1), ("delete", 2), ("insert", 10), ("insert", 20), ("insert", 40)]

    write([(1.5, "q")], "overwrite", "value double, key string", overwriteSchema="true", partitionBy="key")
    snapshot = log.update()
    assert (snapshot.version, snapshot.schema.field_names, snapshot.partition_columns) == (
        6,
        ["value", "key"],
        ["key"],
    )
    assert table_rows(path, "value", "key") == [(1.5, "q")]
    assert len(snapshot.files()) == 1


def test_modes_spark_refuses_for_python_data_sources(deltalog: Any, tmp_path: Path) -> None:
    frame = frame_of(deltalog, [(1, "a")])
    for mode in (None, "errorifexists", "ignore"):
        writer = frame.write.format("deltalog")
        if mode is not None:
            writer = writer.mode(mode)
        with pytest.raises(Exception) as error:
            writer.save(str(tmp_path / "t"))
        shown = "Ignore" if mode == "ignore" else "ErrorIfExists"
        assert (
            '[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] The data source "deltalog" cannot be written in the '
            f'"{shown}" mode. Please use either the "Append" or "Overwrite" mode instead.'
        ) in str(error.value)
    assert not (tmp_path / "t").exists()


# -- concurrency -------------------------------------------------------------------------------------
def test_three_threads_of_four_spark_appends(deltalog: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_table(path, pa.table({"id": pa.array([], pa.int64()), "writer": pa.array([], pa.int64())}))
    errors: list[BaseException] = []

    def appends(writer: int) -> None:
        try:
            for batch in range(4):
                rows = [(writer * 100 + batch * 10 + k, writer) for k in range(3)]
                frame = deltalog.createDataFrame(rows, "id long, writer long").coalesce(1)
                frame.write.format("deltalog").mode("append").save(path)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=appends, args=(writer,)) for writer in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    log = DeltaLog.for_table(path)
    assert log.latest_version() == 12
    ids = [row["id"] for row in ours(path).to_pylist()]
    assert sorted(ids) == sorted(w * 100 + b * 10 + k for w in range(3) for b in range(4) for k in range(3))
    assert all(commit_info(log, v)["isBlindAppend"] for v in range(1, 13))


def test_writers_and_readers_in_a_thread_pool(deltalog: Any, tmp_path: Path) -> None:
    """Frames built on the main thread, written and read from pool threads whose JVM threads have
    no active session (``createDataFrame`` would make one active: not used here)."""
    path, copy = str(tmp_path / "t"), str(tmp_path / "copy")
    empty = pa.table({"id": pa.array([], pa.int64()), "writer": pa.array([], pa.int64())})
    write_table(path, empty)  # concurrent creations of one table conflict, as in Delta
    frames = [
        deltalog.range(w * 10, w * 10 + 5).selectExpr("id", f"CAST({w} AS BIGINT) AS writer").coalesce(1)
        for w in range(4)
    ]

    def append(frame: Any) -> None:
        frame.write.format("deltalog").mode("append").save(path)

    def stream_copy() -> int:
        query = (
            deltalog.readStream.format("deltalog")
            .load(path)
            .writeStream.format("deltalog")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(copy)
        )
        query.awaitTermination()
        return int(deltalog.read.format("deltalog").load(copy).count())

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(append, frames))
        assert pool.submit(lambda: deltalog.read.format("deltalog").load(path).count()).result() == 20
        assert pool.submit(stream_copy).result() == 20
    log = DeltaLog.for_table(path)
    commits = sorted(p.name for p in (tmp_path / "t" / "_delta_log").glob("*.json"))
    assert commits == [f"{v:020d}.json" for v in range(5)]  # one version per write, no gap
    rows = sorted((row["writer"], row["id"]) for row in ours(path).to_pylist())
    assert rows == [(w, w * 10 + k) for w in range(4) for k in range(5)]
    assert all(commit_info(log, v)["isBlindAppend"] for v in range(1, 5))


def test_a_write_leaves_its_thread_without_the_session_it_made_active(deltalog: Any) -> None:
    from replay.spark.active_session import active_in_jvm_thread

    def active() -> bool:
        return bool(deltalog._jvm.org.apache.spark.sql.SparkSession.getActiveSession().isDefined())

    def in_a_new_thread() -> tuple[bool, bool, bool]:
        before = active()
        with active_in_jvm_thread(deltalog):
            during = active()
        return before, during, active()

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(in_a_new_thread).result() == (False, True, False)


def race_append_against_overwrite(spark: Any, uri: str, conf: dict[str, str]) -> None:
    """A Python overwrite reads the table, a Spark append commits, then the overwrite commits."""
    write_table(uri, pa.table({"id": [1, 2]}), conf=conf)
    real = write_module.commit_write

    def spark_append_wins_first(*args: Any, **kwargs: Any) -> Any:
        write_module.commit_write = real
        frame = spark.createDataFrame([(10,), (11,)], "id long").coalesce(1)
        frame.write.format("deltalog").mode("append").options(**conf).save(uri)
        return real(*args, **kwargs)

    write_module.commit_write = spark_append_wins_first
    try:
        with pytest.raises(ConcurrentModificationError) as error:
            write_table(uri, pa.table({"id": [100]}), mode="overwrite", conf=conf)
    finally:
        write_module.commit_write = real
    assert str(error.value).startswith(
        "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added"
    )
    assert error.value.winning_version == 1
    log = DeltaLog.for_table(uri, conf)
    assert log.latest_version() == 1  # the overwrite committed nothing
    assert sorted(row["id"] for row in ours(uri, conf).to_pylist()) == [1, 2, 10, 11]  # nothing lost
    live = {a.path for a in log.snapshot().files()}
    fs_paths = _data_files(uri, conf)
    assert fs_paths == live  # the losing overwrite's file was deleted


def _data_files(uri: str, conf: dict[str, str]) -> set[str]:
    from logstores import open_filesystem

    fs, root = open_filesystem(uri, conf)
    return {
        p[len(root.rstrip("/")) + 1 :]
        for p in fs.find(root)
        if p.endswith(".parquet") and "_delta_log" not in p
    }


def test_spark_append_racing_a_python_overwrite(deltalog: Any, tmp_path: Path) -> None:
    race_append_against_overwrite(deltalog, str(tmp_path / "t"), {})


def test_an_overwrite_commits_after_a_blind_append_under_write_serializable(
    deltalog: Any, tmp_path: Path
) -> None:
    """A WriteSerializable table orders the concurrent blind append before the overwrite."""
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2]}), configuration={"delta.isolationLevel": "WriteSerializable"})
    real = write_module.commit_write

    def spark_append_wins_first(*args: Any, **kwargs: Any) -> Any:
        write_module.commit_write = real
        deltalog.createDataFrame([(10,)], "id long").coalesce(1).write.format("deltalog").mode("append").save(
            uri
        )
        return real(*args, **kwargs)

    write_module.commit_write = spark_append_wins_first
    try:
        assert write_table(uri, pa.table({"id": [100]}), mode="overwrite") == 2
    finally:
        write_module.commit_write = real
    assert sorted(row["id"] for row in ours(uri).to_pylist()) == [10, 100]
    assert commit_info(DeltaLog.for_table(uri), 2)["isolationLevel"] == "WriteSerializable"


def test_spark_append_racing_a_python_overwrite_on_s3_with_dynamodb(
    deltalog: Any, moto_server: MotoServer
) -> None:
    conf = {
        **dynamodb_settings(moto_server, unique_name("ddb")),
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore",
    }
    uri = f"s3a://{moto_server.create_bucket()}/table"
    race_append_against_overwrite(deltalog, uri, conf)
    items = moto_server.client("dynamodb").scan(
        TableName=conf[next(k for k in conf if k.endswith("ddb.tableName"))]
    )
    assert sorted(item["fileName"]["S"] for item in items["Items"]) == [f"{v:020d}.json" for v in range(2)]


def append_from_a_task_once(directory: str, value: int) -> int:
    """Runs in a Spark task: the first call commits a Python append to the table named in ``directory``."""
    try:
        os.close(os.open(Path(directory) / "raced", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return value
    write_table((Path(directory) / "table").read_text(), pa.table({"id": [99]}))
    return value


def test_spark_overwrite_losing_to_an_append_commits_nothing(deltalog: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    path = str(tmp_path / "t")
    write_table(path, pa.table({"id": [1, 2]}))
    race = tmp_path / "race"
    race.mkdir()
    (race / "table").write_text(path)
    directory = str(race)
    racing = udf(lambda value: append_from_a_task_once(directory, value), "long")
    frame = deltalog.range(5).select(racing("id").alias("id")).coalesce(1)
    with pytest.raises(Exception, match=r"ConcurrentAppendException: Files were added"):
        frame.write.format("deltalog").mode("overwrite").save(path)
    assert (race / "raced").exists()
    log = DeltaLog.for_table(path)
    assert log.latest_version() == 1  # the Python append; the overwrite committed nothing
    assert sorted(row["id"] for row in ours(path).to_pylist()) == [1, 2, 99]
    assert local_files(Path(path)) == {a.path for a in log.snapshot().files()}


# -- streaming ---------------------------------------------------------------------------------------
def run_stream(spark: Any, source: Path, table: str, checkpoint: Path, mode: str = "append") -> None:
    frame = spark.readStream.schema("id long, p string").json(str(source))
    if mode == "complete":
        frame = frame.groupBy("p").count()
    query = (
        frame.writeStream.format("deltalog")
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination(180)
    assert query.exception() is None


def add_input(source: Path, name: str, ids: range, partition: str = "a") -> None:
    source.mkdir(exist_ok=True)
    lines = "".join(json.dumps({"id": i, "p": partition}) + "\n" for i in ids)
    (source / f"{name}.json").write_text(lines)


def test_streaming_sink_writes_each_row_once_across_restarts(deltalog: Any, tmp_path: Path) -> None:
    source, checkpoint, table = tmp_path / "in", tmp_path / "checkpoint", str(tmp_path / "t")
    add_input(source, "one", range(0, 5))
    add_input(source, "two", range(5, 8))
    run_stream(deltalog, source, table, checkpoint)
    log = DeltaLog.for_table(table)
    assert log.latest_version() == 0
    add_input(source, "three", range(8, 10), "b")
    run_stream(deltalog, source, table, checkpoint)  # restarted with new input
    run_stream(deltalog, source, table, checkpoint)  # restarted without any
    assert log.latest_version() == 1
    assert sorted(row["id"] for row in ours(table).to_pylist()) == list(range(10))
    txns = [[a for a in log.read_version(v) if isinstance(a, SetTransaction)] for v in range(2)]
    assert [[t.version for t in txn] for txn in txns] == [[0], [1]]
    assert txns[0][0].app_id == txns[1][0].app_id
    info = commit_info(log, 1)
    assert info["operation"] == "STREAMING UPDATE"
    assert info["operationParameters"] == {
        "outputMode": "Append",
        "queryId": txns[0][0].app_id,
        "epochId": "1",
    }

    # killed after the sink committed batch 1 and before Spark recorded it: Spark runs it again
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    files_before = local_files(Path(table))
    run_stream(deltalog, source, table, checkpoint)
    assert log.update().version == 1  # skipped: nothing committed twice
    assert sorted(row["id"] for row in ours(table).to_pylist()) == list(range(10))
    assert local_files(Path(table)) == files_before  # the repeated batch's files were deleted
    assert (checkpoint / "commits" / "1").exists()


def test_streaming_sink_complete_mode_overwrites_each_batch(deltalog: Any, tmp_path: Path) -> None:
    source, checkpoint, table = tmp_path / "in", tmp_path / "checkpoint", str(tmp_path / "t")
    add_input(source, "one", range(0, 3), "a")
    run_stream(deltalog, source, table, checkpoint, "complete")
    assert table_rows(table, "p", "count") == [("a", 3)]
    add_input(source, "two", range(3, 5), "b")
    add_input(source, "three", range(5, 6), "a")
    run_stream(deltalog, source, table, checkpoint, "complete")
    assert table_rows(table, "p", "count") == [("a", 4), ("b", 2)]
    log = DeltaLog.for_table(table)
    assert any(isinstance(a, RemoveFile) for a in log.read_version(log.latest_version()))
    assert commit_info(log, 1)["operationParameters"]["outputMode"] == "Complete"
    shutil.rmtree(checkpoint)


def test_options_arrive_in_lower_case_and_are_read_as_delta_spells_them() -> None:
    from replay.spark.settings import storage_conf
    from replay.spark.writer import streaming_app_id, write_options
    from replay.txn.write_plan import InvalidWriteOptionError

    lowered = {
        "partitionby": "a, `b`",
        "mergeschema": "TRUE",
        "replacewhere": "a = 1",
        "txnappid": "app",
        "txnversion": "3",
        "delta.enablechangedatafeed": "true",
        "delta.logstore.s3a.impl": "x",
        "spark.io.delta.storage.s3dynamodblogstore.ddb.tablename": "locks",
    }
    session = {
        "spark.sql.sources.partitionOverwriteMode": "DYNAMIC",
        "spark.sql.files.maxRecordsPerFile": "0",
    }
    options = write_options(lowered, session, overwrite=True)
    assert (options.partition_by, options.merge_schema, options.replace_where) == (("a", "b"), True, "a = 1")
    assert (options.txn_app_id, options.txn_version) == ("app", 3)
    assert options.partition_overwrite_mode == "static"  # an explicit replaceWhere wins over the session
    assert write_options({}, session, overwrite=True).partition_overwrite_mode == "dynamic"
    assert options.configuration == {"delta.enablechangedatafeed": "true"}  # spelled right on create
    assert storage_conf(lowered) == {
        "delta.logStore.s3a.impl": "x",
        "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": "locks",
    }
    with pytest.raises(InvalidWriteOptionError) as error:
        write_options({"overwriteschema": "yes"}, {}, overwrite=True)
    assert str(error.value) == (
        "[DELTA_ILLEGAL_OPTION] Invalid value 'yes' for option 'overwriteSchema', must be 'true' or 'false'"
    )
    assert streaming_app_id({"txnappid": "mine", "checkpointlocation": "/ck/q1"}) == "mine"


def test_the_streaming_app_id_is_the_query_id_in_the_checkpoint(tmp_path: Path) -> None:
    from replay.spark.writer import streaming_app_id
    from replay.txn.write_plan import InvalidWriteOptionError

    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id":"6f7c2d1e-query"}\n')
    spellings = [str(checkpoint), f"{checkpoint}/", f"file:{checkpoint}", f"file://{checkpoint}"]
    assert {streaming_app_id({"checkpointlocation": spelling}) for spelling in spellings} == {
        "6f7c2d1e-query"
    }
    with pytest.raises(
        InvalidWriteOptionError, match=rf"streaming query's id from {tmp_path}/other/metadata"
    ):
        streaming_app_id({"checkpointlocation": str(tmp_path / "other")})


def test_the_streaming_app_id_under_the_session_checkpoint_root(tmp_path: Path) -> None:
    """Spark's own resolution: the option, else ``<session root>/<queryName>``; an unnamed query under
    the session root has a random checkpoint the sink cannot know (its tasks carry its id)."""
    from replay.spark.writer import STREAMING_CHECKPOINT_KEY, query_checkpoint, streaming_app_id
    from replay.txn.write_plan import InvalidWriteOptionError

    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "metadata").write_text('{"id":"named-query"}\n')
    session = {STREAMING_CHECKPOINT_KEY: f"{tmp_path}/"}
    assert query_checkpoint({"queryname": "named"}, session) == f"{tmp_path}/named"
    assert streaming_app_id({"queryname": "named"}, None, session) == "named-query"
    assert query_checkpoint({"checkpointlocation": "/x", "queryname": "named"}, session) == "/x"
    assert streaming_app_id({}, None, session) is None
    assert streaming_app_id({"txnappid": "mine"}, None, session) == "mine"
    with pytest.raises(InvalidWriteOptionError, match=r"'checkpointLocation' \(or the session setting "):
        streaming_app_id({"queryname": "named"})


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("a, `b`", ("a", "b")),
        ("`a,b`,c", ("a,b", "c")),
        ("` a b `", (" a b ",)),
        ("`x``y`, `a.b`", ("x`y", "a.b")),
        (" a , , b ,", ("a", "b")),
        ("a.b,1st", ("a.b", "1st")),
    ],
)
def test_partition_by_takes_spark_quoted_names(value: str, names: tuple[str, ...]) -> None:
    from replay.spark.writer import write_options

    assert write_options({"partitionby": value}, {}, overwrite=False).partition_by == names


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("`a", "the backquote at position 0 is not closed"),
        ("`a`b", "unexpected text after the quoted name `a` at position 3"),
        ("a`b", "a backquote may only open or close a quoted column name"),
        ("``", "a quoted column name cannot be empty"),
    ],
)
def test_partition_by_refuses_broken_quotes(value: str, reason: str) -> None:
    from replay.spark.writer import write_options
    from replay.txn.write_plan import InvalidWriteOptionError

    with pytest.raises(InvalidWriteOptionError) as error:
        write_options({"partitionby": value}, {}, overwrite=False)
    assert (
        str(error.value)
        == f"[DELTA_ILLEGAL_OPTION] Invalid value '{value}' for option 'partitionBy', {reason}"
    )


@given(st.lists(st.text(min_size=1), min_size=1, max_size=5))
def test_every_list_of_names_round_trips_through_quoting(names: list[str]) -> None:
    from replay.spark.options import column_list

    quoted = ", ".join("`" + name.replace("`", "``") + "`" for name in names)
    assert column_list(quoted) == tuple(names)


def test_spark_partitions_by_quoted_names_and_refuses_a_comma_as_delta_does(
    deltalog: Any, tmp_path: Path
) -> None:
    """A name that needs quoting in Spark (a dot, a backquote) is one column; ``a,b`` is not split
    into two: Delta's invalid-character error names it whole."""
    path = str(tmp_path / "t")
    frame = deltalog.createDataFrame([(1, "x", "y")], "id long, `a.b` string, `odd``name` string")
    frame.write.format("deltalog").mode("append").option("partitionBy", "`a.b`, `odd``name`").save(path)
    assert DeltaLog.for_table(path).update().partition_columns == ["a.b", "odd`name"]
    assert deltalog.read.format("deltalog").load(path).collect()[0].asDict() == {
        "id": 1,
        "a.b": "x",
        "odd`name": "y",
    }
    commas = deltalog.createDataFrame([(1, "x")], "id long, `a,b` string")
    with pytest.raises(Exception) as error:
        commas.write.format("deltalog").mode("append").option("partitionBy", "`a,b`").save(
            str(tmp_path / "u")
        )
    assert "[DELTA_INVALID_PARTITION_COLUMN_NAME]" in str(error.value)
    assert "Invalid partition columns: a,b." in str(error.value)
