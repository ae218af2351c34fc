"""File statistics computed by NumPy (floating-point bounds, NaN checks) and over dictionary
columns equal what ``pyarrow.compute`` gives over the plain values, for any values and chunking."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.txn.statistics import file_statistics

FLOATS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan]),
)
STRINGS = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "zz", "é", "a" * 40]))


def reference(array: pa.ChunkedArray) -> dict[str, Any]:
    """The statistics of one column as ``pyarrow.compute`` alone computes them (over the same
    chunks: which zero a bound is depends on them)."""
    nulls = array.null_count
    floating = pa.types.is_floating(array.type)
    if nulls == len(array) or (floating and pc.any(pc.is_nan(array)).as_py()):
        return {"nullCount": nulls}
    bounds = pc.min_max(array)
    return {"nullCount": nulls, "min": bounds["min"].as_py(), "max": bounds["max"].as_py()}


def computed(table: pa.Table) -> dict[str, Any]:
    stats = json.loads(file_statistics(table, string_prefix_length=64))
    found = {"nullCount": stats["nullCount"]["c"]}
    if "c" in stats["minValues"]:
        found["min"], found["max"] = stats["minValues"]["c"], stats["maxValues"]["c"]
    return found


def chunked(values: list[Any], arrow_type: pa.DataType, cuts: list[int]) -> pa.ChunkedArray:
    bounds = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    return pa.chunked_array(
        [pa.array(values[a:b], arrow_type) for a, b in itertools.pairwise(bounds)], arrow_type
    )


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal, telling -0.0 from 0.0."""
    return (
        a.keys() == b.keys()
        and all(
            (math.copysign(1, a[k]) == math.copysign(1, b[k])) if isinstance(a[k], float) else True for k in a
        )
        and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(FLOATS, max_size=40),
    st.lists(st.integers(0, 40), max_size=3),
    st.sampled_from([pa.float64(), pa.float32()]),
)
def test_floating_point_bounds_are_arrows(
    values: list[Any], cuts: list[int], arrow_type: pa.DataType
) -> None:
    if arrow_type == pa.float32():
        values = [v if v is None or not math.isfinite(v) or abs(v) < 3e38 else 1.0 for v in values]
    column = chunked(values, arrow_type, cuts)
    expected = reference(column)
    found = computed(pa.table({"c": column}))
    for bound in ("min", "max"):  # JSON keeps no infinities: the statistics leave them out
        if bound in expected and not math.isfinite(expected[bound]):
            expected.pop("min"), expected.pop("max")
            break
    assert same(found, expected), (values, found, expected)


@settings(max_examples=300, deadline=None)
@given(st.lists(STRINGS, max_size=40), st.lists(st.integers(0, 40), max_size=3), st.integers(0, 40))
def test_dictionary_columns_have_their_values_bounds(values: list[Any], cuts: list[int], start: int) -> None:
    plain = chunked(values, pa.string(), cuts)
    encoded = pa.chunked_array(
        [pc.dictionary_encode(chunk) for chunk in plain.chunks], pa.dictionary(pa.int32(), pa.string())
    )
    sliced = encoded.slice(start % (len(values) + 1))  # dictionaries then hold values no row uses
    expected = computed(pa.table({"c": plain.slice(start % (len(values) + 1))}))
    assert computed(pa.table({"c": sliced})) == expected
    assert expected == reference(plain.slice(start % (len(values) + 1)))
