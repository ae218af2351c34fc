"""Interval arithmetic of dates and timestamps (the intervals of
:mod:`replay.protocol.sql.interval_literals`), as Spark types and computes it under ANSI mode.

Timestamp ``+``/``-`` interval is a timestamp; a DATE plus an ``INTERVAL DAY`` (only whole days) or
a year-month interval is a DATE, plus any other day-time interval a TIMESTAMP (the date at
midnight, UTC: the session time zone). Two intervals of one kind add, subtract and compare; an
interval times or divided by a number rounds half up to a microsecond (a month); two timestamps
(or DATEs) subtract to a day-time interval. Adding months keeps the day of the month, or takes the
new month's last day where it has fewer (``DATE '2024-01-31' + INTERVAL 1 MONTH`` is
``2024-02-29``); a timestamp keeps its time of day (in UTC).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import coercion
from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import BCall, Bound, Value
from replay.protocol.sql.errors import evaluation_error
from replay.protocol.sql.interval_literals import DAY_TIME, INT32_MAX, MICROS, YEAR_MONTH


# -- kinds ----------------------------------------------------------------------------------------------
def is_day_time(t: pa.DataType) -> bool:
    return pa.types.is_duration(t)


def is_year_month(t: pa.DataType) -> bool:
    return t == YEAR_MONTH


def is_interval(t: pa.DataType) -> bool:
    return is_day_time(t) or is_year_month(t)


# -- kernels ----------------------------------------------------------------------------------------------
_DAY = MICROS["day"]


def months_of(args: Sequence[Value], node: BCall) -> Value:
    """The months of a year-month interval, as BIGINT."""
    (value,) = args
    if isinstance(value, pa.Scalar):
        found = value.as_py()
        return pa.scalar(None if found is None else found.months, pa.int64())
    return pa.array([None if v is None else v.months for v in value.to_pylist()], pa.int64())


def _year_month(months: Value) -> Value:
    if isinstance(months, pa.Scalar):
        found = months.as_py()
        return pa.scalar(None if found is None else pa.MonthDayNano([found, 0, 0]), YEAR_MONTH)
    return pa.array(
        [None if m is None else pa.MonthDayNano([m, 0, 0]) for m in months.to_pylist()], YEAR_MONTH
    )


def _micros(value: Value) -> Value:
    return value.cast(pa.int64())


def _floor_divide(value: Value, divisor: int) -> Value:
    """``value // divisor`` (floor) of BIGINT values, exactly."""
    quotient = pc.divide(value, divisor)  # truncates towards zero
    inexact_negative = pc.and_(pc.less(value, 0), pc.not_equal(pc.multiply(quotient, divisor), value))
    return pc.subtract(quotient, inexact_negative.cast(pa.int64()))


def _days_from_civil(year: Value, month: Value, day: Value) -> Value:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    shifted = pc.subtract(year, pc.less_equal(month, 2).cast(pa.int64()))
    era = _floor_divide(shifted, 400)
    year_of_era = pc.subtract(shifted, pc.multiply(era, 400))
    march_month = pc.if_else(pc.greater(month, 2), pc.subtract(month, 3), pc.add(month, 9))
    day_of_year = pc.add(pc.divide(pc.add(pc.multiply(march_month, 153), 2), 5), pc.subtract(day, 1))
    day_of_era = pc.add(
        pc.add(pc.multiply(year_of_era, 365), pc.divide(year_of_era, 4)),
        pc.subtract(day_of_year, pc.divide(year_of_era, 100)),
    )
    return pc.subtract(pc.add(pc.multiply(era, 146097), day_of_era), 719468)


def _plus_months(days: Value, months: Value) -> Value:
    """Days since the epoch (BIGINT) moved by ``months``, the day of the month kept or clamped."""
    dates = days.cast(pa.int32()).cast(types.DATE)
    year, month, day = (part(dates).cast(pa.int64()) for part in (pc.year, pc.month, pc.day))
    total = pc.add(pc.add(pc.multiply(year, 12), pc.subtract(month, 1)), months)
    new_year = _floor_divide(total, 12)
    new_month = pc.add(pc.subtract(total, pc.multiply(new_year, 12)), 1)
    first = _days_from_civil(new_year, new_month, 1)
    following = _days_from_civil(
        pc.add(new_year, pc.equal(new_month, 12).cast(pa.int64())),
        pc.add(pc.if_else(pc.equal(new_month, 12), 0, new_month), 1),
        1,
    )
    last_day = pc.subtract(following, first)
    return pc.add(first, pc.subtract(pc.min_element_wise(day, last_day), 1))


