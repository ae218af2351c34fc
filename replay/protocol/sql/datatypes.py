"""SQL types as Arrow types, Spark's type names, and Spark's ANSI implicit type coercion.

Types are plain :class:`pyarrow.DataType` values: ``int8``/``int16``/``int32``/``int64`` are
TINYINT/SMALLINT/INT/BIGINT, ``decimal128(p, s)`` DECIMAL, ``float32``/``float64`` FLOAT/DOUBLE,
any string type STRING, any binary type BINARY, ``date32`` DATE, a timestamp with a time zone
TIMESTAMP (an instant; the session time zone is UTC) and one without TIMESTAMP_NTZ, ``null`` VOID.

The coercion rules follow Spark 4 with ANSI mode on (``AnsiTypeCoercion``, ``DecimalPrecision``),
as checked against Spark 4:

* numbers widen TINYINT < SMALLINT < INT < BIGINT < DECIMAL < DOUBLE; an integral type meets a
  FLOAT as DOUBLE; an integral type meets a DECIMAL as ``DECIMAL(3|5|10|20, 0)`` (an integral
  *literal* in arithmetic as the digits it needs: ``1 + 1.5`` is ``DECIMAL(3,1)``);
* a STRING meeting another type is cast to it: to BIGINT against an integral type (``'1' = 1``,
  ``'1.5' = 1`` fails to cast), to DOUBLE against DECIMAL/FLOAT/DOUBLE, to DATE, TIMESTAMP, BOOLEAN
  or BINARY against those; two strings in arithmetic are an error;
* DATE meets TIMESTAMP as TIMESTAMP; TIMESTAMP_NTZ meets TIMESTAMP as TIMESTAMP;
* ``/`` gives DOUBLE unless an operand is DECIMAL; decimal results follow Spark's precision rules
  with ``allowPrecisionLoss`` (at most 38 digits, at least 6 of scale kept where it must give).
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence

import pyarrow as pa

MAX_PRECISION = 38
STRING = pa.string()
BOOLEAN = pa.bool_()
DOUBLE = pa.float64()
BIGINT = pa.int64()
INT = pa.int32()
DATE = pa.date32()
TIMESTAMP = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ = pa.timestamp("us")
VOID = pa.null()

_TYPE_NAMES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": INT,
    "integer": INT,
    "bigint": BIGINT,
    "long": BIGINT,
    "float": pa.float32(),
    "real": pa.float32(),
    "double": DOUBLE,
    "string": STRING,
    "varchar": STRING,
    "char": STRING,
    "boolean": BOOLEAN,
    "bool": BOOLEAN,
    "date": DATE,
    "timestamp": TIMESTAMP,
    "timestamp_ltz": TIMESTAMP,
    "timestamp_ntz": TIMESTAMP_NTZ,
    "binary": pa.binary(),
    "void": VOID,
}
_INTEGRAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}


def type_from_name(name: str, arguments: Sequence[int]) -> pa.DataType | None:
    """The type a Spark type name spells (``decimal(10,2)``, ``varchar(5)``, ``long``), or ``None``."""
    lowered = name.lower()
    if lowered in ("decimal", "dec", "numeric"):
        if len(arguments) > 2:
            return None
        precision = arguments[0] if arguments else 10
        scale = arguments[1] if len(arguments) > 1 else 0
        if not 1 <= precision <= MAX_PRECISION or not 0 <= scale <= precision:
            return None
        return pa.decimal128(precision, scale)
    if lowered in ("varchar", "char"):
        return STRING if len(arguments) == 1 else None
    if arguments:
        return None
    return _TYPE_NAMES.get(lowered)


def type_name(data_type: pa.DataType) -> str:
    """Spark's name of a type, as its error messages spell it (``INT``, ``DECIMAL(10,2)``)."""
    if pa.types.is_decimal(data_type):
        return f"DECIMAL({data_type.precision},{data_type.scale})"
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP" if data_type.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_duration(data_type):
        return "INTERVAL DAY TO SECOND"
    if pa.types.is_interval(data_type):
        return "INTERVAL YEAR TO MONTH"
    if pa.types.is_struct(data_type):
        fields = ", ".join(f"{f.name}: {type_name(f.type)}" for f in data_type)
        return f"STRUCT<{fields}>"
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return f"ARRAY<{type_name(data_type.value_type)}>"
    if pa.types.is_map(data_type):
        return f"MAP<{type_name(data_type.key_type)}, {type_name(data_type.item_type)}>"
    for kind, name in _KINDS:
        if kind(data_type):
            return name
    return str(data_type).upper()


