"""Scans read the string columns a large file stores dictionary-encoded as dictionaries and decode
them themselves: the rows are the Parquet reader's, values that decode past one array's capacity
included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from replay import DeltaTable, write_table
from replay.data import dictionaries, reader
from replay.data.dictionaries import DECODE_ROWS, decode_dictionary

ROWS = DECODE_ROWS + 1000


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    labels = np.array([f"label-{i:03d}" for i in range(300)] + [None], dtype=object)
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64) + seed * rows,
            "label": pa.array(labels[rng.integers(0, len(labels), rows)], pa.string()),
            "part": pa.array(np.full(rows, seed % 2), pa.int64()),
        }
    )


def _expected(path: Path) -> pa.Table:
    """The rows as the Parquet reader decodes them, file by file, with partition values."""
    tables = []
    for file in sorted(path.rglob("*.parquet")):
        data = pq.read_table(file, columns=["id", "label"])
        part = int(file.parent.name.split("=")[1])
        tables.append(data.append_column("part", pa.array(np.full(data.num_rows, part), pa.int64())))
    return pa.concat_tables(tables).sort_by("id")


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    for seed in range(3):
        write_table(str(path), _table(ROWS, seed), partition_by=["part"])
    files = sorted(path.rglob("*.parquet"))
    assert all(pq.ParquetFile(f).metadata.num_rows >= DECODE_ROWS for f in files)
    encodings = pq.ParquetFile(files[0]).metadata.row_group(0).column(1).encodings
    assert "RLE_DICTIONARY" in encodings  # what the scan reads as a dictionary
    return path


def test_a_scan_decodes_dictionary_columns_into_the_readers_values(table_path: Path) -> None:
    scanned = DeltaTable(str(table_path)).to_pyarrow_table()
    assert scanned.schema.field("label").type == pa.string()
    assert scanned.select(["id", "label", "part"]).sort_by("id").equals(_expected(table_path))


def test_the_scan_reads_them_as_dictionaries(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    formats: list[tuple[str, ...]] = []
    real = reader.dataset_format

    def recording(columns: tuple[str, ...]):  # type: ignore[no-untyped-def]
        formats.append(columns)
        return real(columns)

    monkeypatch.setattr(reader, "dataset_format", recording)
    DeltaTable(str(table_path)).to_pyarrow_table()
    assert ("label",) in formats


def test_a_scan_whose_dictionaries_overflow_reads_the_files_one_by_one(
    table_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = reader.scan_local

    def overflowing(parquet_format, schema, fragments, names):  # type: ignore[no-untyped-def]
        if parquet_format.read_options.dictionary_columns:
            raise pa.ArrowInvalid("Take operation overflowed binary array capacity")
        return real(parquet_format, schema, fragments, names)

    monkeypatch.setattr(reader, "scan_local", overflowing)
    scanned = DeltaTable(str(table_path)).to_pyarrow_table()
    assert scanned.select(["id", "label", "part"]).sort_by("id").equals(_expected(table_path))


def test_a_single_file_is_decoded_by_the_reader_too(tmp_path: Path) -> None:
    path = tmp_path / "one"
    write_table(str(path), _table(ROWS, 0).drop_columns(["part"]))
    scanned = DeltaTable(str(path)).to_pyarrow_table()
    (file,) = path.rglob("*.parquet")
    assert scanned.equals(pq.read_table(file).cast(scanned.schema))


def test_decoding_slices_what_would_not_fit_one_array(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dictionaries, "MAX_STRING_BYTES", 100)
    values = pa.array(["a" * 30, "b", None, "c" * 7])
    column = pa.chunked_array([pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 3, 0, 0, 3, 1]), values)])
    decoded = decode_dictionary(column)
    assert decoded.type == pa.string()
    assert decoded.to_pylist() == column.to_pylist()
    assert all(pc.sum(pc.binary_length(chunk)).as_py() <= 100 for chunk in decoded.chunks)
    assert decoded.num_chunks > 1
