"""The values of Spark data source options: booleans, integers, versions, sizes, times, columns.

Spark hands a Python data source its options with lower-case keys; each parser here takes the
lower-cased options (:func:`lower_keys`) and the key to read, and names the option in its error as
the caller asks (Delta's camel-case name, or the key as given). Every invalid value is a typed
error whose first line is Delta's: ``[DELTA_ILLEGAL_OPTION] Invalid value '<value>' for option
'<name>', <what it must be>`` (:func:`illegal_option`), or ``[DELTA_VERSION_INVALID]``,
``[DELTA_TIMESTAMP_INVALID]`` and ``[INVALID_CONF_VALUE.TIME_ZONE]`` where Delta and Spark use
those.

Reads raise :class:`InvalidOptionError`; writes pass ``error=InvalidWriteOptionError`` (the
write planner's error, which the Python write API raises too), so each side keeps its type.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping

from replay.protocol.errors import DeltaError
from replay.protocol.timestamps import UTC, parse_zone, to_datetime

TIME_ZONE_KEY = "spark.sql.session.timeZone"
"""The zone timestamp options without one are read in (from the session, or from the read options)."""
_SIZE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


class InvalidOptionError(DeltaError, ValueError):
    """A read option has an invalid value (Delta's ``DELTA_ILLEGAL_OPTION`` wording)."""


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with lower-case keys and string values (Spark's keys are case-insensitive)."""
    return {str(key).lower(): str(value) for key, value in options.items()}


def illegal_option(
    name: str, value: str, explanation: str, error: type[DeltaError] = InvalidOptionError
) -> DeltaError:
    """Delta's ``DELTA_ILLEGAL_OPTION`` error for ``value`` of option ``name``."""
    return error(f"[DELTA_ILLEGAL_OPTION] Invalid value '{value}' for option '{name}', {explanation}")


def bool_option(
    options: Mapping[str, str],
    key: str,
    name: str | None = None,
    *,
    default: bool = False,
    error: type[DeltaError] = InvalidOptionError,
) -> bool:
    """``true`` or ``false`` (any case, spaces around ignored); ``default`` when absent. The error
    names ``name``, or ``key`` when no name is given."""
    value = options.get(key)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in ("true", "false"):
        raise illegal_option(name or key, value, "must be 'true' or 'false'", error)
    return word == "true"


def int_value(value: str | None, name: str, *, error: type[DeltaError] = InvalidOptionError) -> int | None:
    """An integer, or ``None`` for a missing or blank value."""
    if value is None or value.strip() == "":
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise illegal_option(name, value, "must be an integer", error) from None


def positive_option(options: Mapping[str, str], key: str, name: str) -> int | None:
    """A positive integer (``maxFilesPerTrigger``), or ``None`` when absent."""
    if key not in options:
        return None
    value = options[key]
    try:
        number = int(value)
    except ValueError:
        raise illegal_option(name, value, "must be a positive integer") from None
    if number <= 0:
        raise illegal_option(name, value, "must be a positive integer")
    return number


def version_value(value: str, name: str) -> int:
    """A table version: an integer >= 0 (Delta's ``DELTA_VERSION_INVALID`` for anything else)."""
    try:
        version = int(value)
    except ValueError:
        raise InvalidOptionError(
            f"[DELTA_VERSION_INVALID] The provided version ({value}) is not a valid version (option {name})."
        ) from None
    if version < 0:
        raise illegal_option(name, value, "must be greater than or equal to zero")
    return version


def version_option(options: Mapping[str, str], key: str, name: str) -> int | None:
    """The version option ``key`` (see :func:`version_value`), or ``None`` when absent."""
    return version_value(options[key].strip(), name) if key in options else None


def size_option(options: Mapping[str, str], key: str, name: str) -> int | None:
    """A byte size as Spark writes it (``1048576``, ``10k``, ``10g``, ``1tb``), or ``None`` when absent."""
    if key not in options:
        return None
    value = options[key]
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgtp]?)b?\s*", value.lower())
    if match is None or int(match.group(1)) <= 0:
        raise illegal_option(name, value, "must be a size configuration such as '10g'")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2) or "b"]


def time_zone(name: str | None) -> _dt.tzinfo:
    """The session time zone (UTC when the session's is unknown), checked as Spark checks it."""
    if name is None:
        return UTC
    try:
        return parse_zone(name)
    except ValueError:
        raise InvalidOptionError(
            f"[INVALID_CONF_VALUE.TIME_ZONE] The value '{name}' in the config \"{TIME_ZONE_KEY}\" is "
            "invalid. Cannot resolve the given timezone."
        ) from None


def timestamp_option(options: Mapping[str, str], key: str, zone: _dt.tzinfo) -> _dt.datetime | None:
    """A timestamp option as Spark casts the string (a time without a zone is in ``zone``)."""
    if key not in options:
        return None
    value = options[key]
    try:
        return to_datetime(value, zone)
    except ValueError:
        raise InvalidOptionError(
            f"[DELTA_TIMESTAMP_INVALID] The provided timestamp ('{value}') cannot be converted to a valid "
            "timestamp."
        ) from None


def column_list(
    value: str | None, name: str = "partitionBy", *, error: type[DeltaError] = InvalidOptionError
) -> tuple[str, ...] | None:
    """Comma-separated column names, quoted as Spark quotes identifiers, or ``None`` when absent.

    A name in backquotes is taken as written, commas and blanks included, with a doubled backquote
    standing for one (``"`a,b`, c"`` is ``a,b`` and ``c``; ``"`x``y`"`` is ``x`y``); a bare name is
    trimmed and ends at the next comma. Empty entries are skipped. An unterminated quote, text
    after a closing quote or an empty quoted name is refused naming option ``name``.
    """
    if value is None:
        return None
    names: list[str] = []
    position, length = 0, len(value)
    while position <= length:
        while position < length and value[position].isspace():
            position += 1
        if position < length and value[position] == "`":
            column, position = _quoted_name(value, position, name, error)
            if not column:
                raise illegal_option(name, value, "a quoted column name cannot be empty", error)
            while position < length and value[position].isspace():
                position += 1
            if position < length and value[position] != ",":
                raise illegal_option(
                    name,
                    value,
                    f"unexpected text after the quoted name `{column}` at position {position}",
                    error,
                )
        else:
            end = value.find(",", position)
            end = length if end < 0 else end
            column = value[position:end].strip()
            if "`" in column:
                raise illegal_option(
                    name, value, "a backquote may only open or close a quoted column name", error
                )
            position = end
        if column:
            names.append(column)
        position += 1  # past the comma (or the end)
    return tuple(names)


def _quoted_name(value: str, start: int, name: str, error: type[DeltaError]) -> tuple[str, int]:
    """The name quoted from ``value[start]`` (a backquote) and the position after its closing quote."""
    characters: list[str] = []
    position = start + 1
    while position < len(value):
        if value[position] == "`":
            if value.startswith("``", position):
                characters.append("`")
                position += 2
                continue
            return "".join(characters), position + 1
        characters.append(value[position])
        position += 1
    raise illegal_option(name, value, f"the backquote at position {start} is not closed", error)
