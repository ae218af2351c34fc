"""Spark's ``INTERVAL`` literals: reading each of their forms, and writing them back.

Two kinds, as Spark has them under ANSI mode (a literal cannot mix them):

* day-time intervals: fields ``DAY``, ``HOUR``, ``MINUTE``, ``SECOND`` (``WEEK`` counts as 7 days,
  ``MILLISECOND`` and ``MICROSECOND`` as fractions of a second); values are Arrow
  ``duration("us")``;
* year-month intervals: fields ``YEAR`` and ``MONTH``; values are Arrow
  ``month_day_nano_interval`` holding months only.

The forms are Spark's: unit-value pairs (``INTERVAL 1 DAY``, ``INTERVAL -2 HOURS 30 MINUTES``, a
fraction only for seconds), the same pairs in one string (``INTERVAL '1 day 2 hours'``), one unit
(``INTERVAL '1' DAY``) and the from-to strings (``INTERVAL '1-2' YEAR TO MONTH``, ``INTERVAL
'1 02:03:04.5' DAY TO SECOND`` ...). A literal's largest and smallest fields are its Spark type
(``INTERVAL 1 DAY 2 HOURS`` is an ``INTERVAL DAY TO HOUR``). Errors carry Spark's error classes.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

DAY_TIME = pa.duration("us")
YEAR_MONTH = pa.month_day_nano_interval()

MICROS = {"day": 86_400_000_000, "hour": 3_600_000_000, "minute": 60_000_000, "second": 1_000_000}
"""Microseconds in one unit of each day-time field."""
_UNITS: dict[str, tuple[str, int]] = {
    "year": ("year", 12),
    "month": ("month", 1),
    "week": ("day", 7 * MICROS["day"]),
    "day": ("day", MICROS["day"]),
    "hour": ("hour", MICROS["hour"]),
    "minute": ("minute", MICROS["minute"]),
    "second": ("second", MICROS["second"]),
    "millisecond": ("second", 1_000),
    "microsecond": ("second", 1),
}
"""Each unit word (singular): its field, and its size in months or microseconds."""
_ORDER = ("year", "month", "day", "hour", "minute", "second")
"""Fields from the largest down."""
INT32_MAX = 2**31 - 1
_INT64 = 2**63 - 1


class IntervalFormatError(ValueError):
    """An interval literal Spark would not read: ``error_class`` is Spark's."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


def unit_field(word: str) -> str | None:
    """The unit a word names (``days`` -> ``day``), or ``None`` if it names none."""
    lowered = word.lower()
    singular = lowered[:-1] if lowered.endswith("s") else lowered
    return singular if singular in _UNITS else None


@dataclass(frozen=True)
class IntervalLiteral:
    """A constant interval: ``months`` (year-month) or ``micros`` (day-time), and its fields."""

    months: int
    micros: int
    start: str
    end: str

    @property
    def year_month(self) -> bool:
        return self.start in ("year", "month")

    @property
    def data_type(self) -> pa.DataType:
        return YEAR_MONTH if self.year_month else DAY_TIME

    @property
    def day(self) -> bool:
        """Spark's ``INTERVAL DAY``: a DATE plus it is a DATE."""
        return self.start == self.end == "day"

    def scalar(self) -> pa.Scalar:
        if self.year_month:
            return pa.scalar(pa.MonthDayNano([self.months, 0, 0]), YEAR_MONTH)
        return pa.scalar(self.micros, pa.int64()).cast(DAY_TIME)

    def sql(self) -> str:
        """The literal as Spark writes it: it reads back as this literal, fields included."""
        value = self.months if self.year_month else self.micros
        sign, size = ("-" if value < 0 else ""), abs(value)
        if self.start == self.end:
            if self.year_month:
                return f"INTERVAL '{sign}{size // 12 if self.start == 'year' else size}' {self.start.upper()}"
            return f"INTERVAL '{sign}{_in_unit(size, self.start)}' {self.start.upper()}"
        if self.year_month:
            return f"INTERVAL '{sign}{size // 12}-{size % 12}' YEAR TO MONTH"
        counts: list[str] = []  # the first field's count, then each lower one within its range
        for field in _ORDER[_ORDER.index(self.start) : _ORDER.index(self.end) + 1]:
            if field == self.end:
                counts.append(_in_unit(size, field))
                break
            count, size = divmod(size, MICROS[field])
            counts.append(str(count))
        lower = ":".join(_two_digits(count) for count in counts[1:])
        text = f"{counts[0]} {lower}" if self.start == "day" else f"{counts[0]}:{lower}"
        return f"INTERVAL '{sign}{text}' {self.start.upper()} TO {self.end.upper()}"


def _in_unit(micros: int, field: str) -> str:
    count, rest = divmod(micros, MICROS[field])
    if not rest:
        return str(count)
    return f"{count}.{rest:06d}".rstrip("0")  # only seconds have a fraction


def _two_digits(count: str) -> str:
    whole, dot, fraction = count.partition(".")
    return f"{int(whole):02d}{dot}{fraction}"


