"""The data writer's row groups: batches are buffered until their rows, or their own bytes, reach a
row group's, whether they are whole tables or slices of a larger one (Z-order writes slices)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.txn import data_writer
from replay.txn.data_writer import DataFileWriter
from replay.txn.write_spec import FileWriteSpec

ROWS = 1000


def _rows(count: int, seed: int) -> pa.Table:
    generator = np.random.default_rng(seed)
    return pa.table({"id": np.arange(count, dtype=np.int64), "value": generator.random(count)})


def _row_groups(tmp_path: Path, batches: list[pa.Table]) -> list[int]:
    writer = DataFileWriter(FileWriteSpec(str(tmp_path), batches[0].schema))
    for batch in batches:
        writer.write(batch)
    (written,) = writer.close()
    metadata = pq.ParquetFile(tmp_path / written.add.path).metadata
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


@pytest.fixture
def three_batches_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row group's bytes are those of two and a half batches of :data:`ROWS` rows."""
    monkeypatch.setattr(data_writer, "ROW_GROUP_BYTES", _rows(ROWS, 0).nbytes * 5 // 2)


@pytest.mark.usefixtures("three_batches_a_group")
def test_whole_batches_fill_a_row_group_by_their_bytes(tmp_path: Path) -> None:
    batches = [_rows(ROWS, seed) for seed in range(9)]
    assert _row_groups(tmp_path, batches) == [3 * ROWS] * 3


@pytest.mark.usefixtures("three_batches_a_group")
def test_slices_count_their_own_bytes_not_their_parents(tmp_path: Path) -> None:
    parent = _rows(9 * ROWS, 1)
    assert parent.get_total_buffer_size() >= data_writer.ROW_GROUP_BYTES  # each slice pins it all
    slices = [parent.slice(start, ROWS) for start in range(0, parent.num_rows, ROWS)]
    assert _row_groups(tmp_path, slices) == [3 * ROWS] * 3


def test_buffered_bytes_are_the_rows_own_bytes(tmp_path: Path) -> None:
    parent = _rows(4 * ROWS, 2)
    writer = DataFileWriter(FileWriteSpec(str(tmp_path), parent.schema))
    writer.write(parent.slice(0, ROWS))
    assert writer.buffered_bytes == parent.slice(0, ROWS).nbytes
    writer.write(parent.slice(ROWS, 2 * ROWS))
    assert writer.buffered_bytes == parent.slice(0, 3 * ROWS).nbytes
    writer.discard()
