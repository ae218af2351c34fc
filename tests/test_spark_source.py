"""The ``deltalog`` PySpark data source on a real local Spark: batch, change feed and streams."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.protocol.timestamps import to_timestamp_ms
from replay.spark import register
from replay.spark.options import TIME_ZONE_KEY, InvalidOptionError
from replay.spark.settings import ReadSettings
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


def test_timestamp_options_are_read_in_the_session_time_zone() -> None:
    los_angeles = {TIME_ZONE_KEY: "America/Los_Angeles"}
    options = {
        "path": "/t",
        "timestampAsOf": "2023-12-31 17:00:00",
        "startingTimestamp": "2024-01-01T01:00:00Z",
        "endingTimestamp": "2024-01-01 01:00:00 UTC",
    }
    one_am_utc = to_timestamp_ms("2024-01-01 01:00:00")
    settings = ReadSettings.from_options(options, los_angeles)
    assert [to_timestamp_ms(t) for t in (settings.timestamp_as_of, settings.starting_timestamp)] == [
        one_am_utc,
        one_am_utc,
    ]
    assert settings.timestamp_as_of is not None and settings.timestamp_as_of.utcoffset() == dt.timedelta(
        hours=-8
    )
    assert to_timestamp_ms(settings.ending_timestamp) == one_am_utc  # an explicit zone is kept
    without_zone = ReadSettings.from_options(options, {})  # no session zone known: UTC, as in the API
    assert to_timestamp_ms(without_zone.timestamp_as_of) == one_am_utc - 8 * 3600 * 1000
    with pytest.raises(InvalidOptionError) as info:
        ReadSettings.from_options({"path": "/t", "startingTimestamp": "20240101010000000"}, los_angeles)
    assert str(info.value) == (
        "[DELTA_TIMESTAMP_INVALID] The provided timestamp ('20240101010000000') cannot be converted to a "
        "valid timestamp."
    )
    with pytest.raises(InvalidOptionError, match=r"^\[INVALID_CONF_VALUE.TIME_ZONE\] The value 'Mars/Base'"):
        ReadSettings.from_options({"path": "/t"}, {TIME_ZONE_KEY: "Mars/Base"})


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


def hourly_table(path: Path) -> str:
    """Versions 0, 1, 2 (row ``id`` = version) committed at 00:00, 01:00 and 02:00 UTC on 2024-01-01."""
    for version in range(3):
        data = pa.table({"id": pa.array([version], pa.int64())})
        write_deltalake(str(path), data, mode="append", configuration=CDF_ON)
        commit_time = to_timestamp_ms(f"2024-01-01 0{version}:00:00") / 1000
        os.utime(path / "_delta_log" / f"{version:020d}.json", (commit_time, commit_time))
    return str(path)


def test_timestamp_options_use_the_spark_session_time_zone(deltalog: Any, tmp_path: Path) -> None:
    path = hourly_table(tmp_path / "t")
    version_1_in_los_angeles = "2023-12-31 17:00:00"  # 2024-01-01 01:00 UTC, version 1's commit time
    previous = deltalog.conf.get(TIME_ZONE_KEY)
    deltalog.conf.set(TIME_ZONE_KEY, "America/Los_Angeles")
    register(deltalog)
    try:
        reader = deltalog.read.format("deltalog")
        old = reader.option("timestampAsOf", version_1_in_los_angeles).load(path)
        assert sorted(row.id for row in old.collect()) == [0, 1]
        as_given = reader.option("timestampAsOf", "2024-01-01T01:00:00Z").load(path)  # explicit: kept
        assert sorted(row.id for row in as_given.collect()) == [0, 1]
        changes = (
            deltalog.read.format("deltalog")
            .option("readChangeFeed", "true")
            .option("startingTimestamp", version_1_in_los_angeles)
            .load(path)
        )
        assert sorted((row.id, row._commit_version) for row in changes.collect()) == [(1, 1), (2, 2)]
        with pytest.raises(Exception) as info:  # Spark wraps the Python error
            deltalog.read.format("deltalog").option("timestampAsOf", "2023-12-31 15:00:00").load(
                path
            ).collect()
        assert (
            "The provided timestamp (2023-12-31 15:00:00.000 America/Los_Angeles) is before the earliest "
            "version available"
        ) in str(info.value)
        assert "Please use a timestamp after or at 2023-12-31 16:00:00.000 America/Los_Angeles." in str(
            info.value
        )
        feed = run_stream(
            deltalog,
            path,
            tmp_path / "feed",
            readChangeFeed="true",
            startingTimestamp=version_1_in_los_angeles,
        )
        assert sorted(v for b in feed for v in b["_commit_version"].to_pylist()) == [1, 2]
        appends = run_stream(deltalog, path, tmp_path / "appends", startingTimestamp=version_1_in_los_angeles)
        assert sorted(i for b in appends for i in b["id"].to_pylist()) == [1, 2]
    finally:
        deltalog.conf.set(TIME_ZONE_KEY, previous)
        register(deltalog)
