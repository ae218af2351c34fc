"""Paths of data files as the log spells them: their identity in replay and their URIs.

The log stores data file paths URL-encoded, relative to the table root or absolute. Replay
identifies a file by its *key*: the canonical, escape-normalised path plus the unique id of its
deletion vector (Delta's ``pathAsUri`` and ``getLegacyDeletionVectorUniqueId``).
:func:`resolve_path` turns a log path into a URI that fsspec or a LogStore can open.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

FileKey = tuple[str, str | None]
"""(canonical path, deletion vector unique id or ``None``)."""

_ESCAPE_RE = re.compile(r"%[0-9a-fA-F]{2}")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SLASHES_RE = re.compile(r"/{2,}")


def dv_unique_id(storage_type: str, path_or_inline_dv: str, offset: int | None) -> str:
    """The deletion vector id used in file keys: storage type + path (+ ``@offset``)."""
    base = f"{storage_type}{path_or_inline_dv}"
    return base if offset is None else f"{base}@{offset}"


def normalize_path_key(path: str) -> str:
    """``path`` with %-escapes upper-cased: Java's URI equality treats ``%2f`` and ``%2F`` alike."""
    if "%" not in path:
        return path
    return _ESCAPE_RE.sub(lambda match: match.group(0).upper(), path)


def canonicalize_path(path: str) -> str:
    """Delta's canonical path: absolute local paths qualified as ``file:/...``; others unchanged.

    ``/a/b``, ``file:/a/b`` and ``file:///a/b`` all become ``file:/a/b`` (duplicate slashes
    removed), so an add and a remove written in different spellings cancel out.
    """
    if path.startswith("/"):
        rest = path
    elif path.startswith("file:"):
        rest = path[5:]
        if rest.startswith("//"):
            authority_and_path = rest[2:]
            slash = authority_and_path.find("/")
            authority = authority_and_path if slash < 0 else authority_and_path[:slash]
            if authority:
                return path
            rest = authority_and_path[slash:] if slash >= 0 else "/"
    else:
        return path
    rest = _SLASHES_RE.sub("/", rest)
    if len(rest) > 1:
        rest = rest.rstrip("/")
    return "file:" + rest


def file_key(path: str, dv_id: str | None) -> FileKey:
    """The replay key of a file action: canonical, escape-normalised path and DV unique id."""
    if path.startswith(("/", "file:")):
        path = canonicalize_path(path)
    return normalize_path_key(path), dv_id


def resolve_path(table_root: str, path: str) -> str:
    """The URI of a file named in the log, usable with fsspec or a LogStore.

    Log paths are URL-encoded; relative ones are resolved against ``table_root``. Absolute URIs
    (``s3://b/x%20y``) and absolute paths (``/x``) are decoded and kept; ``file:/x`` becomes
    ``file:///x``. A one-letter scheme is not treated as a Windows drive.
    """
    if _SCHEME_RE.match(path):
        scheme, rest = path.split(":", 1)
        if scheme.lower() == "file":
            local = rest[2:] if rest.startswith("//") else rest
            slash = local.find("/")
            return "file://" + unquote(local if slash <= 0 else local[slash:])
        if rest.startswith("//"):
            authority_and_path = rest[2:]
            slash = authority_and_path.find("/")
            if slash < 0:
                return path
            return f"{scheme}://{authority_and_path[:slash]}{unquote(authority_and_path[slash:])}"
        return path
    decoded = unquote(path)
    if path.startswith("/"):
        root_scheme = _SCHEME_RE.match(table_root)
        if root_scheme and not table_root.lower().startswith("file:"):
            scheme_and_authority = table_root.split("/", 3)
            return "/".join(scheme_and_authority[:3]) + decoded
        return "file://" + decoded if table_root.lower().startswith("file:") else decoded
    return f"{table_root.rstrip('/')}/{decoded}"