def _overflow(node: BCall) -> Exception:
    return evaluation_error("ARITHMETIC_OVERFLOW", f"interval {node.name} overflows", node.position)


def shift(args: Sequence[Value], node: BCall) -> Value:
    """A DATE or a timestamp ``+``/``-`` an interval (day-time: a timestamp; a DATE only by days)."""
    moment, interval = args
    sign = 1 if node.name == "+" else -1
    try:
        if is_year_month(interval.type):
            months = pc.multiply(months_of([interval], node), sign)
            if pa.types.is_date(moment.type):
                shifted = _plus_months(moment.cast(pa.int32()).cast(pa.int64()), months)
                return shifted.cast(pa.int32()).cast(types.DATE)
            micros = moment.cast(pa.int64())
            days = _floor_divide(micros, _DAY)
            time_of_day = pc.subtract(micros, pc.multiply(days, _DAY))
            moved = pc.add_checked(pc.multiply_checked(_plus_months(days, months), _DAY), time_of_day)
            return moved.cast(moment.type)
        if pa.types.is_date(moment.type):  # an INTERVAL DAY: whole days
            days = pc.divide(_micros(interval), _DAY).cast(pa.int32())
            moved_days = (pc.add_checked if sign > 0 else pc.subtract_checked)(moment.cast(pa.int32()), days)
            return moved_days.cast(types.DATE)
        return (pc.add_checked if sign > 0 else pc.subtract_checked)(moment, interval.cast(DAY_TIME))
    except pa.ArrowInvalid:
        raise _overflow(node) from None


def difference(args: Sequence[Value], node: BCall) -> Value:
    """``a - b`` of two timestamps (or two DATEs): a day-time interval."""
    left, right = args
    try:
        if pa.types.is_date(left.type):
            days = pc.subtract_checked(*(side.cast(pa.int32()).cast(pa.int64()) for side in (left, right)))
            return pc.multiply_checked(days, _DAY).cast(DAY_TIME)
        return pc.subtract_checked(left, right).cast(DAY_TIME)
    except pa.ArrowInvalid:
        raise _overflow(node) from None


def add(args: Sequence[Value], node: BCall) -> Value:
    """``+``/``-`` of two intervals of one kind."""
    left, right = args
    operation = pc.add_checked if node.name == "+" else pc.subtract_checked
    try:
        if is_year_month(node.type):
            months = operation(months_of([left], node), months_of([right], node))
            return _year_month(_within_int32(months, node))
        return operation(_micros(left), _micros(right)).cast(DAY_TIME)
    except pa.ArrowInvalid:
        raise _overflow(node) from None


def negate(args: Sequence[Value], node: BCall) -> Value:
    (value,) = args
    try:
        if is_year_month(node.type):
            return _year_month(pc.negate_checked(months_of([value], node)))
        return pc.negate_checked(_micros(value)).cast(DAY_TIME)
    except pa.ArrowInvalid:
        raise _overflow(node) from None


def scale(args: Sequence[Value], node: BCall) -> Value:
    """An interval ``*`` or ``/`` a number (the interval first), rounded half up."""
    interval, number = args
    units = months_of([interval], node) if is_year_month(node.type) else _micros(interval)
    if node.name == "/":
        zero = pc.and_(pc.and_(pc.is_valid(units), pc.is_valid(number)), pc.equal(number, 0))
        if zero.as_py() if isinstance(zero, pa.Scalar) else pc.any(zero).as_py():
            raise evaluation_error("INTERVAL_DIVIDED_BY_ZERO", "Division by zero", node.position)
    try:
        if node.name == "*" and types.is_integral(number.type):
            result = pc.multiply_checked(units, number.cast(pa.int64()))
        else:
            factor = number.cast(pa.float64())
            exact = (pc.multiply if node.name == "*" else pc.divide)(units.cast(pa.float64()), factor)
            result = pc.round(exact, round_mode="half_towards_infinity").cast(pa.int64())
        if is_year_month(node.type):
            return _year_month(_within_int32(result, node))
        return result.cast(DAY_TIME)
    except pa.ArrowInvalid:
        raise _overflow(node) from None


