"""SQL expressions as :mod:`replay.protocol.predicates` trees, for file pruning.

:func:`bound_to_predicate` reads a bound (typed) expression. Every part it cannot express exactly
becomes :class:`~replay.protocol.predicates.Opaque`, so pruning stays sound: a file is dropped
only where the tree proves that no row makes the expression true. ``NOT`` is pushed to the
leaves as SQL's three-valued logic allows. A leaf compares a column with a literal in the
column's own type: the literal is converted exactly (``int_col = 2.5`` can never hold and is
``FALSE``; ``date_col = '2024-01-31'`` compares a DATE), and a column seen through an implicit
cast is used only where the cast keeps values and their order (integers widened, a DATE as a
TIMESTAMP, ...). Columns of other scopes than the one asked for are opaque (MERGE prunes the
target with the target-only part of its condition).

:func:`syntax_to_predicate` reads a syntax tree without types (for ``parse_predicate``): literals
stay Python values, converted to the column's type where the tree is applied, as the predicates
module does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pyarrow as pa

from replay.protocol.predicates import (
    FALSE,
    TRUE,
    And,
    Compare,
    CompareColumns,
    In,
    IsNull,
    Op,
    Opaque,
    Or,
    Predicate,
    StartsWith,
    negate,
)
from replay.protocol.sql import datatypes as types
from replay.protocol.sql import syntax
from replay.protocol.sql.bound import (
    BAnd,
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
)
from replay.protocol.sql.errors import ExpressionError

_NEGATED: dict[str, Op] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_FLIPPED: dict[str, str] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}


def combine(parts: Sequence[Predicate], conjunction: bool) -> Predicate:
    """``AND``/``OR`` of ``parts``, flattened, with constant parts folded away."""
    unit, zero, kind = (TRUE, FALSE, And) if conjunction else (FALSE, TRUE, Or)
    children: list[Predicate] = []
    for part in parts:
        if part == zero:
            return zero
        if part == unit:
            continue
        children.extend(part.children if isinstance(part, kind) else (part,))
    if len(children) == 1:
        return children[0]
    return kind(tuple(children))


def _constant(value: object, negated: bool) -> Predicate:
    """A constant condition: ``NULL`` is never true, under ``NOT`` too."""
    if value is None:
        return FALSE
    return TRUE if bool(value) != negated else FALSE


def _op(op: str, negated: bool) -> Op:
    return _NEGATED[op] if negated else op  # type: ignore[return-value]


# -- bound expressions ------------------------------------------------------------------------------
_LOSSLESS = (
    (types.is_integral, lambda t: types.is_integral(t) or pa.types.is_decimal(t)),
    (pa.types.is_float32, pa.types.is_float64),
    (pa.types.is_decimal, pa.types.is_decimal),
    (pa.types.is_date, pa.types.is_timestamp),
    (pa.types.is_timestamp, pa.types.is_timestamp),
    (types.is_string, types.is_string),
)


def _lossless(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a cast from ``source`` to ``target`` keeps distinct values distinct and in order."""
    if types.is_integral(source) and pa.types.is_float64(target):
        return source.bit_width <= 32
    if pa.types.is_decimal(source) and pa.types.is_decimal(target):
        return (
            target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    return any(kind(source) and wider(target) for kind, wider in _LOSSLESS)


class _BoundReader:
    def __init__(self, scope: str | None, text: str) -> None:
        self.scope = scope
        self.text = text

    def opaque(self, node: Bound) -> Predicate:
        return Opaque(f"{type(node).__name__[1:]} at position {node.position} of {self.text!r}")

    def column(self, node: Bound) -> BColumn | None:
        """The column ``node`` is (seen through value-keeping casts), if it is of the scope."""
        while isinstance(node, BCast) and _lossless(node.child.type, node.type):
            node = node.child
        if isinstance(node, BColumn) and (self.scope is None or node.scope == self.scope):
            return node
        return None

    def read(self, node: Bound, negated: bool) -> Predicate:
        if isinstance(node, BLiteral):
            return _constant(node.value.as_py(), negated)
        if isinstance(node, BNot):
            return self.read(node.child, not negated)
        if isinstance(node, BAnd | BOr):
            conjunction = isinstance(node, BAnd) != negated
            return combine([self.read(node.left, negated), self.read(node.right, negated)], conjunction)
        if isinstance(node, BColumn) and pa.types.is_boolean(node.type) and self.column(node):
            return Compare(node.path, "!=" if negated else "=", True)
        if isinstance(node, BIsNull):  # an ANSI cast keeps nulls and non-nulls apart
            child = node.child
            while isinstance(child, BCast):
                child = child.child
            column = self.column(child)
            if column is None:
                return self.opaque(node)
            return IsNull(column.path, negated != node.negated)
        if isinstance(node, BIsBool):
            if negated != node.negated:
                return self.opaque(node)
            return self.read(node.child, not node.value)
        if isinstance(node, BCompare):
            return self.compare(node, negated)
        if isinstance(node, BIn):
            return self.in_list(node, negated)
        if isinstance(node, BLike) and not negated:
            return self.like(node)
        return self.opaque(node)

    def literal(self, node: Bound, column: BColumn) -> tuple[str, object]:
        """The literal ``node`` as a scalar of the column's type: ``("exact", scalar)``,
        ``("exact", None)`` for NULL, ``("never", None)`` when no value of the column's type
        equals it, ``("unknown", None)`` when that cannot be told (NaN)."""
        assert isinstance(node, BLiteral)
        if not node.value.is_valid:
            return "exact", None
        if types.is_fractional(node.type) and not math.isfinite(node.value.as_py()):
            return "unknown", None
        try:
            converted = node.value.cast(column.type)
            exact = converted.cast(node.type) == node.value
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return "never", None
        return ("exact", converted) if exact else ("never", None)

    def compare(self, node: BCompare, negated: bool) -> Predicate:
        left, right, op = node.left, node.right, node.op
        if isinstance(left, BLiteral) and not isinstance(right, BLiteral):
            left, right, op = right, left, _FLIPPED[op]
        column = self.column(left)
        if column is None:
            return self.opaque(node)
        if not isinstance(right, BLiteral):
            other = self.column(right)
            if other is None or other.type != column.type or op == "<=>":
                return self.opaque(node)
            return CompareColumns(column.path, _op(op, negated), other.path)
        fit, value = self.literal(right, column)
        if fit == "unknown":
            return self.opaque(node)
        if op == "<=>":
            if value is None and fit == "exact":
                return IsNull(column.path, negated)
            if fit == "never":
                return _constant(False, negated)
            both = And((IsNull(column.path, negated=True), Compare(column.path, "=", value)))
            return negate(both) if negated else both
        if fit == "exact" and value is None:
            return FALSE
        if fit == "exact":
            return Compare(column.path, _op(op, negated), value)
        if op in ("=", "!="):  # a value of the column's type can never equal the literal
            return FALSE if (op == "=") != negated else IsNull(column.path, negated=True)
        return self.opaque(node)

    def in_list(self, node: BIn, negated: bool) -> Predicate:
        column = self.column(node.value)
        if column is None or not all(isinstance(item, BLiteral) for item in node.items):
            return self.opaque(node)
        converted = [self.literal(item, column) for item in node.items]
        if any(fit == "unknown" for fit, _ in converted):
            return self.opaque(node)
        has_null = any(fit == "exact" and value is None for fit, value in converted)
        values = tuple(value for fit, value in converted if fit == "exact" and value is not None)
        if has_null:  # true when listed, else null: never false, so never true under NOT
            return FALSE if negated or not values else In(column.path, values)
        if not values:
            return IsNull(column.path, negated=True) if negated else FALSE
        return In(column.path, values, negated)

    def like(self, node: BLike) -> Predicate:
        column = self.column(node.value)
        if column is None or not isinstance(node.pattern, BLiteral) or not node.pattern.value.is_valid:
            return self.opaque(node)
        parsed = _like_prefix(node.pattern.value.as_py(), node.escape)
        if parsed is None:
            return self.opaque(node)
        text, whole = parsed
        return (
            Compare(column.path, "=", pa.scalar(text, column.type))
            if whole
            else StartsWith(column.path, text)
        )


def _like_prefix(pattern: str, escape: str) -> tuple[str, bool] | None:
    """``(text, whole)`` for a pattern that is a plain text (``whole``) or a text then one
    trailing ``%``; ``None`` for any other pattern."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == escape and index + 1 < len(pattern):
            out.append(pattern[index + 1])
            index += 2
            continue
        if char == "%" and index == len(pattern) - 1:
            return "".join(out), False
        if char in ("%", "_") or char == escape:
            return None
        out.append(char)
        index += 1
    return "".join(out), True


def bound_to_predicate(node: Bound, text: str, scope: str | None = None) -> Predicate:
    """The predicate of a bound boolean expression (see the module docstring)."""
    return _BoundReader(scope, text).read(node, False)


# -- syntax trees ---------------------------------------------------------------------------------
Constant = Callable[[syntax.Node], tuple[bool, object]]
"""Computes a syntax node without columns: ``(computed, value)``."""


class _SyntaxReader:
    def __init__(self, text: str, kind: str, constant: Constant) -> None:
        self.text, self.kind, self.constant = text, kind, constant

    def read(self, node: syntax.Node, negated: bool) -> Predicate:
        if isinstance(node, syntax.Binary) and node.op in ("AND", "OR"):
            conjunction = (node.op == "AND") != negated
            return combine([self.read(node.left, negated), self.read(node.right, negated)], conjunction)
        if isinstance(node, syntax.Unary) and node.op == "NOT":
            return self.read(node.operand, not negated)
        if isinstance(node, syntax.Column):
            return Compare(node.parts, "!=" if negated else "=", True)
        if isinstance(node, syntax.Literal):
            if node.value is not None and not isinstance(node.value, bool):
                raise ExpressionError(
                    f"{node.value!r} is not a condition",
                    text=self.text,
                    position=node.position,
                    kind=self.kind,
                    action="parse",
                )
            return _constant(node.value, negated)
        if isinstance(node, syntax.IsNull) and isinstance(node.operand, syntax.Column):
            return IsNull(node.operand.parts, negated != node.negated)
        if isinstance(node, syntax.Binary) and node.op in _FLIPPED:
            return self.compare(node, negated)
        if isinstance(node, syntax.InList) and isinstance(node.operand, syntax.Column):
            return self.in_list(node, negated != node.negated)
        if isinstance(node, syntax.Between) and isinstance(node.operand, syntax.Column):
            low = syntax.Binary(">=", node.operand, node.low, position=node.position)
            high = syntax.Binary("<=", node.operand, node.high, position=node.position)
            return self.read(syntax.Binary("AND", low, high, position=node.position), negated != node.negated)
        if (
            isinstance(node, syntax.Like)
            and isinstance(node.operand, syntax.Column)
            and not (negated or node.negated)
        ):
            computed, pattern = self.constant(node.pattern)
            parsed = _like_prefix(pattern, node.escape) if computed and isinstance(pattern, str) else None
            if parsed is not None:
                text, whole = parsed
                return (
                    Compare(node.operand.parts, "=", text) if whole else StartsWith(node.operand.parts, text)
                )
        computed, value = self.constant(node)
        if computed:
            return _constant(value, negated)
        return Opaque(syntax.to_sql(node))

    def value(self, node: syntax.Node) -> tuple[bool, object]:
        if isinstance(node, syntax.Literal):
            return True, node.value
        return self.constant(node)

    def compare(self, node: syntax.Binary, negated: bool) -> Predicate:
        left, right, op = node.left, node.right, node.op
        if not isinstance(left, syntax.Column) and isinstance(right, syntax.Column):
            left, right, op = right, left, _FLIPPED[op]
        if not isinstance(left, syntax.Column):
            return self.fallback(node, negated)
        if isinstance(right, syntax.Column):
            if op == "<=>":
                both_null = And((IsNull(left.parts), IsNull(right.parts)))
                both_equal = And(
                    (
                        IsNull(left.parts, True),
                        IsNull(right.parts, True),
                        CompareColumns(left.parts, "=", right.parts),
                    )
                )
                either = Or((both_null, both_equal))
                return negate(either) if negated else either
            return CompareColumns(left.parts, _op(op, negated), right.parts)
        computed, value = self.value(right)
        if not computed:
            return Opaque(syntax.to_sql(node))
        if op == "<=>":
            if value is None:
                return IsNull(left.parts, negated)
            both = And((IsNull(left.parts, negated=True), Compare(left.parts, "=", value)))
            return negate(both) if negated else both
        if value is None:
            return FALSE
        return Compare(left.parts, _op(op, negated), value)

    def fallback(self, node: syntax.Node, negated: bool) -> Predicate:
        computed, value = self.constant(node)
        return _constant(value, negated) if computed else Opaque(syntax.to_sql(node))

    def in_list(self, node: syntax.InList, negated: bool) -> Predicate:
        assert isinstance(node.operand, syntax.Column)
        values = [self.value(item) for item in node.items]
        if not all(computed for computed, _ in values):
            return Opaque(syntax.to_sql(node))
        present = tuple(value for _, value in values if value is not None)
        if len(present) < len(values):
            return FALSE if negated or not present else In(node.operand.parts, present)
        return In(node.operand.parts, present, negated)


def syntax_to_predicate(node: syntax.Node, text: str, kind: str, constant: Constant) -> Predicate:
    """The predicate of an unbound syntax tree (see the module docstring)."""
    return _SyntaxReader(text, kind, constant).read(node, False)
