"""What the ``deltalog`` commands share on their command lines: argument types and groups.

Each type checks its value when the line is parsed, so a bad value is a usage error (exit code 1)
that names the expected form, before any table is opened.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

TIMESTAMP_HELP = (
    "a time as milliseconds since the epoch or ISO-8601 (2024-01-31, 2024-01-31T12:00:00.5, "
    "2024-01-31 12:00:00+02:00, 2024-01-31 12:00:00 America/Los_Angeles); a time without a zone is UTC"
)


class UsageError(Exception):
    """Bad command-line arguments (exit code 1)."""


def non_negative(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def timestamp(text: str) -> str:
    """``--timestamp``: checked when parsed, so a bad value is a usage error naming the formats."""
    from replay.protocol.timestamps import to_timestamp_ms

    if text.isdigit():
        return text
    try:
        to_timestamp_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {TIMESTAMP_HELP}") from None
    return text


def timestamp_value(value: str | None) -> str | int | None:
    """A parsed ``--timestamp``: milliseconds since the epoch when all digits, else ISO-8601 text."""
    return int(value) if value is not None and value.isdigit() else value


def byte_size(text: str) -> int:
    """``--target-size``: bytes, or a size such as ``128mb``."""
    from replay.protocol.table_properties import parse_byte_size

    try:
        return parse_byte_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def hours(text: str) -> float:
    """A number of hours (fractions allowed)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of hours, got {text!r}") from None


def pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE``, the key stripped."""
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_version_or_timestamp(
    parser: argparse.ArgumentParser,
    *,
    required: bool = False,
    version_type: Callable[[str], int] = non_negative,
    timestamp_help: str | None = TIMESTAMP_HELP,
) -> None:
    """``--version N`` or ``--timestamp T`` (one of them at most; exactly one when ``required``)."""
    when = parser.add_mutually_exclusive_group(required=required)
    when.add_argument("--version", type=version_type, metavar="N")
    when.add_argument("--timestamp", type=timestamp, metavar="T", help=timestamp_help)
