"""File pruning: which active files may hold rows matching a predicate, decided in Arrow.

Each file gets *bounds* for every column the predicate reads: for a partition column its typed
partition value; for a data column the ``minValues``/``maxValues``/``nullCount`` of its statistics
with ``numRecords``. A predicate is then evaluated over all files at once, with three-valued
logic: ``false`` only where the bounds prove that no row can match; unknown bounds (no
statistics, a column past ``delta.dataSkippingNumIndexedCols``, a literal that does not fit)
keep the file. Statistics are read as Delta writes them: timestamps with millisecond precision
(a maximum is widened by the sub-millisecond part it may have lost) and strings truncated to a
prefix of ``delta.dataSkippingStringPrefixLength`` characters (a maximum that long or longer may be
a truncated prefix, and bounds only the values sharing it). Nothing here does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.predicates import (
    And,
    Compare,
    CompareColumns,
    In,
    IsNull,
    Not,
    Opaque,
    Or,
    Predicate,
    StartsWith,
    coerce_literal,
    columns_of,
    has_opaque,
    negate,
)
from replay.protocol.schema import DataType, PrimitiveType, StructField, StructType
from replay.protocol.table_config import TableConfiguration
from replay.state.file_statistics import (
    convert,
    dig,
    nested_struct,
    partition_values,
    physical_name,
    read_stats_json,
    stats_type,
)

logger = logging.getLogger(__name__)

FLOAT_SLACK = 1e-6
"""Relative slack on floating-point literals (a printed literal may have been rounded)."""
MAX_IN_VALUES = 64
"""Larger ``IN`` lists are pruned by their smallest and largest value only."""


@dataclass(frozen=True)
class Bounds:
    """What the files' metadata says about one column, one entry per file (nulls: unknown).

    ``minimum``/``maximum`` bound the non-null values; ``exact_maximum`` is false where the
    maximum may be a truncated prefix; ``nulls``/``records`` count null values and rows.
    """

    data_type: pa.DataType
    minimum: pa.Array
    maximum: pa.Array
    exact_maximum: pa.Array
    nulls: pa.Array
    records: pa.Array

    @property
    def all_null(self) -> pa.Array:
        return pc.equal(self.nulls, self.records)

    @property
    def some_value(self) -> pa.Array:
        return pc.less(self.nulls, self.records)


def evaluate(files: pa.Table, predicate: Predicate, config: TableConfiguration) -> pa.Array:
    """A three-valued verdict per file of ``files`` (the snapshot form): false where no row can
    match, true where every row must, null where the metadata cannot tell."""
    if files.num_rows == 0:
        return pa.array([], pa.bool_())
    bounds = _column_bounds(files, sorted(columns_of(predicate)), config)
    return _evaluate(predicate, bounds, files.num_rows)


def may_match(files: pa.Table, predicate: Predicate, config: TableConfiguration) -> pa.Array:
    """A boolean per file of ``files`` (the snapshot form): false where no row can match."""
    return pc.fill_null(evaluate(files, predicate, config), True)


def prune(files: pa.Table, predicate: Predicate, config: TableConfiguration) -> pa.Table:
    """The rows of ``files`` that may hold rows matching ``predicate``."""
    return files.filter(may_match(files, predicate, config))


EXACT_PARTITION_TYPES = ("byte", "short", "integer", "long", "string", "boolean", "date")
"""Partition column types whose values compare exactly as SQL compares them (and decimals):
no floating-point slack or NaN, no time zone in the value's spelling."""


def decided_by_partition_values(files: pa.Table, predicate: Predicate, config: TableConfiguration) -> bool:
    """Whether ``predicate`` is decided for every row of ``files`` by partition values alone.

    True when it reads only top-level partition columns of exactly comparable types
    (:data:`EXACT_PARTITION_TYPES` and decimals) and every file gets a verdict: then the files
    :func:`prune` keeps hold only matching rows, and the rows need no further filtering.
    """
    if has_opaque(predicate) or _compares_columns(predicate):
        return False
    schema = config.metadata.schema
    partition_columns = set(config.metadata.partition_columns)
    for path in columns_of(predicate):
        if len(path) != 1 or path[0] not in partition_columns:
            return False
        data_type = schema.field(path[0]).type
        if not isinstance(data_type, PrimitiveType):
            return False
        if data_type.name not in EXACT_PARTITION_TYPES and not data_type.is_decimal:
            return False
    return evaluate(files, predicate, config).null_count == 0


def _compares_columns(predicate: Predicate) -> bool:
    if isinstance(predicate, And | Or):
        return any(_compares_columns(child) for child in predicate.children)
    if isinstance(predicate, Not):
        return _compares_columns(predicate.child)
    return isinstance(predicate, CompareColumns)


