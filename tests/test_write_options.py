"""Delta's write options through ``write_table`` (the rules the Spark writer shares): schema
evolution and its errors, partial overwrites, idempotent writes, and failures that leave nothing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, RemoveFile, SetTransaction
from replay.protocol.errors import ConcurrentModificationError, DeltaError
from replay.protocol.sql_predicate import PredicateError, parse_predicate
from replay.protocol.table_properties import InvalidTablePropertyError
from replay.txn.constraint_checks import InvariantViolationError
from replay.txn.data_writer import MAX_BATCH_ROWS, MIN_BATCH_ROWS, PAGE_BYTES, write_batch_rows, write_batches
from replay.txn.schema_merge import SchemaMismatchError
from replay.txn.write import delta_schema, write_table
from replay.txn.write_commit import commit_write
from replay.txn.write_plan import InvalidWriteOptionError, WriteOptions, plan_write


def rows(path: Path | str, *columns: str) -> list[tuple[Any, ...]]:
    table = DeltaLog.for_table(str(path)).snapshot().to_arrow()
    names = list(columns) or table.column_names
    return sorted(tuple(row[c] for c in names) for row in table.select(names).to_pylist())


def commit_info(path: Path, version: int) -> dict[str, Any]:
    first = (path / "_delta_log" / f"{version:020d}.json").read_bytes().splitlines()[0]
    return orjson.loads(first)["commitInfo"]


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


# -- predicates ------------------------------------------------------------------------------------
def test_predicates_follow_sql_semantics() -> None:
    table = pa.table(
        {
            "p": ["a", "b", None],
            "n": pa.array([1, 2, None], pa.int32()),
            "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 2, 1), None]),
        }
    )

    def matching(text: str) -> list[Any]:
        return parse_predicate(text).resolve(table.column_names).matching(table)["p"].to_pylist()

    assert matching("p = 'a' OR n >= 2") == ["a", "b"]
    assert matching("P IN ('a', 'b') AND NOT n = 1") == ["b"]
    assert matching("d >= '2024-01-15'") == ["b"]  # the string is cast to the column's type
    assert matching("d = DATE '2024-01-01'") == ["a"]
    assert matching("`p` IS NULL") == [None]
    assert matching("p <=> NULL") == [None]
    assert matching("n BETWEEN 2 AND 5") == ["b"]
    assert matching("p NOT IN ('a', NULL)") == []  # never true with a NULL in the list
    violating = parse_predicate("p = 'a'").resolve(["p"]).violating(table.select(["p"]))
    assert violating["p"].to_pylist() == ["b", None]  # null is not true
    with pytest.raises(PredicateError, match=r"Cannot parse the predicate 'p = ': expected a column"):
        parse_predicate("p = ")
    with pytest.raises(PredicateError, match=r"Cannot resolve column 'x' of the predicate 'x = 1'"):
        parse_predicate("x = 1").resolve(["p"])


# -- schema ----------------------------------------------------------------------------------------
def test_merge_schema_adds_columns_and_widens_and_reports_incompatible_types(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": pa.array([1], pa.int64()), "b": pa.array([1], pa.int8())}))
    two = pa.table({"id": pa.array([2], pa.int64()), "b": pa.array([300], pa.int32()), "new": ["x"]})
    with pytest.raises(SchemaMismatchError, match=r"_LEGACY_ERROR_TEMP_DELTA_0007"):
        write_table(path, two.select(["id", "new"]))
    assert write_table(path, two, merge_schema=True) == 1
    schema = DeltaLog.for_table(path).snapshot().schema
    assert [(f.name, f.type.to_json_value()) for f in schema.fields] == [
        ("id", "long"),
        ("b", "integer"),  # byte widened to integer, as Delta allows
        ("new", "string"),
    ]
    assert rows(path) == [(1, 1, None), (2, 300, "x")]
    bad = pa.table({"id": ["not a number"]})
    with pytest.raises(ValueError, match=r"Column id cannot be written to table .* as int64"):
        write_table(path, bad)  # Python writes cast like SQL inserts: the value does not cast
    log = DeltaLog.for_table(path)
    strict = WriteOptions(merge_schema=True)  # DataFrame writes (Spark) do not cast
    with pytest.raises(SchemaMismatchError) as error:
        plan_write(log.io, log.snapshot(), delta_schema(bad.schema), strict)
    assert str(error.value) == (
        "[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields 'id' and 'id'. "
        "[DELTA_MERGE_INCOMPATIBLE_DATATYPE] Failed to merge incompatible data types LongType and StringType"
    )
    assert log.latest_version() == 1
    assert len(data_files(tmp_path)) == 2


def test_overwrite_schema_replaces_schema_and_partitioning(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    replacement = pa.table({"key": ["k"], "value": [1.5]})
    with pytest.raises(SchemaMismatchError, match=r"(?s)overwriteSchema.*replaceWhere"):
        write_table(path, replacement, mode="overwrite")
    assert write_table(path, replacement, mode="overwrite", overwrite_schema=True, partition_by=["key"]) == 1
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.schema.field_names == ["key", "value"]
    assert snapshot.partition_columns == ["key"]
    assert rows(path) == [("k", 1.5)]
    with pytest.raises(
        InvalidWriteOptionError, match="DELTA_OVERWRITE_SCHEMA_WITH_DYNAMIC_PARTITION_OVERWRITE"
    ):
        write_table(
            path, replacement, mode="overwrite", overwrite_schema=True, partition_overwrite_mode="dynamic"
        )


def test_new_tables_check_partitioning_and_table_properties(tmp_path: Path) -> None:
    data = pa.table({"id": [1], "p": ["a"]})
    with pytest.raises(SchemaMismatchError, match=r"DELTA_PARTITION_COLUMN_NOT_FOUND\] Partition column q"):
        write_table(str(tmp_path / "a"), data, partition_by=["q"])
    with pytest.raises(SchemaMismatchError, match="DELTA_NON_PARTITION_COLUMN_ABSENT"):
        write_table(str(tmp_path / "b"), data, partition_by=["id", "p"])
    with pytest.raises(InvalidTablePropertyError, match=r"delta.checkpointInterval: must be positive"):
        write_table(str(tmp_path / "c"), data, configuration={"delta.checkpointInterval": "0"})
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.json"))
    write_table(str(tmp_path / "d"), data, partition_by=["P"], configuration={"delta.appendonly": "true"})
    metadata = DeltaLog.for_table(str(tmp_path / "d")).snapshot().metadata
    assert metadata.partition_columns == ["p"]  # resolved case-insensitively
    assert metadata.configuration == {"delta.appendOnly": "true"}  # Delta's spelling


# -- partial overwrites ------------------------------------------------------------------------------
def partitioned(path: Path) -> None:
    data = pa.table({"id": [1, 2, 3], "p": ["a", "b", "c"]})
    write_table(str(path), data, partition_by=["p"], configuration={"delta.enableChangeDataFeed": "true"})


def test_replace_where_replaces_the_selected_partitions_only(tmp_path: Path) -> None:
    partitioned(tmp_path)
    path = str(tmp_path)
    new = pa.table({"id": [10, 20], "p": ["a", "b"]})
    assert write_table(path, new, mode="overwrite", replace_where="p IN ('a', 'b')") == 1
    assert rows(path, "id", "p") == [(3, "c"), (10, "a"), (20, "b")]
    info = commit_info(tmp_path, 1)
    assert info["operationParameters"]["predicate"] == "p IN ('a', 'b')"
    assert info["isBlindAppend"] is False
    with pytest.raises(InvariantViolationError) as error:
        write_table(path, pa.table({"id": [4], "p": ["c"]}), mode="overwrite", replace_where="p = 'a'")
    assert str(error.value) == (
        "[DELTA_REPLACE_WHERE_MISMATCH] Written data does not conform to partial table overwrite condition "
        "or constraint 'p = 'a''.\n[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint "
        "EXPRESSION(p = 'a') violated by row with values:\n - p : c"
    )
    with pytest.raises(SchemaMismatchError) as data_column:
        write_table(path, new, mode="overwrite", replace_where="id > 1")
    assert str(data_column.value).startswith(
        "[DELTA_NON_PARTITION_COLUMN_REFERENCE] Predicate references non-partition column 'id'. "
        "Only the partition columns may be referenced: [p]"
    )
    # append mode ignores replaceWhere, as Delta does
    assert write_table(path, pa.table({"id": [5], "p": ["c"]}), replace_where="p = 'a'") == 2
    assert DeltaLog.for_table(path).latest_version() == 2
    assert data_files(tmp_path) == {a.path for a in _all_adds(tmp_path)}  # no file of a failed write
    changes = table_changes(DeltaLog.for_table(path), starting_version=1, ending_version=1)
    assert sorted(zip(changes["_change_type"].to_pylist(), changes["id"].to_pylist(), strict=True)) == [
        ("delete", 1),
        ("delete", 2),
        ("insert", 10),
        ("insert", 20),
    ]


def _all_adds(path: Path) -> list[AddFile]:
    log = DeltaLog.for_table(str(path))
    return [a for v in range(log.latest_version() + 1) for a in log.read_version(v) if isinstance(a, AddFile)]


def test_dynamic_partition_overwrite_replaces_the_partitions_written(tmp_path: Path) -> None:
    partitioned(tmp_path)
    path = str(tmp_path)
    new = pa.table({"id": [11, 12], "p": ["a", "d"]})
    with pytest.raises(InvalidWriteOptionError, match="DELTA_REPLACE_WHERE_WITH_DYNAMIC_PARTITION_OVERWRITE"):
        write_table(path, new, mode="overwrite", partition_overwrite_mode="dynamic", replace_where="p = 'a'")
    assert write_table(path, new, mode="overwrite", partition_overwrite_mode="dynamic") == 1
    assert rows(path, "id", "p") == [(2, "b"), (3, "c"), (11, "a"), (12, "d")]
    removed = [a for a in DeltaLog.for_table(path).read_version(1) if isinstance(a, RemoveFile)]
    assert [r.partition_values for r in removed] == [{"p": "a"}]


def test_partial_overwrites_conflict_only_with_appends_to_their_partitions(tmp_path: Path) -> None:
    partitioned(tmp_path)
    path = str(tmp_path)
    log = DeltaLog.for_table(path)
    snapshot = log.snapshot()

    def planned(replace_where: str) -> Any:
        data = pa.table({"id": [7], "p": ["a"]})
        options = WriteOptions(mode="overwrite", replace_where=replace_where)
        plan = plan_write(log.io, snapshot, delta_schema(data.schema), options)
        return plan, write_batches(plan.spec, [data])

    other_plan, other_files = planned("p = 'a'")
    same_plan, same_files = planned("p = 'a'")
    write_table(path, pa.table({"id": [8], "p": ["b"]}))  # version 1: another partition
    assert commit_write(log.io, other_plan, other_files) == 2
    write_table(path, pa.table({"id": [9], "p": ["a"]}))  # version 3
    with pytest.raises(ConcurrentModificationError) as error:
        commit_write(log.io, same_plan, same_files)
    assert str(error.value).startswith("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were")
    assert error.value.winning_version == 2  # the first overwrite of partition a already conflicts


# -- idempotent writes and failures -----------------------------------------------------------------
def test_idempotent_writes_skip_a_committed_version(tmp_path: Path) -> None:
    path = str(tmp_path)
    data = pa.table({"id": [1]})
    assert write_table(path, data, txn_app_id="job", txn_version=3, user_metadata="nightly") == 0
    assert write_table(path, data, txn_app_id="job", txn_version=3) is None
    assert write_table(path, data, txn_app_id="job", txn_version=2) is None
    assert write_table(path, data, txn_app_id="job", txn_version=4) == 1
    assert write_table(path, data, txn_app_id="other", txn_version=0) == 2
    assert rows(path) == [(1,), (1,), (1,)]
    assert DeltaLog.for_table(path).snapshot().set_transactions == {"job": 4, "other": 0}
    txn = next(a for a in DeltaLog.for_table(path).read_version(0) if isinstance(a, SetTransaction))
    assert (txn.app_id, txn.version) == ("job", 3) and txn.last_updated
    assert commit_info(tmp_path, 0)["userMetadata"] == "nightly"
    assert len(data_files(tmp_path)) == 3  # skipped writes leave no files
    with pytest.raises(InvalidWriteOptionError) as error:
        write_table(path, data, txn_app_id="job")
    assert str(error.value) == (
        "[DELTA_INVALID_IDEMPOTENT_WRITES_OPTIONS] Invalid options for idempotent Dataframe writes: "
        "Both txnVersion and txnAppId must be specified for idempotent data writes"
    )


def test_a_failed_write_leaves_no_version_and_no_files(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    before = data_files(tmp_path)
    with pytest.raises(InvariantViolationError, match="DELTA_REPLACE_WHERE_MISMATCH"):
        many = pa.table({"id": list(range(100)), "p": ["a"] * 99 + ["z"]})
        write_table(path, many, mode="overwrite", replace_where="p = 'a'", max_rows_per_file=10)
    assert data_files(tmp_path) == before
    from replay.txn import write as write_module

    real = write_module.commit_write

    def losing_commit(*args: Any, **kwargs: Any) -> Any:
        write_module.commit_write = real
        write_table(path, pa.table({"id": [2], "p": ["a"]}))  # a concurrent append wins first
        return real(*args, **kwargs)

    write_module.commit_write = losing_commit
    try:
        with pytest.raises(ConcurrentModificationError, match="ConcurrentAppendException"):
            write_table(path, pa.table({"id": [3], "p": ["b"]}), mode="overwrite")
    finally:
        write_module.commit_write = real
    assert DeltaLog.for_table(path).latest_version() == 1
    assert len(data_files(tmp_path)) == 2  # the winner's file and the first one; the loser's is gone
    assert rows(path, "id") == [(1,), (2,)]


def test_append_only_tables_refuse_overwrites_before_writing(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1]}), configuration={"delta.appendOnly": "true"})
    with pytest.raises(DeltaError, match="only allow appends"):
        write_table(path, pa.table({"id": [2]}), mode="overwrite")
    assert len(data_files(tmp_path)) == 1


def test_deletion_vector_tables_are_appended_and_overwritten(golden_root: Path, tmp_path: Path) -> None:
    import shutil

    path = tmp_path / "dv"
    shutil.copytree(golden_root / "dat/deletion_vectors/delta", path)
    columns = ["letter", "int", "date"]
    assert rows(path, *columns) == [("b", 228, dt.date(1978, 12, 1))]  # the DV hides the others
    write_table(str(path), pa.table({"letter": ["z"], "int": [1], "date": [dt.date(2024, 1, 1)]}))
    expected = [("b", 228, dt.date(1978, 12, 1)), ("z", 1, dt.date(2024, 1, 1))]
    assert rows(path, *columns) == expected
    version = write_table(
        str(path), pa.table({"letter": ["y"], "int": [2], "date": [None]}), mode="overwrite"
    )
    removed = [a for a in DeltaLog.for_table(str(path)).read_version(version) if isinstance(a, RemoveFile)]
    assert sum(r.deletion_vector is not None for r in removed) == 1  # removed with its deletion vector
    assert rows(path, *columns) == [("y", 2, None)]


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"id": pa.array(range(10), pa.int64())}, MAX_BATCH_ROWS),  # 8 bytes a row: the cap
        ({"s": pa.array(["x" * 200] * 10)}, PAGE_BYTES // 204),  # 200 bytes and an offset a row
        ({"s": pa.array(["x" * 5000] * 10), "id": pa.array(range(10))}, MIN_BATCH_ROWS),  # the floor
        ({"id": pa.array([], pa.int64())}, MIN_BATCH_ROWS),
    ],
)
def test_the_writer_encodes_about_a_page_of_the_widest_column_per_step(
    columns: dict[str, pa.Array], expected: int
) -> None:
    assert write_batch_rows(pa.table(columns)) == expected


def test_wide_and_narrow_columns_round_trip_through_written_files(tmp_path: Path) -> None:
    rows = 70_000  # more than one step of the narrow columns, many pages of the wide one
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "wide": pa.array([f"{i:0>300}" for i in range(rows)]),
            "few": pa.array([f"k{i % 7}" for i in range(rows)]),
            "maybe": pa.array([None if i % 3 else float(i) for i in range(rows)]),
        }
    )
    write_table(str(tmp_path / "t"), table)
    assert DeltaLog.for_table(str(tmp_path / "t")).snapshot().to_arrow().sort_by("id").equals(table)


def test_randomized_file_prefixes_place_data_files_as_delta_does(tmp_path: Path) -> None:
    """``delta.randomizeFilePrefixes``: data files go under ``delta.randomPrefixLength`` random
    characters instead of partition directories; the partition values stay in the log."""
    import re

    uri = str(tmp_path / "t")
    settings = {"delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "3"}
    data = pa.table({"id": [1, 2, 3], "p": ["a", "b", "a"]})
    write_table(uri, data, partition_by=["p"], configuration=settings)
    adds = _all_adds(tmp_path / "t")
    assert len(adds) == 2
    assert all(re.fullmatch(r"[A-Za-z0-9]{3}/part-[^/]+\.parquet", add.path) for add in adds)
    assert sorted(add.partition_values["p"] for add in adds) == ["a", "b"]  # type: ignore[index]
    assert rows(tmp_path / "t", "id", "p") == [(1, "a"), (2, "b"), (3, "a")]
    plain = str(tmp_path / "plain")
    write_table(plain, data, partition_by=["p"])
    assert all(add.path.startswith("p=") for add in _all_adds(tmp_path / "plain"))


@pytest.mark.parametrize("partitioned", [False, True])
def test_files_roll_over_at_the_target_size(tmp_path: Path, partitioned: bool) -> None:
    """A file closes once its row groups reach ``target_file_size`` bytes: every file but the last
    of a partition has at least that many, and none twice as many; the rows are all there."""
    import numpy as np
    from deltalake import DeltaTable as RustTable

    from replay import DeltaTable, write_deltalake

    rows = 400_000
    generator = np.random.default_rng(7)
    data = pa.table(
        {
            "id": pa.array(np.arange(rows), pa.int64()),
            "x": pa.array(generator.random(rows)),
            "p": pa.array(np.arange(rows) % 2, pa.int32()),
        }
    )
    uri, target = str(tmp_path / "t"), 1 << 18
    write_table(uri, data, partition_by=["p"] if partitioned else None, target_file_size=target)
    files = DeltaTable(uri).get_add_actions(flatten=True).to_pylist()
    by_partition: dict[object, list[int]] = {}
    for file in files:
        by_partition.setdefault(file.get("partition.p"), []).append(file["size_bytes"])
    for sizes in by_partition.values():
        sizes.sort()
        assert len(sizes) > 2 and all(target <= size < 2 * target for size in sizes[1:]), sizes
    assert DeltaTable(uri).count() == rows == RustTable(uri).count()
    write_deltalake(tmp_path / "default", data)  # deltalake's 100 MiB: one file
    assert len(DeltaTable(tmp_path / "default").files()) == 1
