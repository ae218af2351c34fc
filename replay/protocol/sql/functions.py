"""The SQL functions: one registry entry per name (arity, argument types, result type, kernel).

Adding a function is one entry in :data:`FUNCTIONS`: usually :func:`scalar` with the kinds of its
arguments (implicitly cast as Spark does: ``upper(1)`` is ``'1'``, ``abs('1')`` is ``1.0D``), its
result type and a vectorised kernel; functions that SQL evaluates lazily (``coalesce``, ``if``,
``nullif``) are rewritten into ``CASE``. Semantics are Spark 4's under ANSI mode, with these
known differences: ``upper``/``lower`` use Unicode's simple case mapping (Spark's Java mapping
turns ``ß`` into ``SS``); ``round`` of a DOUBLE rounds the binary value half away from zero
(Spark rounds its shortest decimal spelling: ``round(2.675D, 2)`` is ``2.68`` there, ``2.67``
here); ``substring`` needs a constant position and length.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import coercion, operators
from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import (
    BCall,
    BCase,
    BCompare,
    BIsNull,
    BLiteral,
    Bound,
    Kernel,
    Value,
    is_constant,
)
from replay.protocol.sql.casts import cast
from replay.protocol.sql.errors import ExpressionError, evaluation_error, resolution_error
from replay.protocol.sql.evaluate import Context, evaluate


@dataclass(frozen=True)
class CallSite:
    """A call being bound: its SQL (for messages), position, the SQL of each argument, the time."""

    site: coercion.Site
    args_sql: tuple[str, ...]
    now: _dt.datetime


Binder = Callable[[list[Bound], CallSite], Bound]


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    min_args: int
    max_args: int | None  # None: any number
    bind: Binder

    def accepts(self, count: int) -> bool:
        return count >= self.min_args and (self.max_args is None or count <= self.max_args)


def arity_error(spec: FunctionSpec, count: int, position: int) -> ExpressionError:
    if spec.max_args is None:
        expected = f"> {spec.min_args - 1}"
    elif spec.min_args == spec.max_args:
        expected = str(spec.min_args)
    else:
        expected = f"[{', '.join(str(n) for n in range(spec.min_args, spec.max_args + 1))}]"
    return resolution_error(
        "WRONG_NUM_ARGS.WITHOUT_SUGGESTION",
        f"The `{spec.name}` requires {expected} parameters but the actual number is {count}",
        position,
    )


def _coerce(args: list[Bound], kinds: Sequence[str], call: CallSite) -> list[Bound]:
    return [
        coercion.implicit(arg, kinds[min(i, len(kinds) - 1)], call.site, i, call.args_sql[i])
        for i, arg in enumerate(args)
    ]


def scalar(
    name: str,
    kinds: Sequence[str],
    result: pa.DataType | Callable[[list[Bound]], pa.DataType],
    kernel: Kernel,
    *,
    min_args: int | None = None,
    variadic: bool = False,
    null_skips: bool = False,
) -> FunctionSpec:
    """A function of ``kinds`` of arguments (the last repeats if ``variadic``) computed by ``kernel``."""

    def bind(args: list[Bound], call: CallSite) -> Bound:
        typed = _coerce(args, kinds, call)
        data_type = result(typed) if callable(result) else result
        return BCall(data_type, call.site.position, name, tuple(typed), kernel, null_skips=null_skips)

    low = len(kinds) if min_args is None else min_args
    return FunctionSpec(name, low, None if variadic else len(kinds), bind)


def _same_as_first(args: list[Bound]) -> pa.DataType:
    return args[0].type


# -- kernels --------------------------------------------------------------------------------------
def _unary(function: Callable[[Value], Value]) -> Kernel:
    return lambda args, node: function(args[0])


def _length(args: Sequence[Value], node: BCall) -> Value:
    value = args[0]
    counted = pc.binary_length(value) if types.is_binary(value.type) else pc.utf8_length(value)
    return counted.cast(types.INT)


def _abs(args: Sequence[Value], node: BCall) -> Value:
    try:
        return pc.abs_checked(args[0]) if types.is_integral(node.type) else pc.abs(args[0])
    except pa.ArrowInvalid:
        raise evaluation_error("ARITHMETIC_OVERFLOW", "overflow", node.position) from None


def _days(value: Value) -> Value:
    return value.cast(pa.int32())


def _date_shift(sign: int) -> Kernel:
    def kernel(args: Sequence[Value], node: BCall) -> Value:
        date, days = args
        shifted = (pc.add_checked if sign > 0 else pc.subtract_checked)(_days(date), days)
        return shifted.cast(types.DATE)

    return kernel


def _part(function: Callable[[Value], Value]) -> Kernel:
    return lambda args, node: function(args[0]).cast(types.INT)


def _constant_int(node: Bound, call: CallSite, index: int) -> int | None:
    if not is_constant(node):
        raise call.site.mismatch(
            f"The {('first', 'second', 'third')[index]} parameter must be a constant, but "
            f'"{call.args_sql[index]}" is not',
            "NON_FOLDABLE_INPUT",
        )
    value = evaluate(node, Context(1, _no_columns))
    result = (value if isinstance(value, pa.Scalar) else value[0]).as_py()
    assert result is None or isinstance(result, int)
    return result


def _no_columns(scope: str, name: str) -> pa.Array:
    raise AssertionError("a constant reads no column")


# -- substring ------------------------------------------------------------------------------------
def _bind_substring(args: list[Bound], call: CallSite) -> Bound:
    kinds = [coercion.STRING_OR_BINARY, coercion.ANY_INTEGER, coercion.ANY_INTEGER][: len(args)]
    typed = _coerce(args, kinds, call)
    position = _constant_int(typed[1], call, 1)
    length = _constant_int(typed[2], call, 2) if len(typed) == 3 else -1
    if position is None or (len(typed) == 3 and length is None):
        return BLiteral(typed[0].type, call.site.position, pa.scalar(None, typed[0].type))
    bounds = _slice_bounds(position, None if len(typed) == 2 else length)
    return BCall(typed[0].type, call.site.position, "substring", (typed[0],), _substring, bounds)


def _slice_bounds(position: int, length: int | None) -> tuple[int, int | None]:
    """Spark's 1-based ``substring(s, pos, len)`` as a Python slice (``pos`` 0 is 1, negative
    counts from the end; a start before the beginning still counts towards the length)."""
    start = position - 1 if position > 0 else position
    if length is None:
        return start, None
    if length <= 0:
        return start, start
    stop = start + length
    if position < 0 and stop >= 0:
        return start, None
    return start, stop


def _substring(args: Sequence[Value], node: BCall) -> Value:
    start, stop = node.options
    assert isinstance(start, int) and (stop is None or isinstance(stop, int))
    slicer = pc.binary_slice if types.is_binary(node.type) else pc.utf8_slice_codeunits
    return slicer(args[0], start=start, stop=stop)


# -- round ----------------------------------------------------------------------------------------
def _round_type(data_type: pa.DataType, scale: int) -> pa.DataType:
    if not pa.types.is_decimal(data_type):
        return data_type
    precision, own = data_type.precision, data_type.scale
    whole = precision - own + 1
    if scale < 0:
        return pa.decimal128(min(max(whole, -scale + 1), types.MAX_PRECISION), 0)
    new_scale = min(own, scale)
    return pa.decimal128(min(whole + new_scale, types.MAX_PRECISION), new_scale)


def _bind_round(args: list[Bound], call: CallSite) -> Bound:
    typed = _coerce(args, [coercion.NUMERIC, coercion.INTEGER], call)
    scale = _constant_int(typed[1], call, 1) if len(typed) == 2 else 0
    if scale is None:
        data_type = _round_type(typed[0].type, 0)
        return BLiteral(data_type, call.site.position, pa.scalar(None, data_type))
    data_type = _round_type(typed[0].type, scale)
    return BCall(data_type, call.site.position, "round", (typed[0],), _round, (scale,))


def _round(args: Sequence[Value], node: BCall) -> Value:
    (scale,) = node.options
    assert isinstance(scale, int)
    value = args[0]
    source = value.type
    if types.is_integral(source) and scale >= 0:
        return value
    if pa.types.is_decimal(source):
        value = cast(value, source, pa.decimal256(min(source.precision + 1, 76), source.scale), node.position)
    rounded = pc.round(value, ndigits=scale, round_mode="half_towards_infinity")
    return cast(rounded, rounded.type, node.type, node.position)


# -- lazily evaluated ------------------------------------------------------------------------------
def _bind_coalesce(args: list[Bound], call: CallSite) -> Bound:
    typed, data_type = coercion.common(args, call.site, "coalesce")
    whens = tuple((BIsNull(types.BOOLEAN, arg.position, arg, negated=True), arg) for arg in typed[:-1])
    if not whens:
        return typed[0]
    return BCase(data_type, call.site.position, whens, typed[-1])


def _bind_if(args: list[Bound], call: CallSite) -> Bound:
    condition = coercion.implicit(args[0], coercion.BOOLEAN_OR_NULL, call.site, 0, call.args_sql[0])
    (then, otherwise), data_type = coercion.common(args[1:], call.site, "if")
    return BCase(data_type, call.site.position, ((condition, then),), otherwise)


def _bind_nullif(args: list[Bound], call: CallSite) -> Bound:
    left, right = coercion.comparison_operands(args[0], args[1], call.site, "=")
    equal = BCompare(types.BOOLEAN, call.site.position, "=", left, right)
    data_type = args[0].type
    return BCase(
        data_type,
        call.site.position,
        ((equal, BLiteral(data_type, -1, pa.scalar(None, data_type))),),
        args[0],
    )


def _bind_now(kind: str) -> Binder:
    def bind(args: list[Bound], call: CallSite) -> Bound:
        moment = call.now.astimezone(_dt.UTC)
        if kind == "date":
            return BLiteral(types.DATE, call.site.position, pa.scalar(moment.date(), types.DATE))
        return BLiteral(types.TIMESTAMP, call.site.position, pa.scalar(moment, types.TIMESTAMP))

    return bind


def _bind_is_null(negated: bool) -> Binder:
    return lambda args, call: BIsNull(types.BOOLEAN, call.site.position, args[0], negated)


def _concat_type(args: list[Bound]) -> pa.DataType:
    return pa.binary() if args and all(types.is_binary(a.type) for a in args) else types.STRING


def _bind_concat(args: list[Bound], call: CallSite) -> Bound:
    kind = (
        coercion.STRING_OR_BINARY if args and all(types.is_binary(a.type) for a in args) else coercion.STRING
    )
    typed = _coerce(args, [kind], call)
    data_type = _concat_type(typed)
    typed = [coercion.cast_to(arg, data_type) for arg in typed]
    return BCall(data_type, call.site.position, "concat", tuple(typed), operators.concat)


_TRIM = _unary(lambda value: pc.utf8_trim(value, characters=" "))

FUNCTIONS: dict[str, FunctionSpec] = {
    spec.name: spec
    for spec in (
        scalar("upper", [coercion.STRING], types.STRING, _unary(pc.utf8_upper)),
        scalar("lower", [coercion.STRING], types.STRING, _unary(pc.utf8_lower)),
        scalar("trim", [coercion.STRING], types.STRING, _TRIM),
        scalar(
            "ltrim",
            [coercion.STRING],
            types.STRING,
            _unary(lambda value: pc.utf8_ltrim(value, characters=" ")),
        ),
        scalar(
            "rtrim",
            [coercion.STRING],
            types.STRING,
            _unary(lambda value: pc.utf8_rtrim(value, characters=" ")),
        ),
        scalar("length", [coercion.STRING_OR_BINARY], types.INT, _length),
        scalar("char_length", [coercion.STRING_OR_BINARY], types.INT, _length),
        scalar("character_length", [coercion.STRING_OR_BINARY], types.INT, _length),
        FunctionSpec("concat", 0, None, _bind_concat),
        FunctionSpec("substring", 2, 3, _bind_substring),
        FunctionSpec("substr", 2, 3, _bind_substring),
        scalar("abs", [coercion.NUMERIC], _same_as_first, _abs),
        FunctionSpec("round", 1, 2, _bind_round),
        FunctionSpec("coalesce", 1, None, _bind_coalesce),
        FunctionSpec("ifnull", 2, 2, _bind_coalesce),
        FunctionSpec("nvl", 2, 2, _bind_coalesce),
        FunctionSpec("nullif", 2, 2, _bind_nullif),
        FunctionSpec("if", 3, 3, _bind_if),
        FunctionSpec("isnull", 1, 1, _bind_is_null(False)),
        FunctionSpec("isnotnull", 1, 1, _bind_is_null(True)),
        FunctionSpec("current_date", 0, 0, _bind_now("date")),
        FunctionSpec("current_timestamp", 0, 0, _bind_now("timestamp")),
        FunctionSpec("now", 0, 0, _bind_now("timestamp")),
        scalar("date_add", [coercion.DATE, coercion.INTEGER], types.DATE, _date_shift(+1), null_skips=True),
        scalar("date_sub", [coercion.DATE, coercion.INTEGER], types.DATE, _date_shift(-1), null_skips=True),
        scalar(
            "datediff",
            [coercion.DATE, coercion.DATE],
            types.INT,
            lambda args, node: pc.subtract(_days(args[0]), _days(args[1])),
            null_skips=True,
        ),
        scalar("year", [coercion.DATE], types.INT, _part(pc.year)),
        scalar("month", [coercion.DATE], types.INT, _part(pc.month)),
        scalar("day", [coercion.DATE], types.INT, _part(pc.day)),
        scalar("dayofmonth", [coercion.DATE], types.INT, _part(pc.day)),
    )
}
"""Every function the grammar knows, by lowercase name."""
