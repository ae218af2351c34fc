"""Statistics taken from the Parquet footer of the file written equal the statistics computed from
the rows, for every type, chunking and row-group split, strings longer than the footer keeps
included."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.txn import data_writer
from replay.txn.data_writer import DataFileWriter
from replay.txn.statistics import FOOTER_STRING_BYTES, StatisticsCollector, file_statistics
from replay.txn.write_spec import FileWriteSpec

LONG = "x" * (4 * FOOTER_STRING_BYTES + 1)
"""Longer than the bounds Arrow's Parquet writer keeps (4096 bytes)."""

STRUCT = pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])
COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "i8": (pa.int8(), st.integers(-128, 127)),
    "i16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "i32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "i64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "flag": (pa.bool_(), st.booleans()),
    "day": (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "ts": (
        pa.timestamp("us", "UTC"),
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)),
    ),
    "ntz": (pa.timestamp("us"), st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))),
    "small_decimal": (
        pa.decimal128(10, 2),
        st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False),
    ),
    "wide_decimal": (
        pa.decimal128(38, 4),
        st.decimals(-(10**20), 10**20, places=4, allow_nan=False, allow_infinity=False),
    ),
    "text": (pa.string(), st.one_of(st.text(max_size=40), st.sampled_from(["", "é", "\U0001f600", LONG]))),
    "f": (pa.float64(), st.floats(allow_nan=True)),
    "nested": (
        STRUCT,
        st.fixed_dictionaries({"a": st.none() | st.integers(-5, 5), "b": st.none() | st.text()}),
    ),
    "items": (pa.list_(pa.int64()), st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=3)),
}


def _write(tmp_path: Path, table: pa.Table, chunks: list[int], schema: pa.Schema) -> dict[str, Any]:
    """The statistics of ``table`` written by a :class:`DataFileWriter` in ``chunks``."""
    writer = DataFileWriter(FileWriteSpec(str(tmp_path), schema), keep_dictionaries=True)
    start = 0
    for size in [*chunks, table.num_rows]:
        part = table.slice(start, size)
        if part.num_rows:
            writer.write(part)
            writer.flush()  # each flush ends as whole row groups of their own
        start += part.num_rows
    (written,) = writer.close()
    assert written.add.stats is not None
    return json.loads(written.add.stats)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_footer_statistics_equal_computed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject
) -> None:
    monkeypatch.setattr(data_writer, "ROW_GROUP_ROWS", 4)  # several row groups per flush
    names = data.draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=5, unique=True))
    rows = data.draw(st.integers(1, 30), label="rows")
    chunks = data.draw(st.lists(st.integers(1, 12), max_size=3), label="chunks")
    dictionary = data.draw(st.booleans(), label="dictionary")
    arrays = []
    for name in names:
        arrow_type, values = COLUMNS[name]
        drawn = data.draw(st.lists(st.none() | values, min_size=rows, max_size=rows), label=name)
        arrays.append(pa.array(drawn, arrow_type))
    table = pa.table(dict(zip(names, arrays, strict=True)))
    schema = table.schema
    if dictionary and "text" in names:  # a dictionary column is written as one, bounded by its values
        index = names.index("text")
        table = table.set_column(index, "text", pc.dictionary_encode(table.column("text")))
    expected = json.loads(file_statistics(table.cast(schema)))
    assert _write(tmp_path / str(len(list(tmp_path.iterdir()))), table, chunks, schema) == expected


def test_a_long_bound_the_footer_leaves_out_comes_from_the_rows(tmp_path: Path) -> None:
    table = pa.table({"s": ["b", LONG + "z", None, "a" + LONG]})
    chunk = pq.ParquetFile(_written_path(tmp_path, table)).metadata.row_group(0).column(0)
    assert not chunk.statistics.has_min_max  # the writer dropped them: too long to keep
    stats = _write(tmp_path / "second", table, [], table.schema)
    assert stats["minValues"]["s"] == ("a" + LONG)[:32]
    assert stats["maxValues"]["s"] == (LONG + "z")[:32] + "\U0010ffff"
    assert stats["nullCount"]["s"] == 1


def _written_path(tmp_path: Path, table: pa.Table) -> Path:
    writer = DataFileWriter(FileWriteSpec(str(tmp_path), table.schema))
    writer.write(table)
    (written,) = writer.close()
    return tmp_path / written.add.path


def test_a_footer_without_statistics_leaves_the_figures_unknown(tmp_path: Path) -> None:
    table = pa.table({"n": [3, 1, None], "s": ["b", "a", "c"]})
    path = tmp_path / "bare.parquet"
    pq.write_table(table, path, write_statistics=False)
    collector = StatisticsCollector(table.schema, from_footer=True)
    collector.add(table)
    stats = json.loads(collector.to_json(pq.ParquetFile(path).metadata))
    assert stats == {"numRecords": 3, "minValues": {}, "maxValues": {}, "nullCount": {}}


def test_a_footer_collector_needs_the_footer() -> None:
    collector = StatisticsCollector(pa.schema([("n", pa.int64())]), from_footer=True)
    with pytest.raises(ValueError, match="metadata"):
        collector.to_json()


def test_decimal_and_timestamp_bounds_from_the_footer(tmp_path: Path) -> None:
    table = pa.table(
        {
            "d": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50")], pa.decimal128(10, 2)),
            "t": pa.array([dt.datetime(2024, 5, 1, 12, 0, 0, 999_999, tzinfo=dt.UTC), None]),
        }
    )
    stats = _write(tmp_path, table, [1], table.schema)
    assert stats["minValues"] == {"d": -3.5, "t": "2024-05-01T12:00:00.999Z"}
    assert stats["maxValues"] == {"d": 1.25, "t": "2024-05-01T12:00:00.999Z"}
    assert stats["nullCount"] == {"d": 0, "t": 1}
