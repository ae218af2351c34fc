"""Kernels of SQL operators over Arrow values: comparison, arithmetic, ``||`` and ``LIKE``.

Semantics are Spark's under ANSI mode:

* comparisons of floating-point numbers treat NaN as equal to NaN and greater than every other
  value (Spark's ordering), ``<=>`` is never null;
* integral ``+ - *`` and unary minus fail on overflow (``ARITHMETIC_OVERFLOW``); ``/`` and ``%``
  fail on a zero divisor (``DIVIDE_BY_ZERO``, ``REMAINDER_BY_ZERO``) of any numeric type, where the
  dividend is not null; ``%`` takes the sign of the dividend (``-7 % 3`` is ``-1``);
* decimal arithmetic is exact, then rounded half up to the result's scale; a result beyond the
  result's precision fails (``NUMERIC_VALUE_OUT_OF_RANGE``);
* ``LIKE`` has ``%`` and ``_`` wildcards and an escape character (``\\`` unless ``ESCAPE`` names
  another); an escape before any other character, or at the end, is an error (``INVALID_FORMAT``).

DOUBLE ``%`` is computed as ``a - trunc(a / b) * b`` (Java's exact remainder can differ in the
last bits when the quotient is large).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import BCall, Value
from replay.protocol.sql.casts import cast
from replay.protocol.sql.errors import ExpressionError, evaluation_error, resolution_error

_COMPARE = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _type_of(value: Value) -> pa.DataType:
    return value.type


def compare(op: str, left: Value, right: Value) -> Value:
    """``left <op> right`` (both of one type) in three-valued logic, ``<=>`` two-valued."""
    if op == "<=>":
        equal = pc.fill_null(compare("=", left, right), False)
        return pc.or_(equal, pc.and_(pc.is_null(left), pc.is_null(right)))
    if pa.types.is_null(_type_of(left)):
        return pa.scalar(None, pa.bool_())
    if types.is_fractional(_type_of(left)):
        return _compare_floats(op, left, right)
    return _COMPARE[op](left, right)


_MIRRORED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _compare_floats(op: str, left: Value, right: Value) -> Value:
    """Spark's order of floating-point numbers: NaN = NaN, and NaN above everything else."""
    if isinstance(left, pa.Scalar) and not isinstance(right, pa.Scalar):
        op, left, right = _MIRRORED[op], right, left
    if isinstance(right, pa.Scalar) and right.is_valid and right.as_py() == right.as_py():
        # against a number (not NaN), IEEE comparison already is Spark's but for a NaN on the
        # left, which only > and >= count as true
        plain = _COMPARE[op](left, right)
        return pc.or_(plain, pc.is_nan(left)) if op in (">", ">=") else plain
    left_nan, right_nan = pc.is_nan(left), pc.is_nan(right)
    if op in ("=", "!="):
        equal = pc.or_(pc.equal(left, right), pc.and_(left_nan, right_nan))
        return equal if op == "=" else pc.invert(equal)
    if op in (">", ">="):
        op, left, right, left_nan, right_nan = ("<" if op == ">" else "<="), right, left, right_nan, left_nan
    plain = pc.if_else(right_nan, True, _COMPARE[op](left, right))
    ordered = pc.if_else(left_nan, right_nan if op == "<=" else False, plain)
    valid = pc.and_(pc.is_valid(left), pc.is_valid(right))  # a NaN against a null is null
    return pc.if_else(valid, ordered, pa.scalar(None, pa.bool_()))


def is_in(value: Value, values: pa.Array) -> Value:
    """``value`` is one of ``values`` (no nulls among them); null for a null ``value``."""
    found = pc.is_in(value, value_set=values)
    return pc.if_else(pc.is_valid(value), found, pa.scalar(None, pa.bool_()))


# -- arithmetic ---------------------------------------------------------------------------------
def _raise_arrow(exc: pa.ArrowException, node: BCall) -> ExpressionError:
    message = str(exc)
    if "overflow" in message.lower():
        if types.is_integral(node.type) and node.type.bit_width < 32 and len(node.args) == 2:
            return evaluation_error(
                "BINARY_ARITHMETIC_OVERFLOW",
                f"{types.type_name(node.type)} {node.name} caused overflow",
                node.position,
            )
        return evaluation_error("ARITHMETIC_OVERFLOW", "overflow", node.position)
    return evaluation_error("ARITHMETIC_ERROR", message, node.position)


def _zero_divisor(left: Value, right: Value, node: BCall) -> None:
    zero = pc.and_(
        pc.and_(pc.is_valid(left), pc.is_valid(right)), pc.equal(right, pa.scalar(0, _type_of(right)))
    )
    if (isinstance(zero, pa.Scalar) and zero.as_py()) or (
        not isinstance(zero, pa.Scalar) and pc.any(zero).as_py()
    ):
        if node.name == "%":
            raise evaluation_error("REMAINDER_BY_ZERO", "Remainder by zero", node.position)
        raise evaluation_error("DIVIDE_BY_ZERO", "Division by zero", node.position)


_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}
_PLAIN = {"+": pc.add, "-": pc.subtract, "*": pc.multiply, "/": pc.divide}


def arithmetic(args: Sequence[Value], node: BCall) -> Value:
    """``+ - * / %`` of two numbers; operands already have the result type (decimals: their own)."""
    left, right = args
    op, result = node.name, node.type
    if op in ("/", "%"):
        _zero_divisor(left, right, node)
    if pa.types.is_decimal(result):
        return _decimal(op, left, right, result, node)
    try:
        if op == "%":
            return _remainder(left, right, result)
        if types.is_integral(result):
            return _CHECKED[op](left, right)
        return _PLAIN[op](left, right)
    except pa.ArrowInvalid as exc:
        raise _raise_arrow(exc, node) from None


