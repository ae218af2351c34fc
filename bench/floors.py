"""pyarrow alone, doing the Parquet work an operation cannot avoid: the floor of any engine built on
pyarrow's Parquet reader and writer, measured beside ours and delta-rs's.

* :func:`rewrite_files` is a copy-on-write DELETE or UPDATE without a transaction log: every data
  file of a table is read whole (string columns it stores dictionary-encoded as dictionaries, as
  our DML reads them), the rows changed with ``pyarrow.compute`` and written to a new file;
* :func:`compact_partitions` is a compaction without a log: the files of each partition directory
  are read one after the other, their rows made one contiguous table and written as one file.

Files are written as this library writes them (Snappy, Parquet statistics, the same choice of
dictionary-encoded columns and of rows encoded per step), one file per thread at a time, a thread
per core. Nothing is committed, no Delta statistics are computed: what is left of our time above
these is the work of being a Delta table (reading the log, planning, checks, statistics, the
commit).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay.data.dictionaries import dictionary_columns, dictionary_encoded_columns
from replay.txn.data_writer import DICTIONARY_PAGE_BYTES, ROW_GROUP_ROWS, write_batch_rows

THREADS = os.cpu_count() or 2


def _write(table: pa.Table, path: Path) -> None:
    pq.write_table(
        table,
        path,
        compression="snappy",
        use_dictionary=dictionary_columns(table),
        dictionary_pagesize_limit=DICTIONARY_PAGE_BYTES,
        write_batch_size=write_batch_rows(table),
        row_group_size=ROW_GROUP_ROWS,
    )


def _read(path: Path, whole: bool = False) -> pa.Table:
    """The rows of ``path``; ``whole``: the file is read with one call and parsed from memory, as
    our compaction reads small files."""
    with pa.BufferReader(path.read_bytes()) if whole else pa.OSFile(str(path)) as source:
        parquet = pq.ParquetFile(source, pre_buffer=False)
        schema = parquet.schema_arrow
        dictionaries = dictionary_encoded_columns(parquet.metadata, schema, schema.names)
        if dictionaries:  # the footer parsed once
            parquet = pq.ParquetFile(
                source, pre_buffer=False, metadata=parquet.metadata, read_dictionary=dictionaries
            )
        return parquet.read(use_threads=False)


def _changed(operation: str) -> Callable[[pa.Table], pa.Table]:
    """The rows of a file after the benchmark's ``delete`` or ``update`` (``bench/dml.py``)."""
    if operation == "delete":
        return lambda rows: rows.filter(pc.greater_equal(rows["value"], 0.01))
    if operation == "update":

        def update(rows: pa.Table) -> pa.Table:
            matched = pc.less(rows["value"], 0.01)
            amount = pc.if_else(matched, pc.add(rows["amount"], 1), rows["amount"])
            return rows.set_column(rows.schema.get_field_index("amount"), "amount", amount)

        return update
    raise ValueError(f"no pyarrow floor for operation {operation!r}")


def rewrite_files(table: str, operation: str) -> dict[str, int]:
    """Rewrite every data file under ``table`` after ``operation``; the rows written."""
    change = _changed(operation)
    files = sorted(Path(table).glob("*.parquet"))

    def rewrite(path: Path) -> int:
        rows = change(_read(path))
        _write(rows, path.with_name(f"floor-{path.name}"))
        return rows.num_rows

    with ThreadPoolExecutor(THREADS) as pool:
        return {"rows": sum(pool.map(rewrite, files))}


def compact_partitions(table: str) -> dict[str, int]:
    """Write the files of each partition directory of ``table`` as one file; the files written."""
    partitions = sorted(p for p in Path(table).iterdir() if p.is_dir() and "=" in p.name)

    def compact(partition: Path) -> int:
        files = sorted(partition.glob("*.parquet"))
        # one contiguous table: the writer and statistics pay per chunk, and these are small
        rows = pa.concat_tables(_read(path, whole=True) for path in files).combine_chunks()
        _write(rows, partition / "floor-compacted.parquet")
        return 1

    with ThreadPoolExecutor(THREADS) as pool:
        return {"files": sum(pool.map(compact, partitions))}
