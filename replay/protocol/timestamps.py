"""Points in time as the API accepts them, and as errors show them; time zones as Spark names them.

Commit times are milliseconds since the epoch everywhere inside the library. Callers may give a
:data:`Timestamp`: a number (milliseconds), a string, a date or a datetime. Strings follow
Spark's cast of a string to a timestamp (what Delta applies to ``timestampAsOf`` and
``startingTimestamp``): ``yyyy[-[m]m[-[d]d[(T| )[h]h[:[m]m[:[s]s[.fraction]]][zone]]]]``, the
zone being ``Z``, an offset (``+05:30``, ``-0800``, ``+8``), ``UTC``/``GMT``/``UT`` with or
without an offset, or a region (``America/Los_Angeles``), optionally after a space. A string or
datetime without a zone is read in ``default_zone``: UTC for the Python API, the session time
zone for Spark reads. Errors show an instant in the zone it was given in (:func:`to_datetime`
keeps it), so the text names the zone and can be pasted back as a timestamp.
"""

from __future__ import annotations

import datetime as _dt
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

Timestamp = int | float | str | _dt.datetime | _dt.date
"""A point in time given by a caller (see :func:`to_datetime`)."""

UTC: _dt.tzinfo = _dt.UTC
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MS = _dt.timedelta(milliseconds=1)

SHORT_ZONE_IDS = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
    "EST": "-05:00",
    "MST": "-07:00",
    "HST": "-10:00",
}
"""Java's ``ZoneId.SHORT_IDS``, which Spark accepts as zone names."""

_UTC_NAMES = ("Z", "UTC", "GMT", "UT")
_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")
_TIMESTAMP = re.compile(
    r"(?P<year>\d{4})(?:-(?P<month>\d{1,2})(?:-(?P<day>\d{1,2})"
    r"(?:[T ](?P<hour>\d{1,2})(?::(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{1,9}))?)?)?"
    r"(?:\s*(?P<zone>[A-Za-z+-].*))?)?)?)?"
)


def parse_zone(name: str) -> _dt.tzinfo:
    """The time zone ``name`` as Spark reads ``spark.sql.session.timeZone`` and zones in strings.

    A region (``America/Los_Angeles``), ``Z``/``UTC``/``GMT``/``UT``, an offset (``+08:00``,
    ``-0800``, ``+8``), one of those prefixes with an offset (``UTC+01:00``) or one of Java's
    short ids (``PST``). Raises :class:`ValueError` naming the zone if it is none of these.
    """
    text = name.strip()
    text = SHORT_ZONE_IDS.get(text, text)
    if text in _UTC_NAMES:
        return UTC
    for prefix in _UTC_NAMES[1:]:
        if text.startswith(prefix) and text[len(prefix) : len(prefix) + 1] in ("+", "-"):
            return _offset_zone(text[len(prefix) :], name)
    if text[:1] in ("+", "-"):
        return _offset_zone(text, name)
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def _offset_zone(text: str, name: str) -> _dt.tzinfo:
    match = _OFFSET.fullmatch(text)
    if match is None:
        raise ValueError(f"unknown time zone {name!r}")
    sign, hours, minutes, seconds = match.groups()
    offset = _dt.timedelta(hours=int(hours), minutes=int(minutes or 0), seconds=int(seconds or 0))
    if offset > _dt.timedelta(hours=18) or int(minutes or 0) > 59 or int(seconds or 0) > 59:
        raise ValueError(f"time zone offset {name!r} is out of range")
    return UTC if not offset else _dt.timezone(-offset if sign == "-" else offset)


def parse_timestamp(text: str, default_zone: _dt.tzinfo = UTC) -> _dt.datetime:
    """The instant a string names (see the module docstring for the forms), as an aware datetime
    in the string's zone, else in ``default_zone``. Digits past microseconds are dropped.

    Raises :class:`ValueError` quoting the string if it is not a timestamp.
    """
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a timestamp (expected e.g. 2024-01-31 12:00:00[.123][+02:00])")
    part = match.groupdict()
    fraction = (part["fraction"] or "").ljust(6, "0")[:6]
    try:
        zone = default_zone if part["zone"] is None else parse_zone(part["zone"])
        return _dt.datetime(
            int(part["year"]),
            int(part["month"] or 1),
            int(part["day"] or 1),
            int(part["hour"] or 0),
            int(part["minute"] or 0),
            int(part["second"] or 0),
            int(fraction),
            tzinfo=zone,
        )
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a timestamp ({exc})") from None


def to_datetime(value: Timestamp, default_zone: _dt.tzinfo = UTC) -> _dt.datetime:
    """The instant of ``value`` as an aware datetime in the zone it was given in.

    A number is milliseconds since the epoch (UTC); a string is parsed by
    :func:`parse_timestamp`; a date is its midnight. Values without a zone are read in
    ``default_zone``. Raises :class:`TypeError` for a bool and :class:`ValueError` for a
    string that is not a timestamp.
    """
    if isinstance(value, bool):
        raise TypeError("a timestamp cannot be a bool")
    if isinstance(value, int | float):
        return EPOCH + _dt.timedelta(milliseconds=int(value))
    if isinstance(value, str):
        return parse_timestamp(value, default_zone)
    if not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=default_zone)
    return value


def to_timestamp_ms(value: Timestamp, default_zone: _dt.tzinfo = UTC) -> int:
    """Milliseconds since the epoch of ``value`` (see :func:`to_datetime`), exactly: sub-millisecond
    parts are dropped towards the past."""
    return (to_datetime(value, default_zone) - EPOCH) // _ONE_MS


def zone_name(zone: _dt.tzinfo, at: _dt.datetime | None = None) -> str:
    """How errors name ``zone``: a region's id, ``UTC``, or ``UTC+05:30`` for a fixed offset."""
    if isinstance(zone, ZoneInfo):
        return zone.key
    offset = zone.utcoffset(at)
    if offset is not None and not offset:
        return "UTC"
    return zone.tzname(at) or str(zone)


def format_timestamp(timestamp_ms: int, zone: _dt.tzinfo = UTC) -> str:
    """``2024-01-02 03:04:05.678 UTC`` (or the wall-clock time in ``zone``, named) for messages.

    The text reads back as the same instant through :func:`parse_timestamp`.
    """
    moment = (EPOCH + _dt.timedelta(milliseconds=timestamp_ms)).astimezone(zone)
    wall_clock = moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d}"
    return f"{wall_clock} {zone_name(zone, moment)}"
