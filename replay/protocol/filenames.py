"""Names of the files in ``_delta_log`` (Delta's ``FileNames``): build them and recognise them.

Functions taking ``name`` accept a bare file name or a full path/URI; only the last segment
(and, for staged commits, the parent directory) matters.
"""

from __future__ import annotations

import re

LAST_CHECKPOINT = "_last_checkpoint"
SIDECAR_DIR = "_sidecars"
STAGED_COMMITS_DIR = "_staged_commits"

_DELTA_RE = re.compile(r"^(\d+)\.json$")
_STAGED_RE = re.compile(r"^(\d+)\.([^.]+)\.json$")
_COMPACTED_RE = re.compile(r"^(\d+)\.(\d+)\.compacted\.json$")
_CHECKSUM_RE = re.compile(r"^(\d+)\.crc$")
_CHECKPOINT_RE = re.compile(r"^(\d+)\.checkpoint((\.\d+\.\d+)?\.parquet|\.[^.]+\.(json|parquet))$")
_MULTIPART_RE = re.compile(r"^\d+\.checkpoint\.(\d+)\.(\d+)\.parquet$")
_V2_CHECKPOINT_RE = re.compile(r"^\d+\.checkpoint\.([^.]+)\.(json|parquet)$")


def _split(path_or_name: str) -> tuple[str, str]:
    """(parent directory name, file name) of a path."""
    parts = path_or_name.rstrip("/").rsplit("/", 2)
    return (parts[-2] if len(parts) >= 2 else ""), parts[-1]


def _join(log_path: str, name: str) -> str:
    return f"{log_path.rstrip('/')}/{name}"


# -- building --------------------------------------------------------------------------------
def delta_file(log_path: str, version: int) -> str:
    """``<log>/<version:020d>.json``."""
    return _join(log_path, f"{version:020d}.json")


def checksum_file(log_path: str, version: int) -> str:
    """``<log>/<version:020d>.crc``."""
    return _join(log_path, f"{version:020d}.crc")


def compacted_delta_file(log_path: str, start: int, end: int) -> str:
    """``<log>/<start:020d>.<end:020d>.compacted.json``."""
    return _join(log_path, f"{start:020d}.{end:020d}.compacted.json")


def checkpoint_file_single(log_path: str, version: int) -> str:
    """``<log>/<version:020d>.checkpoint.parquet`` (classic single-part checkpoint)."""
    return _join(log_path, f"{version:020d}.checkpoint.parquet")


def checkpoint_files_multipart(log_path: str, version: int, parts: int) -> list[str]:
    """The ``parts`` names ``<log>/<version:020d>.checkpoint.<i:010d>.<parts:010d>.parquet``, i = 1..parts."""
    names = (f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1))
    return [_join(log_path, name) for name in names]


def checkpoint_file_v2(log_path: str, version: int, unique_id: str, file_format: str = "json") -> str:
    """``<log>/<version:020d>.checkpoint.<uuid>.<json|parquet>`` (V2 top-level checkpoint file)."""
    return _join(log_path, f"{version:020d}.checkpoint.{unique_id}.{file_format}")


def sidecar_file(log_path: str, name: str) -> str:
    """A sidecar's location: sidecar paths are relative to ``<log>/_sidecars/`` unless absolute."""
    if "://" in name or name.startswith("/"):
        return name
    return _join(_join(log_path, SIDECAR_DIR), name)


def listing_prefix(log_path: str, version: int) -> str:
    """``<log>/<version:020d>.``: ``list_from`` this to see every file of ``version`` and later."""
    return _join(log_path, f"{version:020d}.")


def last_checkpoint_file(log_path: str) -> str:
    """``<log>/_last_checkpoint``."""
    return _join(log_path, LAST_CHECKPOINT)


# -- recognising -----------------------------------------------------------------------------
def is_delta_file(name: str) -> bool:
    """A backfilled commit ``N.json``, or a staged commit ``N.<uuid>.json`` inside ``_staged_commits``."""
    parent, base = _split(name)
    if _DELTA_RE.match(base):
        return True
    return parent == STAGED_COMMITS_DIR and _STAGED_RE.match(base) is not None


def is_staged_delta_file(name: str) -> bool:
    """A staged (unbackfilled) commit ``_staged_commits/N.<uuid>.json``."""
    parent, base = _split(name)
    return parent == STAGED_COMMITS_DIR and _STAGED_RE.match(base) is not None


def is_compacted_delta_file(name: str) -> bool:
    """A log compaction file ``X.Y.compacted.json``."""
    return _COMPACTED_RE.match(_split(name)[1]) is not None


def is_checksum_file(name: str) -> bool:
    """A version checksum ``N.crc``."""
    return _CHECKSUM_RE.match(_split(name)[1]) is not None


def is_checkpoint_file(name: str) -> bool:
    """Any checkpoint file: single, multi-part or V2 top-level (``.json``/``.parquet``)."""
    return _CHECKPOINT_RE.match(_split(name)[1]) is not None


def is_multipart_checkpoint_file(name: str) -> bool:
    """A part ``N.checkpoint.i.n.parquet`` of a classic multi-part checkpoint."""
    return _MULTIPART_RE.match(_split(name)[1]) is not None


def is_v2_checkpoint_file(name: str) -> bool:
    """A V2 top-level checkpoint ``N.checkpoint.<uuid>.<json|parquet>``."""
    base = _split(name)[1]
    return _MULTIPART_RE.match(base) is None and _V2_CHECKPOINT_RE.match(base) is not None


def delta_version(path_or_name: str) -> int:
    """The version of a commit, checkpoint or checksum file: its first dot-separated token.

    Raises :class:`ValueError` naming the file when the name does not start with a version.
    """
    base = _split(path_or_name)[1]
    token = base.split(".", 1)[0]
    if not token.isdigit():
        raise ValueError(f"Not a Delta log file name (no leading version): {path_or_name}")
    return int(token)


def checkpoint_version(name: str) -> int:
    """The version of a checkpoint file (``123.checkpoint.parquet`` -> 123)."""
    return delta_version(name)


def num_checkpoint_parts(name: str) -> int | None:
    """``n`` for ``V.checkpoint.i.n.parquet``; ``None`` for single-part and V2 names."""
    match = _MULTIPART_RE.match(_split(name)[1])
    return int(match.group(2)) if match else None


def checkpoint_part(name: str) -> int | None:
    """``i`` for ``V.checkpoint.i.n.parquet``; ``None`` for other names."""
    match = _MULTIPART_RE.match(_split(name)[1])
    return int(match.group(1)) if match else None


def compacted_delta_versions(name: str) -> tuple[int, int]:
    """``(start, end)`` of ``start.end.compacted.json``; :class:`ValueError` for other names."""
    match = _COMPACTED_RE.match(_split(name)[1])
    if match is None:
        raise ValueError(f"Not a log compaction file: {name}")
    return int(match.group(1)), int(match.group(2))


def file_version(name: str) -> int:
    """Delta's ``getFileVersion``: the version a log file belongs to (end version for compacted files).

    Raises :class:`ValueError` ("Unexpected file type found in transaction log: ...") otherwise.
    """
    if is_compacted_delta_file(name):
        return compacted_delta_versions(name)[1]
    if is_checkpoint_file(name) or is_delta_file(name) or is_checksum_file(name):
        return delta_version(name)
    raise ValueError(f"Unexpected file type found in transaction log: {name}")