def _within_int32(months: Value, node: BCall) -> Value:
    largest = pc.max(pc.abs(months)) if not isinstance(months, pa.Scalar) else pc.abs(months)
    if largest.is_valid and largest.as_py() > INT32_MAX:
        raise _overflow(node)
    return months


# -- typing -------------------------------------------------------------------------------------------------
_INCOMPATIBLE = "the left and right operands of the binary operator have incompatible types"


def _mismatch(
    site: coercion.Site, left: Bound, right: Bound, sub_class: str = "UNEXPECTED_INPUT_TYPE"
) -> Exception:
    names = f'("{types.type_name(left.type)}" and "{types.type_name(right.type)}")'
    return site.mismatch(f"{_INCOMPATIBLE} {names}", sub_class)


def bind_arithmetic(
    op: str, left: Bound, right: Bound, site: coercion.Site, is_day: Callable[[Bound], bool]
) -> tuple[Bound, bool] | None:
    """``left <op> right`` where an interval is involved, or two timestamps (or DATEs) are
    subtracted: the bound node and whether it is Spark's ``INTERVAL DAY``; ``None`` otherwise.
    ``is_day`` tells whether a bound interval is an ``INTERVAL DAY``."""
    lt, rt = left.type, right.type
    position = site.position
    if not (is_interval(lt) or is_interval(rt)):
        if op == "-" and types.is_datetime(lt) and types.is_datetime(rt):
            if not (pa.types.is_date(lt) and pa.types.is_date(rt)):
                common = types.wider_type(lt, rt)
                left, right = coercion.cast_to(left, common), coercion.cast_to(right, common)
            node = BCall(DAY_TIME, position, "-", (left, right), difference, null_skips=True)
            return node, pa.types.is_date(lt) and pa.types.is_date(rt)
        return None
    if op in ("+", "-"):
        if is_interval(lt) and is_interval(rt):
            if is_year_month(lt) != is_year_month(rt):
                raise _mismatch(site, left, right)
            both_days = is_day(left) and is_day(right)
            return BCall(lt, position, op, (left, right), add, null_skips=True), both_days
        if is_interval(lt) and op == "+":
            left, right = right, left
        if is_interval(left.type) or not (types.is_datetime(left.type) or types.is_string(left.type)):
            raise _mismatch(site, left, right)
        if types.is_string(left.type):
            left = coercion.cast_to(left, types.TIMESTAMP)
        if pa.types.is_date(left.type) and is_day_time(right.type) and not is_day(right):
            left = coercion.cast_to(left, types.TIMESTAMP)
        return BCall(left.type, position, op, (left, right), shift, null_skips=True), False
    if op in ("*", "/"):
        if op == "*" and is_interval(rt):
            left, right = right, left
        if not (is_interval(left.type) and types.is_numeric(right.type)):
            raise _mismatch(site, left, right)
        return BCall(left.type, position, op, (left, right), scale, null_skips=True), False
    raise _mismatch(site, left, right)


def negation(operand: Bound) -> Bound:
    """``-interval``."""
    return BCall(operand.type, operand.position, "negative", (operand,), negate)


def comparison_operands(left: Bound, right: Bound, site: coercion.Site) -> tuple[Bound, Bound]:
    """The operands of a comparison of two intervals of one kind: day-time intervals as they
    are, year-month intervals as their months."""
    if pa.types.is_null(left.type):
        left = coercion.cast_to(left, right.type)
    if pa.types.is_null(right.type):
        right = coercion.cast_to(right, left.type)
    if not (is_interval(left.type) and is_interval(right.type)) or is_year_month(left.type) != is_year_month(
        right.type
    ):
        raise _mismatch(site, left, right, "BINARY_OP_DIFF_TYPES")
    if is_year_month(left.type):
        return _months(left), _months(right)
    return left, right


def _months(interval: Bound) -> Bound:
    return BCall(types.BIGINT, interval.position, "months", (interval,), months_of)
