"""Copy-on-write rewrites carry dictionary-encoded string columns as dictionaries: the rows, the
files' schemas and statistics are what they were, delta-rs reads the same, constraints still hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as RustTable

from replay import DeltaTable, InvariantViolationError, write_table
from replay.data.reader import TableReader
from replay.dml.target_rows import read_target_rows, rows_with_columns
from replay.txn.data_writer import DataFileWriter
from replay.txn.statistics import file_statistics
from replay.txn.write_spec import FileWriteSpec
from tests.dml_cases import our_rows, rust_rows, twin_tables

ROWS = 3000
IDS = np.arange(ROWS, dtype=np.int64)
DATA = pa.table(
    {
        "id": IDS,
        "cat": pa.array([None if i % 11 == 0 else f"c{i % 5}" for i in range(ROWS)], pa.string()),
        "name": pa.array([f"name-{i:06d}" for i in range(ROWS)], pa.string()),
        "b": pa.array([bytes([i % 3]) for i in range(ROWS)], pa.binary()),
        "x": IDS / ROWS,
    }
)
SOURCE = pa.table(
    {
        "id": np.array([5, 1500, 2999, 4000, 4001], dtype=np.int64),
        "cat": pa.array(["new", "c1", None, "c9", "c0"], pa.string()),
        "name": pa.array(["n5", "n1500", "n2999", "n4000", "n4001"], pa.string()),
        "b": pa.array([b"\x07", b"\x01", None, b"\x02", b"\x08"], pa.binary()),
        "x": np.array([0.5, 0.25, 0.75, 1.5, 2.5]),
    }
)


def change(table: DeltaTable | RustTable, operation: str) -> None:
    if operation == "delete":
        table.delete("id % 7 = 3 OR cat = 'c2'")
    elif operation == "update-dictionary-column":
        table.update({"cat": "concat(cat, '!')"}, predicate="id % 9 = 4 AND cat IS NOT NULL")
    elif operation == "update-other-column":
        table.update({"x": "x + 1"}, predicate="cat = 'c3' OR cat IS NULL")
    else:
        (
            table.merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )


def added_paths(uri: str) -> list[Path]:
    before = {f.path for f in DeltaTable(uri, version=0)._snapshot.files()}
    return [Path(uri) / f.path for f in DeltaTable(uri)._snapshot.files() if f.path not in before]


@pytest.mark.parametrize("change_data_feed", [False, True])
@pytest.mark.parametrize("operation", ["delete", "update-dictionary-column", "update-other-column", "merge"])
def test_rewritten_files_are_as_before(tmp_path: Path, operation: str, change_data_feed: bool) -> None:
    configuration = {"delta.enableChangeDataFeed": "true"} if change_data_feed else {}
    ours, rust = twin_tables(tmp_path, DATA, configuration=configuration, max_rows_per_file=1000)
    original = next(Path(ours).glob("*.parquet"))
    change(DeltaTable(ours), operation)
    change(RustTable(rust), operation)
    assert our_rows(ours) == rust_rows(rust) == rust_rows(ours)
    written = added_paths(ours)
    assert written
    for path in written:
        parquet = pq.ParquetFile(path)
        assert parquet.schema_arrow == pq.ParquetFile(original).schema_arrow
        assert parquet.metadata.metadata == pq.ParquetFile(original).metadata.metadata
        stats = next(f.stats for f in DeltaTable(ours)._snapshot.files() if path.name in f.path)
        assert json.loads(stats) == json.loads(file_statistics(pq.read_table(path)))


def test_copy_on_write_reads_dictionary_encoded_columns_as_dictionaries(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA)
    snapshot = DeltaTable(uri)._snapshot
    reader = TableReader.for_metadata(uri, snapshot.metadata, snapshot.protocol)
    file = snapshot.files()[0]
    target = read_target_rows(reader, file, ["id"])
    columns = ["id", "cat", "name", "b", "x"]
    kept = rows_with_columns(reader, target, None, columns, keep_dictionaries=True)
    assert [str(t) for t in kept.schema.types] == [
        "int64",
        "dictionary<values=string, indices=int32, ordered=0>",
        "string",  # unique values: stored plain, read plain
        "dictionary<values=binary, indices=int32, ordered=0>",
        "double",
    ]
    plain = rows_with_columns(reader, target, None, columns)
    assert plain.schema == DeltaTable(uri).to_pyarrow_table().schema
    assert kept.cast(plain.schema) == plain


def test_constraints_hold_over_dictionary_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA)
    DeltaTable(uri).alter.add_constraint({"known_cat": "cat IS NULL OR cat <> 'bad'"})
    with pytest.raises(InvariantViolationError, match="known_cat"):
        DeltaTable(uri).update({"cat": "'bad'"}, predicate="id = 7")
    DeltaTable(uri).update({"x": "x * 2"}, predicate="id < 10")
    assert DeltaTable(uri).to_pyarrow_table().sort_by("id")["cat"].to_pylist() == DATA["cat"].to_pylist()


def test_nearly_distinct_columns_are_written_without_a_dictionary(tmp_path: Path) -> None:
    """A dictionary of unique values would outgrow its page and fall back to plain encoding: such
    columns are written plain from the start; the others keep their dictionary."""
    uri = str(tmp_path / "t")
    write_table(uri, DATA)
    path = next(Path(uri).glob("*.parquet"))
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {chunks.column(i).path_in_schema: chunks.column(i).has_dictionary_page for i in range(5)}
    assert dictionary == {"id": False, "cat": True, "name": False, "b": True, "x": False}
    assert pq.read_table(path).equals(DATA)


@pytest.mark.parametrize("keep", [False, True])
def test_only_rewrites_write_dictionary_columns_as_dictionaries(tmp_path: Path, keep: bool) -> None:
    """Any other write decodes a dictionary column first, as it always did; either way the file
    holds the same values under the same Arrow schema."""
    small_indices = pa.dictionary(pa.int8(), pa.string())
    categorical = DATA.set_column(1, "cat", DATA["cat"].dictionary_encode().cast(small_indices))
    writer = DataFileWriter(FileWriteSpec(str(tmp_path), DATA.schema), keep_dictionaries=keep)
    writer.write(categorical)
    path = tmp_path / writer.close()[0].add.path
    assert pq.ParquetFile(path).schema_arrow == DATA.schema
    assert pq.read_table(path).equals(DATA)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert chunk.has_dictionary_page
