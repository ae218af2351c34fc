"""Z-order: Delta's curve (range ids of equal-count ranges, bits interleaved), file statistics that
skip on every Z-order column, Delta's column checks, and delta-rs's result on the same input."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import DeltaLog, DeltaTable, write_table
from replay.maintenance import optimize_rewrite, zorder
from replay.maintenance.zorder import (
    ZOrderColumnError,
    as_keys,
    interleave_bits,
    range_bounds,
    range_ids,
    sortable,
)


# -- the curve ----------------------------------------------------------------------------------------
def reference_key(ids: list[int], bits: int) -> int:
    """Bits interleaved one by one, most significant first, column after column."""
    key = 0
    for bit in reversed(range(bits)):
        for value in ids:
            key = (key << 1) | ((value >> bit) & 1)
    return key


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda bits: st.tuples(
            st.just(bits),
            st.lists(
                st.lists(st.integers(0, (1 << bits) - 1), min_size=1, max_size=4),
                min_size=1,
                max_size=30,
            ).filter(lambda rows: len({len(r) for r in rows}) == 1),
        )
    )
)
def test_interleaved_keys_sort_as_the_bitwise_reference(case: tuple[int, list[list[int]]]) -> None:
    bits, rows = case
    columns = [np.array(column, dtype=np.uint32) for column in zip(*rows, strict=True)]
    keys = as_keys(interleave_bits(columns, bits))
    expected = [reference_key(row, bits) for row in rows]
    width = bits * len(columns)
    as_ints = [
        int.from_bytes(key.ljust(keys.dtype.itemsize, b"\0"), "big") >> (keys.dtype.itemsize * 8 - width)
        for key in keys
    ]
    assert as_ints == expected
    assert sorted(range(len(rows)), key=lambda i: (keys[i], i)) == sorted(
        range(len(rows)), key=lambda i: (expected[i], i)
    )


def test_range_ids_are_approximate_ranks_with_nulls_first() -> None:
    values = np.array([0, 1, 3, 15, 36, 99])
    bounds = range_bounds(values, 3)
    assert range_ids(values, np.ones(6, bool), bounds).tolist() == [0, 0, 1, 1, 2, 2]  # Delta's example
    skewed = np.concatenate([np.zeros(900), np.arange(100)])
    ids = range_ids(skewed, np.ones(skewed.size, bool), range_bounds(skewed, 10))
    assert np.all(np.diff(ids.astype(int)) >= 0) and ids.max() <= 9
    column = pa.chunked_array([pa.array(["pear", None, "apple", "fig"])])
    values, valid = sortable(column)
    assert valid.tolist() == [True, False, True, True]
    assert range_ids(values, valid, range_bounds(values[valid], 3)).tolist()[1] == 0
    for array in (
        pa.array([dt.date(2024, 1, 2), dt.date(2023, 5, 1)]),
        pa.array([dt.datetime(2024, 1, 2), dt.datetime(2023, 5, 1)], pa.timestamp("us", "UTC")),
        pa.array([True, False]),
        pa.array([2.5, -1.0]),
        pa.array([b"b", b"a"]),
    ):
        values, _ = sortable(array)
        assert values[0] > values[1], array.type


# -- skipping ------------------------------------------------------------------------------------------
def scattered(path: str, rows: int = 100_000, files: int = 16) -> None:
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            "x": rng.integers(0, 1_000_000, rows),  # a wide range ...
            "y": rng.integers(0, 1_000, rows),  # ... and a narrow one
            "payload": rng.random(rows),
        }
    )
    for index in range(files):
        write_table(path, table.slice(index * rows // files, rows // files))


def files_read(path: str, row_filter: list[tuple[str, str, int]]) -> tuple[int, int]:
    snapshot = DeltaLog.for_table(path).update()
    return snapshot.scan(row_filter).files().num_rows, snapshot.num_files


X_RANGE = [("x", ">=", 500_000), ("x", "<", 510_000)]
Y_RANGE = [("y", ">=", 500), ("y", "<", 510)]


def test_z_order_lets_a_filter_on_either_column_skip_most_files(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    scattered(ours)
    shutil.copytree(ours, theirs)
    expected = DeltaTable(ours).to_pyarrow_table().sort_by("x").sort_by("payload")
    assert files_read(ours, X_RANGE) == (16, 16) and files_read(ours, Y_RANGE) == (16, 16)
    total = sum(add.size for add in DeltaTable(ours).snapshot.files())
    target = total // 32
    table = DeltaTable(ours)
    metrics = table.optimize.z_order(["x", "y"], target_size=target)
    rust = deltalake.DeltaTable(theirs).optimize.z_order(["x", "y"], target_size=target)
    assert metrics["numFilesRemoved"] == 16 and metrics["numFilesAdded"] == 32  # Delta: size // target
    assert (metrics["plannerStrategy"], metrics["preserveInsertionOrder"]) == ("zOrder", False)
    assert list(metrics) == list(rust)
    x_files, count = files_read(ours, X_RANGE)
    y_files, _ = files_read(ours, Y_RANGE)
    # a 1% slice of either column opens a few files of the 32: each column got bits of the curve
    assert x_files <= count // 3 and y_files <= count // 3, (x_files, y_files)
    rust_x, rust_count = files_read(theirs, X_RANGE)
    rust_y, _ = files_read(theirs, Y_RANGE)
    # delta-rs interleaves the values' bytes: the wide column takes the curve, the narrow one
    # skips nothing; ranks weigh both columns alike
    assert rust_y == rust_count
    assert x_files + y_files < rust_x + rust_y
    both, _ = files_read(ours, [*X_RANGE[:1], ("x", "<", 520_000), ("y", "<", 20)])
    assert both <= min(x_files, y_files)
    after = DeltaTable(ours).to_pyarrow_table().sort_by("x").sort_by("payload")
    assert after.equals(expected)
    history = table.history(1)[0]
    assert history["operation"] == "OPTIMIZE"
    assert history["operationParameters"]["zOrderBy"] == '["x","y"]'
    sizes = [add.size for add in table.snapshot.files()]
    assert max(sizes) < 1.5 * min(sizes)  # equal stretches of the curve: files of equal size


def test_z_order_rewrites_every_file_of_the_selected_partitions(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for part in ("a", "b", "c"):
        write_table(
            path,
            pa.table({"p": [part] * 10, "k": range(10), "s": [f"v{i}" for i in range(10)]}),
            partition_by=["p"],
        )
    write_table(path, pa.table({"p": ["a"] * 5, "k": range(5), "s": ["w"] * 5}))
    table = DeltaTable(path)
    metrics = table.optimize.z_order(["s", "k"], partition_filters=[("p", "in", ["a", "b"])])
    # partition b has a single file: Z-ordering rewrites it all the same (Delta's rule)
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"], metrics["partitionsOptimized"]) == (3, 2, 2)
    assert metrics["totalConsideredFiles"] == 3
    assert table.to_pyarrow_table().num_rows == 35


def test_z_order_column_checks(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_table(
        path,
        pa.table({"p": [1], "a": [1], "b": ["x"], "tags": [["t"]]}),
        partition_by=["p"],
        configuration={"delta.dataSkippingNumIndexedCols": "1"},
    )
    optimizer = DeltaTable(path).optimize
    with pytest.raises(
        ZOrderColumnError, match=r"DELTA_ZORDERING_ON_PARTITION_COLUMN\] p is a partition column"
    ):
        optimizer.z_order(["p"])
    with pytest.raises(ZOrderColumnError, match=r"DELTA_ZORDERING_COLUMN_DOES_NOT_EXIST.*column c does not"):
        optimizer.z_order(["c"])
    with pytest.raises(
        ZOrderColumnError, match=r"DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS\] Z-Ordering on \[b\]"
    ):
        optimizer.z_order(["A", "b"])  # only the first data column has statistics
    relaxed = {"spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled": "false"}
    metrics = DeltaTable(path, conf=relaxed).optimize.z_order(["A", "b"])
    assert metrics["numFilesAdded"] == 1
    with pytest.raises(ZOrderColumnError, match="column tags of type ArrayType"):
        DeltaTable(path, conf=relaxed).optimize.z_order(["tags"])
    with pytest.raises(ZOrderColumnError, match="at least one column"):
        optimizer.z_order([])


def test_z_order_leaves_out_rows_deleted_by_deletion_vectors(tmp_path: Path) -> None:
    from replay.data.deletion_vector_writer import DeletionVectorWriter

    path = str(tmp_path / "t")
    for index in range(3):
        ids = list(range(index * 10, index * 10 + 10))
        write_table(
            path, pa.table({"id": ids, "v": ids}), configuration={"delta.enableDeletionVectors": "true"}
        )
    log = DeltaLog.for_table(path)
    snapshot = log.update()
    with DeletionVectorWriter.for_table(path, snapshot.metadata.configuration) as writer:
        actions = [a for f in snapshot.files() for a in writer.update(f, [0, 1]).actions()]
    log.commit(actions, operation="DELETE", read_version=snapshot.version)
    expected = sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist())
    assert len(expected) == 24
    metrics = DeltaTable(path).optimize.z_order(["v"])
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (3, 1)
    files = DeltaLog.for_table(path).update().files()
    assert files[0].deletion_vector is None and files[0].num_records == 24
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == expected


# -- the writers' buffer budget ------------------------------------------------------------------------
def _row_groups_after_z_order(path: str, budget: int, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Z-order ``path`` into four files with open writers sharing ``budget`` bytes; the row groups
    (rows) of each file written."""
    plain = zorder.ZOrderRewriter.for_snapshot

    def with_budget(*args: Any, **kwargs: Any) -> zorder.ZOrderRewriter:
        return dataclasses.replace(plain(*args, **kwargs), buffer_bytes=budget)

    monkeypatch.setattr(zorder.ZOrderRewriter, "for_snapshot", with_budget)
    table = DeltaTable(path)
    total = sum(add.size for add in table.snapshot.files())
    metrics = table.optimize.z_order(["x", "y"], target_size=total // 4)
    assert metrics["numFilesAdded"] == 4
    groups = []
    for uri in table.file_uris():
        metadata = pq.ParquetFile(uri.removeprefix("file://")).metadata
        groups.append([metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)])
    assert sum(map(sum, groups)) == ROWS_AT_BUDGET
    return groups


ROWS_AT_BUDGET = 400_000
"""More rows than one batch of a rewrite: the rows reach the writers as slices of several batches."""


@pytest.fixture
def z_order_table(tmp_path: Path) -> tuple[str, int]:
    """A table of :data:`ROWS_AT_BUDGET` rows in four files, and the bytes of its rows in memory."""
    path = str(tmp_path / "t")
    scattered(path, rows=ROWS_AT_BUDGET, files=4)
    assert ROWS_AT_BUDGET > optimize_rewrite.BATCH_ROWS
    return path, DeltaTable(path).to_pyarrow_table().nbytes


def test_rows_within_the_budget_are_encoded_once_per_file(
    z_order_table: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # each slice holds a share of its batch: counted whole, the slices would pass the budget at
    # once and be encoded early, batch after batch
    path, nbytes = z_order_table
    groups = _row_groups_after_z_order(path, nbytes * 5 // 4, monkeypatch)
    assert all(len(each) == 1 for each in groups), groups


def test_rows_beyond_the_budget_are_encoded_early(
    z_order_table: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, nbytes = z_order_table
    groups = _row_groups_after_z_order(path, nbytes // 4, monkeypatch)
    assert any(len(each) > 1 for each in groups), groups
