"""MERGE's join: which source rows each row of a target file matches, and which files to read.

The ON condition is split into join keys (``t.k = s.k``, ``t.k <=> s.k``, each side reading one
scope) and the rest. With keys, a target file's rows are matched by a hash join of the key values
(Arrow's; the source side's keys are evaluated once per process) and the pairs found are filtered
by the rest of the condition; without keys, every pair is tried, in chunks. Keys compare as SQL
``=`` does: nulls match nothing (``<=>``: each other), ``NaN`` matches ``NaN`` and ``-0.0``
matches ``0.0``.

:func:`source_key_ranges` is the early filter: the source's key values (clusters of them, at
most :data:`MAX_KEY_RANGES` ranges per key, else their minimum and maximum) as a predicate on the
target's key columns, which prunes the target files whose statistics cannot hold a matching row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.dml.expressions import SqlText
from replay.protocol.predicates import FALSE, And, Compare, IsNull, Or, Predicate
from replay.protocol.sql import BoundExpression, JoinKey, join_keys
from replay.protocol.sql.bound import BCast, BColumn, Bound

MAX_KEY_RANGES = 16
"""Ranges of source key values the early filter uses per key (more values: split at the largest gaps)."""
MAX_PAIRS_PER_CHUNK = 1 << 20
"""Row pairs tried at once by a join without keys."""

TARGET_PREFIX = "\x00t:"
SOURCE_PREFIX = "\x00s:"


def target_name(column: str) -> str:
    return TARGET_PREFIX + column


def source_name(column: str) -> str:
    return SOURCE_PREFIX + column


def column_mapping(
    aliases: tuple[str, str], target: list[str], source: list[str]
) -> dict[tuple[str, str], str]:
    """How expressions over ``(target alias, source alias)`` find their columns in a joined table."""
    mapping = {(aliases[0], c): target_name(c) for c in target}
    mapping.update({(aliases[1], c): source_name(c) for c in source})
    return mapping


def joined(target: pa.Table, target_rows: np.ndarray, source: pa.Table, source_rows: np.ndarray) -> pa.Table:
    """Pairs of rows side by side: ``target``'s columns (prefixed) at ``target_rows`` and
    ``source``'s at ``source_rows``."""
    t_index = pa.array(target_rows, pa.int64())
    s_index = pa.array(source_rows, pa.int64())
    arrays = [target.column(c).take(t_index) for c in target.column_names]
    arrays += [source.column(c).take(s_index) for c in source.column_names]
    names = [target_name(c) for c in target.column_names] + [source_name(c) for c in source.column_names]
    if not names:
        return pa.table({"_": pa.nulls(len(target_rows))})
    return pa.Table.from_arrays(arrays, names=names)