def _remainder(left: Value, right: Value, result: pa.DataType) -> Value:
    if types.is_integral(result):  # x % -1 is 0, and computing it must not overflow
        divisor = pc.if_else(pc.equal(right, pa.scalar(-1, result)), pa.scalar(1, result), right)
        divisor = pc.if_else(pc.equal(divisor, pa.scalar(0, result)), pa.scalar(1, result), divisor)
        return pc.subtract(left, pc.multiply(pc.divide(left, divisor), divisor))
    divisor = pc.if_else(pc.equal(right, 0.0), pa.scalar(1.0, result), right)
    return pc.subtract(left, pc.multiply(pc.trunc(pc.divide(left, divisor)), divisor))


def _wide(value: Value, scale: int | None = None) -> Value:
    """A decimal in 256 bits with as few digits as its values need (at ``scale`` if given), so
    that Arrow's result types of exact products and quotients stay within 76 digits."""
    data_type = _type_of(value)
    scale = data_type.scale if scale is None else scale
    largest = pc.max(pc.abs(value)) if not isinstance(value, pa.Scalar) else pc.abs(value)
    whole = len(str(int(largest.as_py()))) if largest.is_valid else 1
    return cast(value, data_type, pa.decimal256(min(whole + scale, 76), scale), -1)


def _decimal(op: str, left: Value, right: Value, result: pa.DataType, node: BCall) -> Value:
    """Exact decimal arithmetic in 256 bits, rounded half up to ``result`` (Spark's semantics).

    Arrow's decimal division truncates at scale ``s1 + p2 - s2 + 1``: the dividend gets enough
    scale for one digit beyond the result's, which rounding then uses."""
    rt = _type_of(right)
    try:
        if op in ("+", "-"):
            exact = _PLAIN[op](_wide(left), _wide(right))
        elif op == "*":
            exact = pc.multiply(_wide(left), _wide(right))
        else:
            divisor = _wide(pc.if_else(pc.equal(right, pa.scalar(0, rt)), pa.scalar(1, rt), right))
            wanted = result.scale + divisor.type.scale - divisor.type.precision if op == "/" else 0
            quotient = pc.divide(_wide(left, max(_type_of(left).scale, wanted)), divisor)
            if op == "/":
                exact = quotient
            else:
                exact = pc.subtract(_wide(left), pc.multiply(pc.trunc(quotient), divisor))
        return cast(exact, _type_of(exact), result, node.position)
    except pa.ArrowInvalid as exc:
        raise _raise_arrow(exc, node) from None


def negate(args: Sequence[Value], node: BCall) -> Value:
    (value,) = args
    try:
        return pc.negate_checked(value) if types.is_integral(node.type) else pc.negate(value)
    except pa.ArrowInvalid as exc:
        raise _raise_arrow(exc, node) from None


def date_arithmetic(args: Sequence[Value], node: BCall) -> Value:
    """``date + days`` / ``date - days`` (days an INT): a DATE."""
    date, days = args
    shifted = (pc.add_checked if node.name == "+" else pc.subtract_checked)(date.cast(pa.int32()), days)
    return shifted.cast(types.DATE)


def concat(args: Sequence[Value], node: BCall) -> Value:
    """Strings (or binaries) joined; null if any is null; ``''`` for none."""
    if not args:
        return pa.scalar("", node.type)
    if len(args) == 1:
        return args[0]
    return pc.binary_join_element_wise(*args, pa.scalar("", node.type))


# -- LIKE -------------------------------------------------------------------------------------------
def like_pattern(pattern: str, escape: str, position: int) -> str:
    """A Spark ``LIKE`` pattern as Arrow's ``match_like`` reads it (backslash escapes)."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == escape:
            if index + 1 == len(pattern):
                raise resolution_error(
                    "INVALID_FORMAT.ESC_AT_THE_END",
                    f"The format is invalid: {pattern!r}. The escape character is not allowed to end with",
                    position,
                )
            following = pattern[index + 1]
            if following not in ("%", "_", escape):
                raise resolution_error(
                    "INVALID_FORMAT.ESC_IN_THE_MIDDLE",
                    f"The format is invalid: {pattern!r}. The escape character is not allowed to precede "
                    f"{following!r}",
                    position,
                )
            out.append("\\" + following if following in "%_\\" else following)
            index += 2
            continue
        out.append("\\\\" if char == "\\" else char)
        index += 1
    return "".join(out)


def like(value: Value, pattern: Value, escape: str, position: int) -> Value:
    """``value LIKE pattern`` (both strings); a pattern per row is matched pattern by pattern."""
    if isinstance(pattern, pa.Scalar):
        if not pattern.is_valid:
            return pa.scalar(None, pa.bool_())
        arrow_pattern = like_pattern(pattern.as_py(), escape, position)
        prefix = re.fullmatch(r"((?:[^%_\\]|\\.)*)%", arrow_pattern, re.DOTALL)
        if prefix is not None:  # a plain prefix: the cheaper kernel
            return pc.starts_with(value, re.sub(r"\\(.)", r"\1", prefix.group(1), flags=re.DOTALL))
        return pc.match_like(value, arrow_pattern)
    result: Value = pa.nulls(len(pattern), pa.bool_())
    for text in pc.unique(pattern.drop_null()).to_pylist():
        rows = pc.fill_null(pc.equal(pattern, text), False)
        result = pc.if_else(rows, pc.match_like(value, like_pattern(text, escape, position)), result)
    return result
