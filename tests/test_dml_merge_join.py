"""MERGE's equi-join of whole-number keys (binary search over the sorted source keys, narrowed by a
table of flags where the keys' range is narrow) finds exactly the pairs a nested loop finds, in
target order then source order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.dml.merge_join import _sorted_join

KEYS = st.one_of(st.none(), st.integers(-5, 40), st.sampled_from([-(2**62), 2**62, 10**9]))


def nested_loop(target: list[int | None], source: list[int | None]) -> list[tuple[int, int]]:
    return [
        (t, s)
        for t, t_value in enumerate(target)
        for s, s_value in enumerate(source)
        if t_value is not None and t_value == s_value
    ]


@settings(max_examples=400, deadline=None)
@given(st.lists(KEYS, max_size=60), st.lists(KEYS, max_size=30))
def test_pairs_are_the_nested_loops(target: list[int | None], source: list[int | None]) -> None:
    source_values = np.array([0 if v is None else v for v in source], dtype=np.int64)
    valid = np.flatnonzero([v is not None for v in source])
    order = valid[np.argsort(source_values[valid], kind="stable")]
    t_pos, s_idx = _sorted_join(pa.array(target, pa.int64()), source_values[order], order)
    assert list(zip(t_pos.tolist(), s_idx.tolist(), strict=True)) == nested_loop(target, source)


def test_a_file_of_consecutive_keys_against_scattered_source_keys() -> None:
    """The benchmark's shape: a file of 100 000 consecutive ids, a source spread over a hundred
    times their range."""
    rng = np.random.default_rng(3)
    target = np.arange(500_000, 600_000, dtype=np.int64)
    source = rng.choice(10_000_000, 50_000, replace=False).astype(np.int64)
    order = np.argsort(source, kind="stable")
    t_pos, s_idx = _sorted_join(pa.array(target), source[order], order)
    inside = np.flatnonzero((source >= 500_000) & (source < 600_000))
    assert sorted(s_idx.tolist()) == sorted(inside.tolist())
    assert (target[t_pos] == source[s_idx]).all()
    assert (np.diff(t_pos) > 0).all()
