"""Delta's per-file statistics: ``numRecords`` and ``minValues``/``maxValues``/``nullCount``.

Statistics cover the first ``delta.dataSkippingNumIndexedCols`` leaf columns of a data file, in
schema order, nested struct fields counted one by one (-1: all), or, when
``delta.dataSkippingStatsColumns`` names columns, exactly those (a struct: its fields).
Min/max are kept for types Delta orders (numbers, booleans, strings, dates, timestamps, decimals
up to precision 15), left out for binary, arrays and maps, for float columns holding NaN, and for
columns without a non-null value; strings are truncated to
``delta.dataSkippingStringPrefixLength`` characters (32 by default; the max then gets a tie
breaker so it stays an upper bound), timestamps are written with millisecond precision.

A :class:`StatisticsCollector` takes a file's data in chunks, computes each chunk's figures with
``pyarrow.compute`` (no per-row Python) and combines them, so a file written batch by batch never
has to be held whole. A collector made ``from_footer`` leaves to the Parquet writer what it
computes anyway, as delta-rs does: the null counts and bounds of integer, boolean, date,
timestamp, decimal and string columns are read from the footer of the file written
(:meth:`StatisticsCollector.to_json` given its metadata). Floating-point bounds stay computed here
(Parquet's ignore NaN, Delta's leave a column holding one out), and so do the bounds of strings
longer than :data:`FOOTER_STRING_BYTES`: a Parquet writer drops a bound longer than its limit
(Arrow's: 4096 bytes), and the bound it dropped is then the least or greatest of those strings.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import decimal
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay.protocol.table_properties import (
    DATA_SKIPPING_NUM_INDEXED_COLS,
    DATA_SKIPPING_STRING_PREFIX_LENGTH,
)

MAX_STRING_TIE_BREAKER = "\U0010ffff"
"""Appended to a truncated max string so it stays an upper bound."""
FOOTER_STRING_BYTES = 1024
"""Strings longer than this (in bytes) are bounded by the collector itself even when the footer
gives the column's bounds: at most the limit beyond which a Parquet writer leaves a bound out."""
DEFAULT_NUM_INDEXED_COLS = DATA_SKIPPING_NUM_INDEXED_COLS.default
DEFAULT_STRING_PREFIX_LENGTH = DATA_SKIPPING_STRING_PREFIX_LENGTH.default


def _has_min_max(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_timestamp(arrow_type)
        or pa.types.is_decimal(arrow_type)
    )


def _footer_bounded(arrow_type: pa.DataType) -> bool:
    """Whether a Parquet footer's statistics of a column of ``arrow_type`` are Delta's: exact
    bounds in the same order (strings compared as UTF-8 bytes) and null counts."""
    return _has_min_max(arrow_type) and not pa.types.is_floating(arrow_type)


def _is_text(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _stat_value(value: Any, arrow_type: pa.DataType) -> Any:
    """A min/max value in Delta's JSON stats form, or ``None`` when it must be left out."""
    if value is None:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if arrow_type.precision <= 15 else None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC)
            return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


Bounds = tuple[Any, Any]