# -- reading literals ---------------------------------------------------------------------------------
def from_pairs(pairs: Sequence[tuple[str, str]]) -> IntervalLiteral:
    """``INTERVAL <value> <unit> ...``: each pair a signed number (as written) and a unit word."""
    months = micros = 0
    fields: list[str] = []
    for value, word in pairs:
        unit = unit_field(word)
        if unit is None:
            raise IntervalFormatError("INVALID_INTERVAL_FORMAT.INVALID_UNIT", f"{word!r} is not a unit")
        field, size = _UNITS[unit]
        number = _number(value, field, f"{value} {word}")
        if field in ("year", "month"):
            months += int(number) * size
        else:
            micros += int(number * size)  # a fraction of a second: whole microseconds
        fields.append(field)
    return _literal(months, micros, fields)


def from_text(text: str) -> IntervalLiteral:
    """``INTERVAL '1 day 2 hours'``: unit-value pairs in a string (``interval`` may lead)."""
    words = text.split()
    if words and words[0].lower() == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        raise IntervalFormatError("INVALID_TYPED_LITERAL", f"{text!r} is not a valid INTERVAL")
    try:
        return from_pairs(list(zip(words[::2], words[1::2], strict=True)))
    except IntervalFormatError as exc:
        if exc.error_class in ("INVALID_INTERVAL_FORMAT.INVALID_UNIT", "_LEGACY_ERROR_TEMP_0026"):
            raise IntervalFormatError("INVALID_TYPED_LITERAL", f"{text!r} is not a valid INTERVAL") from None
        raise


_RANGES = {
    ("year", "month"): r"(?P<year>\d+)-(?P<month>\d+)",
    ("day", "hour"): r"(?P<day>\d+) (?P<hour>\d+)",
    ("day", "minute"): r"(?P<day>\d+) (?P<hour>\d+):(?P<minute>\d+)",
    ("day", "second"): r"(?P<day>\d+) (?P<hour>\d+):(?P<minute>\d+):(?P<second>\d+(?:\.\d*)?)",
    ("hour", "minute"): r"(?P<hour>\d+):(?P<minute>\d+)",
    ("hour", "second"): r"(?P<hour>\d+):(?P<minute>\d+):(?P<second>\d+(?:\.\d*)?)",
    ("minute", "second"): r"(?P<minute>\d+):(?P<second>\d+(?:\.\d*)?)",
}
_LIMITS = {"month": 12, "hour": 24, "minute": 60, "second": 60}
"""A field below the literal's first holds less than this."""


def from_range(text: str, start_word: str, end_word: str) -> IntervalLiteral:
    """``INTERVAL '<text>' <start> TO <end>`` (``'1-2' YEAR TO MONTH``, ``'1 02:03' DAY TO MINUTE``)."""
    start, end = unit_field(start_word), unit_field(end_word)
    pattern = _RANGES.get((start or "", end or ""))
    if start is None or end is None or pattern is None:
        raise IntervalFormatError(
            "INVALID_INTERVAL_FORMAT.UNSUPPORTED_FROM_TO_EXPRESSION",
            f"interval from {start_word.upper()} to {end_word.upper()} is not supported",
        )
    match = re.fullmatch(r"\s*(?P<sign>[+-])?" + pattern + r"\s*", text)
    if match is None:
        raise IntervalFormatError(
            "INVALID_INTERVAL_FORMAT.UNMATCHED_FORMAT_STRING_WITH_NOTICE",
            f"{text!r} does not match the format of an interval {start.upper()} TO {end.upper()}",
        )
    months = micros = 0
    for field in _ORDER[_ORDER.index(start) : _ORDER.index(end) + 1]:
        number = decimal.Decimal(match.group(field))
        if field != start and number >= _LIMITS[field]:
            raise IntervalFormatError(
                "_LEGACY_ERROR_TEMP_0063", f"{field.upper()} {number} is outside its range in {text!r}"
            )
        if field in ("year", "month"):
            months += int(number) * _UNITS[field][1]
        else:
            micros += int(number * MICROS[field])
    if match.group("sign") == "-":
        months, micros = -months, -micros
    return _literal(months, micros, [start, end])


def _number(value: str, field: str, spelled: str) -> decimal.Decimal:
    try:
        number = decimal.Decimal(value)
    except decimal.InvalidOperation:
        raise IntervalFormatError(
            "_LEGACY_ERROR_TEMP_0026", f"{value!r} is not a number of {field}s in an interval"
        ) from None
    if not number.is_finite():
        raise IntervalFormatError("_LEGACY_ERROR_TEMP_0026", f"{value!r} is not a number of {field}s")
    if field != "second" and number != number.to_integral_value():
        raise IntervalFormatError(
            "INVALID_INTERVAL_FORMAT.INVALID_FRACTION", f"{spelled!r}: only seconds can have a fraction"
        )
    return number


def _literal(months: int, micros: int, fields: list[str]) -> IntervalLiteral:
    kinds = {field in ("year", "month") for field in fields}
    if len(kinds) > 1:
        raise IntervalFormatError(
            "_LEGACY_ERROR_TEMP_0029", "an interval literal cannot mix year-month and day-time fields"
        )
    if abs(months) > INT32_MAX or abs(micros) > _INT64:
        raise IntervalFormatError("INVALID_INTERVAL_FORMAT.ARITHMETIC_EXCEPTION", "the interval overflows")
    ordered = sorted(set(fields), key=_ORDER.index)
    return IntervalLiteral(months, micros, ordered[0], ordered[-1])
