"""The change data feed: filtering, indexing, offsets, admission, batch reads and the stream source."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.cdc import (
    BASE_INDEX,
    END_INDEX,
    METADATA_CHANGE_INDEX,
    AdmissionLimits,
    DeltaSource,
    DeltaSourceOffset,
    IndexedFile,
    InvalidCDCRangeError,
    InvalidSourceOffsetError,
    StreamOptions,
    UnsupportedSourceChangeError,
    filter_cdc_actions,
    index_commit,
    index_snapshot,
    offset_after,
    select_changes,
    table_changes,
)
from replay.cdc.change_rows import ConstantColumns
from replay.data import DataFileNotFoundError
from replay.data.deletion_vectors import z85_encode
from replay.data.roaring_bitmap import serialize_bitmap
from replay.delta_log import DeltaLog
from replay.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    Metadata,
    RemoveFile,
)
from replay.protocol.errors import (
    ChangeDataFeedNotEnabledError,
    DataLossError,
    TimestampOutOfRangeError,
    VersionNotFoundError,
)
from replay.protocol.filenames import delta_file

CDF_ON = {"delta.enableChangeDataFeed": "true"}
TABLE_ID = "00000000-0000-0000-0000-000000000001"


def add(path: str, size: int = 10, data_change: bool = True, **extra: object) -> AddFile:
    return AddFile(path=path, size=size, modification_time=1, data_change=data_change, **extra)  # type: ignore[arg-type]


def remove(path: str, size: int = 10, data_change: bool = True, **extra: object) -> RemoveFile:
    return RemoveFile(path=path, size=size, data_change=data_change, **extra)  # type: ignore[arg-type]


def cdc(path: str, size: int = 10) -> AddCDCFile:
    return AddCDCFile(path=path, size=size)


def merge_info(inserted: str, updated: str, deleted: str) -> CommitInfo:
    metrics = {
        "numTargetRowsInserted": inserted,
        "numTargetRowsUpdated": updated,
        "numTargetRowsDeleted": deleted,
    }
    return CommitInfo({"operation": "MERGE", "operationMetrics": metrics})


# -- filter_cdc_actions ---------------------------------------------------------------------------
def test_cdc_files_win_over_adds_and_removes() -> None:
    actions = [CommitInfo({"operation": "UPDATE"}), add("a"), remove("b"), cdc("c1"), cdc("c2")]
    assert filter_cdc_actions(actions, 3) == [cdc("c1"), cdc("c2")]


def test_without_cdc_files_data_changing_adds_and_removes_are_kept() -> None:
    actions = [
        add("a"),
        add("b", data_change=False),
        remove("c"),
        remove("d", data_change=False),
        Metadata(id="x"),
    ]
    assert filter_cdc_actions(actions, 1) == [add("a"), remove("c")]


def test_noop_merge_yields_nothing_but_merge_with_changes_or_missing_metrics_does() -> None:
    files = [add("a"), remove("b")]
    assert filter_cdc_actions([merge_info("0", "0", "0"), *files], 1) == []
    assert filter_cdc_actions([merge_info("0", "1", "0"), *files], 1) == files
    partial = CommitInfo({"operation": "MERGE", "operationMetrics": {"numTargetRowsInserted": "0"}})
    assert filter_cdc_actions([partial, *files], 1) == files


# -- indexing -------------------------------------------------------------------------------------
def test_commit_entries_are_bracketed_by_placeholders() -> None:
    entries = index_commit(4, [add("a"), remove("b")])
    assert [(e.version, e.index, e.has_file_action, e.is_last) for e in entries] == [
        (4, BASE_INDEX, False, False),
        (4, 0, True, False),
        (4, 1, True, True),
        (4, END_INDEX, False, False),
    ]
    assert entries[1].add == add("a") and entries[2].remove == remove("b")
    assert entries[2].size == 10 and entries[0].size == 0


def test_snapshot_entries_are_sorted_and_become_data_changes() -> None:
    files = [
        AddFile(path="z", modification_time=1, data_change=False),
        AddFile(path="b", modification_time=2, data_change=False),
        AddFile(path="a", modification_time=2, data_change=False),
    ]
    entries = index_snapshot(7, files)
    assert [(e.index, e.add.path, e.add.data_change) for e in entries if e.add] == [
        (0, "z", True),
        (1, "a", True),
        (2, "b", True),
    ]


# -- offsets --------------------------------------------------------------------------------------
def test_offset_json_forms() -> None:
    base = DeltaSourceOffset(TABLE_ID, 3, BASE_INDEX, False)
    assert base.json() == (
        f'{{"sourceVersion":1,"reservoirId":"{TABLE_ID}","reservoirVersion":3,"index":-1,"isStartingVersion":false}}'
    )
    assert DeltaSourceOffset(TABLE_ID, 3, METADATA_CHANGE_INDEX, False).to_dict()["sourceVersion"] == 3
    assert DeltaSourceOffset(TABLE_ID, 3, METADATA_CHANGE_INDEX, False).to_dict()["index"] == -20
    assert DeltaSourceOffset(TABLE_ID, 9, 23, True).to_dict()["sourceVersion"] == 1
    assert DeltaSourceOffset.from_json(base.json()) == base


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"sourceVersion":1,"reservoirId":"x","reservoirVersion":3,"index":-1,"isStartingVersion":false}',
            -100,
        ),
        (
            '{"sourceVersion":3,"reservoirId":"x","reservoirVersion":3,"index":-100,"isStartingVersion":false}',
            -100,
        ),
        (
            '{"sourceVersion":3,"reservoirId":"x","reservoirVersion":3,"index":-20,"isStartingVersion":false}',
            -20,
        ),
        (
            '{"sourceVersion":3,"reservoirId":"x","reservoirVersion":9,"index":23,"isStartingVersion":true}',
            23,
        ),
    ],
)
def test_offset_index_decoding(text: str, expected: int) -> None:
    assert DeltaSourceOffset.from_json(text).index == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"sourceVersion":4,"reservoirId":"x","reservoirVersion":1,"index":1,"isStartingVersion":false}',
            "[DELTA_INVALID_FORMAT_FROM_SOURCE_VERSION] Unsupported format. Expected version should be "
            "smaller than or equal to 3 but was 4. Please upgrade to newer version of Delta.",
        ),
        ('"foo"', "[DELTA_INVALID_SOURCE_OFFSET_FORMAT] The stored source offset format is invalid"),
        ("23x", "[DELTA_INVALID_SOURCE_OFFSET_FORMAT] The stored source offset format is invalid"),
        (
            '{"reservoirId":"x","reservoirVersion":1,"index":1,"isStartingVersion":false}',
            "[DELTA_INVALID_SOURCE_VERSION] sourceVersion(None) is invalid",
        ),
        (
            '{"sourceVersion":2,"reservoirId":"x","reservoirVersion":1,"index":1,"isStartingVersion":false}',
            "[DELTA_INVALID_SOURCE_VERSION] sourceVersion(2) is invalid",
        ),
    ],
)
def test_offset_format_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidSourceOffsetError) as info:
        DeltaSourceOffset.from_json(text)
    assert str(info.value) == message


def test_offset_of_another_table_is_refused() -> None:
    text = DeltaSourceOffset("other-id", 1, 0, False).json()
    with pytest.raises(
        InvalidSourceOffsetError, match=r"^\[DIFFERENT_DELTA_TABLE_READ_BY_STREAMING_SOURCE\]"
    ) as info:
        DeltaSourceOffset.from_json(text, reservoir_id=TABLE_ID)
    assert f"(id = '{TABLE_ID}')" in str(info.value) and "(id = 'other-id')" in str(info.value)
    assert str(info.value).endswith(
        "Please revert your change or delete your streaming query checkpoint to restart from scratch."
    )


def test_validate_offsets() -> None:
    previous = DeltaSourceOffset(TABLE_ID, 4, 10, False)
    DeltaSourceOffset.validate_offsets(previous, DeltaSourceOffset(TABLE_ID, 4, 10, False))
    DeltaSourceOffset.validate_offsets(previous, DeltaSourceOffset(TABLE_ID, 5, 1, False))
    for current, message in [
        (
            DeltaSourceOffset(TABLE_ID, 4, 10, True),
            "Found invalid offsets: 'isInitialSnapshot' flipped incorrectly.",
        ),
        (DeltaSourceOffset(TABLE_ID, 1, 10, False), "Found invalid offsets: 'reservoirVersion' moved back."),
        (DeltaSourceOffset(TABLE_ID, 4, 9, False), "Found invalid offsets. 'index' moved back."),
    ]:
        with pytest.raises(InvalidSourceOffsetError, match=f"^{message}"):
            DeltaSourceOffset.validate_offsets(previous, current)


# -- admission ------------------------------------------------------------------------------------
def test_admission_defaults_follow_delta() -> None:
    assert AdmissionLimits().files_to_take == 1000
    assert AdmissionLimits(max_bytes=10).files_to_take == 2**31 - 9
    assert AdmissionLimits(max_files=5).bytes_to_take == 2**63 - 1


Versions = list[tuple[int, list[IndexedFile]]]


def simulate(
    versions: Versions, limits: Callable[[], AdmissionLimits], initial: bool = False
) -> list[list[str]]:
    """Run micro-batches over indexed versions until nothing is left; the file paths per batch."""
    start = DeltaSourceOffset(TABLE_ID, versions[0][0], BASE_INDEX, initial)
    batches: list[list[str]] = []
    for _ in range(50):
        admitted = list(
            select_changes(
                versions,
                start.reservoir_version,
                start.index,
                is_initial_snapshot=start.is_initial_snapshot,
                limits=limits(),
                end_offset=None,
            )
        )
        entries = [entry for _, version_entries in admitted for entry in version_entries]
        if not entries:
            return batches
        start = offset_after(TABLE_ID, entries[-1], start)
        paths = [entry.file_action.path for entry in entries if entry.file_action is not None]
        if paths:
            batches.append(paths)
    raise AssertionError("the stream did not finish")


def delta_137() -> Versions:
    commits = [
        [add("add0a"), add("add0b")],
        [add("add1")],
        [remove("remove2")],
        [cdc("cdc3a"), cdc("cdc3b")],
        [cdc("cdc4a"), cdc("cdc4b")],
    ]
    return [(version, index_commit(version, files)) for version, files in enumerate(commits)]


@pytest.mark.parametrize(
    "limits",
    [lambda: AdmissionLimits(max_files=1), lambda: AdmissionLimits(max_bytes=1)],
    ids=["files", "bytes"],
)
def test_rate_limits_never_split_cdc_commits(limits: Callable[[], AdmissionLimits]) -> None:
    assert simulate(delta_137(), limits) == [
        ["add0a"],
        ["add0b"],
        ["add1"],
        ["remove2"],
        ["cdc3a", "cdc3b"],
        ["cdc4a", "cdc4b"],
    ]


def test_initial_snapshot_is_admitted_file_by_file() -> None:
    versions = [(0, index_snapshot(0, [AddFile(path=f"f{i}", modification_time=i) for i in range(5)]))]
    assert simulate(versions, lambda: AdmissionLimits(max_files=1), initial=True) == [
        [f"f{i}"] for i in range(5)
    ]


def test_three_files_per_batch() -> None:
    commits = [[add("a0"), add("b0")], [cdc("c1"), cdc("d1")], [cdc("c2"), cdc("d2")]]
    versions = [(v, index_commit(v, files)) for v, files in enumerate(commits)]
    assert simulate(versions, lambda: AdmissionLimits(max_files=3)) == [
        ["a0", "b0"],
        ["c1", "d1"],
        ["c2", "d2"],
    ]
    commits = [[add("a0"), add("b0")], [cdc("c1"), cdc("d1")], [add("e2")]]
    versions = [(v, index_commit(v, files)) for v, files in enumerate(commits)]
    assert simulate(versions, lambda: AdmissionLimits(max_files=3)) == [["a0", "b0"], ["c1", "d1", "e2"]]


def test_commits_with_deletion_vectors_are_admitted_whole() -> None:
    descriptor = inline_dv([1])
    commits = [
        [remove("f"), add("f", deletion_vector=descriptor)],
        [remove("f", deletion_vector=descriptor), add("f")],
    ]
    versions = [(v, index_commit(v, files)) for v, files in enumerate(commits)]
    assert simulate(versions, lambda: AdmissionLimits(max_files=1)) == [["f", "f"], ["f", "f"]]


def test_empty_commits_move_the_offset_to_the_next_base_index() -> None:
    versions = [(v, index_commit(v, [])) for v in range(2, 5)]
    start = DeltaSourceOffset(TABLE_ID, 2, BASE_INDEX, False)
    admitted = list(
        select_changes(
            versions, 2, BASE_INDEX, is_initial_snapshot=False, limits=AdmissionLimits(), end_offset=None
        )
    )
    assert offset_after(TABLE_ID, admitted[-1][1][-1], start) == DeltaSourceOffset(
        TABLE_ID, 5, BASE_INDEX, False
    )


def test_end_offset_bounds_the_batch() -> None:
    versions = delta_137()
    end = DeltaSourceOffset(TABLE_ID, 1, 0, False)
    admitted = select_changes(versions, 0, 0, is_initial_snapshot=False, limits=None, end_offset=end)
    paths = [e.file_action.path for _, entries in admitted for e in entries if e.file_action is not None]
    assert paths == ["add0b", "add1"]


# -- batch change data feed on real tables --------------------------------------------------------
def inline_dv(rows: list[int]) -> DeletionVectorDescriptor:
    data = serialize_bitmap(rows)
    return DeletionVectorDescriptor("i", z85_encode(data), None, len(data), len(rows))


def ids(table: pa.Table) -> list[tuple[int, str, int]]:
    return sorted(
        zip(
            table["id"].to_pylist(),
            table["_change_type"].to_pylist(),
            table["_commit_version"].to_pylist(),
            strict=True,
        )
    )


def new_table(path: Path, rows: range, configuration: dict[str, str] | None = CDF_ON) -> DeltaLog:
    data = pa.table({"id": pa.array(list(rows), pa.int64()), "v": [f"v{i}" for i in rows]})
    write_deltalake(str(path), data, configuration=configuration)
    return DeltaLog.for_table(str(path))


def append(path: Path, rows: range) -> None:
    write_deltalake(
        str(path),
        pa.table({"id": pa.array(list(rows), pa.int64()), "v": [f"v{i}" for i in rows]}),
        mode="append",
    )


def set_commit_times(delta_log: DeltaLog, times_ms: dict[int, int]) -> None:
    for version, ms in times_ms.items():
        path = delta_file(delta_log.log_path, version).removeprefix("file://")
        os.utime(path, (ms / 1000, ms / 1000))


def test_range_errors(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t", range(3))
    append(tmp_path / "t", range(3, 5))
    with pytest.raises(InvalidCDCRangeError) as info:
        table_changes(delta_log)
    assert str(info.value) == (
        "[DELTA_NO_START_FOR_CDC_READ] No startingVersion or startingTimestamp provided for CDC read. "
        f"(table {delta_log.table_path})"
    )
    with pytest.raises(VersionNotFoundError) as not_found:
        table_changes(delta_log, starting_version=2**63 - 1)
    assert str(not_found.value) == (
        f"[DELTA_CDC_START_VERSION_AFTER_LATEST] Start version {2**63 - 1} for change data feed exceeds the "
        f"latest table version 1. (table {delta_log.table_path})"
    )
    assert table_changes(delta_log, starting_version=5, allow_out_of_range=True).num_rows == 0
    with pytest.raises(InvalidCDCRangeError) as invalid:
        table_changes(delta_log, starting_version=1, ending_version=0)
    assert str(invalid.value) == (
        "[DELTA_INVALID_CDC_RANGE] CDC range from start 1 to end 0 was invalid. End cannot be before start. "
        f"(table {delta_log.table_path})"
    )
    assert ids(table_changes(delta_log, starting_version=0, ending_version=7)) == sorted(
        [(i, "insert", 0) for i in range(3)] + [(i, "insert", 1) for i in range(3, 5)]
    )
    assert ids(table_changes(delta_log, starting_version=1, ending_version=1)) == [
        (3, "insert", 1),
        (4, "insert", 1),
    ]


def test_change_data_must_be_enabled_throughout(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(10), configuration=None)  # v0: CDF off
    DeltaTable(str(path)).delete("id = 0")  # v1: removes without cdc files
    DeltaTable(str(path)).alter.set_table_properties(CDF_ON)  # v2
    append(path, range(10, 11))  # v3
    DeltaTable(str(path)).delete("id = 10")  # v4
    DeltaTable(str(path)).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})  # v5

    def error(start: int, end: int) -> str:
        with pytest.raises(ChangeDataFeedNotEnabledError) as info:
            table_changes(delta_log, starting_version=start, ending_version=end)
        return str(info.value)

    assert error(0, 4).startswith(
        "[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [0 , 4] as change data was not\n"
        "recorded for version [0]. If you've enabled change data feed on this table,\nuse `DESCRIBE HISTORY`"
    )
    assert "for range [2 , 5] as change data was not\nrecorded for version [5]." in error(2, 5)
    assert "recorded for version [1]." in error(1, 4)
    assert ids(table_changes(delta_log, starting_version=2, ending_version=4)) == [
        (10, "delete", 4),
        (10, "insert", 3),
    ]


def test_timestamp_ranges(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(0, 10))
    append(path, range(10, 20))
    append(path, range(20, 30))
    t = 1_600_000_000_000
    set_commit_times(delta_log, {0: t, 1: t + 1000, 2: t + 3000})

    def versions(**kwargs: object) -> list[int]:
        return sorted(set(table_changes(delta_log, **kwargs)["_commit_version"].to_pylist()))  # type: ignore[arg-type]

    assert versions(starting_timestamp=t, ending_timestamp=t + 2000) == [0, 1]
    assert versions(starting_timestamp=t + 500, ending_timestamp=t + 1000) == [1]
    assert versions(starting_timestamp=t + 1000) == [1, 2]
    assert versions(starting_timestamp=t + 1200, ending_timestamp=t + 1500) == []  # both between v1 and v2
    assert versions(starting_timestamp="2020-09-13 12:26:41", ending_timestamp="2020-09-13 12:26:43") == [
        1,
        2,
    ]
    with pytest.raises(InvalidCDCRangeError, match=r"CDC range from start 2 to end 1 was invalid"):
        table_changes(delta_log, starting_timestamp=t + 2500, ending_timestamp=t + 1500)
    with pytest.raises(TimestampOutOfRangeError):
        table_changes(delta_log, starting_timestamp=t - 5000, ending_timestamp=t - 4000)
    table = table_changes(delta_log, starting_version=2)
    assert set(table["_commit_timestamp"].to_pylist()) == {
        pa.scalar((t + 3000) * 1000, pa.timestamp("us", "UTC")).as_py()
    }


def write_commit(delta_log: DeltaLog, version: int, actions: list[object]) -> None:
    delta_log.store.write(delta_file(delta_log.log_path, version), [action.json() for action in actions])  # type: ignore[attr-defined]


def test_deletion_vector_changes_yield_exactly_the_changed_rows(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t", range(10))
    (base,) = delta_log.snapshot().files()
    file = base.path

    def dv_commit(version: int, old: list[int] | None, new: list[int] | None) -> None:
        actions: list[object] = [
            remove(file, size=base.size, deletion_vector=inline_dv(old) if old else None)
        ]
        if new is not None:
            actions.append(add(file, size=base.size, deletion_vector=inline_dv(new) if new else None))
        write_commit(delta_log, version, actions)

    dv_commit(1, None, [1, 3])  # DELETE id in (1, 3)
    dv_commit(2, [1, 3], [1, 3, 6])  # DELETE id = 6
    dv_commit(3, [1, 3, 6], [1])  # restore rows 3 and 6
    dv_commit(4, [1], None)  # remove the whole file
    assert ids(table_changes(delta_log, starting_version=1, ending_version=1)) == [
        (1, "delete", 1),
        (3, "delete", 1),
    ]
    assert ids(table_changes(delta_log, starting_version=2, ending_version=2)) == [(6, "delete", 2)]
    assert ids(table_changes(delta_log, starting_version=3, ending_version=3)) == [
        (3, "insert", 3),
        (6, "insert", 3),
    ]
    assert ids(table_changes(delta_log, starting_version=4)) == [
        (i, "delete", 4) for i in (0, 2, 3, 4, 5, 6, 7, 8, 9)
    ]
    assert DeltaLog.for_table(str(tmp_path / "t")).snapshot(3).num_files == 1


def test_noop_merge_commit_has_no_changes(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t", range(3))
    (base,) = delta_log.snapshot().files()
    write_commit(
        delta_log, 1, [merge_info("0", "0", "0"), remove(base.path, base.size), add(base.path, base.size)]
    )
    assert table_changes(delta_log, starting_version=1).num_rows == 0


def test_missing_commits_and_files(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(2))
    append(path, range(2, 4))
    append(path, range(4, 6))
    DeltaTable(str(path)).create_checkpoint()  # the table stays readable without commit 1
    Path(delta_file(delta_log.log_path, 1).removeprefix("file://")).unlink()
    assert ids(table_changes(delta_log, starting_version=0)) == [
        (0, "insert", 0),
        (1, "insert", 0),
        (4, "insert", 2),
        (5, "insert", 2),
    ]
    with pytest.raises(
        DataLossError,
        match="from version 1,\nbut the earliest available version in the _delta_log directory is 2",
    ):
        table_changes(delta_log, starting_version=0, fail_on_data_loss=True)
    victim = next(f for f in delta_log.snapshot(0).files())
    (path / victim.path).unlink()
    with pytest.raises(
        DataFileNotFoundError,
        match=f"Data file file://{path}/{victim.path} of table file://{path} does not exist",
    ):
        table_changes(delta_log, starting_version=0)


def test_cdc_columns_types(tmp_path: Path) -> None:
    delta_log = new_table(tmp_path / "t", range(2))
    schema = table_changes(delta_log, starting_version=0).schema
    assert schema.names == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert schema.field("_commit_version").type == pa.int64()
    assert schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")


def test_files_of_one_commit_share_their_cdc_columns(tmp_path: Path) -> None:
    path = tmp_path / "t"
    data = pa.table({"id": pa.array(range(6), pa.int64()), "p": pa.array([0, 0, 1, 1, 2, 2], pa.int32())})
    write_deltalake(str(path), data, partition_by=["p"], configuration=CDF_ON)
    # one file at a time, so that no two reads build the same column at once
    changes = table_changes(DeltaLog.for_table(str(path)), starting_version=0, max_workers=1)
    assert ids(changes) == [(i, "insert", 0) for i in range(6)]
    assert len(set(changes["_commit_timestamp"].to_pylist())) == 1
    for name in ("_change_type", "_commit_version", "_commit_timestamp"):
        chunks = changes[name].chunks
        assert len(chunks) == 3
        # slices of one array: the three files' columns point into the same buffer
        assert len({chunk.buffers()[1].address for chunk in chunks}) == 1, name


def test_constant_columns_grow_and_slice() -> None:
    constants = ConstantColumns()
    short = constants.column("delete", pa.string(), 2)
    longer = constants.column("delete", pa.string(), 5)
    again = constants.column("delete", pa.string(), 3)
    assert short.to_pylist() == ["delete"] * 2
    assert longer.to_pylist() == ["delete"] * 5
    assert again.to_pylist() == ["delete"] * 3
    assert again.buffers()[1].address == longer.buffers()[1].address
    assert constants.column(7, pa.int64(), 4).to_pylist() == [7] * 4
    assert constants.column(8, pa.int64(), 2).to_pylist() == [8] * 2
    assert constants.column(7, pa.int64(), 0).to_pylist() == []


# -- the streaming source without Spark -----------------------------------------------------------
def drain(
    source: DeltaSource, start: DeltaSourceOffset, limits: Callable[[], AdmissionLimits | None]
) -> tuple[list[pa.Table], DeltaSourceOffset]:
    batches = []
    for _ in range(100):
        end = source.latest_offset(start, limits())
        if end == start:
            return batches, start
        batches.append(source.read_batch(start, end))
        start = end
    raise AssertionError("the stream did not finish")


def test_stream_starts_with_the_snapshot_then_follows_commits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(3))
    append(path, range(3, 5))
    source = DeltaSource(delta_log)
    start = source.initial_offset()
    assert start == DeltaSourceOffset(source.table_id, 1, BASE_INDEX, True)
    batches, offset = drain(source, start, lambda: AdmissionLimits(max_files=1))
    assert offset == DeltaSourceOffset(source.table_id, 2, BASE_INDEX, False)
    assert [ids(batch) for batch in batches] == [
        [(0, "insert", 1), (1, "insert", 1), (2, "insert", 1)],
        [(3, "insert", 1), (4, "insert", 1)],
    ]
    DeltaTable(str(path)).delete("id = 4")
    batches, _ = drain(source, offset, lambda: None)
    assert [ids(batch) for batch in batches] == [[(4, "delete", 2)]]


def test_stream_from_latest_and_out_of_range(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(3))
    latest = DeltaSource(delta_log, starting_version="latest")
    start = latest.initial_offset()
    assert drain(latest, start, lambda: None)[0] == []
    append(path, range(3, 4))
    assert [ids(b) for b in drain(latest, start, lambda: None)[0]] == [[(3, "insert", 1)]]
    with pytest.raises(VersionNotFoundError) as info:
        DeltaSource(delta_log, starting_version=5).initial_offset()
    assert (
        str(info.value) == "[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version 5. "
        f"Available versions: [0, 1]. (table {delta_log.table_path})"
    )
    with pytest.raises(ValueError, match="Please either provide 'startingVersion' or 'startingTimestamp'"):
        DeltaSource(delta_log, starting_version=0, starting_timestamp=0)


def test_stream_before_cdf_was_enabled_fails(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(2), configuration=None)
    DeltaTable(str(path)).alter.set_table_properties(CDF_ON)
    source = DeltaSource(delta_log, starting_version=0)
    start = source.initial_offset()
    with pytest.raises(ChangeDataFeedNotEnabledError, match=r"recorded for version \[0\]"):
        source.read_batch(start, source.latest_offset(start, None))


def test_plain_stream_of_appends_and_change_commits(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(2))
    append(path, range(2, 3))
    source = DeltaSource(delta_log, read_change_feed=False, starting_version=0)
    batches, offset = drain(source, source.initial_offset(), lambda: AdmissionLimits(max_files=1))
    assert [sorted(b["id"].to_pylist()) for b in batches] == [[0, 1], [2]]
    assert batches[0].column_names == ["id", "v"]
    DeltaTable(str(path)).delete("id = 1")
    with pytest.raises(
        UnsupportedSourceChangeError, match=r"^\[DELTA_SOURCE_TABLE_IGNORE_CHANGES\] Detected a data update"
    ):
        drain(source, offset, lambda: None)
    append(path, range(3, 4))
    skipping = DeltaSource(
        delta_log, read_change_feed=False, stream_options=StreamOptions(skip_change_commits=True)
    )
    assert [sorted(b["id"].to_pylist()) for b in drain(skipping, offset, lambda: None)[0]] == [[3]]


def test_stream_fails_on_data_loss_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "t"
    delta_log = new_table(path, range(2))
    append(path, range(2, 4))
    append(path, range(4, 6))
    DeltaTable(str(path)).create_checkpoint()
    Path(delta_file(delta_log.log_path, 1).removeprefix("file://")).unlink()
    strict = DeltaSource(delta_log, starting_version=1)
    with pytest.raises(DataLossError) as info:
        strict.latest_offset(strict.initial_offset(), None)
    assert str(info.value).startswith(
        "[DELTA_MISSING_FILES_UNEXPECTED_VERSION] The stream from your Delta table was expecting process "
        "data from version 1,\nbut the earliest available version in the _delta_log directory is 2."
    )
    lenient = DeltaSource(delta_log, starting_version=1, fail_on_data_loss=False)
    batches, _ = drain(lenient, lenient.initial_offset(), lambda: None)
    assert [ids(batch) for batch in batches] == [[(4, "insert", 2), (5, "insert", 2)]]


def expired_log_table(path: Path) -> DeltaLog:
    """Versions 0..6 (one row each), a checkpoint at 5 and commits 0..4 deleted, as log cleanup leaves it."""
    delta_log = new_table(path, range(1))
    for version in range(1, 6):
        append(path, range(version, version + 1))
    DeltaTable(str(path)).create_checkpoint()
    append(path, range(6, 7))
    for version in range(5):
        Path(delta_file(delta_log.log_path, version).removeprefix("file://")).unlink()
    return delta_log


@pytest.mark.parametrize("read_change_feed", [True, False], ids=["change-feed", "plain"])
def test_new_stream_starting_before_the_earliest_commit_fails_as_delta_does(
    tmp_path: Path, read_change_feed: bool
) -> None:
    delta_log = expired_log_table(tmp_path / "t")
    for fail_on_data_loss in (True, False):  # Delta's starting-version check ignores failOnDataLoss
        source = DeltaSource(
            delta_log,
            read_change_feed=read_change_feed,
            starting_version=0,
            fail_on_data_loss=fail_on_data_loss,
        )
        with pytest.raises(VersionNotFoundError) as info:
            source.initial_offset()
        assert str(info.value) == (
            "[DELTA_VERSION_NOT_FOUND] Cannot time travel Delta table to version 0. "
            f"Available versions: [5, 6]. (table {delta_log.table_path})"
        )
        assert (info.value.version, info.value.earliest, info.value.latest) == (0, 5, 6)

    def rows(source: DeltaSource, start: DeltaSourceOffset) -> list[int]:
        return sorted(i for batch in drain(source, start, lambda: None)[0] for i in batch["id"].to_pylist())

    at_checkpoint = DeltaSource(delta_log, read_change_feed=read_change_feed, starting_version=5)
    assert rows(at_checkpoint, at_checkpoint.initial_offset()) == [5, 6]
    # a restart from a checkpointed offset is not a new query: failOnDataLoss decides, as before
    restarted = DeltaSourceOffset(at_checkpoint.table_id, 2, BASE_INDEX, False)
    strict = DeltaSource(delta_log, read_change_feed=read_change_feed)
    with pytest.raises(DataLossError, match=r"^\[DELTA_MISSING_FILES_UNEXPECTED_VERSION\]"):
        strict.latest_offset(restarted, None)
    lenient = DeltaSource(delta_log, read_change_feed=read_change_feed, fail_on_data_loss=False)
    assert rows(lenient, restarted) == [5, 6]


def test_exclude_regex_drops_matching_files_without_falling_back() -> None:
    commits = [[add("part=0/a"), add("part=1/b")], [cdc("_change_data/part=0/c"), add("part=1/d")]]
    versions = [(v, index_commit(v, filter_cdc_actions(files, v))) for v, files in enumerate(commits)]
    admitted = select_changes(
        versions,
        0,
        BASE_INDEX,
        is_initial_snapshot=False,
        limits=None,
        end_offset=None,
        exclude_regex=re.compile("part=0"),
    )
    paths = [e.file_action.path for _, entries in admitted for e in entries if e.file_action is not None]
    assert paths == ["part=1/b"]
