"""Comparisons of floating-point columns and literals in Spark's order (NaN equal to NaN and above
every number, nulls null), whichever side the literal is on: the kernel takes shortcuts against a
number literal, and these properties hold it to the general rule."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.protocol.sql.operators import compare

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
VALUES = st.one_of(
    st.none(),
    st.sampled_from([math.nan, 0.0, -0.0, math.inf, -math.inf]),
    st.floats(allow_nan=False),
)


def spark(op: str, left: float | None, right: float | None) -> bool | None:
    """``left <op> right`` in Spark's order of doubles."""
    if left is None or right is None:
        return None

    def key(value: float) -> tuple[int, float]:
        return (1, 0.0) if math.isnan(value) else (0, value)

    a, b = key(left), key(right)
    return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def values_of(result: pa.Array | pa.ChunkedArray | pa.Scalar, count: int) -> list[bool | None]:
    if isinstance(result, pa.Scalar):
        return [result.as_py()] * count
    return result.to_pylist()


@settings(max_examples=200, deadline=None)
@given(
    column=st.lists(VALUES, min_size=1, max_size=8),
    literal=VALUES,
    op=st.sampled_from(OPERATORS),
    float32=st.booleans(),
)
def test_column_against_literal_on_either_side(
    column: list[float | None], literal: float | None, op: str, float32: bool
) -> None:
    data_type = pa.float32() if float32 else pa.float64()
    array = pa.array(column, data_type)
    scalar = pa.scalar(literal, data_type)
    stored, value = array.to_pylist(), scalar.as_py()  # as float32 holds them
    assert values_of(compare(op, array, scalar), len(column)) == [spark(op, v, value) for v in stored]
    assert values_of(compare(op, scalar, array), len(column)) == [spark(op, value, v) for v in stored]


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=8), op=st.sampled_from(OPERATORS))
def test_column_against_column(pairs: list[tuple[float | None, float | None]], op: str) -> None:
    left = pa.array([a for a, _ in pairs], pa.float64())
    right = pa.array([b for _, b in pairs], pa.float64())
    assert values_of(compare(op, left, right), len(pairs)) == [spark(op, a, b) for a, b in pairs]
