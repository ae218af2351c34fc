"""Vectorised evaluation of bound expressions with pyarrow compute, in SQL's three-valued logic.

A table is evaluated record batch by record batch (so every column of a batch is one aligned
array); each node is computed once per batch for all its rows (results are cached per node, so a
``BETWEEN`` operand or a ``COALESCE`` argument read twice is computed once). Constant parts stay
scalars until the end, where they are broadcast to the batch's length.

SQL evaluates some operands only for some rows: a ``CASE`` branch only where it is chosen, the
right side of ``AND`` only where the left is not false (of ``OR``: not true), a ``COALESCE``
argument only where the ones before it are null, an ``IN`` item only for a non-null value not
matched yet, and (as Spark's binary operators do) the right side of an arithmetic operator or
a comparison only where the left side is not null. Evaluation is optimistic: such an operand is
computed for every row, and only if that raises an
:class:`~replay.protocol.sql.errors.ExpressionEvaluationError` (``1 / 0`` in a branch no row
takes) is it computed again for the rows that need it, which fail only if one of them fails.
(Spark's generated code can evaluate a subexpression shared by several expressions of one
query for every row, and then fail where this evaluator does not.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import operators
from replay.protocol.sql.bound import (
    BAnd,
    BCall,
    BCase,
    BCast,
    BColumn,
    BCompare,
    BIn,
    BIsBool,
    BIsNull,
    BLike,
    BLiteral,
    BNot,
    BOr,
    Bound,
    Value,
)
from replay.protocol.sql.casts import cast
from replay.protocol.sql.errors import ExpressionEvaluationError, evaluation_error

ColumnSource = Callable[[str, str], pa.Array]
"""Gives the array of a (scope, top-level column) of the batch being evaluated."""


class Context:
    """One batch's columns, the rows being evaluated, and the results computed so far."""

    def __init__(self, length: int, source: ColumnSource) -> None:
        self.length = length
        self.source = source
        self.cache: dict[int, Value] = {}

    def column(self, scope: str, name: str) -> pa.Array:
        return self.source(scope, name)

    def subset(self, mask: pa.Array) -> Context:
        """The same columns, only the rows where ``mask`` is true."""
        parent = self.source
        cache: dict[tuple[str, str], pa.Array] = {}

        def source(scope: str, name: str) -> pa.Array:
            if (scope, name) not in cache:
                cache[(scope, name)] = parent(scope, name).filter(mask)
            return cache[(scope, name)]

        return Context(int(pc.sum(mask).as_py() or 0), source)


def batch_source(batch: pa.RecordBatch, names: Mapping[tuple[str, str], str] | None) -> ColumnSource:
    """Columns of ``batch``: ``names[(scope, column)]`` names the batch's column (default: the column)."""

    def source(scope: str, name: str) -> pa.Array:
        column = names.get((scope, name)) if names is not None else name
        if column is None or batch.schema.get_field_index(column) < 0:
            where = f"{scope}.{name}" if scope else name
            raise ExpressionEvaluationError(
                f"the column {where} is not in the data (columns: {', '.join(batch.schema.names)})"
            )
        return batch.column(column)

    return source


def broadcast(value: Value, length: int) -> pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.repeat(value, length) if value.is_valid else pa.nulls(length, value.type)
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    return value


def evaluate(node: Bound, context: Context) -> Value:
    """The value of ``node`` for the rows of ``context``."""
    key = id(node)
    cached = context.cache.get(key)
    if cached is not None:
        return cached
    try:
        value = _compute(node, context)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ExpressionEvaluationError(
            f"{exc} at position {node.position}", position=node.position
        ) from None
    context.cache[key] = value
    return value


def _compute(node: Bound, context: Context) -> Value:
    if isinstance(node, BLiteral):
        return node.value
    if isinstance(node, BColumn):
        return _column(node, context)
    if isinstance(node, BCast):
        return cast(evaluate(node.child, context), node.child.type, node.type, node.position)
    if isinstance(node, BCall):
        if not node.null_skips:
            return node.kernel([evaluate(arg, context) for arg in node.args], node)
        values = [evaluate(node.args[0], context)]
        for arg in node.args[1:]:
            values.append(_needed(arg, context, lambda: _all_valid(values)))
        return node.kernel(values, node)
    if isinstance(node, BCompare):
        left = evaluate(node.left, context)
        if node.op == "<=>":
            return operators.compare(node.op, left, evaluate(node.right, context))
        return operators.compare(node.op, left, _needed(node.right, context, lambda: pc.is_valid(left)))
    if isinstance(node, BAnd | BOr):
        return _logic(node, context)
    if isinstance(node, BNot):
        return pc.invert(evaluate(node.child, context))
    if isinstance(node, BIsNull):
        value = evaluate(node.child, context)
        return pc.is_valid(value) if node.negated else pc.is_null(value)
    if isinstance(node, BIsBool):
        value = evaluate(node.child, context)
        holds = pc.fill_null(value if node.value else pc.invert(value), False)
        return pc.invert(holds) if node.negated else holds
    if isinstance(node, BIn):
        return _in(node, context)
    if isinstance(node, BLike):
        return operators.like(
            evaluate(node.value, context), evaluate(node.pattern, context), node.escape, node.position
        )
    assert isinstance(node, BCase), node
    return _case(node, context)