def _normalised(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Float keys with ``-0.0`` as ``0.0`` (SQL equality; the hash join compares bits)."""
    if pa.types.is_floating(values.type):
        return pc.add(values, pa.scalar(0.0, values.type))
    return values


def _null_default(arrow_type: pa.DataType) -> pa.Scalar:
    """A value standing in for null in a null-safe key (its null flag tells the two apart)."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.scalar("", arrow_type)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.scalar(b"", arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.scalar(False)
    return pa.scalar(0).cast(arrow_type)


def _key_columns(keys: list[JoinKey], values: list[pa.Array | pa.ChunkedArray]) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    for i, (key, raw) in enumerate(zip(keys, values, strict=True)):
        value = _normalised(raw)
        if key.null_safe:
            columns[f"n{i}"] = pc.is_null(value)
            value = pc.fill_null(value, _null_default(value.type))
        columns[f"k{i}"] = value
    return columns


@dataclass(frozen=True, eq=False)
class MergeJoin:
    """The ON condition of a MERGE (bound over ``{target alias, source alias}``) and the source
    rows (held whole, as Delta materializes a MERGE's source). Picklable."""

    condition: SqlText
    target_alias: str
    source_alias: str
    source: pa.Table

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for cached in ("parts", "source_keys", "sorted_source_keys"):
            state.pop(cached, None)
        return state

    @cached_property
    def parts(self) -> tuple[list[JoinKey], BoundExpression | None]:
        return join_keys(self.condition.bound, self.target_alias, self.source_alias)

    @property
    def keys(self) -> list[JoinKey]:
        return self.parts[0]

    def target_columns(self) -> list[str]:
        return self.condition.bound.columns(self.target_alias)

    @cached_property
    def source_keys(self) -> pa.Table:
        """The source's key values, evaluated once, with each row's index (``__s``)."""
        mapping = {(self.source_alias, c): c for c in self.source.column_names}
        values = [key.source.evaluate(self.source, mapping) for key in self.keys]
        columns = _key_columns(self.keys, values)
        columns["__s"] = pa.array(np.arange(self.source.num_rows, dtype=np.int64))
        return pa.table(columns)

    @cached_property
    def sorted_source_keys(self) -> tuple[np.ndarray, np.ndarray] | None:
        """For a single key of whole numbers (integers, dates, timestamps) compared with ``=``: the
        source's non-null key values sorted, and the source row of each (``None`` otherwise)."""
        keys = self.keys
        if len(keys) != 1 or keys[0].null_safe or _whole_numbers(keys[0].source.type) is None:
            return None
        mapping = {(self.source_alias, c): c for c in self.source.column_names}
        values = _as_int64(keys[0].source.evaluate(self.source, mapping))
        valid = np.flatnonzero(values[1])
        order = valid[np.argsort(values[0][valid], kind="stable")]
        return values[0][order], order

    def match(self, target: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The pairs ``(target positions, source indexes)`` satisfying the ON condition, ordered
        by target position then source index; ``target`` holds (at least) the condition's target
        columns."""
        if self.source.num_rows == 0 or target.num_rows == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        keys, rest = self.parts
        if not keys:
            return self._nested_loop(target)
        mapping = {(self.target_alias, c): c for c in target.column_names}
        values = [key.target.evaluate(target, mapping) for key in keys]
        if self.sorted_source_keys is not None:
            t_pos, s_idx = _sorted_join(values[0], *self.sorted_source_keys)
        else:
            left = pa.table({**_key_columns(keys, values), "__t": np.arange(target.num_rows, dtype=np.int64)})
            names = [name for name in left.column_names if name != "__t"]
            pairs = left.join(self.source_keys, keys=names, join_type="inner", use_threads=False)
            t_pos = pairs.column("__t").to_numpy()
            s_idx = pairs.column("__s").to_numpy()
            order = np.lexsort((s_idx, t_pos))
            t_pos, s_idx = t_pos[order], s_idx[order]
        if rest is not None and t_pos.size:
            keep = self._holds(rest, target, t_pos, s_idx)
            t_pos, s_idx = t_pos[keep], s_idx[keep]
        return t_pos.astype(np.int64), s_idx.astype(np.int64)

    def _holds(
        self, condition: BoundExpression, target: pa.Table, t_pos: np.ndarray, s_idx: np.ndarray
    ) -> np.ndarray:
        """Where ``condition`` holds for the pairs."""
        t_cols = [c for c in condition.columns(self.target_alias)]
        s_cols = [c for c in condition.columns(self.source_alias)]
        data = joined(target.select(t_cols), t_pos, self.source.select(s_cols), s_idx)
        mapping = column_mapping((self.target_alias, self.source_alias), t_cols, s_cols)
        result = condition.matches(data, mapping)
        return np.asarray(
            result.to_numpy(zero_copy_only=False) if isinstance(result, pa.Array) else result.to_numpy()
        )

    def _nested_loop(self, target: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        count = self.source.num_rows
        chunk = max(1, MAX_PAIRS_PER_CHUNK // count)
        found_t: list[np.ndarray] = []
        found_s: list[np.ndarray] = []
        for start in range(0, target.num_rows, chunk):
            stop = min(start + chunk, target.num_rows)
            t_pos = np.repeat(np.arange(start, stop, dtype=np.int64), count)
            s_idx = np.tile(np.arange(count, dtype=np.int64), stop - start)
            keep = self._holds(self.condition.bound, target, t_pos, s_idx)
            found_t.append(t_pos[keep])
            found_s.append(s_idx[keep])
        return np.concatenate(found_t), np.concatenate(found_s)


def _whole_numbers(arrow_type: pa.DataType) -> pa.DataType | None:
    """The integer type a key of ``arrow_type`` compares as (``None``: not a whole-number type)."""
    if pa.types.is_integer(arrow_type) or pa.types.is_timestamp(arrow_type) or pa.types.is_date64(arrow_type):
        return pa.int64()
    if pa.types.is_date32(arrow_type):
        return pa.int32()
    return None


def _as_int64(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Key values as int64 (nulls as 0) and where they are valid."""
    physical = _whole_numbers(values.type)
    assert physical is not None
    numbers = values.cast(physical) if values.type != physical else values
    valid = pc.is_valid(numbers)
    filled = pc.fill_null(numbers, 0).cast(pa.int64())
    as_numpy = (
        filled.to_numpy() if isinstance(filled, pa.ChunkedArray) else filled.to_numpy(zero_copy_only=False)
    )
    mask = valid.to_numpy() if isinstance(valid, pa.ChunkedArray) else valid.to_numpy(zero_copy_only=False)
    return np.asarray(as_numpy, dtype=np.int64), np.asarray(mask, dtype=bool)


def _sorted_join(
    target: pa.Array | pa.ChunkedArray, keys: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Equal-key pairs of ``target`` values against sorted source ``keys`` (with their source
    ``rows``): for each target row, every source row of its key range (binary search, among the
    keys within the target's range of values, for the rows :func:`_candidates` leaves)."""
    empty = np.empty(0, np.int64), np.empty(0, np.int64)
    values, valid = _as_int64(target)
    if not valid.any():
        return empty
    present = values if valid.all() else values[valid]
    lowest, highest = int(present.min()), int(present.max())
    start = np.searchsorted(keys, lowest, side="left")
    stop = np.searchsorted(keys, highest, side="right")
    keys, rows = keys[start:stop], rows[start:stop]
    if not keys.size:
        return empty
    candidates = _candidates(values, valid, keys, lowest, highest)
    found = values[candidates]
    low = np.searchsorted(keys, found, side="left")
    counts = np.searchsorted(keys, found, side="right") - low
    matched = np.flatnonzero(counts)
    if not matched.size:
        return empty
    per_hit = counts[matched]
    t_pos = np.repeat(candidates[matched], per_hit)
    starts = np.repeat(low[matched] - np.cumsum(per_hit) + per_hit, per_hit)
    positions = starts + np.arange(t_pos.size)
    return t_pos.astype(np.int64), rows[positions].astype(np.int64)


DENSE_SPAN_PER_ROW = 4
"""How wide (in values per target row) a range of key values may be for :func:`_candidates` to
mark the keys in a table of flags over it."""


def _candidates(
    values: np.ndarray, valid: np.ndarray, keys: np.ndarray, lowest: int, highest: int
) -> np.ndarray:
    """The target rows (ascending) whose value may equal one of ``keys`` (sorted, within
    ``[lowest, highest]``, the range of the valid ``values``): where that range is narrow, those
    whose value is flagged in a table of the keys (a lookup per row, no search); else every valid
    row."""
    span = highest - lowest + 1
    if span > DENSE_SPAN_PER_ROW * values.size + 1024:
        return np.flatnonzero(valid)
    flagged = np.zeros(span, dtype=bool)
    flagged[keys - lowest] = True
    if valid.all():
        return np.flatnonzero(flagged[values - lowest])
    offsets = np.where(valid, values - lowest, 0)
    return np.flatnonzero(flagged[offsets] & valid)


# -- the early filter ------------------------------------------------------------------------------
_MONOTONE_KINDS = (pa.types.is_integer, pa.types.is_decimal, pa.types.is_floating)


def _plain_column(node: Bound, alias: str) -> str | None:
    """The target column a key side reads, if its value orders as the column does (the column, or
    the column widened to a wider number type); else ``None``."""
    if isinstance(node, BCast):
        child = node.child
        widening = any(kind(node.type) for kind in _MONOTONE_KINDS) and pa.types.is_integer(child.type)
        return _plain_column(child, alias) if widening else None
    if isinstance(node, BColumn) and node.scope == alias and len(node.path) == 1:
        return node.path[0]
    return None


def _orderable(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_timestamp(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_string(arrow_type)
    )


def _clusters(values: pa.Array) -> list[tuple[pa.Scalar, pa.Scalar]]:
    """``(low, high)`` ranges covering ``values`` (non-null): split at the largest gaps for integers
    and times, one range otherwise."""
    arrow_type = values.type
    if pa.types.is_integer(arrow_type) or pa.types.is_date(arrow_type) or pa.types.is_timestamp(arrow_type):
        physical = pa.int64() if not pa.types.is_date32(arrow_type) else pa.int32()
        numbers = np.unique(values.cast(physical).to_numpy(zero_copy_only=False))
        if numbers.size > 1:
            gaps = np.diff(numbers)
            cuts = np.sort(np.argsort(gaps)[::-1][: MAX_KEY_RANGES - 1])
            cuts = cuts[gaps[cuts] > 1]
            starts = np.concatenate([[0], cuts + 1])
            ends = np.concatenate([cuts, [numbers.size - 1]])
        else:
            starts = ends = np.zeros(1, dtype=np.int64)
        lows = pa.array(numbers[starts]).cast(physical).cast(arrow_type)
        highs = pa.array(numbers[ends]).cast(physical).cast(arrow_type)
        return list(zip(lows, highs, strict=True))
    bounds = pc.min_max(values)
    return [(bounds["min"], bounds["max"])]


def source_key_ranges(join: MergeJoin) -> Predicate | None:
    """A predicate on the target's key columns that every target row matching a source row
    satisfies (``None``: no key gives one)."""
    parts: list[Predicate] = []
    mapping = {(join.source_alias, c): c for c in join.source.column_names}
    for key in join.keys:
        column = _plain_column(key.target.node, join.target_alias)
        if column is None or not _orderable(key.source.type):
            continue
        values = key.source.evaluate(join.source, mapping)
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        present = values.drop_null()
        ranges: list[Predicate] = [
            And((Compare((column,), ">=", low), Compare((column,), "<=", high)))
            for low, high in (_clusters(present) if len(present) else [])
        ]
        if key.null_safe and values.null_count:
            ranges.append(IsNull((column,)))
        parts.append(Or(tuple(ranges)) if ranges else FALSE)
    if not parts:
        return None
    return And(tuple(parts))


def pairs_mapping(join: MergeJoin, target: list[str], source: list[str]) -> Mapping[tuple[str, str], str]:
    return column_mapping((join.target_alias, join.source_alias), target, source)