@dataclass
class _Leaf:
    """Running figures of one leaf column (``indexes``: field indexes from the top level).

    ``footer`` is the Parquet column index of a leaf whose figures the file's footer gives (a
    collector made ``from_footer``); such a leaf only bounds its long strings itself, one entry
    of ``own`` per chunk added (``None`` where the chunk has none).
    """

    names: tuple[str, ...]
    indexes: tuple[int, ...]
    arrow_type: pa.DataType
    footer: int | None = None
    nulls: int | None = 0
    low: Any = None
    high: Any = None
    has_nan: bool = False
    own: list[Bounds | None] = field(default_factory=list)

    def add(self, array: pa.ChunkedArray) -> None:
        if self.footer is not None:
            self.own.append(_long_string_bounds(array) if _is_text(self.arrow_type) else None)
            return
        assert self.nulls is not None
        self.nulls += array.null_count
        if self.has_nan or not _has_min_max(self.arrow_type) or array.null_count == len(array):
            return
        if pa.types.is_dictionary(array.type):
            array = _used_values(array)
        if pa.types.is_floating(self.arrow_type):
            if _any_nan(array):
                self.has_nan = True
                return
            self._widen(_float_bounds(array))
        else:
            self._widen(_min_max(array))

    def _widen(self, bounds: Bounds) -> None:
        low, high = bounds
        if low is not None and (self.low is None or low < self.low):
            self.low = low
        if high is not None and (self.high is None or high > self.high):
            self.high = high

    def read_footer(self, metadata: pq.FileMetaData, chunk_ends: list[int]) -> None:
        """Take this leaf's figures from the footer of the file written (``chunk_ends``: the
        running row count after each chunk added; a row group never spans two chunks). A row
        group without bounds takes its chunk's own; a figure the footer lacks is left unknown."""
        assert self.footer is not None
        self.nulls, self.low, self.high = 0, None, None
        bounded = True
        start = 0
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(self.footer)
            statistics = chunk.statistics
            rows = metadata.row_group(group).num_rows
            if statistics is None or not statistics.has_null_count:
                self.nulls, bounded = None, False
                break
            assert self.nulls is not None
            self.nulls += statistics.null_count
            if statistics.has_min_max:
                self._widen((statistics.min, statistics.max))
            elif statistics.null_count < chunk.num_values:  # values, but bounds too long to keep
                index = bisect.bisect_right(chunk_ends, start)
                own = self.own[index] if rows and index < len(self.own) else None
                if own is None:
                    bounded = False
                else:
                    self._widen(own)
            start += rows
        if not bounded:
            self.low = self.high = None

    def bounds(self, prefix_length: int) -> Bounds:
        """Minimum and maximum as written (strings cut to ``prefix_length`` characters)."""
        if self.has_nan or self.low is None or self.high is None:
            return None, None
        low, high = self.low, self.high
        if isinstance(low, str) and len(low) > prefix_length:
            low = low[:prefix_length]
        if isinstance(high, str) and len(high) > prefix_length:
            high = high[:prefix_length] + MAX_STRING_TIE_BREAKER
        return _stat_value(low, self.arrow_type), _stat_value(high, self.arrow_type)


def _min_max(array: pa.ChunkedArray) -> Bounds:
    result = pc.min_max(array)
    return result["min"].as_py(), result["max"].as_py()


def _long_string_bounds(array: pa.ChunkedArray) -> Bounds | None:
    """The bounds of a chunk of strings holding one longer than :data:`FOOTER_STRING_BYTES`
    (``None`` when it holds none): the chunk's row groups may lack the bounds in the footer."""
    if pa.types.is_dictionary(array.type):
        if not any(_longest(chunk.dictionary) > FOOTER_STRING_BYTES for chunk in array.chunks):
            return None
        array = _used_values(array)
    if _longest(array) <= FOOTER_STRING_BYTES:
        return None
    return _min_max(array)


def _longest(strings: pa.Array | pa.ChunkedArray) -> int:
    """Bytes of the longest non-null string of ``strings`` (0 for none)."""
    longest = pc.max(pc.binary_length(strings)).as_py()
    return int(longest) if longest is not None else 0


