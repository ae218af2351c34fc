"""ANSI SQL casts over Arrow values, vectorised: what ``CAST(x AS type)`` and implicit casts do.

Spark 4 with ANSI mode is the reference (checked against it):

* a value that does not fit fails the cast: ``CAST('a' AS INT)`` is ``CAST_INVALID_INPUT``,
  ``CAST(3000000000L AS INT)`` ``CAST_OVERFLOW``, ``CAST(123.456 AS DECIMAL(4,2))``
  ``NUMERIC_VALUE_OUT_OF_RANGE``; the error names the first such value;
* strings are trimmed before they are read as numbers, booleans, dates or timestamps; integers
  are read without a fraction or exponent (``'1.5'`` is not an INT), decimals are rounded half up
  (``'1.55'`` as ``DECIMAL(3,1)`` is ``1.6``), booleans are ``t, true, y, yes, 1`` and
  ``f, false, n, no, 0`` in any case, dates ``yyyy[-m[-d]]`` followed by anything after a space or
  ``T``, timestamps ``yyyy[-m[-d][(T| )h[:m[:s[.fraction]]]][zone]]`` with zone ``Z``, ``UTC``,
  ``GMT`` or ``+hh[:mm]`` (named regions are not read); a timestamp without zone is in the
  session time zone, UTC;
* fractional numbers become integers by truncation, decimals by rounding half up (of the
  shortest decimal spelling of a DOUBLE, as Spark rounds ``1.25D`` to ``1.3``);
* numbers become strings as Java prints them (``1.0E20``, ``1.0E-4``, ``100.0``), timestamps as
  ``yyyy-MM-dd HH:mm:ss[.ffffff]`` without trailing zeros, booleans as ``true``/``false``.
"""

from __future__ import annotations

import datetime as _dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import Value
from replay.protocol.sql.errors import evaluation_error

_WIDE = pa.decimal256(76, 38)


