"""Reading the deletion vectors of many files: one request per DV file for a scan and for DML on
a table with deletion vectors, the same rows as reading them one by one, Delta's errors, and a
read-ahead that never travels with a pickled reader."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import DeltaTable
from replay.data import deletion_vector_reads
from replay.data.deletion_vector_errors import CorruptDeletionVectorError, DeletionVectorNotFoundError
from replay.data.deletion_vector_reads import read_deletion_vectors
from replay.data.deletion_vectors import dv_file_path, read_deletion_vector
from replay.data.reader import TableReader
from tests.dml_cases import DV_CDF, ROWS, our_changes, our_rows, rust_changes, rust_rows, twin_tables

FILES_WITH_DVS = 6
"""ROWS (13) in files of 2 rows, after a DELETE of half the rows: one file lost both its rows, the
other six keep a deletion vector each, all in one DV file."""


class _CountingFileSystem:
    """A real filesystem whose ``cat_file`` calls are counted per path."""

    def __init__(self, fs: Any, counts: Counter[str]) -> None:
        self._fs = fs
        self._counts = counts

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> bytes:
        self._counts[path.rsplit("/", 1)[-1]] += 1
        return bytes(self._fs.cat_file(path, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


@pytest.fixture
def dv_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Reads of DV files, by file name, through either way of reading them."""
    counts: Counter[str] = Counter()
    from replay.data import deletion_vectors

    for module in (deletion_vector_reads, deletion_vectors):
        real = module.open_filesystem

        def counting(uri: str, conf: Any = None, real: Any = real) -> tuple[Any, str]:
            fs, path = real(uri, conf)
            return _CountingFileSystem(fs, counts), path

        monkeypatch.setattr(module, "open_filesystem", counting)
    yield counts


def _dv_table(tmp_path: Path) -> tuple[str, str]:
    """A DV table (ours and a copy) whose every file lost a row to one DELETE: one DV file."""
    ours, rust = twin_tables(tmp_path, ROWS, configuration=DV_CDF, max_rows_per_file=2)
    for uri in (ours, rust):
        DeltaTable(uri).delete("id % 2 = 0 OR id IS NULL")
    return ours, rust


def _dv_files(uri: str) -> set[str]:
    table = DeltaTable(uri)
    return {
        str(dv_file_path(f.deletion_vector, uri)).rsplit("/", 1)[-1]
        for f in table.snapshot.files()
        if f.deletion_vector is not None
    }


def test_a_scan_reads_each_dv_file_once(tmp_path: Path, dv_reads: Counter[str]) -> None:
    ours, _ = _dv_table(tmp_path)
    (dv_file,) = _dv_files(ours)
    assert sum(f.deletion_vector is not None for f in DeltaTable(ours).snapshot.files()) == FILES_WITH_DVS
    dv_reads.clear()
    rows = our_rows(ours)
    assert dv_reads == Counter({dv_file: 1})
    assert rows == rust_rows(ours)
    assert sorted(r["id"] for r in rows) == [1, 3, 5, 7, 9, 11]


def test_dml_on_a_dv_table_reads_each_dv_file_once(tmp_path: Path, dv_reads: Counter[str]) -> None:
    ours, rust = _dv_table(tmp_path)
    (dv_file,) = _dv_files(ours)
    dv_reads.clear()
    metrics = DeltaTable(ours).delete("id > 4")
    assert dv_reads == Counter({dv_file: 1})  # neither a request per file nor the writer's re-read
    assert metrics["numDeletedRows"] == 4
    DeltaTable(rust).delete("id > 4")
    assert our_rows(ours) == rust_rows(ours) == our_rows(rust)
    assert sorted(r["id"] for r in our_rows(ours)) == [1, 3]


def test_the_change_feed_reads_each_dv_file_once(tmp_path: Path, dv_reads: Counter[str]) -> None:
    ours, rust = twin_tables(tmp_path, ROWS, configuration=DV_CDF, max_rows_per_file=4)
    for uri in (ours, rust):
        DeltaTable(uri).delete("id % 2 = 0 OR id IS NULL")
    first = _dv_files(ours)
    for uri in (ours, rust):
        DeltaTable(uri).delete("id = 5 OR id = 9")  # new DVs on top of the first, in a file of their own
    both = _dv_files(ours) | first
    assert len(both) == 2
    dv_reads.clear()
    changes = our_changes(ours, 1)
    assert dv_reads == Counter(dict.fromkeys(both, 1))
    assert changes == rust_changes(rust, 1) == rust_changes(ours, 1)
    assert sorted(c["id"] for c in changes if c["_commit_version"] == 2) == [5, 9]


