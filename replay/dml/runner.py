"""Running the per-file work of an operation over its target files, several files at once.

Files are worked on by the shared data-reading pool (:mod:`replay.log.concurrency`), each task
holding one file's rows. When a task fails, files not yet started are skipped, every running
task is waited for (so nothing is written after the caller cleans up), and the first error is
raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import TypeVar

from replay.log.concurrency import Work, executor

T = TypeVar("T")
R = TypeVar("R")


class _SkippedError(Exception):
    """A task not run because another one failed."""


def run_files(function: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``[function(item) for item in items]``, ``threads`` at a time, all or nothing (see the module
    docstring)."""
    pool = executor(Work.DATA, threads) if len(items) > 1 else None
    if pool is None:
        return [function(item) for item in items]
    failed = threading.Event()

    def task(item: T) -> R:
        if failed.is_set():
            raise _SkippedError
        try:
            return function(item)
        except BaseException:
            failed.set()
            raise

    futures: list[Future[R]] = [pool.submit(task, item) for item in items]
    wait(futures)
    errors = [f.exception() for f in futures if f.exception() is not None]
    first = next((e for e in errors if not isinstance(e, _SkippedError)), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]