def _column(node: BColumn, context: Context) -> Value:
    array: pa.Array = context.column(node.scope, node.path[0])
    for name in node.path[1:]:
        array = pc.struct_field(array, [array.type.get_field_index(name)])
    if array.type != node.type:
        try:
            array = array.cast(node.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise evaluation_error(
                "DATATYPE_MISMATCH",
                f"the column {'.'.join(node.path)} holds {array.type}, not the bound type {node.type}: {exc}",
                node.position,
            ) from None
    return array


def _all_valid(values: list[Value]) -> Value:
    valid = pc.is_valid(values[0])
    for value in values[1:]:
        valid = pc.and_(valid, pc.is_valid(value))
    return valid


def _needed(node: Bound, context: Context, rows: Value | Callable[[], Value]) -> Value:
    """``node`` where ``rows`` (booleans, or a function computing them when they are needed) is
    true; other rows may be anything (null here)."""
    if isinstance(rows, pa.Scalar) and not rows.as_py():
        return pa.scalar(None, node.type)
    try:
        return evaluate(node, context)
    except ExpressionEvaluationError:
        mask = rows() if callable(rows) else rows
        if isinstance(mask, pa.Scalar):
            if mask.as_py():
                raise
            return pa.scalar(None, node.type)
        mask = pc.fill_null(mask, False)
        if pc.all(mask).as_py():
            raise
        if not pc.any(mask).as_py():
            return pa.scalar(None, node.type)
    values = evaluate(node, context.subset(mask))
    if isinstance(values, pa.Scalar):
        return pc.if_else(mask, values, pa.scalar(None, node.type))
    return pc.replace_with_mask(
        pa.nulls(context.length, node.type), mask, broadcast(values, int(pc.sum(mask).as_py()))
    )


def _logic(node: BAnd | BOr, context: Context) -> Value:
    left = evaluate(node.left, context)
    if isinstance(node, BAnd):
        if isinstance(left, pa.Scalar) and left.as_py() is False:
            return left
        right = _needed(node.right, context, lambda: pc.fill_null(left, True))
        return pc.and_kleene(left, right)
    if isinstance(left, pa.Scalar) and left.as_py() is True:
        return left
    right = _needed(node.right, context, lambda: pc.invert(pc.fill_null(left, False)))
    return pc.or_kleene(left, right)


def _in(node: BIn, context: Context) -> Value:
    value = evaluate(node.value, context)
    if _all_literals(node):
        literals = [item.value for item in node.items if isinstance(item, BLiteral)]
        present = [v for v in literals if v.is_valid]
        found = operators.is_in(value, pa.array([v.as_py() for v in present], node.value.type))
        if len(present) < len(literals):  # a NULL listed: no match is unknown, never false
            found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
        return found
    # as SQL does: no item is evaluated for a null value, none after the first that matches
    result: Value = pa.scalar(False)
    for item in node.items:
        needed = pc.and_(pc.is_valid(value), pc.invert(pc.fill_null(result, False)))
        result = pc.or_kleene(result, operators.compare("=", value, _needed(item, context, needed)))
    return pc.if_else(pc.is_valid(value), result, pa.scalar(None, pa.bool_()))


def _all_literals(node: BIn) -> bool:
    return all(isinstance(item, BLiteral) for item in node.items)


def _case(node: BCase, context: Context) -> Value:
    remaining: Value = pa.scalar(True)
    conditions: list[Value] = []
    values: list[Value] = []
    for when, then in node.whens:
        condition = pc.fill_null(_needed(when, context, remaining), False)
        chosen = pc.and_(remaining, condition)
        if isinstance(chosen, pa.Scalar) and not chosen.as_py():
            continue
        conditions.append(chosen)
        values.append(_needed(then, context, chosen))
        remaining = pc.and_(remaining, pc.invert(condition))
        if isinstance(remaining, pa.Scalar) and not remaining.as_py():
            break
    otherwise = _needed(node.otherwise, context, remaining)
    if not conditions:
        return otherwise
    if all(isinstance(c, pa.Scalar) for c in conditions):
        chosen_index = next((i for i, c in enumerate(conditions) if c.as_py()), None)
        return otherwise if chosen_index is None else values[chosen_index]
    length = context.length
    arrays = [broadcast(c, length) for c in conditions]
    names = [str(i) for i in range(len(arrays))]
    branches = [broadcast(v, length) if not isinstance(v, pa.Scalar) else v for v in values]
    return pc.case_when(pc.make_struct(*arrays, field_names=names), *branches, otherwise)
