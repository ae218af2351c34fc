"""Replacing columns of a Parquet file byte for byte (``replay.data.parquet_splice``): any table,
row groups and writer options give a file pyarrow reads as the original with the new columns,
whose kept column chunks are the original's bytes; the real files of the golden tables splice;
files that cannot be edited safely are refused with a typed error."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.data.parquet_splice import NotSpliceableError, parquet_layout, splice_columns
from replay.data.thrift_compact import I64, ThriftList, decode_struct, encode_struct
from tests.paths import GOLDEN_ROOT


def column_values(kind: str, rows: int, rng: np.random.Generator) -> pa.Array:
    nulls = rng.random(rows) < 0.2
    if kind == "long":
        return pa.array(rng.integers(-1000, 1000, rows), mask=nulls)
    if kind == "double":
        values = rng.normal(size=rows)
        values[rng.random(rows) < 0.05] = np.nan
        return pa.array(values, mask=nulls)
    if kind == "string":
        return pa.array([f"v{int(x)}" for x in rng.integers(0, 30, rows)], mask=nulls)
    if kind == "bool":
        return pa.array(rng.random(rows) < 0.5, mask=nulls)
    if kind == "timestamp":
        return pa.array(rng.integers(0, 2**40, rows), mask=nulls).cast(pa.timestamp("us", tz="UTC"))
    if kind == "decimal":
        cents = rng.integers(-(10**6), 10**6, rows).tolist()
        return pa.array([Decimal(c).scaleb(-2) for c in cents], pa.decimal128(12, 2), mask=nulls)
    inner = pa.array([[f"e{j}" for j in range(int(n))] for n in rng.integers(0, 3, rows)])
    return pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 9, rows)), inner], names=["x", "y"], mask=pa.array(nulls)
    )


KINDS = ["long", "double", "string", "bool", "timestamp", "decimal", "struct"]


def without_nan(table: pa.Table) -> pa.Table:
    """``table`` with NaN as infinity (NaN is not equal to itself; the data holds no infinity)."""
    for index, field in enumerate(table.schema):
        if pa.types.is_floating(field.type):
            column = table.column(index)
            table = table.set_column(index, field, pc.if_else(pc.is_nan(column), float("inf"), column))
    return table


def write(table: pa.Table, groups: list[int], **options: object) -> bytes:
    sink = io.BytesIO()
    writer = pq.ParquetWriter(sink, table.schema, **options)  # type: ignore[arg-type]
    offset = 0
    for rows in groups:
        writer.write_table(table.slice(offset, rows), row_group_size=rows)
        offset += rows
    writer.close()
    return sink.getvalue()


def joined(parts: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(part) for part in parts)


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6),
    rows=st.integers(1, 3000),
    groups=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    options=st.fixed_dictionaries(
        {
            "compression": st.sampled_from(["snappy", "zstd", "none", "gzip"]),
            "use_dictionary": st.booleans(),
            "data_page_version": st.sampled_from(["1.0", "2.0"]),
            "write_page_index": st.booleans(),
            "data_page_size": st.sampled_from([256, 4096, 1 << 20]),
        }
    ),
    data=st.data(),
)
def test_spliced_file_reads_as_the_original_with_new_columns(
    *, kinds: list[str], rows: int, groups: int, seed: int, options: dict[str, object], data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(len(kinds))]
    table = pa.table({name: column_values(kind, rows, rng) for name, kind in zip(names, kinds, strict=True)})
    cuts = sorted(set(rng.integers(1, rows, groups - 1).tolist())) if rows > 1 else []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    original = write(table, sizes, **options)
    replaced = data.draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
    new = pa.table({name: column_values(kinds[names.index(name)], rows, rng) for name in replaced})
    replacement = write(new, sizes, compression="snappy")

    layout = parquet_layout(original)
    spliced = joined(splice_columns(layout, parquet_layout(replacement)))

    expected = table
    for name in replaced:
        expected = expected.set_column(names.index(name), name, new.column(name))
    result = pq.read_table(io.BytesIO(spliced))
    assert without_nan(result).equals(without_nan(expected))
    assert [
        rg.num_rows
        for rg in (pq.ParquetFile(io.BytesIO(spliced)).metadata.row_group(i) for i in range(len(sizes)))
    ] == sizes
    after = parquet_layout(spliced)
    for index, (name, _, (first, last)) in enumerate(layout.columns):
        if name in replaced:
            continue
        assert after.columns[index][2] == (first, last)
        for group in range(len(sizes)):
            for leaf in range(first, last):
                old_start, old_end = layout.chunks[group][leaf]
                new_start, new_end = after.chunks[group][leaf]
                assert bytes(after.data[new_start:new_end]) == original[old_start:old_end]


def golden_samples() -> list[Path]:
    """One data file of every golden table (the first, by name)."""
    chosen: dict[Path, Path] = {}
    for path in sorted(GOLDEN_ROOT.rglob("*.parquet")):
        if "_delta_log" in path.parts or "_change_data" in path.parts:
            continue
        table = next((p for p in path.parents if (p / "_delta_log").is_dir()), path.parent)
        chosen.setdefault(table, path)
    return list(chosen.values())


def test_golden_files_splice_a_re_encoded_column() -> None:
    samples = golden_samples()
    assert len(samples) > 50
    spliced_files = 0
    for path in samples:
        data = path.read_bytes()
        layout = parquet_layout(data)  # every real file is editable
        source = pq.ParquetFile(io.BytesIO(data))
        if not layout.rows:
            continue
        first = layout.names[0]
        column = source.read(columns=[first], use_threads=False)
        replacement = write(column, list(layout.rows))
        spliced = joined(splice_columns(layout, parquet_layout(replacement)))
        result = pq.read_table(io.BytesIO(spliced), coerce_int96_timestamp_unit="us")
        before = source.read(use_threads=False)
        assert result.num_rows == before.num_rows, path
        for name in layout.names[1:]:
            assert result.column(name).equals(
                pq.read_table(io.BytesIO(data), columns=[name], coerce_int96_timestamp_unit="us").column(name)
            ), (path, name)
        assert result.column(first).to_pylist() == column.column(first).to_pylist(), path
        spliced_files += 1
    assert spliced_files > 50


def small_file() -> bytes:
    table = pa.table({"a": list(range(100)), "b": [f"x{i}" for i in range(100)]})
    return write(table, [60, 40], compression="snappy")


def edited_footer(data: bytes, edit: object) -> bytes:
    length = int.from_bytes(data[-8:-4], "little")
    footer, _ = decode_struct(data[-8 - length : -8])
    edit(footer)  # type: ignore[operator]
    encoded = encode_struct(footer)
    return data[: -8 - length] + encoded + len(encoded).to_bytes(4, "little") + b"PAR1"


def first_chunk(footer: dict) -> dict:  # type: ignore[type-arg]
    groups: ThriftList = footer[4][1]
    columns: ThriftList = groups.items[0][1][1]  # type: ignore[index]
    return columns.items[0]  # type: ignore[return-value]


def test_a_chunk_size_that_does_not_match_its_pages_is_refused() -> None:
    def shrink(footer: dict) -> None:  # type: ignore[type-arg]
        meta = first_chunk(footer)[3][1]
        meta[7] = (I64, meta[7][1] - 1)

    with pytest.raises(NotSpliceableError, match="do not add up"):
        parquet_layout(edited_footer(small_file(), shrink))


def test_overlapping_chunks_and_outside_ranges_are_refused() -> None:
    def overlap(footer: dict) -> None:  # type: ignore[type-arg]
        groups: ThriftList = footer[4][1]
        second = groups.items[0][1][1].items[1][3][1]  # type: ignore[index]
        second[9] = (I64, 4)  # points into the first chunk
        second.pop(11, None)

    with pytest.raises(NotSpliceableError):
        parquet_layout(edited_footer(small_file(), overlap))

    def outside(footer: dict) -> None:  # type: ignore[type-arg]
        meta = first_chunk(footer)[3][1]
        meta[9] = (I64, 10**9)
        meta.pop(11, None)

    with pytest.raises(NotSpliceableError, match="outside the file"):
        parquet_layout(edited_footer(small_file(), outside))


def test_chunks_in_other_files_and_encrypted_files_are_refused() -> None:
    def external(footer: dict) -> None:  # type: ignore[type-arg]
        first_chunk(footer)[1] = (8, b"other.parquet")

    with pytest.raises(NotSpliceableError, match="another file"):
        parquet_layout(edited_footer(small_file(), external))
    data = small_file()
    with pytest.raises(NotSpliceableError, match="PAR1"):
        parquet_layout(data[:-4] + b"PARE")
    with pytest.raises(NotSpliceableError):
        parquet_layout(data[:-20] + data[-8:])  # footer length beyond what is left


def test_replacements_must_fit_the_file() -> None:
    layout = parquet_layout(small_file())
    other_groups = write(pa.table({"a": list(range(100))}), [50, 50])
    with pytest.raises(NotSpliceableError):
        splice_columns(layout, parquet_layout(other_groups))
    unknown = write(pa.table({"z": list(range(100))}), [60, 40])
    with pytest.raises(NotSpliceableError, match="z"):
        splice_columns(layout, parquet_layout(unknown))


def test_arrow_schema_metadata_is_dropped_and_other_metadata_kept() -> None:
    table = pa.table({"a": pa.array(["x", "y"]).dictionary_encode(), "b": [1, 2]})
    table = table.replace_schema_metadata({"writer.note": "kept"})
    original = write(table, [2])
    replacement = write(pa.table({"b": [3, 4]}), [2])
    spliced = joined(splice_columns(parquet_layout(original), parquet_layout(replacement)))
    metadata = pq.ParquetFile(io.BytesIO(spliced)).metadata.metadata
    assert metadata == {b"writer.note": b"kept"}
    assert pq.read_table(io.BytesIO(spliced)).to_pydict() == {"a": ["x", "y"], "b": [3, 4]}