# -- evaluation -----------------------------------------------------------------------------------
def _evaluate(predicate: Predicate, bounds: Mapping[tuple[str, ...], Bounds | None], count: int) -> pa.Array:
    unknown = pa.nulls(count, pa.bool_())
    if isinstance(predicate, And):
        result = pa.repeat(pa.scalar(True), count)
        for child in predicate.children:
            result = pc.and_kleene(result, _evaluate(child, bounds, count))
        return result
    if isinstance(predicate, Or):
        result = pa.repeat(pa.scalar(False), count)
        for child in predicate.children:
            result = pc.or_kleene(result, _evaluate(child, bounds, count))
        return result
    if isinstance(predicate, Not):
        return _evaluate(negate(predicate.child), bounds, count)
    if isinstance(predicate, Opaque | CompareColumns):
        return unknown
    column = bounds.get(predicate.column)
    if column is None:
        return unknown
    try:
        return _leaf(predicate, column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError) as exc:
        logger.debug("no pruning for %s: %s", predicate, exc)
        return unknown


def _literal(value: object, data_type: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of the column's type; :class:`ValueError` if it does not fit exactly."""
    if isinstance(value, str) and (pa.types.is_date(data_type) or pa.types.is_timestamp(data_type)):
        value = coerce_literal(value, data_type)
    scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
    if pa.types.is_floating(data_type) and not pa.types.is_floating(scalar.type):
        scalar = scalar.cast(pa.float64())
    if pa.types.is_floating(scalar.type) and scalar.is_valid and scalar.as_py() != scalar.as_py():
        raise ValueError("a NaN literal")
    return scalar if scalar.type == data_type else scalar.cast(data_type, safe=True)


def _leaf(predicate: Compare | In | IsNull | StartsWith, column: Bounds) -> pa.Array:
    if isinstance(predicate, IsNull):
        return column.some_value if predicate.negated else pc.greater(column.nulls, 0)
    if isinstance(predicate, StartsWith):
        prefix = _literal(predicate.prefix, column.data_type)
        low = pc.utf8_slice_codeunits(column.minimum, 0, len(predicate.prefix))
        return _all(column.some_value, pc.less_equal(low, prefix), _at_most_max(column, prefix, ">="))
    if isinstance(predicate, In):
        return _in(predicate, column)
    literal = _literal(predicate.value, column.data_type)
    op = predicate.op
    if op == "=":
        return _all(
            column.some_value, _at_least_min(column, literal, "<="), _at_most_max(column, literal, ">=")
        )
    if op == "!=":
        only_literal = _all(
            column.exact_maximum, pc.equal(column.minimum, literal), pc.equal(column.maximum, literal)
        )
        return pc.invert(
            pc.or_kleene(column.all_null, pc.and_kleene(only_literal, pc.equal(column.nulls, 0)))
        )
    if op in ("<", "<="):
        return pc.and_kleene(column.some_value, _at_least_min(column, literal, op))
    return pc.and_kleene(column.some_value, _at_most_max(column, literal, op))


def _in(predicate: In, column: Bounds) -> pa.Array:
    values = [_literal(value, column.data_type) for value in predicate.values]
    if predicate.negated:  # cannot match only where every row is null or one single listed value
        single = _all(column.exact_maximum, pc.equal(column.minimum, column.maximum))
        listed = pc.is_in(column.minimum, value_set=pa.array([v.as_py() for v in values], column.data_type))
        return pc.and_kleene(column.some_value, pc.invert(_all(single, listed, pc.equal(column.nulls, 0))))
    if not values:
        return pa.repeat(pa.scalar(False), len(column.records))
    if len(values) > MAX_IN_VALUES:
        ordered = pc.sort_indices(pa.array([v.as_py() for v in values], column.data_type))
        values = [values[int(ordered[0].as_py())], values[int(ordered[-1].as_py())]]
        return _all(
            column.some_value, _at_least_min(column, values[-1], "<="), _at_most_max(column, values[0], ">=")
        )
    result = pa.repeat(pa.scalar(False), len(column.records))
    for value in values:
        hit = _all(column.some_value, _at_least_min(column, value, "<="), _at_most_max(column, value, ">="))
        result = pc.or_kleene(result, hit)
    return result


def _all(*conditions: pa.Array) -> pa.Array:
    result = conditions[0]
    for condition in conditions[1:]:
        result = pc.and_kleene(result, condition)
    return result


_COMPARE: dict[str, Callable[[Any, Any], pa.Array]] = {
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _slack(literal: pa.Scalar, direction: int) -> pa.Scalar:
    """A floating literal moved by :data:`FLOAT_SLACK` towards keeping more files."""
    if not pa.types.is_floating(literal.type):
        return literal
    value = float(literal.as_py())
    return pa.scalar(value + direction * (abs(value) * FLOAT_SLACK + 1e-300), literal.type)


def _at_least_min(column: Bounds, literal: pa.Scalar, op: str) -> pa.Array:
    """Some value ``v >= minimum`` can satisfy ``v <op> literal`` (``op`` is ``<`` or ``<=``)."""
    return _COMPARE["<" if op == "<" else "<="](column.minimum, _slack(literal, +1))


def _at_most_max(column: Bounds, literal: pa.Scalar, op: str) -> pa.Array:
    """Some value ``v <= maximum`` can satisfy ``v <op> literal`` (``op`` is ``>`` or ``>=``).

    Where the maximum may be a truncated prefix ``p`` of the true maximum ``m``, ``m`` starts
    with ``p``: a literal whose first ``len(p)`` characters are ``<= p`` may be below ``m``.
    """
    compare = _COMPARE[">" if op == ">" else ">="]
    literal = _slack(literal, -1)
    exact = compare(column.maximum, literal)
    if not pa.types.is_string(column.data_type) or pc.all(column.exact_maximum).as_py():
        return exact
    text = str(literal.as_py())
    lengths = pc.utf8_length(column.maximum)
    prefix_ok = pa.nulls(len(lengths), pa.bool_())
    for length in pc.unique(lengths.drop_null()).to_pylist():
        holds = pc.less_equal(pa.scalar(text[:length]), column.maximum)
        prefix_ok = pc.if_else(pc.equal(lengths, length), holds, prefix_ok)
    return pc.if_else(column.exact_maximum, exact, prefix_ok)


# -- bounds ---------------------------------------------------------------------------------------
def _column_bounds(
    files: pa.Table, paths: Sequence[tuple[str, ...]], config: TableConfiguration
) -> dict[tuple[str, ...], Bounds | None]:
    schema = config.metadata.schema
    partition_columns = set(config.metadata.partition_columns)
    mode = config.column_mapping_mode
    out: dict[tuple[str, ...], Bounds | None] = {}
    stats_paths: list[tuple[tuple[str, ...], list[StructField]]] = []
    for path in paths:
        fields = _resolve(schema, path)
        if fields is None:
            out[path] = None
        elif len(path) == 1 and path[0] in partition_columns:
            out[path] = _partition_bounds(files, fields[0], mode)
        else:
            stats_paths.append((path, fields))
    if stats_paths:
        out.update(_statistics_bounds(files, stats_paths, mode, config.string_prefix_length))
    return out


def _resolve(schema: StructType, path: tuple[str, ...]) -> list[StructField] | None:
    """The fields along ``path`` (top-level first); ``None`` if it names no primitive column."""
    fields: list[StructField] = []
    current: DataType = schema
    for part in path:
        if not isinstance(current, StructType):
            return None
        match = next((f for f in current.fields if f.name == part), None)
        if match is None:
            return None
        fields.append(match)
        current = match.type
    return fields if isinstance(current, PrimitiveType) else None


def _partition_bounds(files: pa.Table, field: StructField, mode: str) -> Bounds:
    """Bounds of a partition column: its typed value, both minimum and maximum of the file.

    Every row of a file shares its partition value, so one row stands for all of them (a file's
    statistics are not read for partition columns).
    """
    typed = partition_values(files, field, mode)
    target = typed.type
    count = len(typed)
    nulls = pc.if_else(typed.is_null(), 1, 0).cast(pa.int64())
    return Bounds(
        target, typed, typed, pa.repeat(pa.scalar(True), count), nulls, pa.repeat(pa.scalar(1), count)
    )


def _statistics_bounds(
    files: pa.Table,
    columns: Sequence[tuple[tuple[str, ...], list[StructField]]],
    mode: str,
    prefix_length: int,
) -> dict[tuple[str, ...], Bounds | None]:
    out: dict[tuple[str, ...], Bounds | None] = {}
    usable: list[tuple[tuple[str, ...], tuple[str, ...], PrimitiveType]] = []
    for path, fields in columns:
        leaf = fields[-1].type
        try:
            assert isinstance(leaf, PrimitiveType)
            stats_type(leaf)
        except (AssertionError, ValueError):
            out[path] = None
            continue
        usable.append((path, tuple(physical_name(f, mode) for f in fields), leaf))
    if not usable:
        return out
    physical = [p for _, p, _ in usable]
    value_types = [stats_type(leaf) for _, _, leaf in usable]
    schema = pa.schema(
        [
            ("numRecords", pa.int64()),
            ("minValues", nested_struct(physical, value_types)),
            ("maxValues", nested_struct(physical, value_types)),
            ("nullCount", nested_struct(physical, [pa.int64()] * len(physical))),
        ]
    )
    parsed = read_stats_json(files.column("stats").combine_chunks(), schema)
    records = pc.struct_field(parsed, "numRecords")
    for path, names, leaf in usable:
        target = leaf.to_arrow()
        minimum = convert(dig(parsed, ("minValues", *names)), target)
        maximum = convert(dig(parsed, ("maxValues", *names)), target)
        if pa.types.is_floating(target):  # a NaN bound says nothing about the other values
            minimum = pc.if_else(pc.is_nan(minimum), pa.scalar(None, target), minimum)
            maximum = pc.if_else(pc.is_nan(maximum), pa.scalar(None, target), maximum)
        if pa.types.is_timestamp(target):  # statistics keep milliseconds: the maximum may be below
            maximum = pc.add(maximum, pa.scalar(999, pa.duration("us")).cast(pa.duration(target.unit)))
        exact = pa.repeat(pa.scalar(True), len(maximum))
        if pa.types.is_string(target):
            exact = pc.less(pc.utf8_length(maximum), prefix_length)
        out[path] = Bounds(target, minimum, maximum, exact, dig(parsed, ("nullCount", *names)), records)
    return out
