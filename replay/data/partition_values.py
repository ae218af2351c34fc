"""Partition values: Delta's string form of each type, parsed, and filled in as Arrow columns.

Delta writes partition values as strings: numbers in decimal, booleans ``true``/``false``, dates
``yyyy-MM-dd``, timestamps ``yyyy-MM-dd HH:mm:ss[.ffffff]`` (UTC) or ISO-8601 with a zone, binary
as the string's UTF-8 bytes; an empty string is null for every type but string.
:func:`constant_array` fills a column with one value in bulk (also the change feed's columns).
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from replay.protocol.schema import DataType, PrimitiveType, arrow_type


def parse_partition_value(value: str | None, data_type: DataType) -> Any:
    """The Python value of a serialised partition value (``None`` stays null).

    Delta writes partition values as strings: numbers in decimal, booleans ``true``/``false``,
    dates ``yyyy-MM-dd``, timestamps ``yyyy-MM-dd HH:mm:ss[.ffffff]`` (UTC) or ISO-8601 with a
    zone, binary as the string's UTF-8 bytes. An empty string is null for every type but string.
    Raises :class:`ValueError` naming the value and the type when it cannot be parsed.
    """
    if value is None:
        return None
    if not isinstance(data_type, PrimitiveType):
        raise ValueError(f"partition columns must have a primitive type, not {data_type}")
    name = data_type.name
    if name == "string":
        return value
    if value == "":
        return None
    try:
        if name in ("long", "integer", "short", "byte"):
            return int(value)
        if name in ("float", "double"):
            return float(value)
        if name == "boolean":
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(value)
            return lowered == "true"
        if name == "date":
            return _dt.date.fromisoformat(value.strip()[:10])
        if name in ("timestamp", "timestamp_ntz"):
            return _parse_timestamp(value, zoned=name == "timestamp")
        if name == "binary":
            return value.encode("utf-8")
        if data_type.is_decimal:
            return Decimal(value)
    except ValueError:
        raise ValueError(f"Cannot parse partition value {value!r} as {name}") from None
    raise ValueError(f"unsupported partition column type {name}")


def _parse_timestamp(value: str, zoned: bool) -> _dt.datetime:
    parsed = _dt.datetime.fromisoformat(value.strip())
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(_dt.UTC)
        return parsed if zoned else parsed.replace(tzinfo=None)
    return parsed.replace(tzinfo=_dt.UTC) if zoned else parsed


def partition_value_array(value: str | None, data_type: DataType, length: int) -> pa.Array:
    """``length`` copies of a serialised partition value as an array of ``data_type``'s Arrow type."""
    return constant_array(parse_partition_value(value, data_type), arrow_type(data_type), length)


_UNSIGNED_OF_WIDTH: dict[int, type[np.unsignedinteger[Any]]] = {
    1: np.uint8,
    2: np.uint16,
    4: np.uint32,
    8: np.uint64,
}


def constant_array(value: Any, data_type: pa.DataType, length: int) -> pa.Array:
    """``length`` copies of the Python ``value`` as an array of ``data_type`` (nulls for ``None``).

    Strings, binaries and fixed-width values of 1 to 8 bytes are filled in bulk in buffers of
    Arrow's memory pool (which keeps freed memory for reuse, so a large result does not cost
    fresh pages on every read); other types go through :func:`pyarrow.repeat`.
    """
    if value is None:
        return pa.nulls(length, data_type)
    if pa.types.is_string(data_type) or pa.types.is_binary(data_type):
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if len(data) * length < 2**31:
            offsets, offset_values = _pool_array(np.int32, length + 1)
            offset_values[0] = 0
            offset_values[1:] = len(data)
            np.cumsum(offset_values, out=offset_values)
            values, bytes_view = _pool_array(np.uint8, length * len(data))
            _fill_repeating(bytes_view, data)
            return pa.Array.from_buffers(data_type, length, [None, offsets, values])
    single = pa.array([value], type=data_type)
    if pa.types.is_primitive(data_type) and not pa.types.is_boolean(data_type):
        width = _UNSIGNED_OF_WIDTH.get(data_type.byte_width)
        if width is not None:
            values, view = _pool_array(width, length)
            view[:] = np.frombuffer(single.buffers()[1], dtype=width, count=1)[0]
            return pa.Array.from_buffers(data_type, length, [None, values])
    return pa.repeat(single[0], length)


def _fill_repeating(target: np.ndarray, pattern: bytes) -> None:
    """Fill the byte array ``target`` with copies of ``pattern`` (its length a multiple of it)."""
    if not target.size:
        return
    target[: len(pattern)] = np.frombuffer(pattern, dtype=np.uint8)
    filled = len(pattern)
    while filled < target.size:
        step = min(filled, target.size - filled)
        target[filled : filled + step] = target[:step]
        filled += step


def _pool_array(dtype: type[np.generic], length: int) -> tuple[pa.Buffer, np.ndarray]:
    """A new buffer of ``length`` ``dtype`` items from Arrow's memory pool and a writable view of it."""
    buffer = pa.allocate_buffer(length * np.dtype(dtype).itemsize)
    return buffer, np.frombuffer(buffer, dtype=dtype)
