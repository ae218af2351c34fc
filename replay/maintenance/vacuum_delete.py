"""Deleting the files VACUUM found, concurrently and in batches.

On object stores a batch of paths is one filesystem call (``fs.rm`` with a list: S3's
``DeleteObjects`` with up to 1000 keys, GCS batch requests, Azure blob batches), several batches
at once. On local disk each file is one ``unlink``, a few threads at once. A file that is already
gone counts as not deleted, as Delta's ``tryDeleteNonRecursive`` counts it; directories are only
removed when empty (never recursively), deepest first.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence

from fsspec import AbstractFileSystem

from replay.log.concurrency import REMOTE_THREADS, Work, default_threads, map_concurrently

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000
"""Paths per delete request (S3's ``DeleteObjects`` limit)."""


def delete_files(fs: AbstractFileSystem, root: str, paths: Sequence[str], *, local: bool) -> int:
    """Delete ``paths`` (relative to ``root``, a path of ``fs``); returns how many were deleted.

    Raises the first storage error other than a missing file, after the other batches ran.
    """
    batches = [list(paths[start : start + BATCH_SIZE]) for start in range(0, len(paths), BATCH_SIZE)]
    if local:
        counts = map_concurrently(
            lambda batch: _unlink(root, batch), batches, Work.DATA, default_threads(Work.DATA, True)
        )
    else:
        counts = map_concurrently(lambda batch: _remove(fs, root, batch), batches, Work.DATA, REMOTE_THREADS)
    return sum(counts)


def _unlink(root: str, batch: list[str]) -> int:
    deleted = 0
    for relative in batch:
        try:
            os.unlink(f"{root}/{relative}")
        except FileNotFoundError:
            continue
        deleted += 1
    return deleted


def _remove(fs: AbstractFileSystem, root: str, batch: list[str]) -> int:
    full = [f"{root}/{relative}" for relative in batch]
    try:
        fs.rm(full)
    except FileNotFoundError:
        deleted = 0
        for path in full:  # some were gone: delete the rest one by one to count them
            with contextlib.suppress(FileNotFoundError):
                fs.rm(path)
                deleted += 1
        return deleted
    return len(full)


def delete_empty_directories(root: str, directories: Sequence[str]) -> int:
    """Remove those of the local ``directories`` (relative to ``root``) that are empty, deepest
    first, so that a tree of empty directories goes in one pass; returns how many were removed."""
    removed = 0
    for relative in sorted(directories, key=lambda d: d.count("/"), reverse=True):
        try:
            os.rmdir(f"{root}/{relative}")
        except OSError:  # not empty (a file written meanwhile, or one kept), or already gone
            continue
        removed += 1
    return removed
