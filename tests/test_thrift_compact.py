"""The Thrift compact protocol codec that Parquet footers are edited with: every footer of the
golden tables decodes and encodes back to the same bytes, any struct survives a round trip,
selective decoding agrees with full decoding, and damaged input fails with a typed error."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.data.thrift_compact import (
    BINARY,
    BYTE,
    DOUBLE,
    I16,
    I32,
    I64,
    LIST,
    MAP,
    MAX_DEPTH,
    SET,
    STRUCT,
    TRUE,
    Selection,
    Struct,
    ThriftDecodeError,
    ThriftList,
    ThriftMap,
    decode_struct,
    encode_struct,
)
from tests.paths import GOLDEN_ROOT

GOLDEN_PARQUET = sorted(GOLDEN_ROOT.rglob("*.parquet"))


def footer_of(data: bytes) -> bytes:
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


def test_every_golden_footer_round_trips() -> None:
    assert len(GOLDEN_PARQUET) > 500
    for path in GOLDEN_PARQUET:
        footer = footer_of(path.read_bytes())
        decoded, end = decode_struct(footer)
        assert end == len(footer), path
        assert encode_struct(decoded) == footer, path


def test_page_headers_round_trip_and_select() -> None:
    table = pa.table({"a": list(range(5000)), "b": [f"s{i % 7}" for i in range(5000)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, data_page_size=1024)
    data = sink.getvalue()
    position = 4
    pages = 0
    selection: Selection = {1: None, 3: None, 5: {1: None}}
    while position < len(data) - 8 - len(footer_of(data)):
        header, end = decode_struct(data, position)
        chosen, chosen_end = decode_struct(data, position, selection)
        assert chosen_end == end
        assert encode_struct(header) == data[position:end]
        assert chosen == {k: v for k, v in header.items() if k in (1, 3)} | (
            {5: (STRUCT, {1: header[5][1][1]})} if 5 in header else {}  # type: ignore[index]
        )
        position = end + header[3][1]  # type: ignore[operator]
        pages += 1
    assert pages >= 8


_SCALARS = {
    BYTE: st.integers(-128, 127),
    I16: st.integers(-(2**15), 2**15 - 1),
    I32: st.integers(-(2**31), 2**31 - 1),
    I64: st.integers(-(2**63), 2**63 - 1),
    DOUBLE: st.floats(allow_nan=False),
    BINARY: st.binary(max_size=40),
    TRUE: st.booleans(),
}


def _typed(depth: int) -> st.SearchStrategy[tuple[int, object]]:
    scalar = st.sampled_from(sorted(_SCALARS)).flatmap(lambda k: _SCALARS[k].map(lambda v: (k, v)))
    if depth == 0:
        return scalar
    inner = _typed(depth - 1)
    element_kinds = st.sampled_from([BYTE, I32, I64, BINARY, DOUBLE, TRUE])
    lists = st.tuples(element_kinds, st.sampled_from([LIST, SET])).flatmap(
        lambda ks: st.lists(_SCALARS[ks[0]], max_size=20).map(lambda items: (ks[1], ThriftList(ks[0], items)))
    )
    maps = st.lists(st.tuples(_SCALARS[I32], _SCALARS[BINARY]), min_size=1, max_size=5).map(
        lambda items: (MAP, ThriftMap(I32, BINARY, items))
    )
    structs = _structs(depth - 1).map(lambda s: (STRUCT, s))
    struct_lists = st.lists(_structs(depth - 1), max_size=4).map(
        lambda items: (LIST, ThriftList(STRUCT, items))
    )
    return st.one_of(scalar, lists, maps, structs, struct_lists, inner)


def _structs(depth: int) -> st.SearchStrategy[Struct]:
    return st.dictionaries(st.integers(-300, 32767), _typed(depth), max_size=8)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(_structs(2))
def test_any_struct_round_trips(value: Struct) -> None:
    encoded = encode_struct(value)
    decoded, end = decode_struct(encoded)
    assert end == len(encoded)
    assert decoded == value
    assert encode_struct(decoded) == encoded


@settings(max_examples=60, deadline=None)
@given(_structs(1), st.data())
def test_selection_is_the_selected_part_of_the_whole(value: Struct, data: st.DataObject) -> None:
    encoded = encode_struct(value)
    wanted = data.draw(st.sets(st.sampled_from(sorted(value) or [1])))
    selected, end = decode_struct(encoded + b"tail", 0, dict.fromkeys(wanted))
    assert end == len(encoded)
    assert selected == {k: v for k, v in value.items() if k in wanted}


@settings(max_examples=60, deadline=None)
@given(_structs(1).filter(bool), st.data())
def test_truncated_input_fails_typed(value: Struct, data: st.DataObject) -> None:
    encoded = encode_struct(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ThriftDecodeError):
        decode_struct(encoded[:cut])
    with pytest.raises(ThriftDecodeError):
        decode_struct(encoded[:cut], 0, {})


def test_unknown_type_and_deep_nesting_fail_typed() -> None:
    with pytest.raises(ThriftDecodeError, match="unknown type 14"):
        decode_struct(bytes([0x1E, 0]))
    nested: Struct = {}
    for _ in range(MAX_DEPTH + 2):
        nested = {1: (STRUCT, nested)}
    with pytest.raises(ThriftDecodeError, match="nested deeper"):
        decode_struct(encode_struct(nested))


def test_arrow_buffers_decode_as_unsigned_bytes() -> None:
    value: Struct = {1: (I32, 300), 2: (BINARY, b"\xff\x80"), 20: (I64, -(2**40))}
    buffer = pa.py_buffer(encode_struct(value))
    assert decode_struct(memoryview(buffer))[0] == value
    assert decode_struct(memoryview(buffer), 0, {20: None})[0] == {20: value[20]}
