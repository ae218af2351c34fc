"""Delta's per-file statistics: ``numRecords`` and ``minValues``/``maxValues``/``nullCount``.

Statistics cover the first ``delta.dataSkippingNumIndexedCols`` leaf columns of a data file, in
schema order, nested struct fields counted one by one (-1: all). Min/max are kept for types Delta
orders (numbers, booleans, strings, dates, timestamps, decimals up to precision 15), left out for
binary, arrays and maps, for float columns holding NaN, and for columns without a non-null value;
strings are truncated to ``delta.dataSkippingStringPrefixLength`` characters (32 by default; the
max then gets a tie breaker so it stays an upper bound),
timestamps are written with millisecond precision.

A :class:`StatisticsCollector` takes a file's data in chunks, computes each chunk's figures with
``pyarrow.compute`` (no per-row Python) and combines them, so a file written batch by batch never
has to be held whole.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.table_properties import (
    DATA_SKIPPING_NUM_INDEXED_COLS,
    DATA_SKIPPING_STRING_PREFIX_LENGTH,
)

MAX_STRING_TIE_BREAKER = "\U0010ffff"
"""Appended to a truncated max string so it stays an upper bound."""
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


@dataclass
class _Leaf:
    """Running figures of one leaf column (``path`` are field indexes from the top level)."""

    names: tuple[str, ...]
    indexes: tuple[int, ...]
    arrow_type: pa.DataType
    nulls: int = 0
    low: Any = None
    high: Any = None
    has_nan: bool = False

    def add(self, array: pa.ChunkedArray) -> None:
        self.nulls += array.null_count
        if self.has_nan or not _has_min_max(self.arrow_type) or array.null_count == len(array):
            return
        if pa.types.is_dictionary(array.type):
            array = _used_values(array)
        if pa.types.is_floating(self.arrow_type):
            if _any_nan(array):
                self.has_nan = True
                return
            low, high = _float_bounds(array)
        else:
            result = pc.min_max(array)
            low, high = result["min"].as_py(), result["max"].as_py()
        if low is not None and (self.low is None or low < self.low):
            self.low = low
        if high is not None and (self.high is None or high > self.high):
            self.high = high

    def bounds(self, prefix_length: int) -> tuple[Any, Any]:
        """Minimum and maximum as written (strings cut to ``prefix_length`` characters)."""
        if self.has_nan or self.low is None or self.high is None:
            return None, None
        low, high = self.low, self.high
        if isinstance(low, str) and len(low) > prefix_length:
            low = low[:prefix_length]
        if isinstance(high, str) and len(high) > prefix_length:
            high = high[:prefix_length] + MAX_STRING_TIE_BREAKER
        return _stat_value(low, self.arrow_type), _stat_value(high, self.arrow_type)


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


def _leaves(schema: pa.Schema, limit: int) -> list[_Leaf]:
    """The first ``limit`` leaf columns (-1: all), depth first in schema order."""
    leaves: list[_Leaf] = []

    def visit(arrow_field: pa.Field, names: tuple[str, ...], indexes: tuple[int, ...]) -> None:
        if limit >= 0 and len(leaves) >= limit:
            return
        arrow_type = arrow_field.type
        if pa.types.is_dictionary(arrow_type):  # a dictionary column has its values' statistics
            arrow_type = arrow_type.value_type
        if pa.types.is_struct(arrow_type):
            for index in range(arrow_type.num_fields):
                child = arrow_type.field(index)
                visit(child, (*names, child.name), (*indexes, index))
            return
        leaves.append(_Leaf(names, indexes, arrow_type))

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
    """Delta statistics of one data file, fed chunk by chunk (see the module docstring)."""

    schema: pa.Schema
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS
    string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH
    num_records: int = 0
    _leaves: list[_Leaf] = field(init=False)

    def __post_init__(self) -> None:
        self._leaves = _leaves(self.schema, -1 if self.num_indexed_cols < 0 else self.num_indexed_cols)

    def add(self, table: pa.Table) -> None:
        """Account for ``table`` (rows of the file, with :attr:`schema`)."""
        self.num_records += table.num_rows
        if table.num_rows:
            for leaf in self._leaves:
                leaf.add(_leaf_array(table, leaf.indexes))

    def to_json(self) -> str:
        """The ``stats`` string of the file's ``add`` action."""
        mins: dict[str, Any] = {}
        maxes: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for leaf in self._leaves:  # in schema order, parents before their fields
            parent = leaf.names[:-1]
            name = leaf.names[-1]
            _nested(nulls, parent)[name] = leaf.nulls
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
