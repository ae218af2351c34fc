"""Implicit casts on bound expressions: what an operand becomes where an operator or a function
expects another type (Spark's ANSI implicit casts; the rules are in :mod:`replay.protocol.sql.types`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import BCast, BLiteral, Bound
from replay.protocol.sql.casts import cast
from replay.protocol.sql.errors import ExpressionError, ExpressionEvaluationError, resolution_error

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


@dataclass(frozen=True)
class Site:
    """Where a coercion happens: the SQL of the expression (for messages) and its position."""

    sql: str
    position: int

    def mismatch(self, detail: str, sub_class: str = "UNEXPECTED_INPUT_TYPE") -> ExpressionError:
        return resolution_error(
            f"DATATYPE_MISMATCH.{sub_class}",
            f'Cannot resolve "{self.sql}" due to data type mismatch: {detail}',
            self.position,
        )


def cast_to(node: Bound, target: pa.DataType) -> Bound:
    """``node`` as ``target``: a literal cast now (unless that fails: then when evaluated), any
    other node through an implicit cast node (none if it already has that type)."""
    if node.type == target:
        return node
    if isinstance(node, BLiteral):
        try:
            return BLiteral(target, node.position, cast(node.value, node.type, target, node.position))
        except (ExpressionEvaluationError, pa.ArrowException):
            pass
    return BCast(target, node.position, node)


# Expected kinds of operands (ANSI implicit casts into each)
STRING = "STRING"
STRING_OR_BINARY = "STRING or BINARY"
NUMERIC = "NUMERIC"
INTEGER = "INT"
ANY_INTEGER = "INT "
DATE = "DATE"
BOOLEAN = "BOOLEAN"
STRICT_BOOLEAN = "BOOLEAN!"
BOOLEAN_OR_NULL = "BOOLEAN?"


def implicit_target(source: pa.DataType, kind: str) -> pa.DataType | None:
    """The type a value of ``source`` becomes where ``kind`` is expected, or ``None`` if it cannot."""
    null = pa.types.is_null(source)
    if kind == STRING:
        return source if types.is_string(source) else (types.STRING if types.is_atomic(source) else None)
    if kind == STRING_OR_BINARY:
        if types.is_string(source) or types.is_binary(source):
            return source
        return types.STRING if types.is_atomic(source) else None
    if kind == NUMERIC:
        if types.is_numeric(source):
            return source
        return types.DOUBLE if types.is_string(source) or null else None
    if kind == ANY_INTEGER:  # an INT parameter (not a choice of types): any number is cast
        return types.INT if types.is_numeric(source) or types.is_string(source) or null else None
    if kind == INTEGER:  # TINYINT, SMALLINT or INT (or a string)
        if (types.is_integral(source) and source.bit_width <= 32) or types.is_string(source) or null:
            return types.INT
        return None
    if kind == DATE:
        if pa.types.is_date(source):
            return source
        return types.DATE if types.is_string(source) or pa.types.is_timestamp(source) or null else None
    if kind == BOOLEAN:
        return types.BOOLEAN if pa.types.is_boolean(source) or types.is_string(source) or null else None
    if kind == STRICT_BOOLEAN:
        return types.BOOLEAN if pa.types.is_boolean(source) else None
    if kind == BOOLEAN_OR_NULL:
        return types.BOOLEAN if pa.types.is_boolean(source) or null else None
    raise ValueError(f"unknown kind {kind}")


def implicit(node: Bound, kind: str, site: Site, index: int, sql: str) -> Bound:
    """``node`` (the ``index``-th operand, spelled ``sql``) cast to what ``kind`` expects."""
    target = implicit_target(node.type, kind)
    if target is None:
        ordinal = _ORDINALS[index] if index < len(_ORDINALS) else f"{index + 1}th"
        raise site.mismatch(
            f'The {ordinal} parameter requires the "{kind.rstrip("!? ")}" type, however "{sql}" has the type '
            f'"{types.type_name(node.type)}"'
        )
    return cast_to(node, target)


def common(nodes: list[Bound], site: Site, function: str) -> tuple[list[Bound], pa.DataType]:
    """``nodes`` cast to the type they all meet as (CASE branches, IN lists, COALESCE)."""
    target = types.common_type([node.type for node in nodes])
    if target is None:
        names = ", ".join(f'"{types.type_name(node.type)}"' for node in nodes)
        raise site.mismatch(
            f"Input to `{function}` should all be the same type, but it's [{names}]", "DATA_DIFF_TYPES"
        )
    return [cast_to(node, target) for node in nodes], target


def _exact_number(data_type: pa.DataType) -> bool:
    return types.is_integral(data_type) or pa.types.is_decimal(data_type)


def _narrowed(node: Bound, other: pa.DataType) -> Bound | None:
    """An exact-number literal as the other side's exact-number type, when it converts without
    loss: comparing an INT column with ``5L`` or a DECIMAL(5,2) column with ``1`` then converts
    the literal, not the column (the comparison's result is the same: both types are exact)."""
    if not (isinstance(node, BLiteral) and node.value.is_valid and node.type != other):
        return None
    if not (_exact_number(node.type) and _exact_number(other)):
        return None
    try:
        converted = cast(node.value, node.type, other, node.position)
        if cast(converted, other, node.type, node.position) != node.value:
            return None
    except (ExpressionEvaluationError, pa.ArrowException):
        return None
    return BLiteral(other, node.position, converted)


def comparison_operands(left: Bound, right: Bound, site: Site, op: str) -> tuple[Bound, Bound]:
    """``left`` and ``right`` cast to the one type ``left <op> right`` compares them in."""
    narrowed = _narrowed(right, left.type)
    if narrowed is not None:
        return left, narrowed
    narrowed = _narrowed(left, right.type)
    if narrowed is not None:
        return narrowed, right
    target = types.wider_type(left.type, right.type)
    if target is None:
        raise site.mismatch(
            "the left and right operands of the binary operator have incompatible types "
            f'("{types.type_name(left.type)}" and "{types.type_name(right.type)}")',
            "BINARY_OP_DIFF_TYPES",
        )
    if not types.is_atomic(target):  # Spark compares structs, arrays and maps; this evaluator does not
        raise site.mismatch(
            f'{op} of "{types.type_name(target)}" values is not supported', "UNSUPPORTED_TYPE"
        )
    return cast_to(left, target), cast_to(right, target)
