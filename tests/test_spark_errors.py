"""What a Spark user sees first when our code fails inside a Python data source: the error itself,
on the first line, right after Spark's prefix, for storage, configuration, timeout and conflict
errors raised while planning, reading, writing, committing and streaming; bugs keep their traceback.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from logstores import AccessDeniedError, BucketNotFoundError, LogStoreConfError, RequestTimeoutError
from replay import write_table
from replay.protocol.errors import ConcurrentAppendException
from replay.spark import register
from replay.spark.worker_errors import HIDE_TRACEBACK_VARIABLE, errors_first, our_errors_first
from tests.cloud_servers import MotoServer, StalledEndpoint
from tests.spark_settings import session_settings

CREATE = "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
INITIALIZE_WRITER = "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
COMMIT = "[PYTHON_DATA_SOURCE_ERROR] Failed to commit or abort Python data source write: "
STREAM_FAILED = r"\[STREAM_FAILED\] Query \[id = [0-9a-f-]+, runId = [0-9a-f-]+\] terminated with exception: "
STREAM_RUNTIME = (
    r"\[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR\] Failed when Python streaming data source perform "
)


@pytest.fixture(scope="module")
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def shown(error: pytest.ExceptionInfo[BaseException]) -> tuple[str, str]:
    """The first line the user sees, and the whole message."""
    message = str(error.value)
    return message.splitlines()[0], message


# -- in a Spark worker -------------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.cloud
def test_a_missing_bucket_is_the_first_line_with_the_whole_log_path(
    deltalog: Any, moto_server: MotoServer
) -> None:
    missing = "no-such-bucket-at-all"
    expected = f"logstores.errors.BucketNotFoundError: S3 bucket '{missing}' does not exist "
    expected += f"(s3a://{missing}/events/_delta_log/)"
    with session_settings(deltalog, moto_server.s3a_conf()):
        with pytest.raises(Exception) as read:
            deltalog.read.format("deltalog").load(f"s3a://{missing}/events").collect()
        with pytest.raises(Exception) as write:
            deltalog.range(3).write.format("deltalog").mode("append").save(f"s3a://{missing}/events")
    for error, prefix in ((read, CREATE), (write, INITIALIZE_WRITER)):
        first, message = shown(error)
        assert first == prefix + expected
        assert "Traceback" not in message


@pytest.mark.spark
def test_a_misspelt_log_store_class_in_the_session_is_the_first_line(deltalog: Any, tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": [1]}))
    misspelt = {"spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStor"}
    with session_settings(deltalog, misspelt), pytest.raises(Exception) as error:
        deltalog.read.format("deltalog").load(table).collect()
    first, message = shown(error)
    assert first.startswith(
        CREATE + "logstores.errors.LogStoreConfError: Unknown LogStore class 'io.delta.storage.LocalLogStor' "
        "for key spark.delta.logStore.file.impl. Did you mean io.delta.storage.LocalLogStore?"
    ), message
    assert "Traceback" not in message


@pytest.mark.spark
@pytest.mark.cloud
@pytest.mark.timeout(180)
def test_a_storage_timeout_is_the_first_line_within_the_session_bound(
    deltalog: Any, moto_server: MotoServer, stalled_endpoint: StalledEndpoint
) -> None:
    """``spark.delta.logstores.requestTimeoutMs`` set in the session bounds the requests of a read."""
    settings = {
        **moto_server.s3a_conf(stalled_endpoint.endpoint),
        "spark.delta.logstores.requestTimeoutMs": "1000",
        "spark.hadoop.fs.s3a.attempts.maximum": "0",
    }
    started = time.monotonic()
    with session_settings(deltalog, settings), pytest.raises(Exception) as error:
        deltalog.read.format("deltalog").load("s3a://bucket/events").collect()
    elapsed = time.monotonic() - started
    first, message = shown(error)
    assert first.startswith(
        CREATE + "logstores.errors.RequestTimeoutError: S3 request for s3a://bucket/events/_delta_log/ to "
        f"127.0.0.1:{stalled_endpoint.port} timed out (1 s read timeout, 1 attempt; "
    ), message
    assert "Traceback" not in message
    assert elapsed < 30, f"the session's request timeout was not applied: {elapsed:.0f} s"


def append_from_a_task_once(directory: str, value: int) -> int:
    """Runs in a Spark task: the first call commits a Python append to the table named in ``directory``."""
    try:
        os.close(os.open(Path(directory) / "raced", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return value
    write_table((Path(directory) / "table").read_text(), pa.table({"id": pa.array([99], pa.int64())}))
    return value


@pytest.mark.spark
def test_a_conflict_in_a_batch_commit_is_the_first_line(deltalog: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": pa.array([1, 2], pa.int64())}))
    race = tmp_path / "race"
    race.mkdir()
    (race / "table").write_text(table)
    directory = str(race)
    racing = udf(lambda value: append_from_a_task_once(directory, value), "long")
    frame = deltalog.range(3).select(racing("id").alias("id")).coalesce(1)
    with pytest.raises(Exception) as error:
        frame.write.format("deltalog").mode("overwrite").save(table)
    first, message = shown(error)
    assert first == (
        COMMIT + f"replay.protocol.errors.{ConcurrentAppendException.__name__}: [DELTA_CONCURRENT_APPEND] "
        "ConcurrentAppendException: Files were added to the root of the table by a concurrent update "
        f"(version 1 of table file://{table}, operation WRITE). Please try the operation again."
    ), message
    assert "Traceback" not in message


def change_table_once(directory: str, value: int) -> int:
    """Runs in a Spark task: the first call overwrites the table named in ``directory`` with a new
    partitioning, while a micro-batch's tasks write."""
    try:
        os.close(os.open(Path(directory) / "changed", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return value
    new_layout = pa.table({"id": pa.array([-1], pa.int64()), "part": ["x"]})
    table = (Path(directory) / "table").read_text()
    write_table(table, new_layout, mode="overwrite", overwrite_schema=True, partition_by=["part"])
    return value


@pytest.mark.spark
def test_a_conflict_in_a_streaming_commit_is_the_first_line(deltalog: Any, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    table, source = str(tmp_path / "t"), tmp_path / "in"
    write_table(table, pa.table({"id": pa.array([100], pa.int64())}))
    source.mkdir()
    (source / "a.json").write_text('{"id": 1}\n')
    race = tmp_path / "race"
    race.mkdir()
    (race / "table").write_text(table)
    directory = str(race)
    changing = udf(lambda value: change_table_once(directory, value), "long")
    query = (
        deltalog.readStream.schema("id long")
        .json(str(source))
        .select(changing("id").alias("id"))
        .writeStream.format("deltalog")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(table)
    )
    with pytest.raises(Exception) as error:
        query.awaitTermination(180)
    first, message = shown(error)
    expected = (
        STREAM_FAILED + STREAM_RUNTIME + r"commit: replay\.protocol\.errors\.MetadataChangedException: "
        r"\[DELTA_METADATA_CHANGED\] MetadataChangedException: The metadata of the Delta table has been "
        rf"changed by a concurrent update \(version 1 of table file://{re.escape(table)}, operation WRITE\)"
    )
    assert re.match(expected, first), message
    assert "Traceback" not in message


@pytest.mark.spark
def test_an_error_of_the_stream_reader_is_the_first_line(deltalog: Any, tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": [1]}))
    query = (
        deltalog.readStream.format("deltalog")
        .option("startingVersion", "7")
        .load(table)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as error:
        query.awaitTermination(120)
    first, message = shown(error)
    expected = (
        STREAM_FAILED + STREAM_RUNTIME + r"initialOffset: replay\.protocol\.errors\.VersionNotFoundError: "
        r"\[DELTA_VERSION_NOT_FOUND\] Cannot time travel Delta table to version 7"
    )
    assert re.match(expected, first), message
    assert "Traceback" not in message


# -- which errors are ours -----------------------------------------------------------------------------
class Reader:
    @errors_first
    def read(self, error: BaseException) -> Iterator[int]:
        yield 1
        raise error

    @errors_first
    def plan(self, error: BaseException) -> int:
        raise error


@pytest.mark.parametrize(
    ("error", "hidden"),
    [
        (ConcurrentAppendException("[DELTA_CONCURRENT_APPEND] ..."), True),
        (BucketNotFoundError("S3 bucket 'b' does not exist (s3a://b/t/)"), True),
        (AccessDeniedError("access to s3a://b/t was denied"), True),
        (RequestTimeoutError("S3 request ... timed out"), True),
        (LogStoreConfError("Unknown LogStore class 'x'"), True),
        (KeyError("a bug"), False),
        (PermissionError("not ours: no store said what it means"), False),
        (FileNotFoundError("not ours either"), False),
    ],
)
def test_only_our_errors_lose_their_traceback_in_a_spark_worker(
    error: BaseException, hidden: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
    for call in (lambda: list(Reader().read(error)), lambda: Reader().plan(error)):
        monkeypatch.delenv(HIDE_TRACEBACK_VARIABLE, raising=False)
        with pytest.raises(type(error)):
            call()
        assert (os.environ.get(HIDE_TRACEBACK_VARIABLE) == "1") is hidden
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME")
    monkeypatch.delenv(HIDE_TRACEBACK_VARIABLE, raising=False)
    with pytest.raises(type(error)), our_errors_first():
        raise error
    assert HIDE_TRACEBACK_VARIABLE not in os.environ  # outside a Spark worker nothing changes
