"""Points in time as the API accepts them, and as errors show them.

Commit times are milliseconds since the epoch everywhere inside the library. Callers may give a
:data:`Timestamp`: a number (milliseconds), an ISO-8601 string, a date or a datetime. A string or
datetime without a zone is read in ``default_zone`` (UTC unless the caller says otherwise).
"""

from __future__ import annotations

import datetime as _dt

Timestamp = int | float | str | _dt.datetime | _dt.date
"""A point in time given by a caller (see :func:`to_timestamp_ms`)."""


def to_timestamp_ms(value: Timestamp, default_zone: _dt.tzinfo = _dt.UTC) -> int:
    """Milliseconds since the epoch of a number (already ms), ISO string, date or datetime.

    Values without a zone are read in ``default_zone``. Raises :class:`TypeError` for a bool and
    :class:`ValueError` for a string that is not ISO-8601.
    """
    if isinstance(value, bool):
        raise TypeError("a timestamp cannot be a bool")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=default_zone)
    return int(value.timestamp() * 1000)


def format_timestamp(timestamp_ms: int) -> str:
    """``2024-01-02 03:04:05.678 UTC`` for error messages."""
    moment = _dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{timestamp_ms % 1000:03d} UTC"