def test_a_spark_task_reads_each_dv_file_once(tmp_path: Path, dv_reads: Counter[str]) -> None:
    """A Spark task's files (a scan, a change feed, the target of Spark DML) share few DV files:
    the task reads each once, where it read one for every file."""
    from replay.cdc import ChangeRead, plan_changes
    from replay.delta_log import DeltaLog
    from replay.spark.partitions import FilesPartition, record_batches
    from replay.spark.row_ids import row_id_batches, scan_schema
    from replay.spark.schema import spark_schema

    ours, rust = twin_tables(tmp_path, ROWS, configuration=DV_CDF, max_rows_per_file=4)
    for uri in (ours, rust):
        DeltaTable(uri).delete("id % 2 = 0 OR id IS NULL")
        DeltaTable(uri).delete("id = 5 OR id = 9")  # new DVs on top of the first, in a file of their own
    latest = _dv_files(ours)
    snapshot = DeltaTable(ours).snapshot
    assert sum(f.deletion_vector is not None for f in snapshot.files()) > len(latest)
    reader = TableReader.for_metadata(ours, snapshot.metadata, snapshot.protocol)
    files = snapshot.files()
    reads = [ChangeRead(add, None, snapshot.version, 0) for add in files]
    schema = spark_schema(snapshot.metadata.schema_string, change_feed=False)

    def ids(batches: Iterator[pa.RecordBatch], column: str = "id") -> list[int]:
        return sorted(i for batch in batches for i in batch.column(column).to_pylist())

    dv_reads.clear()
    assert ids(record_batches(reader, FilesPartition(reads), False, schema)) == [1, 3, 7, 11]
    assert dv_reads == Counter(dict.fromkeys(latest, 1))

    dv_reads.clear()
    paths = [add.path for add in files]
    with_ids = scan_schema(schema, ["id"], row_ids=True)
    fresh = TableReader.for_metadata(ours, snapshot.metadata, snapshot.protocol)
    assert ids(row_id_batches(fresh, FilesPartition(reads), with_ids, paths)) == [1, 3, 7, 11]
    assert dv_reads == Counter(dict.fromkeys(latest, 1))

    plan = plan_changes(DeltaLog.for_table(ours), 1, snapshot.version)
    dv_reads.clear()
    changes = pa.Table.from_batches(
        record_batches(
            plan.reader(None),
            FilesPartition(plan.reads),
            True,
            spark_schema(snapshot.metadata.schema_string, change_feed=True),
        )
    )
    assert dv_reads == Counter(dict.fromkeys(latest | _first_dv_files(ours), 1))
    expected = rust_changes(rust, 1)
    assert sorted(changes.select(["id", "_change_type", "_commit_version"]).to_pylist(), key=repr) == sorted(
        ({k: c[k] for k in ("id", "_change_type", "_commit_version")} for c in expected), key=repr
    )


def _first_dv_files(uri: str) -> set[str]:
    """The DV files of version 1 of ``uri``."""
    table = DeltaTable(uri, version=1)
    return {
        str(dv_file_path(f.deletion_vector, uri)).rsplit("/", 1)[-1]
        for f in table.snapshot.files()
        if f.deletion_vector is not None
    }


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(0, 50), max_size=3), max_size=30),
    limit=st.integers(0, 120),
)
def test_dv_batches_are_consecutive_bounded_runs(sizes: list[list[int]], limit: int) -> None:
    """Runs keep the items' order, cover them all, stay within the limit unless an item alone is
    over it, and end only where the next item would not fit."""

    @dataclass(frozen=True)
    class Descriptor:
        cardinality: int

    items = [tuple(Descriptor(n) for n in item) for item in sizes]

    def rows(run: Sequence[tuple[Descriptor, ...]]) -> int:
        return sum(d.cardinality for item in run for d in item)

    runs = list(deletion_vector_reads.dv_batches(items, lambda item: item, limit))
    assert [item for run in runs for item in run] == items
    assert all(run for run in runs)
    for index, run in enumerate(runs):
        assert rows(run) <= limit or len(run) == 1
        if index + 1 < len(runs):
            assert rows(run) + rows(runs[index + 1][:1]) > limit


