"""Time travel by version and timestamp, commit timestamps, history and getChanges."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from deltalake import DeltaTable

from logstores.base import FileStatus
from replay.delta_log import DeltaLog
from replay.log.commit_timestamps import CommitRecord, active_commit_at, monotonic_timestamps
from replay.protocol.actions import AddFile, CommitInfo, Metadata, Protocol, parse_actions
from replay.protocol.errors import DataLossError, TimestampOutOfRangeError, VersionNotFoundError
from replay.protocol.paths import resolve_path
from replay.protocol.timestamps import format_timestamp, parse_zone, to_datetime, to_timestamp_ms

START = 1540415658000  # the generator's mtime of commit 0 of time-travel-start*
TWENTY_MINUTES = 20 * 60 * 1000
LOS_ANGELES = ZoneInfo("America/Los_Angeles")


@pytest.fixture
def time_travel_table(golden_root: Path, tmp_path: Path) -> Path:
    """time-travel-start-start20-start40 with the commit mtimes its generator set (lost in git)."""
    target = tmp_path / "tt"
    shutil.copytree(
        golden_root / "delta-spark-golden" / "time-travel-start-start20-start40" / "delta", target
    )
    for version in range(3):
        mtime = (START + version * TWENTY_MINUTES) / 1000
        os.utime(target / "_delta_log" / f"{version:020d}.json", (mtime, mtime))
    return target


def test_version_at_timestamp(time_travel_table: Path) -> None:
    log = DeltaLog.for_table(str(time_travel_table))
    assert log.version_at_timestamp(START) == 0
    assert log.version_at_timestamp(START + TWENTY_MINUTES - 1) == 0
    assert log.version_at_timestamp(START + TWENTY_MINUTES) == 1
    assert log.version_at_timestamp(START + 2 * TWENTY_MINUTES) == 2
    assert [log.commit_timestamp(v) for v in range(3)] == [START + v * TWENTY_MINUTES for v in range(3)]


def test_timestamp_out_of_range(time_travel_table: Path) -> None:
    log = DeltaLog.for_table(str(time_travel_table))
    with pytest.raises(TimestampOutOfRangeError, match="is before the earliest version available") as info:
        log.version_at_timestamp(START - 1)
    assert (info.value.timestamp, info.value.earliest) == (START - 1, START)
    assert log.version_at_timestamp(START - 1, can_return_earliest_commit=True) == 0
    late = START + 2 * TWENTY_MINUTES + 1
    with pytest.raises(TimestampOutOfRangeError, match="is after the latest version available") as info:
        log.snapshot(timestamp=late)
    assert log.table_path in str(info.value)
    assert log.version_at_timestamp(late, can_return_last_commit=True) == 2


def test_snapshot_by_timestamp_and_version(time_travel_table: Path) -> None:
    log = DeltaLog.for_table(str(time_travel_table))
    at_20 = dt.datetime.fromtimestamp((START + TWENTY_MINUTES + 5) / 1000, tz=dt.UTC)
    assert log.snapshot(timestamp=at_20).version == 1
    assert log.snapshot(timestamp=at_20.isoformat()).version == 1
    assert [log.snapshot(v).num_files for v in range(3)] == [2, 4, 6]
    assert [log.snapshot(v).timestamp for v in range(3)] == [START + v * TWENTY_MINUTES for v in range(3)]


def test_timestamp_strings_are_read_as_spark_casts_them() -> None:
    utc_ms = 1704164645000  # 2024-01-02 03:04:05 UTC
    eight_hours = 8 * 3600 * 1000
    assert to_timestamp_ms("2024-01-02 03:04:05") == utc_ms  # no zone: the default, UTC
    assert to_timestamp_ms("2024-01-02 03:04:05", LOS_ANGELES) == utc_ms + eight_hours
    for explicit in ("2024-01-02T03:04:05Z", "2024-01-02 03:04:05+00:00", "2024-01-02 03:04:05 UTC"):
        assert to_timestamp_ms(explicit, LOS_ANGELES) == utc_ms  # an explicit zone is kept
    assert to_timestamp_ms("2024-01-01 19:04:05-0800") == utc_ms
    assert to_timestamp_ms("2024-01-01 19:04:05 America/Los_Angeles") == utc_ms
    assert to_timestamp_ms("2024-1-2 3:4:5.1239999") == utc_ms + 123  # Spark's short forms; us precision
    assert to_timestamp_ms("2024-01-02", LOS_ANGELES) == to_timestamp_ms("2024-01-02 08:00")
    assert to_timestamp_ms("2024") == to_timestamp_ms("2024-01-01 00:00:00")
    # a wall-clock time that happens twice is the earlier instant, as in Spark (Java's rule)
    assert to_datetime("2024-11-03 01:30:00", LOS_ANGELES).utcoffset() == dt.timedelta(hours=-7)
    for bad in ("20240102030405123", "2024-13-01", "2024-01-02 UTC", "2024-01-02 03:04:05 Mars/Base", ""):
        with pytest.raises(ValueError, match=f"^{bad!r} is not a timestamp"):
            to_timestamp_ms(bad)
    assert [parse_zone(z).utcoffset(None) for z in ("+8", "GMT-08:00", "UT", "Z", "-0830")] == [
        dt.timedelta(hours=h) for h in (8, -8, 0, 0, -8.5)
    ]
    assert parse_zone("PST") == LOS_ANGELES  # Java's short ids, which Spark accepts
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Base'"):
        parse_zone("Mars/Base")
    assert format_timestamp(utc_ms + 678) == "2024-01-02 03:04:05.678 UTC"
    assert format_timestamp(utc_ms, LOS_ANGELES) == "2024-01-01 19:04:05.000 America/Los_Angeles"
    assert format_timestamp(utc_ms, parse_zone("+05:30")) == "2024-01-02 08:34:05.000 UTC+05:30"
    for zone in (dt.UTC, LOS_ANGELES, parse_zone("+05:30")):  # error texts read back as the same instant
        assert to_timestamp_ms(format_timestamp(utc_ms - 1, zone)) == utc_ms - 1


def test_timestamp_errors_show_the_zone_the_timestamp_was_given_in(time_travel_table: Path) -> None:
    log = DeltaLog.for_table(str(time_travel_table))
    assert log.snapshot(timestamp="2018-10-24 21:34:18").version == 1  # the Python API: no zone is UTC
    assert log.snapshot(timestamp="2018-10-24 14:34:18 America/Los_Angeles").version == 1
    with pytest.raises(TimestampOutOfRangeError) as info:
        log.snapshot(timestamp="2018-10-24 14:00:00 America/Los_Angeles")
    assert str(info.value) == (
        "[DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION] The provided timestamp (2018-10-24 14:00:00.000 "
        f"America/Los_Angeles) is before the earliest version available to table {log.table_path} (version 0"
        " at 2018-10-24 14:14:18.000 America/Los_Angeles). Please use a timestamp after or at 2018-10-24"
        " 14:14:18.000 America/Los_Angeles."
    )
    with pytest.raises(
        TimestampOutOfRangeError, match=r"\(2018-10-24 22:00:00.000 UTC\) is after the latest"
    ):
        log.snapshot(timestamp="2018-10-24 22:00:00")


def test_commit_times_are_forced_monotonic(time_travel_table: Path) -> None:
    older = START - 10_000
    os.utime(time_travel_table / "_delta_log" / f"{1:020d}.json", (older / 1000, older / 1000))
    log = DeltaLog.for_table(str(time_travel_table))
    assert [log.commit_timestamp(v) for v in range(3)] == [START, START + 1, START + 2 * TWENTY_MINUTES]
    assert log.version_at_timestamp(START + 1) == 1


def test_monotonic_timestamps_and_active_commit() -> None:
    statuses = [
        (v, FileStatus(f"file:///t/_delta_log/{v}.json", 1, mtime)) for v, mtime in enumerate([5, 5, 3, 9])
    ]
    records = monotonic_timestamps(statuses)
    assert [r.timestamp for r in records] == [5, 6, 7, 9]
    assert active_commit_at(records, 8, table="t") == 2
    assert active_commit_at(records, 9, table="t") == 3
    with pytest.raises(TimestampOutOfRangeError):
        active_commit_at([CommitRecord(0, 5, statuses[0][1])], 6, table="t")


def test_in_commit_timestamps(golden_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "ict"
    shutil.copytree(golden_root / "delta-rs" / "cdc_ict_table" / "delta", target)
    for version in range(4):  # file times say nothing: every commit "written" at the same instant
        os.utime(target / "_delta_log" / f"{version:020d}.json", (1000, 1000))
    log = DeltaLog.for_table(str(target))
    assert log.commit_timestamp(3) == 1783874213881
    assert log.snapshot().timestamp == 1783874213881
    assert log.version_at_timestamp(1783874212175 + 1) == 2
    assert log.version_at_timestamp(1783874213881) == 3
    assert log.history(limit=1)[0]["timestamp"] == 1783874213881


def test_version_out_of_range(golden_root: Path) -> None:
    log = DeltaLog.for_table(str(golden_root / "delta-rs" / "checkpoint-cdf-table" / "delta"))
    assert (log.earliest_version(), log.earliest_commit_version(), log.latest_version()) == (3, 3, 5)
    assert log.snapshot(3).version == 3
    for version in (2, 6, -1):
        with pytest.raises(
            VersionNotFoundError, match=rf"to version {version}\. Available versions: \[3, 5\]"
        ) as info:
            log.snapshot(version)
        assert (info.value.version, info.value.earliest, info.value.latest) == (version, 3, 5)


def test_dat_version_time_travel(golden_root: Path) -> None:
    root = str(golden_root / "dat" / "multi_partitioned" / "delta")
    log = DeltaLog.for_table(root)
    for version in range(3):
        snapshot = log.snapshot(version)
        theirs = DeltaTable(root, version=version)
        assert snapshot.version == version
        ours = sorted(
            resolve_path(snapshot.table_path, p).removeprefix("file://") for p in snapshot.file_paths()
        )
        assert ours == sorted(theirs.file_uris())


def test_history_newest_first(golden_root: Path) -> None:
    log = DeltaLog.for_table(str(golden_root / "delta-rs" / "simple_table" / "delta"))
    history = log.history()
    assert [h["version"] for h in history] == [4, 3, 2, 1, 0]
    assert [h.get("operation") for h in history][-1] == "WRITE"
    assert [h["version"] for h in log.history(limit=2)] == [4, 3]
    assert all(isinstance(h["timestamp"], int) for h in history)
    info = DeltaLog.for_table(
        str(golden_root / "delta-spark-golden" / "deltalog-commit-info" / "delta")
    ).history()
    assert len(info) == 1
    assert info[0]["operation"] == "WRITE"
    assert info[0]["operationParameters"] == {"test": "test"}
    assert (info[0]["userName"], info[0]["job"]["jobId"], info[0]["version"]) == ("username_0", "job_id_0", 0)


def test_read_version_and_get_changes(golden_root: Path) -> None:
    log = DeltaLog.for_table(str(golden_root / "delta-rs" / "checkpoint-cdf-table" / "delta"))
    with pytest.raises(
        DataLossError,
        match="from version 0,\nbut the earliest available version in the _delta_log directory is 3",
    ):
        list(log.get_changes(0))
    changes = list(log.get_changes(0, fail_on_data_loss=False))
    assert [version for version, _ in changes] == [3, 4, 5]
    assert [version for version, _ in log.get_changes(4, 4)] == [4]
    assert changes[1][1] == log.read_version(4)
    with pytest.raises(VersionNotFoundError, match=r"commit 9 of table .* does not exist"):
        log.read_version(9)
    root = golden_root / "dat" / "basic_append" / "delta"
    first = DeltaLog.for_table(str(root)).read_version(0)
    assert first == parse_actions((root / "_delta_log" / f"{0:020d}.json").read_text().splitlines())
    assert [type(a) for a in first[:3]] == [CommitInfo, Metadata, Protocol]
    assert all(isinstance(a, AddFile) for a in first[3:])
