"""Names of log files as the stores see them (Delta's ``FileNameUtils``), and of the stores' temp files.

Stores that coordinate commits (``S3DynamoDBLogStore``) need to know which files are commits
and their versions; this is the one parser of commit file names in ``logstores``. Temp files
(:func:`is_temp_file_name`) are hidden, so Delta never takes them for log files.
"""

from __future__ import annotations

import re

_DELTA_FILE = re.compile(r"^(\d+)\.json$")
_TEMP_FILE = re.compile(r"^\..+\.tmp$")


def delta_file_name(version: int) -> str:
    """``00000000000000000007.json`` for version 7."""
    return f"{version:020d}.json"


def delta_version(name: str) -> int | None:
    """The version of the commit file ``name`` (a bare name or a path); ``None`` if it is not one."""
    match = _DELTA_FILE.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def is_delta_file(name: str) -> bool:
    """Whether ``name`` (a bare name or a path) is a commit file ``N.json``."""
    return delta_version(name) is not None


def temp_file_name(name: str, unique: str) -> str:
    """``.<name>.<unique>.tmp``: the hidden temp file a rename- or link-based write of ``name`` uses."""
    return f".{name}.{unique}.tmp"


def is_temp_file_name(name: str) -> bool:
    """Whether ``name`` (a bare name or a path) is a temp file of :func:`temp_file_name`'s form."""
    return _TEMP_FILE.match(name.rstrip("/").rsplit("/", 1)[-1]) is not None
