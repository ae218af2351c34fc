"""The ``deltalog`` PySpark data source on a real local Spark: batch, change feed and streams."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.spark import register
from replay.spark.datasource import InvalidOptionError, ReadSettings
from tests.paths import GOLDEN_ROOT as GOLDEN

pytestmark = pytest.mark.spark

CDF_ON = {"delta.enableChangeDataFeed": "true"}


def arrow_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(row.values()) for row in table.to_pylist()), key=repr)


def spark_rows(frame: Any) -> list[tuple[Any, ...]]:
    """Rows of a DataFrame; Spark gives timestamps as naive datetimes in the (UTC) session zone."""
    return sorted((tuple(_utc(value) for value in row) for row in frame.collect()), key=repr)


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


@pytest.fixture(scope="module")
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def test_options_are_validated_case_insensitively() -> None:
    settings = ReadSettings.from_options({"path": "/t", "ReadChangeFEED": "tRuE", "startingVersion": "3"}, {})
    assert settings.read_change_feed and settings.starting_version == 3
    assert ReadSettings.from_options({"path": "/t", "READCHANGEDATA": "true"}, {}).read_change_feed
    assert (
        ReadSettings.from_options({"path": "/t", "maxBytesPerTrigger": "10g"}, {}).max_bytes_per_trigger
        == 10 * 2**30
    )
    with pytest.raises(InvalidOptionError) as info:
        ReadSettings.from_options({"path": "/t", "readChangeFeed": "yes"}, {})
    assert (
        str(info.value)
        == "[DELTA_ILLEGAL_OPTION] Invalid value 'yes' for option 'readchangefeed', must be 'true' or 'false'"
    )
    with pytest.raises(
        InvalidOptionError, match="for option 'maxFilesPerTrigger', must be a positive integer"
    ):
        ReadSettings.from_options({"path": "/t", "maxFilesPerTrigger": "0"}, {})
    with pytest.raises(InvalidOptionError, match=r"\[DELTA_VERSION_INVALID\] The provided version \(x\)"):
        ReadSettings.from_options({"path": "/t", "startingVersion": "x"}, {})
    storage = ReadSettings.from_options(
        {"path": "/t", "fs.s3a.endpoint": "e", "other": "o"}, {"spark.hadoop.fs.x": "1"}
    )
    assert storage.conf == {"spark.hadoop.fs.x": "1", "fs.s3a.endpoint": "e"}


def test_batch_snapshot_and_change_feed_match_the_library(deltalog: Any) -> None:
    path = str(GOLDEN / "kernel-rs/cdf-table/delta")
    delta_log = DeltaLog.for_table(path)
    frame = deltalog.read.format("deltalog").load(path)
    assert frame.columns == ["id", "name", "birthday"]
    assert spark_rows(frame) == arrow_rows(delta_log.snapshot().to_arrow())
    old = deltalog.read.format("deltalog").option("versionAsOf", "1").load(path)
    assert spark_rows(old) == arrow_rows(delta_log.snapshot(1).to_arrow())
    changes = (
        deltalog.read.format("deltalog")
        .option("readChangeFeed", "true")
        .option("startingVersion", "1")
        .option("endingVersion", "2")
        .load(path)
    )
    assert changes.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    expected = table_changes(delta_log, starting_version=1, ending_version=2)
    assert spark_rows(changes) == arrow_rows(expected)
    assert len(expected) == 12


def run_stream(spark: Any, path: Path | str, checkpoint: Path, **options: str) -> list[pa.Table]:
    """One ``availableNow`` run of a stream; the rows of each micro-batch in order."""
    batches: list[pa.Table] = []

    def collect(frame: Any, batch_id: int) -> None:
        rows = [{key: _utc(value) for key, value in row.asDict().items()} for row in frame.collect()]
        if rows:
            batches.append(pa.Table.from_pylist(rows))

    reader = spark.readStream.format("deltalog")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(str(path))
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return batches


def table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(row[c] for c in sorted(row)) for row in table.to_pylist()), key=repr)


def test_change_feed_stream_restarts_from_its_checkpoint(deltalog: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(GOLDEN / "kernel-rs/cdf-table/delta", path)
    checkpoint = tmp_path / "checkpoint"
    options = {"readChangeFeed": "true", "startingVersion": "1", "maxFilesPerTrigger": "1"}
    first = run_stream(deltalog, path, checkpoint, **options)
    # versions 1-3 carry 6, 6 and 1 cdc files: each commit comes whole despite the limit of 1 file
    assert [batch.num_rows for batch in first] == [6, 6, 1]
    assert run_stream(deltalog, path, checkpoint, **options) == []
    for new_id in (11, 12):  # versions 4 and 5: one file each
        row = {
            "id": pa.array([new_id], pa.int32()),
            "name": ["Zoe"],
            "birthday": pa.array([None], pa.date32()),
        }
        write_deltalake(str(path), pa.table(row), mode="append")
    DeltaTable(str(path)).delete("id = 1")  # version 6
    second = run_stream(deltalog, path, checkpoint, **options)
    assert [sorted(set(batch["_commit_version"].to_pylist())) for batch in second] == [[4], [5], [6]]
    everything = table_changes(DeltaLog.for_table(str(path)), starting_version=1)
    streamed = pa.concat_tables([b.cast(everything.schema) for b in first + second])
    assert table_rows(streamed) == table_rows(everything)


def test_running_plain_stream_picks_up_new_commits(deltalog: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2], pa.int64())}))
    write_deltalake(str(path), pa.table({"id": pa.array([3], pa.int64())}), mode="append")
    seen: list[list[int]] = []

    def collect(frame: Any, batch_id: int) -> None:
        ids = sorted(row["id"] for row in frame.collect())
        if ids:
            seen.append(ids)

    query = (
        deltalog.readStream.format("deltalog")
        .load(str(path))
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert seen == [[1, 2, 3]]  # the snapshot at the start, as one batch of inserts
        write_deltalake(str(path), pa.table({"id": pa.array([4, 5], pa.int64())}), mode="append")
        query.processAllAvailable()
        assert seen == [[1, 2, 3], [4, 5]]
    finally:
        query.stop()
    assert query.exception() is None


def test_change_feed_stream_on_s3(deltalog: Any, moto_server: Any, tmp_path: Path) -> None:
    bucket = moto_server.create_bucket()
    uri = f"s3://{bucket}/table"
    storage = {
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    write_deltalake(
        uri, pa.table({"id": pa.array(range(4), pa.int64())}), configuration=CDF_ON, storage_options=storage
    )
    DeltaTable(uri, storage_options=storage).delete("id = 2")
    conf = moto_server.s3a_conf()
    batches = run_stream(
        deltalog, uri, tmp_path / "checkpoint", readChangeFeed="true", startingVersion="0", **conf
    )
    expected = table_changes(DeltaLog.for_table(uri, conf), starting_version=0)
    assert table_rows(pa.concat_tables([b.cast(expected.schema) for b in batches])) == table_rows(expected)
    assert sorted(expected["_change_type"].to_pylist()) == ["delete", "insert", "insert", "insert", "insert"]