def test_dml_and_scans_read_dvs_a_bounded_run_at_a_time(
    tmp_path: Path, dv_reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for the DVs of one file at a time, each run reads the DV file again (one request
    per run, not per file) and the results do not change."""
    ours, rust = _dv_table(tmp_path)
    (dv_file,) = _dv_files(ours)
    snapshot = DeltaTable(ours).snapshot
    dv_rows = [f.deletion_vector.cardinality for f in snapshot.files() if f.deletion_vector is not None]
    assert len(dv_rows) == FILES_WITH_DVS and max(dv_rows) == 1
    dv_reads.clear()
    streamed = pa.Table.from_batches(list(snapshot.scan().to_batches()))
    assert dv_reads == Counter({dv_file: 1})  # every DV fits in one run
    monkeypatch.setattr(deletion_vector_reads, "BATCH_ROWS", 2)
    dv_reads.clear()
    assert pa.Table.from_batches(list(snapshot.scan().to_batches())).equals(streamed)
    assert dv_reads == Counter({dv_file: FILES_WITH_DVS // 2})
    dv_reads.clear()
    metrics = DeltaTable(ours).delete("id % 4 = 1")  # no file pruned: every DV is read
    assert dv_reads == Counter({dv_file: FILES_WITH_DVS // 2})
    assert metrics["numDeletedRows"] == 3
    DeltaTable(rust).delete("id % 4 = 1")
    assert our_rows(ours) == rust_rows(ours) == our_rows(rust)
    assert sorted(r["id"] for r in our_rows(ours)) == [3, 7, 11]


def test_dvs_too_far_apart_are_read_one_by_one(
    tmp_path: Path, dv_reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = _dv_table(tmp_path)
    (dv_file,) = _dv_files(ours)
    monkeypatch.setattr(deletion_vector_reads, "COALESCE_BYTES", 0)
    dv_reads.clear()
    assert our_rows(ours) == rust_rows(ours)
    assert dv_reads == Counter({dv_file: FILES_WITH_DVS})


def test_the_dvs_read_together_are_the_dvs_read_alone(tmp_path: Path) -> None:
    ours, _ = _dv_table(tmp_path)
    descriptors = [f.deletion_vector for f in DeltaTable(ours).snapshot.files() if f.deletion_vector]
    together = read_deletion_vectors(descriptors, ours, None, threads=2)
    assert len(together) == FILES_WITH_DVS
    for descriptor in descriptors:
        alone = read_deletion_vector(descriptor, ours)
        assert np.array_equal(together[deletion_vector_reads.dv_key(descriptor)], alone)


def test_a_missing_or_damaged_dv_file_is_named(tmp_path: Path) -> None:
    ours, _ = _dv_table(tmp_path)
    descriptors = [f.deletion_vector for f in DeltaTable(ours).snapshot.files() if f.deletion_vector]
    path = Path(str(dv_file_path(descriptors[0], ours)))
    data = bytearray(path.read_bytes())
    last = descriptors[-1]
    assert last.offset is not None
    data[last.offset + 4] ^= 0xFF  # a bitmap byte of the last DV: its checksum no longer matches
    path.write_bytes(bytes(data))
    named = f"deletion vector in {path} at offset {last.offset}"
    with pytest.raises(CorruptDeletionVectorError, match=named):
        read_deletion_vectors(descriptors, ours, None, threads=2)
    path.unlink()
    with pytest.raises(DeletionVectorNotFoundError, match=f"Deletion vector file {path} does not exist"):
        read_deletion_vectors(descriptors, ours, None, threads=2)


def test_only_a_read_ahead_is_kept_and_a_pickled_reader_leaves_it_behind(tmp_path: Path) -> None:
    ours, _ = _dv_table(tmp_path)
    snapshot = DeltaTable(ours).snapshot
    reader = TableReader.for_metadata(ours, snapshot.metadata, snapshot.protocol)
    files = snapshot.files()
    rows = reader.read_files(files)
    assert len(reader.dv_cache) == 0  # a read keeps no DV: a reader may outlive it by far
    reader.prefetch_deletion_vectors(files)  # what one DML operation's reader does
    assert len(reader.dv_cache) == FILES_WITH_DVS
    assert reader.read_files(files).equals(rows)
    copy = pickle.loads(pickle.dumps(reader))
    assert len(copy.dv_cache) == 0
    assert copy.read_files(files).equals(reader.read_files(files))
