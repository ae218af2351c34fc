"""The files VACUUM must keep: what the latest snapshot and the versions within the retention use.

Delta's ``getValidFilesFromSnapshot``: every active file, every tombstone deleted at or after the
retention cut-off (a version inside the retention may still read it), the deletion vector files
of both, and every directory holding one of them. Change data files are not state: once older
than the retention they go like any unreferenced file.

A lite VACUUM (deltalake's default) deletes only what the log says was removed:
:func:`expired_tombstones`.

Paths come out relative to the table root and decoded (as the listing names files), in one Arrow
string array: the log's paths are converted in Arrow, and only the few that are URL-encoded,
absolute or carry a deletion vector stored in a file are resolved one by one. Files outside the
table's directory are never the vacuum's business and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from replay.data.deletion_vectors import dv_file_path
from replay.protocol.actions import DeletionVectorDescriptor
from replay.protocol.arrow_actions import may_need_canonical_form
from replay.protocol.paths import resolve_path
from replay.state.snapshot import Snapshot


@dataclass(frozen=True)
class ReferencedFiles:
    """What VACUUM keeps: file paths and the directories above them (relative to the table root)."""

    paths: pa.Array
    directories: frozenset[str]


def referenced_files(snapshot: Snapshot, delete_before_ms: int) -> ReferencedFiles:
    """The files and directories of ``snapshot``'s table that VACUUM keeps when it deletes files
    unreferenced since before ``delete_before_ms`` (see the module docs)."""
    root = snapshot.table_path.rstrip("/")
    active = snapshot.files_table().select(["path", "deletion_vector"])
    tombstones = snapshot.tombstones_table()
    kept = pc.greater_equal(pc.fill_null(tombstones.column("deletion_timestamp"), 0), delete_before_ms)
    retained = tombstones.filter(kept).select(["path", "deletion_vector"])
    paths = _file_paths([active, retained], root)
    return ReferencedFiles(paths, frozenset(ancestor_directories(paths)))


def expired_tombstones(snapshot: Snapshot, delete_before_ms: int) -> pa.Array:
    """The files of the tombstones deleted before ``delete_before_ms`` and their deletion vector
    files (relative to the table root): all that a lite VACUUM may delete."""
    root = snapshot.table_path.rstrip("/")
    tombstones = snapshot.tombstones_table(expired=True)
    expired = pc.less(pc.fill_null(tombstones.column("deletion_timestamp"), 0), delete_before_ms)
    return _file_paths([tombstones.filter(expired)], root)


def _file_paths(tables: list[pa.Table], root: str) -> pa.Array:
    """The data files and deletion vector files of the file actions in ``tables`` (relative to
    ``root``; those outside it left out)."""
    parts: list[pa.Array] = []
    for table in tables:
        parts += [relative_paths(chunk, root) for chunk in table.column("path").chunks]
        parts.append(pa.array(_dv_paths(table.column("deletion_vector"), root), pa.string()))
    return pc.drop_null(pa.concat_arrays(parts))


def relative_paths(paths: pa.Array, root: str) -> pa.Array:
    """Log paths (URL-encoded, relative or absolute) as paths relative to ``root``, decoded; null
    for a file outside ``root``. Plain relative paths pass through in Arrow."""
    if not may_need_canonical_form(paths, (b"%", b":")):
        return paths.cast(pa.string())
    special = pc.match_substring_regex(paths, "^/|[%:]")
    if not pc.any(special).as_py():
        return paths.cast(pa.string())
    values = paths.to_pylist()
    flags = special.to_pylist()
    return pa.array(
        [
            _relative(resolve_path(root, value), root) if flag else value
            for value, flag in zip(values, flags, strict=True)
        ],
        pa.string(),
    )


def _relative(uri: str, root: str) -> str | None:
    prefix = root + "/"
    return uri[len(prefix) :] if uri.startswith(prefix) else None


def _dv_paths(deletion_vectors: pa.ChunkedArray, root: str) -> list[str | None]:
    """The relative paths of the deletion vector files (not inline ones) in ``deletion_vectors``."""
    found: list[str | None] = []
    for chunk in deletion_vectors.chunks:
        if chunk.null_count == len(chunk):
            continue
        for descriptor in chunk.filter(pc.is_valid(chunk)).to_pylist():
            storage = descriptor.get("storage_type")
            if storage == "i":
                continue
            if storage == "p":  # an absolute URI, URL-encoded like a log path
                found.append(_relative(resolve_path(root, descriptor["path_or_inline_dv"]), root))
                continue
            dv = DeletionVectorDescriptor(**{k: v for k, v in descriptor.items() if v is not None})
            location = dv_file_path(dv, root)
            found.append(_relative(location, root) if location is not None else None)
    return found


def ancestor_directories(paths: pa.Array | pa.ChunkedArray) -> set[str]:
    """Every directory above the relative ``paths``."""
    nested = pc.filter(paths, pc.match_substring(paths, "/"))
    parents = pc.unique(pc.replace_substring_regex(nested, r"/[^/]*$", "")).to_pylist()
    directories: set[str] = set()
    for parent in parents:
        directory = parent
        while directory and directory not in directories:
            directories.add(directory)
            directory = directory.rpartition("/")[0]
    return directories