# -- kinds ----------------------------------------------------------------------------------------
def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def is_binary(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def is_integral(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t)


def is_fractional(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) and not pa.types.is_float16(t)


def is_numeric(t: pa.DataType) -> bool:
    return is_integral(t) or is_fractional(t) or pa.types.is_decimal(t)


def is_datetime(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def is_atomic(t: pa.DataType) -> bool:
    """A type SQL operators and casts work on (not a struct, array or map)."""
    return (
        is_numeric(t)
        or is_string(t)
        or is_binary(t)
        or is_datetime(t)
        or pa.types.is_boolean(t)
        or pa.types.is_null(t)
    )


def is_orderable(t: pa.DataType) -> bool:
    return is_atomic(t) and not pa.types.is_null(t)


_KINDS = (
    (pa.types.is_null, "VOID"),
    (pa.types.is_boolean, "BOOLEAN"),
    (lambda t: t == pa.int8(), "TINYINT"),
    (lambda t: t == pa.int16(), "SMALLINT"),
    (lambda t: t == pa.int32(), "INT"),
    (lambda t: t == pa.int64(), "BIGINT"),
    (lambda t: t == pa.float32(), "FLOAT"),
    (lambda t: t == pa.float64(), "DOUBLE"),
    (is_string, "STRING"),
    (is_binary, "BINARY"),
    (pa.types.is_date, "DATE"),
)


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether ``a`` and ``b`` are one SQL type with one Arrow layout (no cast between them)."""
    return a == b


def sql_equal(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether ``a`` and ``b`` are the same SQL type, whatever their Arrow layout."""
    if a == b:
        return True
    if is_string(a) and is_string(b):
        return True
    if is_binary(a) and is_binary(b):
        return True
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        return (a.precision, a.scale) == (b.precision, b.scale)
    return False


# -- literals -------------------------------------------------------------------------------------
def integer_literal_type(value: int) -> pa.DataType:
    """INT if it fits, else BIGINT, else DECIMAL of its digits (Spark's unsuffixed integers)."""
    if -(2**31) <= value < 2**31:
        return INT
    if -(2**63) <= value < 2**63:
        return BIGINT
    return decimal_literal_type(decimal.Decimal(value))


def decimal_literal_type(value: decimal.Decimal) -> pa.DataType:
    """The DECIMAL(p, s) a literal's digits need, as Spark types ``1.50`` (``DECIMAL(3,2)``)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    unscaled = list(digits) + [0] * max(exponent, 0)
    while len(unscaled) > 1 and unscaled[0] == 0:
        unscaled.pop(0)
    precision = max(len(unscaled), scale, 1)
    if precision > MAX_PRECISION:
        raise ValueError(f"{value} needs more than {MAX_PRECISION} digits")
    return pa.decimal128(precision, scale)


# -- widening ---------------------------------------------------------------------------------------
def integral_as_decimal(t: pa.DataType) -> pa.DataType:
    """The DECIMAL an integral type converts to without loss (INT: ``DECIMAL(10,0)``)."""
    return pa.decimal128(_INTEGRAL_DIGITS[t.bit_width], 0)


def literal_as_decimal(value: int) -> pa.DataType:
    """The DECIMAL an integral literal converts to in decimal arithmetic (its digits)."""
    return pa.decimal128(max(len(str(abs(value))), 1), 0)


def as_decimal(t: pa.DataType, literal: int | None = None) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.decimal128(t.precision, t.scale)
    return literal_as_decimal(literal) if literal is not None else integral_as_decimal(t)


def wider_decimal(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    scale = max(a.scale, b.scale)
    whole = max(a.precision - a.scale, b.precision - b.scale)
    return pa.decimal128(min(whole + scale, MAX_PRECISION), scale)


def wider_numeric(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type two numeric types meet as (Spark's ``findWiderTypeForTwo`` under ANSI)."""
    if sql_equal(a, b):
        return a
    if pa.types.is_float64(a) or pa.types.is_float64(b):
        return DOUBLE
    if pa.types.is_float32(a) or pa.types.is_float32(b):
        other = b if pa.types.is_float32(a) else a
        return pa.float32() if pa.types.is_float32(other) else DOUBLE
    if pa.types.is_decimal(a) or pa.types.is_decimal(b):
        return wider_decimal(as_decimal(a), as_decimal(b))
    return a if a.bit_width >= b.bit_width else b


def _string_meets(other: pa.DataType) -> pa.DataType | None:
    """The type a STRING is cast to when it meets ``other`` (ANSI string promotion)."""
    if is_string(other):
        return other
    if is_integral(other):
        return BIGINT
    if pa.types.is_decimal(other) or is_fractional(other):
        return DOUBLE
    if is_datetime(other) or pa.types.is_boolean(other) or is_binary(other):
        return other
    return None


def wider_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The common type of two values (CASE branches, IN lists, comparisons), or ``None``."""
    if sql_equal(a, b):
        return _common_layout(a, b)
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if is_numeric(a) and is_numeric(b):
        return wider_numeric(a, b)
    if is_string(a):
        return _string_meets(b)
    if is_string(b):
        return _string_meets(a)
    if is_datetime(a) and is_datetime(b):
        return _wider_datetime(a, b)
    return None


def common_type(types: Sequence[pa.DataType]) -> pa.DataType | None:
    """The type all of ``types`` meet as, or ``None`` if two of them do not meet."""
    result: pa.DataType = VOID
    for data_type in types:
        wider = wider_type(result, data_type)
        if wider is None:
            return None
        result = wider
    return result


def _common_layout(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if a == b:
        return a
    if pa.types.is_timestamp(a):
        return _wider_datetime(a, b)
    if is_string(a):
        return pa.large_string() if pa.types.is_large_string(a) or pa.types.is_large_string(b) else STRING
    if is_binary(a):
        return (
            pa.large_binary() if pa.types.is_large_binary(a) or pa.types.is_large_binary(b) else pa.binary()
        )
    return a


_UNITS = ("s", "ms", "us", "ns")


def _wider_datetime(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_date(a) and pa.types.is_date(b):
        return DATE
    stamps = [t for t in (a, b) if pa.types.is_timestamp(t)]
    unit = max((t.unit for t in stamps), key=_UNITS.index)
    unit = unit if _UNITS.index(unit) >= _UNITS.index("us") else "us"
    zone = next((t.tz for t in stamps if t.tz is not None), None)
    return pa.timestamp(unit, tz=zone)


# -- arithmetic ---------------------------------------------------------------------------------
def adjust_precision(precision: int, scale: int) -> pa.DataType:
    """Spark's ``DecimalType.adjustPrecisionScale``: at most 38 digits, keeping the integral part
    and at least ``min(scale, 6)`` digits of scale."""
    if precision <= MAX_PRECISION:
        return pa.decimal128(precision, scale)
    whole = precision - scale
    min_scale = min(scale, 6)
    return pa.decimal128(MAX_PRECISION, max(MAX_PRECISION - whole, min_scale))


def decimal_result(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The DECIMAL result of ``a <op> b`` for two decimals (Spark's ``DecimalPrecision``)."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return adjust_precision(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return adjust_precision(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return adjust_precision(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)  # %
    return pa.decimal128(min(min(p1 - s1, p2 - s2) + scale, MAX_PRECISION), scale)


def string_in_arithmetic(other: pa.DataType) -> pa.DataType:
    """The type a STRING operand of arithmetic becomes next to ``other`` (ANSI)."""
    return BIGINT if is_integral(other) else DOUBLE
