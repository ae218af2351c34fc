"""Cross-check: tables written by delta-rs give the same change rows as ``DeltaTable.load_cdf``.

delta-rs stamps change rows with ``commitInfo.timestamp`` while Delta (and this library) use the
commit file's modification time, so each commit file's mtime is set to its commitInfo timestamp
first; then every column, ``_commit_timestamp`` included, must agree.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.cdc import table_changes
from replay.delta_log import DeltaLog

CDF_ON = {"delta.enableChangeDataFeed": "true"}


def people(ids: range, city: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "name": [f"n{i}" for i in ids],
            "score": pa.array([i * 1.5 for i in ids], pa.float64()),
            "city": [city if i % 2 else f"{city}-b" for i in ids],
        }
    )


def build(path: Path, partition_by: list[str] | None) -> int:
    """append, delete, update, merge, checkpoint, append, full overwrite, delete: returns latest version."""
    uri = str(path)
    write_deltalake(uri, people(range(0, 6), "ams"), partition_by=partition_by, configuration=CDF_ON)  # v0
    write_deltalake(uri, people(range(6, 10), "ber"), mode="append")  # v1
    table = DeltaTable(uri)
    table.delete("id = 2 OR id = 7")  # v2
    table.update(updates={"score": "score + 100"}, predicate="id >= 8")  # v3
    source = people(range(4, 12), "cph")
    (
        table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update(updates={"name": "s.name", "city": "s.city"})
        .when_not_matched_insert_all()
        .execute()
    )  # v4
    table.create_checkpoint()
    write_deltalake(uri, people(range(20, 22), "dub"), mode="append")  # v5
    write_deltalake(uri, people(range(30, 33), "edi"), mode="overwrite")  # v6
    DeltaTable(uri).delete("id = 31")  # v7
    align_commit_times(path)
    return DeltaTable(uri).version()


def align_commit_times(path: Path) -> None:
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_bytes().splitlines():
            info = orjson.loads(line).get("commitInfo")
            if info is not None:
                os.utime(commit, (info["timestamp"] / 1000, info["timestamp"] / 1000))


def normalised(table: pa.Table, schema: pa.Schema) -> list[tuple[object, ...]]:
    columns = {name: table.column(name).cast(schema.field(name).type) for name in schema.names}
    return sorted((tuple(row.values()) for row in pa.table(columns).to_pylist()), key=repr)


@pytest.fixture(scope="module", params=[None, ["city"]], ids=["flat", "partitioned"])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("deltars") / "table"
    return path, build(path, request.param)


@pytest.mark.parametrize(("start", "end"), [(0, None), (1, 3), (2, 2), (3, 5), (4, 4), (5, None), (6, 7)])
def test_same_change_rows_as_delta_rs(written: tuple[Path, int], start: int, end: int | None) -> None:
    path, latest = written
    assert latest == 7
    ours = table_changes(DeltaLog.for_table(str(path)), starting_version=start, ending_version=end)
    reader = DeltaTable(str(path)).load_cdf(starting_version=start, ending_version=end)
    theirs = pa.table(reader.read_all())
    assert sorted(theirs.column_names) == sorted(ours.column_names)
    assert ours.num_rows > 0
    assert normalised(ours, ours.schema) == normalised(theirs, ours.schema)


def test_every_change_type_is_covered(written: tuple[Path, int]) -> None:
    path, _ = written
    changes = table_changes(DeltaLog.for_table(str(path)), starting_version=0)
    assert set(changes["_change_type"].to_pylist()) == {
        "insert",
        "delete",
        "update_preimage",
        "update_postimage",
    }
