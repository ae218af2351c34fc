"""Row tracking (the ``rowTracking`` writer feature): fresh row ids for every file a commit adds.

Each new file gets ``baseRowId`` after the table's high water mark (the ``delta.rowTracking``
domain) and the commit's version as ``defaultRowCommitVersion``; a commit that loses a race numbers
its files after the winner's; files re-added with a deletion vector keep theirs. Rows keep their
ids through rewrites: ``test_row_tracking_rewrites``.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from replay import DeltaLog, DeltaTable, write_table
from replay.protocol.actions import AddFile, DomainMetadata
from replay.txn.row_tracking import ROW_TRACKING_DOMAIN, assign_row_ids, high_water_mark
from replay.txn.transaction import Transaction
from tests.dml_cases import our_rows, rust_rows
from tests.paths import GOLDEN_ROOT

SETTINGS = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}


def ranges(uri: str) -> list[tuple[int, int, int]]:
    """(first row id, last row id + 1, default row commit version) of each active file."""
    found = []
    for add in DeltaTable(uri).snapshot.files():
        assert add.base_row_id is not None and add.default_row_commit_version is not None, add.path
        found.append(
            (add.base_row_id, add.base_row_id + (add.num_records or 0), add.default_row_commit_version)
        )
    return sorted(found)


def disjoint(spans: list[tuple[int, int, int]]) -> bool:
    return all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_new_files_get_fresh_row_ids_after_the_high_water_mark(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2, 3]}), configuration=SETTINGS)
    write_table(uri, pa.table({"id": [4, 5]}), mode="append")
    table = DeltaTable(uri)
    assert "rowTracking" in (table.protocol().writer_features or [])
    configuration = table.metadata().configuration
    assert configuration["delta.rowTracking.materializedRowIdColumnName"].startswith("_row-id-col-")
    assert ranges(uri) == [(0, 3, 0), (3, 5, 1)]
    assert high_water_mark(table.snapshot.domain_metadata) == 4
    DeltaTable(uri).delete("id = 2")  # a deletion vector: the file is re-added with its ids
    assert ranges(uri) == [(0, 3, 0), (3, 5, 1)]
    assert our_rows(uri) == rust_rows(uri) == [{"id": 1}, {"id": 3}, {"id": 4}, {"id": 5}]


def test_a_commit_that_lost_a_race_numbers_its_files_after_the_winner(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2]}), configuration=SETTINGS)
    log = DeltaLog.for_table(uri)
    late = Transaction(log.io, log.update(), operation="WRITE")
    late.add_actions([AddFile("late.parquet", size=1, modification_time=1, stats='{"numRecords":10}')])
    write_table(uri, pa.table({"id": [3, 4, 5]}), mode="append")  # the winner: ids 2..4
    version = late.commit()
    assert version == 2
    spans = ranges(uri)
    assert disjoint(spans) and (5, 15, 2) in spans
    assert high_water_mark(log.update().domain_metadata) == 14


def test_an_insert_only_merge_numbers_its_rows_after_the_mark(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2, 3]}), configuration=SETTINGS)
    write_table(uri, pa.table({"id": [4]}), mode="append")
    source = pa.table({"id": [3, 9]})
    merged = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    merged.when_not_matched_insert_all().execute()  # new rows only: fresh ids
    assert sorted(r["id"] for r in our_rows(uri)) == [1, 2, 3, 4, 9]
    assert disjoint(ranges(uri)) and ranges(uri)[-1] == (4, 5, 2)


def test_a_delta_table_with_row_tracking_and_clustering_takes_appends_and_deletes(tmp_path: Path) -> None:
    """Delta's table (row tracking enabled, clustered, deletion vectors, created empty)."""
    path = tmp_path / "t"
    shutil.copytree(GOLDEN_ROOT / "kernel-rs/crc-full/delta", path)
    uri = str(path)
    write_table(uri, pa.table({"id": pa.array([1, 2, 3], pa.int64())}), mode="append")
    write_table(uri, pa.table({"id": pa.array([4, 5], pa.int64())}), mode="append")
    assert ranges(uri) == [(0, 3, 1), (3, 5, 2)]
    DeltaTable(uri).delete("id = 2")
    assert ranges(uri) == [(0, 3, 1), (3, 5, 2)]
    assert our_rows(uri) == rust_rows(uri) == [{"id": i} for i in (1, 3, 4, 5)]
    assert "clustering" in (DeltaTable(uri).protocol().writer_features or [])


@given(
    st.integers(-1, 1000),
    st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12),
    st.integers(0, 100),
)
def test_assigned_ranges_follow_the_mark_and_never_overlap(
    mark: int, files: list[tuple[int, bool]], version: int
) -> None:
    """Files without ids get consecutive ranges after ``mark`` in order; those with ids keep them;
    the domain records the last id given (a domain the commit carries stays when none was given)."""
    actions = [
        AddFile(f"f{i}", stats=orjson.dumps({"numRecords": n}).decode(), base_row_id=7 if has else None)
        for i, (n, has) in enumerate(files)
    ]
    actions.append(DomainMetadata(ROW_TRACKING_DOMAIN, '{"rowIdHighWaterMark":-5}'))  # replaced
    assigned, last = assign_row_ids(actions, version, mark)
    adds = [a for a in assigned if isinstance(a, AddFile)]
    expected = mark
    for add, (records, has) in zip(adds, files, strict=True):
        if has:
            assert add.base_row_id == 7 and add.default_row_commit_version is None
        else:
            assert add.base_row_id == expected + 1 and add.default_row_commit_version == version
            expected += records
    assert last == expected
    domains = [a for a in assigned if isinstance(a, DomainMetadata)]
    if any(not has for _, has in files):
        assert [high_water_mark(domains)] == [expected]
    else:
        assert [high_water_mark(domains)] == [-5]  # nothing given: the commit's own domain stays
