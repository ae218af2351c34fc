"""Log segment selection on listings (SnapshotManagementSuite, minor compaction, checkpoints)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logstores.base import FileStatus
from logstores.local import LocalLogStore
from replay.delta_log import DeltaLog
from replay.log.checkpoint_instances import CheckpointFormat, CheckpointInstance
from replay.log.listing import classify_listing
from replay.log.log_segment import LogSegment, select_log_segment, verify_delta_versions
from replay.protocol import filenames
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.protocol.errors import MissingVersionsError, VersionNotFoundError

LOG = "file:///t/_delta_log"
TABLE = "file:///t"


def status(path: str, size: int = 20, mtime: int = 0) -> FileStatus:
    return FileStatus(path, size, mtime)


def listing(
    commits: range | list[int],
    checkpoints: list[int] = (),  # type: ignore[assignment]
    compacted: list[tuple[int, int]] = (),  # type: ignore[assignment]
    extra: list[FileStatus] = (),  # type: ignore[assignment]
) -> list[FileStatus]:
    files = [status(filenames.delta_file(LOG, v), mtime=1000 + v) for v in commits]
    files += [status(filenames.checkpoint_file_single(LOG, v)) for v in checkpoints]
    files += [status(filenames.compacted_delta_file(LOG, a, b)) for a, b in compacted]
    files += list(extra)
    return sorted(files, key=lambda s: s.name)


def segment(files: list[FileStatus], version: int | None = None) -> LogSegment:
    return select_log_segment(LOG, classify_listing(files, version), TABLE, version_to_load=version)


def replayed(seg: LogSegment) -> list[tuple[int, int]]:
    return [(start, end) for start, end, _ in seg.replay_files]


def test_latest_version_from_commits_only() -> None:
    seg = segment(listing(range(5)))
    assert (seg.version, seg.checkpoint, [s.name for s in seg.deltas][-1]) == (
        4,
        None,
        "00000000000000000004.json",
    )
    assert seg.last_commit_timestamp == 1004


def test_checkpoint_then_contiguous_commits() -> None:
    seg = segment(listing(range(15), checkpoints=[5, 10]))
    assert seg.checkpoint == CheckpointInstance(10)
    assert [filenames.delta_version(s.name) for s in seg.deltas] == [11, 12, 13, 14]
    assert segment(listing(range(15), checkpoints=[5, 10]), version=7).checkpoint_version == 5
    at_checkpoint = segment(listing(range(15), checkpoints=[10]), version=10)
    assert (at_checkpoint.version, at_checkpoint.deltas, at_checkpoint.last_commit_timestamp) == (
        10,
        [],
        1010,
    )


def test_unrelated_files_are_ignored() -> None:
    extra = [
        status(f"{LOG}/00000000000000000001.crc"),
        status(f"{LOG}/.s3-optimization-0", size=0),
        status(f"{LOG}/_sidecars", size=0),
        status(f"{LOG}/00000000000000000002.checkpoint.parquet", size=0),  # zero-byte: ignored
        status(f"{LOG}/.00000000000000000003.json.abc.tmp"),
    ]
    seg = segment(listing(range(4), extra=extra))
    assert (seg.version, seg.checkpoint) == (3, None)


def test_gap_raises_missing_versions() -> None:
    with pytest.raises(MissingVersionsError, match=r"Versions \(0, 2\) are not contiguous") as info:
        segment(listing([0, 2]))
    assert info.value.missing == [1]
    assert TABLE in str(info.value)


def test_truncated_log_without_checkpoint() -> None:
    with pytest.raises(MissingVersionsError, match="DELTA_TRUNCATED_TRANSACTION_LOG") as info:
        segment(listing([3, 4, 5]))
    assert info.value.missing == [0, 1, 2]


def test_commit_after_checkpoint_missing() -> None:
    with pytest.raises(MissingVersionsError, match="checkpoint 5; first commit found is 7"):
        segment(listing([0, 1, 2, 3, 4, 5, 7, 8], checkpoints=[5]))


def test_non_existent_version() -> None:
    with pytest.raises(VersionNotFoundError, match="Trying to load a non-existent version 2") as info:
        segment(listing([0]), version=2)
    assert (info.value.version, info.value.latest) == (2, 0)


def test_checkpoint_without_any_commit_file() -> None:
    with pytest.raises(MissingVersionsError, match="Could not find any delta files for version 0"):
        segment(listing([], checkpoints=[0]))


def test_multi_part_beats_single_at_same_version() -> None:
    parts = [status(p) for p in filenames.checkpoint_files_multipart(LOG, 4, 3)]
    seg = segment(listing(range(6), checkpoints=[4], extra=parts))
    assert seg.checkpoint == CheckpointInstance(4, CheckpointFormat.WITH_PARTS, 3)
    assert len(seg.checkpoint_files) == 3
    incomplete = segment(listing(range(6), checkpoints=[2], extra=parts[:2]))
    assert incomplete.checkpoint == CheckpointInstance(2)


@pytest.mark.parametrize(
    ("checkpoints", "windows", "expected"),
    [
        ([], [(1, 3), (2, 3), (3, 8)], [(0, 0), (1, 3)] + [(v, v) for v in range(4, 11)]),
        ([], [(0, 10)], [(0, 10)]),
        ([], [(0, 2), (3, 4), (4, 5)], [(0, 2), (3, 4)] + [(v, v) for v in range(5, 11)]),
        ([], [(7, 10), (8, 10)], [(v, v) for v in range(7)] + [(7, 10)]),
        ([], [(0, 2), (3, 5), (6, 8), (9, 10)], [(0, 2), (3, 5), (6, 8), (9, 10)]),
        ([0, 2], [(1, 3), (2, 3), (3, 8), (4, 9), (3, 10)], [(3, 8), (9, 9), (10, 10)]),
        ([2, 4], [(0, 10), (5, 10)], [(5, 10)]),
        ([0], [(1, 2), (3, 4), (4, 5)], [(1, 2), (3, 4)] + [(v, v) for v in range(5, 11)]),
        ([0, 2, 5], [(7, 10), (8, 10)], [(6, 6), (7, 10)]),
        ([0, 2], [(0, 2), (3, 5), (3, 6), (9, 10)], [(3, 5), (6, 6), (7, 7), (8, 8), (9, 10)]),
        ([0, 2], [(0, 2), (3, 5), (3, 6), (9, 11)], [(3, 5)] + [(v, v) for v in range(6, 11)]),
    ],
)
def test_minor_compaction_selection(
    checkpoints: list[int], windows: list[tuple[int, int]], expected: list[tuple[int, int]]
) -> None:
    assert replayed(segment(listing(range(11), checkpoints=checkpoints, compacted=windows))) == expected


def test_compaction_never_hides_a_missing_commit() -> None:
    with pytest.raises(MissingVersionsError, match=r"Versions .* are not contiguous"):
        segment(listing([0, 1, 2, 3, 5, 6], compacted=[(3, 5)]))


def test_verify_delta_versions() -> None:
    verify_delta_versions([], TABLE)
    verify_delta_versions([1, 2, 3], TABLE, 1, 3)
    with pytest.raises(MissingVersionsError, match="Did not get the first delta file version: 0"):
        verify_delta_versions([1, 2], TABLE, expected_start=0)
    with pytest.raises(MissingVersionsError, match="Did not get the last delta file version: 3"):
        verify_delta_versions([1, 2], TABLE, expected_end=3)
    for versions in ([1, 3], [1, 2, 2, 3], [3, 2, 1]):
        with pytest.raises(MissingVersionsError, match="not contiguous"):
            verify_delta_versions(versions, TABLE)


# -- a listing that races with commits --------------------------------------------------------------
class RacingListingStore(LocalLogStore):
    """A local store whose first listing misses one commit and shows the later ones, as a directory
    read in hash order does while another writer creates that commit behind the read position."""

    def __init__(self, hidden: str) -> None:
        super().__init__()
        self.hidden = hidden
        self.listings = 0

    def list_from(self, path: str) -> Iterator[FileStatus]:
        self.listings += 1
        statuses = list(super().list_from(path))
        if self.listings == 1:
            statuses = [s for s in statuses if s.name != self.hidden]
        return iter(statuses)


def _table_of(root: Path, versions: int, checkpoint: int | None = None) -> str:
    uri = root.as_uri()
    log = DeltaLog.for_table(uri)
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
    log.commit([Protocol(1, 2), Metadata(id="t", schema_string=schema, configuration={})], read_version=-1)
    for version in range(1, versions):
        log.commit([AddFile(path=f"f{version}", size=1, modification_time=1, data_change=True)])
        if version == checkpoint:
            log.checkpoint()
    return uri


def test_a_commit_missed_by_a_racing_listing_is_found_by_listing_again(tmp_path: Path) -> None:
    uri = _table_of(tmp_path, 6)
    store = RacingListingStore(filenames.delta_file("", 3).lstrip("/"))
    snapshot = DeltaLog(uri, None, store).update()
    assert (snapshot.version, store.listings) == (5, 2)
    assert len(snapshot.files()) == 5


def test_a_real_hole_is_still_an_error_after_one_more_listing(tmp_path: Path) -> None:
    uri = _table_of(tmp_path, 6)
    (tmp_path / "_delta_log" / filenames.delta_file("", 3).lstrip("/")).unlink()
    store = RacingListingStore("none")
    with pytest.raises(MissingVersionsError, match="DELTA_VERSIONS_NOT_CONTIGUOUS"):
        DeltaLog(uri, None, store).update()
    assert store.listings == 2


def test_a_hole_before_the_newest_checkpoint_costs_no_second_listing(tmp_path: Path) -> None:
    uri = _table_of(tmp_path, 6, checkpoint=3)
    (tmp_path / "_delta_log" / filenames.delta_file("", 1).lstrip("/")).unlink()
    store = RacingListingStore("none")
    assert DeltaLog(uri, None, store).update().version == 5
    assert store.listings == 1
