"""Row-level changes as transactions: what they read decides their conflicts (changes of disjoint
partitions both commit), and a failed operation leaves no visible change and no file behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay import ConcurrentAppendException, ConcurrentDeleteReadException, DeltaTable, write_table
from replay.dml.outputs import Sinks
from replay.protocol.errors import ConcurrentModificationError
from tests.dml_cases import CDF, DV_CDF, files_under, latest_version, our_rows

DATA = pa.table(
    {
        "id": pa.array(range(40), pa.int64()),
        "v": pa.array(range(40), pa.int64()),
        "p": pa.array([i % 2 for i in range(40)], pa.int32()),
    }
)


def _table(tmp_path: Path, configuration: dict[str, str]) -> str:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, partition_by=["p"], configuration=configuration, max_rows_per_file=5)
    return uri


def _upsert(table: DeltaTable, part: int, ids: list[int]) -> dict[str, int]:
    source = pa.table(
        {"id": pa.array(ids, pa.int64()), "v": [-1] * len(ids), "p": pa.array([part] * len(ids), pa.int32())}
    )
    return (
        table.merge(source, f"t.id = s.id AND t.p = {part}", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


@pytest.mark.parametrize("configuration", [CDF, DV_CDF])
def test_merges_into_disjoint_partitions_both_commit(tmp_path: Path, configuration: dict[str, str]) -> None:
    uri = _table(tmp_path, configuration)
    first, second = DeltaTable(uri), DeltaTable(uri)  # both read version 0
    _upsert(first, 0, [0, 2, 100])
    _upsert(second, 1, [1, 3, 101])
    assert second.version() == 2
    rows = {r["id"]: r["v"] for r in our_rows(uri)}
    assert [rows[i] for i in (0, 1, 2, 3, 100, 101)] == [-1] * 6
    assert DeltaTable(uri).history(1)[0]["readVersion"] == 0


@pytest.mark.parametrize("configuration", [CDF, DV_CDF])
def test_merges_into_the_same_partition_conflict_and_leave_nothing(
    tmp_path: Path, configuration: dict[str, str]
) -> None:
    uri = _table(tmp_path, configuration)
    first, second = DeltaTable(uri), DeltaTable(uri)
    _upsert(first, 0, [0, 2])
    after_first = files_under(uri)
    with pytest.raises(ConcurrentModificationError):
        _upsert(second, 0, [4, 6])
    assert latest_version(uri) == 1
    assert files_under(uri) == after_first  # no data, DV or change data file of the loser is left


def test_delete_conflicts_with_a_concurrent_append_of_matching_rows_only(tmp_path: Path) -> None:
    uri = _table(tmp_path, CDF)
    planned = DeltaTable(uri)
    write_table(
        uri,
        pa.table(
            {"id": pa.array([-5], pa.int64()), "v": pa.array([0], pa.int64()), "p": pa.array([0], pa.int32())}
        ),
    )
    planned.delete("id > 30")  # the appended row cannot match: no conflict
    assert planned.version() == 2
    planned = DeltaTable(uri)
    write_table(
        uri,
        pa.table(
            {"id": pa.array([35], pa.int64()), "v": pa.array([0], pa.int64()), "p": pa.array([1], pa.int32())}
        ),
    )
    before = files_under(uri)
    with pytest.raises(ConcurrentAppendException):
        planned.delete("id > 20")
    assert files_under(uri) == before and latest_version(uri) == 3


def test_update_conflicts_when_a_file_it_read_is_removed(tmp_path: Path) -> None:
    uri = _table(tmp_path, CDF)
    planned = DeltaTable(uri)
    DeltaTable(uri).delete("p = 0")  # removes the files of partition 0 (adds none)
    with pytest.raises(ConcurrentDeleteReadException):
        planned.update({"v": "0"}, predicate="p = 0")
    planned = DeltaTable(uri)
    write_table(
        uri,
        pa.table(
            {"id": pa.array([-1], pa.int64()), "v": pa.array([0], pa.int64()), "p": pa.array([0], pa.int32())}
        ),
    )
    planned.update({"v": "0"}, predicate="p = 1")  # partition 0 changed concurrently: not read
    assert planned.version() == 3


@pytest.mark.parametrize("configuration", [CDF, DV_CDF])
@pytest.mark.parametrize("operation", ["delete", "update", "merge"])
def test_a_failure_while_writing_leaves_no_change_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configuration: dict[str, str], operation: str
) -> None:
    uri = _table(tmp_path, configuration)
    before = files_under(uri)
    writes = []
    original = Sinks.close

    def failing_close(self: Sinks) -> Any:
        original(self)  # every file of the operation is written ...
        writes.append(files_under(uri) - before)
        raise OSError("lost the connection")  # ... then it fails before committing

    monkeypatch.setattr(Sinks, "close", failing_close)
    table = DeltaTable(uri)
    with pytest.raises(OSError, match="lost the connection"):
        if operation == "delete":
            table.delete("v % 3 = 0")
        elif operation == "update":
            table.update({"v": "v + 1"}, predicate="v % 3 = 0")
        else:
            _upsert(table, 0, [0, 2, 100])
    assert writes and writes[0]  # something was written before the failure
    assert files_under(uri) == before and latest_version(uri) == 0 and table.version() == 0