def can_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether ``CAST`` from ``source`` to ``target`` is allowed under ANSI (Spark's ``canAnsiCast``)."""
    if types.sql_equal(source, target) or pa.types.is_null(source):
        return True
    if not (types.is_atomic(source) and types.is_atomic(target)):
        return False
    if types.is_string(source) or types.is_string(target):
        return not pa.types.is_null(target)
    numeric_like = (types.is_numeric, pa.types.is_boolean)
    if any(kind(source) for kind in numeric_like) and any(kind(target) for kind in numeric_like):
        return True
    if types.is_datetime(source) and types.is_datetime(target):
        return True
    if pa.types.is_timestamp(source) and source.tz is not None:
        return types.is_numeric(target)
    if pa.types.is_timestamp(target) and target.tz is not None:
        return types.is_numeric(source)
    return False


def can_store_assign(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a value of ``source`` may be stored into a column of ``target`` under ANSI store
    assignment (Spark's ``canANSIStoreAssign``)."""
    if types.sql_equal(source, target) or pa.types.is_null(source):
        return True
    if types.is_numeric(source) and types.is_numeric(target):
        return True
    if types.is_atomic(source) and types.is_string(target):
        return True
    return types.is_datetime(source) and types.is_datetime(target)


def cast_mismatch_class(source: pa.DataType, target: pa.DataType) -> str:
    """Spark's error sub-class of a cast ANSI mode does not allow (which alternative it suggests)."""
    if (pa.types.is_date(source) and types.is_numeric(target)) or (
        pa.types.is_date(target) and types.is_numeric(source)
    ):
        return "CAST_WITH_FUNC_SUGGESTION"
    if types.is_binary(target) and types.is_numeric(source):
        return "CAST_WITH_CONF_SUGGESTION"
    return "CAST_WITHOUT_SUGGESTION"


def cast(value: Value, source: pa.DataType, target: pa.DataType, position: int) -> Value:
    """``value`` (of ``source``) as ``target``; an ``ExpressionEvaluationError`` where one does not fit."""
    if source == target:
        return value
    if isinstance(value, pa.Scalar):
        return _cast_array(
            pa.array([value.as_py() if value.is_valid else None], source), source, target, position
        )[0]
    if isinstance(value, pa.ChunkedArray):
        chunks = [_cast_array(chunk, source, target, position) for chunk in value.chunks]
        return pa.chunked_array(chunks, type=target)
    return _cast_array(value, source, target, position)


def _cast_array(array: pa.Array, source: pa.DataType, target: pa.DataType, position: int) -> pa.Array:
    if pa.types.is_null(source) or array.null_count == len(array):
        return pa.nulls(len(array), target)
    if types.sql_equal(source, target):
        return array.cast(target, safe=False)
    if types.is_string(target):
        return to_string(array, source)
    if types.is_string(source):
        return _from_string(array, target, position)
    if pa.types.is_boolean(target):
        return pc.not_equal(array, pa.scalar(0, source) if not types.is_fractional(source) else 0.0)
    if pa.types.is_boolean(source):
        return _numeric(array.cast(pa.int8()), pa.int8(), target, position)
    if types.is_numeric(source) and types.is_numeric(target):
        return _numeric(array, source, target, position)
    if pa.types.is_timestamp(target):
        if pa.types.is_date(source):
            return array.cast(pa.timestamp(target.unit)).cast(target)
        if pa.types.is_timestamp(source):
            return array.cast(target, safe=False)
        micros = pc.multiply_checked(_numeric(array, source, types.BIGINT, position), 1_000_000)
        return micros.cast(pa.timestamp("us", tz=target.tz)).cast(target)
    if pa.types.is_date(target):
        return array.cast(pa.timestamp("us", tz=source.tz), safe=False).cast(types.DATE)
    if pa.types.is_timestamp(source) and types.is_numeric(target):  # seconds since the epoch
        micros = array.cast(pa.timestamp("us", tz=source.tz), safe=False).cast(types.BIGINT)
        if types.is_fractional(target):
            return pc.divide(micros.cast(types.DOUBLE), 1e6).cast(target)
        seconds = pc.floor(pc.divide(micros.cast(types.DOUBLE), 1e6)).cast(types.BIGINT)
        return _numeric(seconds, types.BIGINT, target, position)
    raise evaluation_error(
        "DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION",
        f'cannot cast "{types.type_name(source)}" to "{types.type_name(target)}"',
        position,
    )


# -- numbers ------------------------------------------------------------------------------------
def _first_bad(array: pa.Array, bad: pa.Array) -> object:
    index = pc.index(pc.fill_null(bad, False), True).as_py()
    return array[index].as_py() if index >= 0 else None


def _overflow(
    array: pa.Array, source: pa.DataType, target: pa.DataType, bad: pa.Array, position: int
) -> Exception:
    value = _first_bad(array, bad)
    if pa.types.is_decimal(target):
        return evaluation_error(
            "NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION",
            f"{value} cannot be represented as Decimal({target.precision}, {target.scale})",
            position,
        )
    return evaluation_error(
        "CAST_OVERFLOW",
        f'The value {value!r} of the type "{types.type_name(source)}" cannot be cast to '
        f'"{types.type_name(target)}" '
        "due to an overflow",
        position,
    )


def _numeric(array: pa.Array, source: pa.DataType, target: pa.DataType, position: int) -> pa.Array:
    if types.is_fractional(target):
        return array.cast(target, safe=False)
    if types.is_integral(target):
        whole = array
        if types.is_fractional(source):
            finite = pc.is_finite(array)
            if not pc.all(pc.fill_null(finite, True)).as_py():
                raise _overflow(array, source, target, pc.invert(finite), position)
            whole = pc.trunc(array)
        elif pa.types.is_decimal(source):
            whole = pc.trunc(array)
        try:
            return whole.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            wide = whole.cast(_WIDE, safe=False) if not types.is_fractional(source) else whole
            info = (-(2 ** (target.bit_width - 1)), 2 ** (target.bit_width - 1) - 1)
            fractional = types.is_fractional(source)
            low, high = (
                pa.scalar(float(v) if fractional else v, types.DOUBLE if fractional else _WIDE) for v in info
            )
            bad = pc.or_(pc.less(wide, low), pc.greater(wide, high))
            raise _overflow(array, source, target, bad, position) from None
    # to DECIMAL
    if types.is_fractional(source):
        wide = _from_decimal_text(to_string_plain(array), position, array, source)
    elif pa.types.is_decimal(source):
        wide = array.cast(pa.decimal256(min(source.precision + 1, 76), source.scale))
    else:
        wide = array.cast(pa.decimal256(types.integral_as_decimal(source).precision, 0))
    return _fit_decimal(wide, target, array, source, position)


def _fit_decimal(
    wide: pa.Array, target: pa.DataType, original: pa.Array, source: pa.DataType, position: int
) -> pa.Array:
    """A decimal rounded half up to ``target``'s scale and checked against its precision."""
    if wide.type.scale > target.scale:
        wide = pc.round(wide, ndigits=target.scale, round_mode="half_towards_infinity")
    whole = target.precision - target.scale
    if wide.type.precision - wide.type.scale > whole:
        limit_type = pa.decimal256(min(whole + 1 + wide.type.scale, 76), wide.type.scale)
        bad = pc.greater_equal(pc.abs(wide), pa.scalar(decimal.Decimal(10) ** whole, limit_type))
        if pc.any(pc.fill_null(bad, False)).as_py():
            raise _overflow(original, source, target, bad, position)
    return wide.cast(target, safe=False)


def _from_decimal_text(text: pa.Array, position: int, original: pa.Array, source: pa.DataType) -> pa.Array:
    try:
        return text.cast(_WIDE)
    except pa.ArrowInvalid:
        raise _overflow(original, source, pa.decimal128(38, 0), pc.is_valid(original), position) from None


# -- strings ------------------------------------------------------------------------------------
def _malformed(array: pa.Array, bad: pa.Array, target: pa.DataType, position: int) -> Exception:
    return evaluation_error(
        "CAST_INVALID_INPUT",
        f'The value {_first_bad(array, bad)!r} of the type "STRING" cannot be cast to '
        f'"{types.type_name(target)}" '
        "because it is malformed",
        position,
    )


_TRUE = pa.array(["t", "true", "y", "yes", "1"])
_FALSE = pa.array(["f", "false", "n", "no", "0"])


def _from_string(array: pa.Array, target: pa.DataType, position: int) -> pa.Array:
    if types.is_binary(target):
        return array.cast(target)
    text = pc.utf8_trim_whitespace(array.cast(pa.string()) if not pa.types.is_string(array.type) else array)
    if pa.types.is_boolean(target):
        lowered = pc.utf8_lower(text)
        truth = pc.is_in(lowered, value_set=_TRUE)
        bad = pc.and_(pc.invert(truth), pc.invert(pc.is_in(lowered, value_set=_FALSE)))
        if pc.any(pc.fill_null(bad, False)).as_py():
            raise _malformed(array, bad, target, position)
        return pc.if_else(pc.is_valid(array), truth, pa.scalar(None, pa.bool_()))
    if types.is_integral(target):
        pattern_ok = pc.match_substring_regex(text, r"^[+-]?[0-9]+$")
        if not pc.all(pc.fill_null(pattern_ok, True)).as_py():
            raise _malformed(array, pc.invert(pattern_ok), target, position)
        clean = pc.replace_substring_regex(text, r"^\+", "")
        try:
            return clean.cast(target)
        except pa.ArrowInvalid:
            wide = clean.cast(pa.decimal256(76, 0))
            info = (-(2 ** (target.bit_width - 1)), 2 ** (target.bit_width - 1) - 1)
            bad = pc.or_(
                pc.less(wide, pa.scalar(info[0], wide.type)), pc.greater(wide, pa.scalar(info[1], wide.type))
            )
            raise _malformed(array, bad, target, position) from None
    if types.is_fractional(target) or pa.types.is_decimal(target):
        clean = pc.replace_substring_regex(text, r"(?i)^([+-]?)inf(inity)?$", r"\1inf")
        clean = pc.replace_substring_regex(clean, r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)[dDfF]$", r"\1")
        pattern = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
        if types.is_fractional(target):
            pattern = r"(?i)^([+-]?(inf|nan)|[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?)$"
        pattern_ok = pc.match_substring_regex(clean, pattern)
        if not pc.all(pc.fill_null(pattern_ok, True)).as_py():
            raise _malformed(array, pc.invert(pattern_ok), target, position)
        if types.is_fractional(target):
            return clean.cast(target)
        try:
            wide = clean.cast(_WIDE)
        except pa.ArrowInvalid:
            raise _malformed(array, pc.is_valid(array), target, position) from None
        return _fit_decimal(wide, target, array, types.STRING, position)
    if pa.types.is_date(target) or pa.types.is_timestamp(target):
        micros, bad = _read_datetimes(
            text,
            date_only=pa.types.is_date(target),
            zoned=target.tz is not None if pa.types.is_timestamp(target) else False,
        )
        if pc.any(pc.fill_null(bad, False)).as_py():
            raise _malformed(array, bad, target, position)
        stamps = micros.cast(
            pa.timestamp("us", tz="UTC" if pa.types.is_timestamp(target) and target.tz else None)
        )
        return stamps.cast(types.DATE) if pa.types.is_date(target) else stamps.cast(target, safe=False)
    raise evaluation_error(
        "DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION",
        f'cannot cast "STRING" to "{types.type_name(target)}"',
        position,
    )


_DATE_RE = r"^(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{1,2})(?:-(?P<d>[0-9]{1,2})(?:[T ].*)?)?)?$"
_STAMP_RE = (
    r"^(?P<y>[0-9]{4})(?:-(?P<m>[0-9]{1,2})(?:-(?P<d>[0-9]{1,2})(?:[T ](?P<H>[0-9]{1,2})(?::(?P<M>[0-9]{1,2})"
    r"(?::(?P<S>[0-9]{1,2})(?:\.(?P<f>[0-9]*))?)?)?)?)?)?\s*(?P<z>Z|UTC|GMT|[+-][0-9]{1,2}(?::?[0-9]{2})?)?$"
)


def _field(parts: pa.StructArray, index: int, default: str, width: int) -> pa.Array:
    values = pc.struct_field(parts, [index])
    values = pc.if_else(pc.equal(values, ""), default, values)
    return pc.utf8_lpad(values, width, "0")


def _read_datetimes(text: pa.Array, *, date_only: bool, zoned: bool) -> tuple[pa.Array, pa.Array]:
    """Microseconds since the epoch (UTC) of each string, and where a string is malformed."""
    parts = pc.extract_regex(text, _DATE_RE if date_only else _STAMP_RE)
    year, month, day = _field(parts, 0, "0", 4), _field(parts, 1, "1", 2), _field(parts, 2, "1", 2)
    hour = minute = second = pa.repeat(pa.scalar("00"), len(text))
    if not date_only:
        hour, minute, second = (_field(parts, i, "0", 2) for i in (3, 4, 5))
    canonical = pc.binary_join_element_wise(
        year, "-", month, "-", day, "T", hour, ":", minute, ":", second, ""
    )
    parsed = pc.strptime(canonical, format="%Y-%m-%dT%H:%M:%S", unit="s", error_is_null=True)
    again = pc.strftime(parsed, format="%Y-%m-%dT%H:%M:%S")
    bad = pc.and_(pc.is_valid(text), pc.invert(pc.fill_null(pc.equal(again, canonical), False)))
    micros = pc.multiply(parsed.cast(types.BIGINT), 1_000_000)
    if not date_only:
        fraction = pc.utf8_slice_codeunits(pc.utf8_rpad(pc.struct_field(parts, [6]), 6, "0"), 0, 6)
        micros = pc.add(micros, fraction.cast(types.BIGINT))
        if zoned:
            micros = pc.subtract(micros, _zone_offsets(pc.struct_field(parts, [7])))
    return micros, bad


def _zone_offsets(zones: pa.Array) -> pa.Array:
    """Microseconds east of UTC of zone suffixes ``Z``, ``UTC``, ``+hh``, ``-hh:mm``, ``+hhmm``."""
    numbers = pc.extract_regex(
        pc.fill_null(zones, ""), r"^(?P<sign>[+-]?)(?P<h>[0-9]{0,2}):?(?P<m>[0-9]{0,2})"
    )
    hours = _field(numbers, 1, "0", 1).cast(types.BIGINT)
    minutes = _field(numbers, 2, "0", 1).cast(types.BIGINT)
    offset = pc.multiply(pc.add(pc.multiply(hours, 60), minutes), 60_000_000)
    negative = pc.equal(pc.struct_field(numbers, [0]), "-")
    return pc.fill_null(pc.if_else(negative, pc.negate(offset), offset), 0)


def parse_datetime_literal(text: str, target: pa.DataType) -> _dt.date | _dt.datetime | None:
    """The value of ``DATE '...'`` / ``TIMESTAMP '...'`` (``None`` if malformed)."""
    array = pc.utf8_trim_whitespace(pa.array([text]))
    date_only = pa.types.is_date(target)
    micros, bad = _read_datetimes(
        array, date_only=date_only, zoned=target.tz is not None if not date_only else False
    )
    if bad[0].as_py() or not micros[0].is_valid:
        return None
    if date_only:
        value = micros.cast(pa.timestamp("us")).cast(types.DATE)[0].as_py()
    else:
        value = micros.cast(target)[0].as_py()
    assert isinstance(value, _dt.date)
    return value


# -- to strings -----------------------------------------------------------------------------------
def to_string(array: pa.Array, source: pa.DataType) -> pa.Array:
    """``array`` as strings, spelled as Spark spells each type."""
    if types.is_fractional(source):
        return _java_floats(array)
    if pa.types.is_timestamp(source):
        text = array.cast(pa.timestamp("us", tz=source.tz), safe=False).cast(pa.string())
        text = pc.replace_substring_regex(text, r"Z$", "")
        text = pc.replace_substring_regex(text, r"0+$", "")  # only a fraction ends in zeros here
        return pc.replace_substring_regex(text, r"\.$", "")
    if types.is_binary(source):
        return array.cast(pa.binary()).cast(pa.string())
    return array.cast(pa.string())


def to_string_plain(array: pa.Array) -> pa.Array:
    """Floating-point numbers as their shortest decimal spelling (for exact conversions)."""
    return array.cast(pa.string())


def _java_floats(array: pa.Array) -> pa.Array:
    """Floating-point numbers as Java's ``Double.toString`` prints them (``1.0E20``, ``100.0``)."""
    base = array.cast(pa.string())
    magnitude = pc.abs(array.cast(types.DOUBLE))
    plain = pc.or_(
        pc.equal(magnitude, 0.0), pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7))
    )
    plain_text = pc.if_else(pc.match_substring(base, "."), base, pc.binary_join_element_wise(base, ".0", ""))
    sci = pc.extract_regex(base, r"^(?P<s>-?)(?P<d>[0-9])(?:\.(?P<f>[0-9]+))?e(?P<es>[+-])0*(?P<e>[0-9]+)$")
    sci_text = pc.binary_join_element_wise(
        pc.struct_field(sci, [0]),
        pc.struct_field(sci, [1]),
        ".",
        _or_zero(pc.struct_field(sci, [2])),
        "E",
        pc.replace_substring(pc.struct_field(sci, [3]), "+", ""),
        pc.struct_field(sci, [4]),
        "",
    )
    big = pc.extract_regex(base, r"^(?P<s>-?)(?P<d>[0-9])(?P<r>[0-9]*)(?:\.(?P<f>[0-9]*))?$")
    rest = pc.binary_join_element_wise(pc.struct_field(big, [2]), pc.struct_field(big, [3]), "")
    big_text = pc.binary_join_element_wise(
        pc.struct_field(big, [0]),
        pc.struct_field(big, [1]),
        ".",
        _or_zero(rest),
        "E",
        pc.utf8_length(pc.struct_field(big, [2])).cast(pa.string()),
        "",
    )
    small = pc.extract_regex(base, r"^(?P<s>-?)0\.(?P<z>0*)(?P<d>[0-9])(?P<r>[0-9]*)$")
    exponent = pc.add(pc.utf8_length(pc.struct_field(small, [1])), 1).cast(pa.string())
    small_text = pc.binary_join_element_wise(
        pc.struct_field(small, [0]),
        pc.struct_field(small, [2]),
        ".",
        _or_zero(pc.struct_field(small, [3])),
        "E-",
        exponent,
        "",
    )
    scientific = pc.coalesce(sci_text, pc.if_else(pc.greater_equal(magnitude, 1.0), big_text, small_text))
    text = pc.if_else(plain, plain_text, scientific)
    text = pc.if_else(pc.is_nan(array), "NaN", text)
    infinite = pc.and_(pc.invert(pc.is_finite(array)), pc.invert(pc.is_nan(array)))
    return pc.if_else(infinite, pc.if_else(pc.greater(array, 0), "Infinity", "-Infinity"), text)


def _or_zero(digits: pa.Array) -> pa.Array:
    stripped = pc.replace_substring_regex(digits, r"0+$", "")
    return pc.if_else(pc.equal(stripped, ""), "0", stripped)
