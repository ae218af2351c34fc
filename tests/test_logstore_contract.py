"""The LogStore contract (Delta's LogStoreSuite), run against every store."""

from __future__ import annotations

import threading
import time

import pytest

from logstores import FileStatus
from tests.store_cases import STORE_FIXTURES, StoreUnderTest


@pytest.fixture(params=STORE_FIXTURES)
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)


def names(statuses: object) -> list[str]:
    return [status.name for status in statuses]  # type: ignore[attr-defined]


def test_read_write_round_trip(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/0", ["zero", "none"])
    sut.store.write(f"{log}/1", iter(["one"]))
    assert sut.store.read(f"{log}/0") == ["zero", "none"]
    assert sut.store.read(f"{log}/1") == ["one"]
    with sut.store.read_as_iterator(f"{log}/0") as lines:
        assert list(lines) == ["zero", "none"]


def test_file_format_is_one_newline_per_action_in_utf8(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/0", ["a", "ü€"])
    assert sut.store.read_bytes(f"{log}/0") == "a\nü€\n".encode()
    assert sut.store.read(f"{log}/0") == ["a", "ü€"]


def test_empty_write_makes_a_zero_byte_file(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/0", [])
    assert sut.store.read_bytes(f"{log}/0") == b""
    assert sut.store.read(f"{log}/0") == []
    [status] = sut.store.list_from(f"{log}/0")
    assert status.size == 0


def test_lines_are_trimmed_like_java(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/0", ["  padded\t", "\x01ctl\x1f", "inner  space"])
    assert sut.store.read(f"{log}/0") == ["padded", "ctl", "inner  space"]


def test_put_if_absent_refuses_an_existing_file(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/00000000000000000000.json", ["zero"])  # S3DynamoDBLogStore needs N-1
    target = f"{log}/00000000000000000001.json"
    sut.store.write(target, ["one"])
    with pytest.raises(FileExistsError, match=r"00000000000000000001\.json"):
        sut.store.write(target, ["uno"])
    assert sut.store.read(target) == ["one"]


def test_overwrite_replaces_the_whole_file(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/_last_checkpoint", ["a much longer first version"])
    sut.store.write(f"{log}/_last_checkpoint", ["short"], overwrite=True)
    assert sut.store.read(f"{log}/_last_checkpoint") == ["short"]
    sut.store.write(f"{log}/new", ["created"], overwrite=True)
    assert sut.store.read(f"{log}/new") == ["created"]


def test_binary_writes_keep_bytes_and_put_if_absent(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    payload = bytes(range(256)) * 4
    sut.store.write_bytes(f"{log}/1.checkpoint.parquet", payload)
    assert sut.store.read_bytes(f"{log}/1.checkpoint.parquet") == payload
    with sut.store.open_input(f"{log}/1.checkpoint.parquet") as handle:
        handle.seek(256)
        assert handle.read(4) == bytes([0, 1, 2, 3])
    with pytest.raises(FileExistsError):
        sut.store.write_bytes(f"{log}/1.checkpoint.parquet", b"other")


def test_list_from_returns_names_at_or_after_the_start_sorted(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    for name in ("3", "1", "2"):
        sut.store.write(f"{log}/{name}", ["x"])
    assert names(sut.store.list_from(f"{log}/0")) == ["1", "2", "3"]
    assert names(sut.store.list_from(f"{log}/1")) == ["1", "2", "3"]
    assert names(sut.store.list_from(f"{log}/2")) == ["2", "3"]
    assert names(sut.store.list_from(f"{log}/3")) == ["3"]
    assert names(sut.store.list_from(f"{log}/4")) == []


def test_list_from_a_prefix_that_is_not_a_file(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    for version in range(8):  # from 0: S3DynamoDBLogStore needs N-1
        sut.store.write(f"{log}/{version:020d}.json", ["x"])
    sut.store.write(f"{log}/{5:020d}.checkpoint.parquet", ["x"])
    listed = names(sut.store.list_from(f"{log}/{5:020d}."))
    assert listed == [
        f"{5:020d}.checkpoint.parquet",
        f"{5:020d}.json",
        f"{6:020d}.json",
        f"{7:020d}.json",
    ]


def test_list_from_reports_directories_and_full_statuses(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    before_ms = int(time.time() * 1000) - 5_000
    sut.store.create_directories(f"{log}/_sidecars")
    sut.store.write(f"{log}/_sidecars/a.parquet", ["x"])
    sut.store.write(f"{log}/{0:020d}.json", ["abc", "de"])
    statuses = list(sut.store.list_from(f"{log}/0"))
    by_name = {status.name: status for status in statuses}
    assert list(by_name) == [f"{0:020d}.json", "_sidecars"]
    commit = by_name[f"{0:020d}.json"]
    assert isinstance(commit, FileStatus)
    assert commit.size == len(b"abc\nde\n")
    assert not commit.is_dir
    assert before_ms <= commit.modification_time <= int(time.time() * 1000) + 5_000
    assert by_name["_sidecars"].is_dir
    # A listed path is fully qualified and reads back through the same store.
    assert "://" in commit.path
    assert sut.store.read(commit.path) == ["abc", "de"]


def test_list_from_a_missing_directory_raises_file_not_found(sut: StoreUnderTest) -> None:
    missing = sut.path("no-such-table", "_delta_log")
    with pytest.raises(FileNotFoundError, match="no-such-table"):
        list(sut.store.list_from(f"{missing}/{0:020d}.json"))


def test_read_of_a_missing_file_raises_file_not_found(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    with pytest.raises(FileNotFoundError):
        sut.store.read(f"{log}/{9:020d}.json")
    with pytest.raises(FileNotFoundError):
        sut.store.read_bytes(f"{log}/{9:020d}.json")


def test_read_as_iterator_is_lazy_and_closeable(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    lines = sut.store.read_as_iterator(f"{log}/not-yet-written")  # nothing is opened yet
    sut.store.write(f"{log}/not-yet-written", ["foo", "bar"])
    assert next(lines) == "foo"
    lines.close()
    assert list(lines) == []


def test_paths_with_spaces_percent_and_non_ascii(sut: StoreUnderTest) -> None:
    root = sut.path("tàble with space %25 ünï")
    sut.store.create_directories(f"{root}/_delta_log")
    target = f"{root}/_delta_log/{0:020d}.json"
    sut.store.write(target, ["ok"])
    assert sut.store.read(target) == ["ok"]
    [status] = sut.store.list_from(target)
    assert status.name == f"{0:020d}.json"
    assert "tàble with space %25 ünï" in status.path
    assert sut.store.read(status.path) == ["ok"]
    with pytest.raises(FileExistsError):
        sut.store.write(status.path, ["again"])


def test_write_into_a_missing_directory(sut: StoreUnderTest) -> None:
    target = sut.path("missing-parent", "_delta_log", f"{0:020d}.json")
    if sut.has_directories:
        with pytest.raises(FileNotFoundError, match="missing-parent"):
            sut.store.write(target, ["x"])
        with pytest.raises(FileNotFoundError):
            sut.store.read(target)
    else:  # object stores have no directories: the key is simply created
        sut.store.write(target, ["x"])
        assert sut.store.read(target) == ["x"]


def test_no_temporary_files_are_left_behind(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    sut.store.write(f"{log}/0", ["zero"])
    with pytest.raises(FileExistsError):
        sut.store.write(f"{log}/0", ["again"])
    sut.store.write(f"{log}/0", ["replaced"], overwrite=True)
    assert names(sut.store.list_from(f"{log}/.")) == ["0"]  # "." sorts before hidden temp names


def test_resolve_path_on_physical_storage_is_fully_qualified(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    resolved = sut.store.resolve_path_on_physical_storage(f"{log}/0")
    assert "://" in resolved
    assert resolved.endswith("/_delta_log/0")
    sut.store.write(resolved, ["via resolved path"])
    assert sut.store.read(f"{log}/0") == ["via resolved path"]


def test_concurrent_writers_exactly_one_wins(sut: StoreUnderTest) -> None:
    log = sut.log_dir()
    for version in range(7):  # S3DynamoDBLogStore needs N-1
        sut.store.write(f"{log}/{version:020d}.json", ["x"])
    target = f"{log}/{7:020d}.json"
    barrier = threading.Barrier(8)
    outcomes: dict[int, str] = {}

    def writer(index: int) -> None:
        lines = [f"writer-{index}-line-{n}" + "x" * 200 for n in range(200)]
        barrier.wait()
        try:
            sut.store.write(target, lines)
            outcomes[index] = "won"
        except FileExistsError:
            outcomes[index] = "lost"

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [index for index, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == 8
    assert len(winners) == 1
    expected = [f"writer-{winners[0]}-line-{n}" + "x" * 200 for n in range(200)]
    assert sut.store.read(target) == expected
