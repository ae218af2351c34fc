"""Partition directories and log paths of data files, as Delta on Spark writes them.

Hive-style partition directories (``col=value``, special characters escaped as Hive's
``escapePathName`` does, nulls as ``__HIVE_DEFAULT_PARTITION__``), partition values serialised as
``partitionValues`` holds them, and relative paths URL-encoded as the log stores them. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_ESCAPED_CHARS = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 0x20))
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")


def escape_partition_value(value: str) -> str:
    """Hive's ``escapePathName``: ``%XX`` for characters that are unsafe in a directory name."""
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED_CHARS else ch for ch in value)


def encode_log_path(relative_path: str) -> str:
    """A data file's relative path as the log stores it (Hadoop ``Path.toUri.toString``).

    ASCII characters that are not legal in a URI path are %-encoded (``%`` itself included);
    non-ASCII characters stay as they are.
    """
    out: list[str] = []
    for ch in relative_path:
        if ch in _URI_PATH_SAFE or ord(ch) >= 0x80:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8"))
    return "".join(out)


def partition_value_string(value: Any, arrow_type: pa.DataType) -> str | None:
    """A partition value as Delta serialises it in ``partitionValues`` (``None`` for null/empty)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    text = str(value)
    if text == "" and pa.types.is_string(arrow_type):
        return None
    return text


def partition_directory(partition_columns: list[str], values: Mapping[str, str | None]) -> str:
    """``a=1/b=x%3Ay`` for the given values (``__HIVE_DEFAULT_PARTITION__`` for nulls)."""
    parts = []
    for column in partition_columns:
        value = values[column]
        rendered = HIVE_DEFAULT_PARTITION if value is None else escape_partition_value(value)
        parts.append(f"{escape_partition_value(column)}={rendered}")
    return "/".join(parts)
