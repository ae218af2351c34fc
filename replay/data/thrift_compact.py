"""Apache Thrift's compact protocol, read and written without a schema.

Parquet stores its footer and page headers as Thrift structs in the compact protocol. Editing a
footer (:mod:`replay.data.parquet_splice`) must keep every field it does not know about exactly
as it was, so structs are decoded generically: a :data:`Struct` maps each field id to its wire
type and value, and encoding it again gives the same bytes (fields in id order, as every Thrift
writer sends them). Values: ``bool``, ``int`` (byte, i16, i32, i64), ``float`` (double),
``bytes`` (binary and string), :data:`Struct`, :class:`ThriftList` (lists and sets) and
:class:`ThriftMap`.

Malformed input raises :class:`ThriftDecodeError` naming the offset; nesting is limited to
:data:`MAX_DEPTH`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

STOP = 0
TRUE = 1
FALSE = 2
BYTE = 3
I16 = 4
I32 = 5
I64 = 6
DOUBLE = 7
BINARY = 8
LIST = 9
SET = 10
MAP = 11
STRUCT = 12
MAX_DEPTH = 64
"""Deepest nesting of structs and containers decoded (a Parquet footer needs about ten)."""

_DOUBLE = struct.Struct("<d")
_INTEGERS = (BYTE, I16, I32, I64)


@dataclass
class ThriftList:
    """A list or set (the field's wire type says which) with the wire type of its elements."""

    element_type: int
    items: Sequence[Value] = field(default_factory=list)


@dataclass
class ThriftMap:
    """A map with the wire types of its keys and values, entries in wire order."""

    key_type: int
    value_type: int
    items: list[tuple[Value, Value]] = field(default_factory=list)


Value = Union[bool, int, float, bytes, "Struct", ThriftList, ThriftMap]
Struct = dict[int, tuple[int, Value]]
"""A struct: field id -> (wire type, value); booleans have wire type :data:`TRUE`."""


class ThriftDecodeError(ValueError):
    """The bytes are not a Thrift compact-protocol struct."""


Selection = Mapping[int, "Selection | None"]
"""Which fields of a struct to decode: field id -> ``None`` (the whole value) or the selection
of a struct field's own fields."""


def decode_struct(
    data: bytes | memoryview, offset: int = 0, selection: Selection | None = None
) -> tuple[Struct, int]:
    """The struct encoded at ``offset`` of ``data`` (only the fields ``selection`` names, if
    given: the others are skipped without being decoded) and the offset just past it."""
    reader = _Reader(_bytes_view(data), offset)
    try:
        value = reader.struct(0, selection)
    except (IndexError, struct.error):
        raise ThriftDecodeError(f"Thrift struct at offset {offset} is truncated") from None
    return value, reader.pos


def _bytes_view(data: bytes | memoryview) -> memoryview:
    """``data`` as unsigned bytes (a view of an Arrow buffer has signed ones)."""
    view = memoryview(data)
    return view if view.format == "B" else view.cast("B")


def encode_struct(value: Struct) -> bytes:
    """``value`` in the compact protocol."""
    out = bytearray()
    _write_struct(out, value)
    return bytes(out)


class _Reader:
    def __init__(self, data: memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        byte = self.data[self.pos]
        self.pos += 1
        if byte < 0x80:  # most are one byte
            return byte
        result, shift = byte & 0x7F, 7
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ThriftDecodeError(f"Thrift varint at offset {self.pos} is longer than 10 bytes")

    def zigzag(self) -> int:
        raw = self.varint()
        return (raw >> 1) ^ -(raw & 1)

    def struct(self, depth: int, selection: Selection | None = None) -> Struct:
        """The struct at :attr:`pos`: every field, or those ``selection`` names (the others
        skipped)."""
        if depth > MAX_DEPTH:
            raise ThriftDecodeError(f"Thrift value at offset {self.pos} is nested deeper than {MAX_DEPTH}")
        fields: Struct = {}
        last = 0
        while True:
            header = self.data[self.pos]
            self.pos += 1
            kind = header & 0x0F
            if kind == STOP:
                return fields
            delta = header >> 4
            last = last + delta if delta else self.zigzag()
            if selection is not None and last not in selection:
                if kind not in (TRUE, FALSE):
                    self.skip(kind, depth + 1)
                continue
            if kind in (TRUE, FALSE):
                fields[last] = (TRUE, kind == TRUE)
                continue
            inner = selection[last] if selection is not None else None
            if inner is not None and kind == STRUCT:
                fields[last] = (kind, self.struct(depth + 1, inner))
            else:
                fields[last] = (kind, self.value(kind, depth + 1))

    def skip(self, kind: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ThriftDecodeError(f"Thrift value at offset {self.pos} is nested deeper than {MAX_DEPTH}")
        if kind in (TRUE, FALSE, BYTE):
            self.pos += 1
        elif kind in (I16, I32, I64):
            self.varint()
        elif kind == DOUBLE:
            self.pos += 8
        elif kind == BINARY:
            size = self.varint()  # read before pos is (``pos += varint()`` would lose its bytes)
            self.pos += size
        elif kind == STRUCT:
            while True:
                header = self.data[self.pos]
                self.pos += 1
                inner = header & 0x0F
                if inner == STOP:
                    break
                if not header >> 4:
                    self.zigzag()
                if inner not in (TRUE, FALSE):
                    self.skip(inner, depth + 1)
        elif kind in (LIST, SET, MAP):
            self.value(kind, depth)  # rare in the structs skipped; decoded and dropped
        else:
            raise ThriftDecodeError(f"Thrift value at offset {self.pos} has unknown type {kind}")
        if self.pos > len(self.data):
            raise ThriftDecodeError(f"Thrift value before offset {self.pos} runs past the end")

    def value(self, kind: int, depth: int) -> Value:
        if kind in (TRUE, FALSE):  # inside a container: one byte, 1 for true
            return self.byte() == TRUE
        if kind == BYTE:
            raw = self.byte()
            return raw - 256 if raw > 127 else raw
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            (number,) = _DOUBLE.unpack_from(self.data, self.pos)
            self.pos += 8
            return float(number)
        if kind == BINARY:
            size = self.varint()
            end = self.pos + size
            if end > len(self.data):
                raise ThriftDecodeError(f"Thrift binary at offset {self.pos} runs past the end")
            value = bytes(self.data[self.pos : end])
            self.pos = end
            return value
        if kind in (LIST, SET):
            header = self.byte()
            size = header >> 4
            if size == 15:
                size = self.varint()
            element = header & 0x0F
            items = [self.value(element, depth + 1) for _ in range(size)]
            return ThriftList(TRUE if element == FALSE else element, items)
        if kind == MAP:
            size = self.varint()
            if not size:
                return ThriftMap(STOP, STOP)
            types = self.byte()
            key_type, value_type = types >> 4, types & 0x0F
            entries = [
                (self.value(key_type, depth + 1), self.value(value_type, depth + 1)) for _ in range(size)
            ]
            return ThriftMap(key_type, value_type, entries)
        if kind == STRUCT:
            return self.struct(depth)
        raise ThriftDecodeError(f"Thrift value at offset {self.pos} has unknown type {kind}")


def _varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(out: bytearray, value: int) -> None:
    _varint(out, (value << 1) ^ (value >> 63) if value < 0 else value << 1)


def _write_struct(out: bytearray, fields: Struct) -> None:
    last = 0
    for field_id in sorted(fields):
        kind, value = fields[field_id]
        if kind in (TRUE, FALSE):
            kind = TRUE if value else FALSE
        delta = field_id - last
        if 0 < delta <= 15:
            out.append(delta << 4 | kind)
        else:
            out.append(kind)
            _zigzag(out, field_id)
        if kind not in (TRUE, FALSE):
            _write_value(out, kind, value)
        last = field_id
    out.append(STOP)


def _write_value(out: bytearray, kind: int, value: Value) -> None:
    if kind in (TRUE, FALSE):
        out.append(TRUE if value else FALSE)
    elif kind == BYTE:
        assert isinstance(value, int)
        out.append(value & 0xFF)
    elif kind in (I16, I32, I64):
        assert isinstance(value, int)
        _zigzag(out, value)
    elif kind == DOUBLE:
        assert isinstance(value, float)
        out += _DOUBLE.pack(value)
    elif kind == BINARY:
        assert isinstance(value, bytes)
        _varint(out, len(value))
        out += value
    elif kind in (LIST, SET):
        assert isinstance(value, ThriftList)
        size = len(value.items)
        if size < 15:
            out.append(size << 4 | value.element_type)
        else:
            out.append(0xF0 | value.element_type)
            _varint(out, size)
        for item in value.items:
            _write_value(out, value.element_type, item)
    elif kind == MAP:
        assert isinstance(value, ThriftMap)
        _varint(out, len(value.items))
        if value.items:
            out.append(value.key_type << 4 | value.value_type)
        for key, item in value.items:
            _write_value(out, value.key_type, key)
            _write_value(out, value.value_type, item)
    elif kind == STRUCT:
        assert isinstance(value, dict)
        _write_struct(out, value)
    else:
        raise ValueError(f"cannot encode Thrift type {kind}")