def _used_values(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The values a dictionary column refers to (its bounds are theirs), each once."""
    chunks = []
    for chunk in column.chunks:
        indices = chunk.indices.drop_null() if chunk.null_count else chunk.indices
        used = np.zeros(len(chunk.dictionary), dtype=bool)
        used[indices.to_numpy()] = True
        chunks.append(chunk.dictionary.filter(pa.array(used)))
    return pa.chunked_array(chunks, type=column.type.value_type)


def _any_nan(array: pa.ChunkedArray) -> bool:
    """Whether a floating-point column holds a NaN (NumPy where no value is null: a quarter of the
    time)."""
    if array.null_count:
        return bool(pc.any(pc.is_nan(array)).as_py())
    return any(bool(np.isnan(chunk.to_numpy()).any()) for chunk in array.chunks)


def _float_bounds(array: pa.ChunkedArray) -> tuple[float | None, float | None]:
    """``pc.min_max`` of a floating-point column without NaN, computed by NumPy (twenty times
    faster) where no value is null and neither bound is a zero, whose sign Arrow's kernel decides."""
    values = [chunk.to_numpy() for chunk in array.chunks if len(chunk)] if not array.null_count else []
    if values:
        low = min(float(v.min()) for v in values)
        high = max(float(v.max()) for v in values)
        if low != 0.0 and high != 0.0:
            return low, high
    result = pc.min_max(array)
    return result["min"].as_py(), result["max"].as_py()


def _parquet_columns(arrow_type: pa.DataType) -> int:
    """How many Parquet leaf columns a column of ``arrow_type`` is stored as."""
    if pa.types.is_dictionary(arrow_type):
        return 1
    if pa.types.is_struct(arrow_type):
        return sum(_parquet_columns(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pa.types.is_map(arrow_type):
        return _parquet_columns(arrow_type.key_type) + _parquet_columns(arrow_type.item_type)
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return _parquet_columns(arrow_type.value_type)
    return 1


StatsColumns = tuple[tuple[str, ...], ...]
"""Column paths statistics cover (``delta.dataSkippingStatsColumns``; a struct covers its fields)."""


def _leaves(
    schema: pa.Schema, limit: int, from_footer: bool = False, columns: StatsColumns | None = None
) -> list[_Leaf]:
    """The first ``limit`` leaf columns (-1: all), depth first in schema order, or with
    ``columns`` the leaves under those paths, whatever their number; with ``from_footer``, those
    whose figures a Parquet footer gives know their Parquet column."""
    leaves: list[_Leaf] = []
    column = 0
    chosen = set(columns) if columns is not None else None

    def visit(arrow_field: pa.Field, names: tuple[str, ...], indexes: tuple[int, ...]) -> None:
        nonlocal column
        if chosen is None and limit >= 0 and len(leaves) >= limit:
            return
        arrow_type = arrow_field.type
        if pa.types.is_dictionary(arrow_type):  # a dictionary column has its values' statistics
            arrow_type = arrow_type.value_type
        if pa.types.is_struct(arrow_type):
            for index in range(arrow_type.num_fields):
                child = arrow_type.field(index)
                visit(child, (*names, child.name), (*indexes, index))
            return
        footer = column if from_footer and _footer_bounded(arrow_type) else None
        if chosen is None or any(names[:depth] in chosen for depth in range(1, len(names) + 1)):
            leaves.append(_Leaf(names, indexes, arrow_type, footer))
        column += _parquet_columns(arrow_type)

    for index, arrow_field in enumerate(schema):
        visit(arrow_field, (arrow_field.name,), (index,))
    return leaves


def _leaf_array(table: pa.Table, indexes: tuple[int, ...]) -> pa.ChunkedArray:
    """The leaf column at ``indexes``, null wherever one of its parent structs is null."""
    column = table.column(indexes[0])
    for index in indexes[1:]:
        column = pa.chunked_array(
            [chunk.flatten()[index] for chunk in column.chunks], type=column.type.field(index).type
        )
    return column


@dataclass
class StatisticsCollector:
    """Delta statistics of one data file, fed chunk by chunk (see the module docstring).

    With ``from_footer`` the figures a Parquet footer gives are read from the footer of the file
    the chunks were written to, each chunk as whole row groups (:meth:`to_json`).
    """

    schema: pa.Schema
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS
    string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH
    from_footer: bool = False
    stats_columns: StatsColumns | None = None
    num_records: int = 0
    _leaves: list[_Leaf] = field(init=False)
    _chunk_ends: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        limit = -1 if self.num_indexed_cols < 0 else self.num_indexed_cols
        self._leaves = _leaves(self.schema, limit, self.from_footer, self.stats_columns)

    def add(self, table: pa.Table) -> None:
        """Account for ``table`` (rows of the file, with :attr:`schema`)."""
        self.num_records += table.num_rows
        if not table.num_rows:
            return
        self._chunk_ends.append(self.num_records)
        for leaf in self._leaves:
            if leaf.footer is None or _is_text(leaf.arrow_type):
                leaf.add(_leaf_array(table, leaf.indexes))

    def to_json(self, footer: pq.FileMetaData | None = None) -> str:
        """The ``stats`` string of the file's ``add`` action; a collector made ``from_footer``
        needs the ``footer`` of the file written."""
        if self.from_footer:
            if footer is None:
                raise ValueError("statistics taken from a Parquet footer need the file's metadata")
            for leaf in self._leaves:
                if leaf.footer is not None:
                    leaf.read_footer(footer, self._chunk_ends)
        mins: dict[str, Any] = {}
        maxes: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for leaf in self._leaves:  # in schema order, parents before their fields
            parent = leaf.names[:-1]
            name = leaf.names[-1]
            if leaf.nulls is not None:
                _nested(nulls, parent)[name] = leaf.nulls
            else:
                _nested(nulls, parent)
            low, high = leaf.bounds(self.string_prefix_length)
            if low is not None and high is not None:
                _nested(mins, parent)[name] = low
                _nested(maxes, parent)[name] = high
            else:
                _nested(mins, parent)
                _nested(maxes, parent)
        stats = {"numRecords": self.num_records, "minValues": mins, "maxValues": maxes, "nullCount": nulls}
        return orjson.dumps(stats).decode()


def _nested(out: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The dict at ``path`` inside ``out``, created (in order) where missing."""
    for name in path:
        out = out.setdefault(name, {})
    return out


def file_statistics(
    table: pa.Table,
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
    string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH,
) -> str:
    """Delta's statistics JSON of a whole data file held as ``table``."""
    collector = StatisticsCollector(table.schema, num_indexed_cols, string_prefix_length)
    collector.add(table)
    return collector.to_json()


def indexed_paths(
    schema: pa.Schema,
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
    stats_columns: StatsColumns | None = None,
) -> set[tuple[str, ...]]:
    """The leaf columns of ``schema`` that statistics cover (each a path of field names)."""
    limit = -1 if num_indexed_cols < 0 else num_indexed_cols
    return {leaf.names for leaf in _leaves(schema, limit, columns=stats_columns)}


def replace_column_statistics(
    stats: str,
    replacement: str,
    columns: set[str],
    schema: pa.Schema,
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
    *,
    stats_columns: StatsColumns | None = None,
) -> str | None:
    """The statistics of a file whose top-level ``columns`` changed and nothing else: ``stats``
    (the file's before) with those columns' figures taken from ``replacement`` (statistics of
    every leaf of those columns), both keeping only the leaves ``schema``'s statistics cover.
    ``None`` when ``stats`` does not cover every unchanged column it should (a writer that
    collected fewer statistics); the file's statistics must then be collected anew."""
    before = orjson.loads(stats)
    after = orjson.loads(replacement)
    paths = indexed_paths(schema, num_indexed_cols, stats_columns)
    prefixes = {path[:depth] for path in paths for depth in range(1, len(path) + 1)}
    null_counts = before.get("nullCount")
    if not isinstance(null_counts, dict) or not isinstance(before.get("numRecords"), int):
        return None
    if any((name,) in prefixes and name not in null_counts for name in schema.names if name not in columns):
        return None
    merged: dict[str, Any] = {key: value for key, value in before.items() if key not in _FIGURES}
    for figure in _FIGURES:
        old, new = before.get(figure) or {}, after.get(figure) or {}
        values = {}
        for name in schema.names:
            value = _covered(new.get(name), (name,), paths, prefixes) if name in columns else old.get(name)
            if value is not None:
                values[name] = value
        merged[figure] = values
    return orjson.dumps(merged).decode()


_FIGURES = ("minValues", "maxValues", "nullCount")


def _covered(
    value: Any, path: tuple[str, ...], paths: set[tuple[str, ...]], prefixes: set[tuple[str, ...]]
) -> Any:
    """``value`` (a figure at ``path``) with only the covered leaves; ``None`` if none is."""
    if path not in prefixes:
        return None
    if path in paths or not isinstance(value, dict):
        return value
    kept = {name: _covered(item, (*path, name), paths, prefixes) for name, item in value.items()}
    return {name: item for name, item in kept.items() if item is not None}
