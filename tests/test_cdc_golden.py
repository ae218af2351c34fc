"""Every golden table with a change data feed: the expected change rows, and delta-rs agreement.

Expected rows are the ones Delta Kernel's CDF integration tests assert for these tables (same
versions, same rows; ``_commit_timestamp`` left out there because git does not keep mtimes).
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from tests.paths import GOLDEN_ROOT as GOLDEN

INS, DEL, PRE, POST = "insert", "delete", "update_preimage", "update_postimage"

CDF_TABLE = [
    (1, "Steve", "2023-12-22", INS, 0),
    (2, "Bob", "2023-12-23", INS, 0),
    (3, "Dave", "2023-12-23", INS, 0),
    (4, "Kate", "2023-12-23", INS, 0),
    (5, "Emily", "2023-12-24", INS, 0),
    (6, "Carl", "2023-12-24", INS, 0),
    (7, "Dennis", "2023-12-24", INS, 0),
    (8, "Claire", "2023-12-25", INS, 0),
    (9, "Ada", "2023-12-25", INS, 0),
    (10, "Borb", "2023-12-25", INS, 0),
    (3, "Dave", "2023-12-22", POST, 1),
    (3, "Dave", "2023-12-23", PRE, 1),
    (4, "Kate", "2023-12-22", POST, 1),
    (4, "Kate", "2023-12-23", PRE, 1),
    (2, "Bob", "2023-12-22", POST, 1),
    (2, "Bob", "2023-12-23", PRE, 1),
    (7, "Dennis", "2023-12-24", PRE, 2),
    (7, "Dennis", "2023-12-29", POST, 2),
    (5, "Emily", "2023-12-24", PRE, 2),
    (5, "Emily", "2023-12-29", POST, 2),
    (6, "Carl", "2023-12-24", PRE, 2),
    (6, "Carl", "2023-12-29", POST, 2),
    (7, "Dennis", "2023-12-29", DEL, 3),
]

NON_PARTITIONED = [
    (1, "Steve", "2024-04-14", 1, INS, 0),
    (2, "Bob", "2024-04-15", 1, INS, 0),
    (3, "Dave", "2024-04-15", 2, INS, 0),
    (4, "Kate", "2024-04-15", 3, INS, 0),
    (5, "Emily", "2024-04-16", 4, INS, 0),
    (6, "Carl", "2024-04-16", 5, INS, 0),
    (7, "Dennis", "2024-04-16", 6, INS, 0),
    (8, "Claire", "2024-04-17", 7, INS, 0),
    (9, "Ada", "2024-04-17", 8, INS, 0),
    (10, "Borb", "2024-04-17", 99999999999999999, INS, 0),
    (3, "Dave", "2024-04-15", 2, PRE, 1),
    (3, "Dave", "2024-04-14", 2, POST, 1),
    (4, "Kate", "2024-04-15", 3, PRE, 1),
    (4, "Kate", "2024-04-14", 3, POST, 1),
    (2, "Bob", "2024-04-15", 1, PRE, 1),
    (2, "Bob", "2024-04-14", 1, POST, 1),
    (7, "Dennis", "2024-04-16", 6, PRE, 2),
    (7, "Dennis", "2024-04-14", 6, POST, 2),
    (5, "Emily", "2024-04-16", 4, PRE, 2),
    (5, "Emily", "2024-04-14", 4, POST, 2),
    (6, "Carl", "2024-04-16", 5, PRE, 2),
    (6, "Carl", "2024-04-14", 5, POST, 2),
    (7, "Dennis", "2024-04-14", 6, DEL, 3),
    (1, "Alex", "2024-04-14", 1, INS, 4),
    (2, "Alan", "2024-04-15", 1, INS, 4),
]

CDC_AND_DVS = [
    (1, "initial", INS, 0),
    (2, "insert1", INS, 1),
    (3, "insert1-delete1", INS, 1),
    (4, "insert1-delete2", INS, 1),
    (5, "insert1-delete2", INS, 1),
    (3, "insert1-delete1", DEL, 2),
    (3, "insert1-delete1", INS, 4),
    (4, "insert1-delete2", DEL, 5),
    (5, "insert1-delete2", DEL, 5),
    (4, "insert1-delete2", INS, 7),
    (5, "insert2", INS, 8),
    (1, "initial", PRE, 9),
    (1, "update1", POST, 9),
    (2, "insert1", PRE, 9),
    (2, "update1", POST, 9),
    (3, "insert1-delete1", PRE, 9),
    (3, "update1", POST, 9),
    (1, "update1", DEL, 10),
    (2, "update1", PRE, 12),
    (2, "update2", POST, 12),
    (6, "insert3", INS, 14),
    (7, "insert3", INS, 14),
    (8, "insert4", INS, 15),
    (9, "insert4", INS, 15),
    (8, "insert4", DEL, 16),
    (7, "insert3", DEL, 16),
    (10, "merge1-insert", INS, 18),
    (11, "merge1-insert", INS, 18),
    (9, "merge1-update", POST, 18),
    (9, "insert4", PRE, 18),
    (11, "merge1-insert", PRE, 20),
    (11, "", POST, 20),
    (12, "merge2-insert", INS, 22),
    (11, "", DEL, 22),
    (3, "update1", DEL, 24),
    (4, "insert1-delete2", DEL, 24),
    (5, "insert2", DEL, 24),
    (2, "update2", DEL, 24),
    (6, "insert3", DEL, 24),
    (9, "merge1-update", DEL, 24),
    (0, "new", INS, 25),
    (1, "after-large-delete", INS, 25),
    (2, "", INS, 25),
]

TEN_INSERTS = [(i, INS, 0) for i in range(10)]
DELETED_AT_1 = [(i, DEL, 1) for i in range(10)]
INSERTED_AT_2 = [(i, INS, 2) for i in range(20, 25)]
COLUMN_MAPPING_NAME = [
    (1, "Alice", 100.0, DEL, 4),
    (2, "Bob", 200.0, PRE, 2),
    (2, "Bob", 250.0, POST, 2),
    (4, "David", 400.0, INS, 3),
]
COLUMN_MAPPING_ID = [
    (2, "Frank", 250.0, PRE, 2),
    (2, "Frank", 275.0, POST, 2),
    (3, "Grace", 350.0, DEL, 4),
    (4, "Henry", 450.0, INS, 3),
]
STRUCT = {"field": 1, "field.one": 2}

# table, start, end, columns, expected rows
CASES: list[tuple[str, int, int | None, list[str], list[tuple[Any, ...]]]] = [
    ("cdf-table", 0, None, ["id", "name", "birthday"], CDF_TABLE),
    ("cdf-table-non-partitioned", 0, None, ["id", "name", "birthday", "long_field"], NON_PARTITIONED),
    ("compacted-log-files-table", 0, None, ["id", "comment"], CDC_AND_DVS),
    ("cdf-table-simple", 0, 0, ["id"], TEN_INSERTS),
    ("cdf-table-simple", 1, 1, ["id"], DELETED_AT_1),
    ("cdf-table-simple", 2, 2, ["id"], INSERTED_AT_2),
    ("cdf-table-simple", 0, 2, ["id"], [*TEN_INSERTS, *DELETED_AT_1, *INSERTED_AT_2]),
    ("cdf-table-delete-unconditional", 0, None, ["id"], [*TEN_INSERTS, *DELETED_AT_1]),
    ("cdf-table-delete-conditional-all-rows", 0, None, ["id"], [*TEN_INSERTS, *DELETED_AT_1]),
    ("cdf-table-delete-conditional-two-rows", 0, None, ["id"], [*TEN_INSERTS, (2, DEL, 1), (8, DEL, 1)]),
    (
        "cdf-table-backtick-column-names",
        0,
        None,
        ["id.num", "id.num`s", "struct_col"],
        [
            (2, 10, STRUCT, INS, 0),
            (4, 10, STRUCT, INS, 0),
            (1, 10, STRUCT, INS, 1),
            (3, 10, STRUCT, INS, 1),
            (5, 10, STRUCT, INS, 1),
        ],
    ),
    ("cdf-column-mapping-name-mode", 1, None, ["id", "name", "value"], COLUMN_MAPPING_NAME),
    ("cdf-column-mapping-name-mode-3-7", 1, None, ["id", "name", "value"], COLUMN_MAPPING_NAME),
    ("cdf-column-mapping-id-mode", 1, None, ["id", "name", "value"], COLUMN_MAPPING_ID),
]

DELTA_RS_READABLE = [
    "dat/cdf",
    "delta-rs/cdc_ict_table",
    "delta-rs/simple_table_with_cdc",
    "delta-spark-golden/commit-info-containing-arbitrary-operationParams-types",
    "kernel-rs/cdf-table",
    "kernel-rs/cdf-table-non-partitioned",
    "kernel-rs/compacted-log-files-table",
]
"""Golden CDF tables delta-rs can read (it refuses column mapping and %-escaped file names)."""


def change_rows(table: pa.Table, columns: list[str]) -> list[str]:
    names = [*columns, "_change_type", "_commit_version"]
    return sorted(repr(tuple(row.values())) for row in table.select(names).to_pylist())


def as_text(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


@pytest.mark.parametrize(
    ("name", "start", "end", "columns", "expected"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES]
)
def test_expected_change_rows(
    name: str, start: int, end: int | None, columns: list[str], expected: list[tuple[Any, ...]]
) -> None:
    delta_log = DeltaLog.for_table(str(GOLDEN / "kernel-rs" / name / "delta"))
    got = table_changes(delta_log, starting_version=start, ending_version=end)
    rows = [
        tuple(as_text(value) for value in row.values())
        for row in got.select([*columns, "_change_type", "_commit_version"]).to_pylist()
    ]
    assert sorted(rows, key=repr) == sorted(expected, key=repr)


def test_in_commit_timestamps_are_the_commit_timestamps() -> None:
    table = GOLDEN / "delta-rs/cdc_ict_table/delta"
    ict = {}
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_bytes().splitlines():
            info = orjson.loads(line).get("commitInfo")
            if info and "inCommitTimestamp" in info:
                ict[int(commit.name.split(".")[0])] = info["inCommitTimestamp"]
    got = table_changes(DeltaLog.for_table(str(table)), starting_version=1)
    seen = {
        version: int(ts.timestamp() * 1000)
        for version, ts in zip(
            got["_commit_version"].to_pylist(), got["_commit_timestamp"].to_pylist(), strict=True
        )
    }
    assert seen and all(seen[v] == ict[v] for v in seen)
    assert set(seen) == {1, 2, 3}


@pytest.mark.parametrize("name", DELTA_RS_READABLE)
def test_same_rows_as_delta_rs(name: str) -> None:
    """All columns but ``_commit_timestamp`` (delta-rs uses commitInfo times, Delta the file times)."""
    path = str(GOLDEN / name / "delta")
    ours = table_changes(DeltaLog.for_table(path), starting_version=0)
    theirs = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all())
    columns = [name for name in ours.column_names if name != "_commit_timestamp"]
    theirs = pa.table(
        {column: theirs.column(column).cast(ours.schema.field(column).type) for column in columns}
    )
    assert ours.num_rows > 0
    assert change_rows(ours, columns[:-2]) == change_rows(theirs, columns[:-2])


def test_checkpoint_continuation_table_reads_from_its_checkpoint() -> None:
    """``checkpoint-cdf-table`` lost commits 0-2; its change feed from version 3 still reads."""
    delta_log = DeltaLog.for_table(str(GOLDEN / "delta-rs/checkpoint-cdf-table/delta"))
    got = table_changes(delta_log, starting_version=3)
    assert sorted(got["_commit_version"].to_pylist()) == [3] + [4] * 4 + [5] * 8
    assert sorted(zip(got["id"].to_pylist(), got["_change_type"].to_pylist(), strict=True))[:3] == [
        (7, DEL),
        (11, INS),
        (11, PRE),
    ]
