"""Running the per-file work of an operation over its target files, several files at once.

Files are worked on by the shared data-reading pool (:mod:`replay.log.concurrency`), each task
holding one file's rows. When a task fails, files not yet started are skipped, every running
task is waited for (so nothing is written after the caller cleans up), and the first error is
raised. :func:`run_plan` runs an operation's plan over its candidate files that way and hands
the results to the operation's commit, deleting what was written unless the commit landed; it
reads the files' deletion vectors ahead a run of files at a time
(:func:`~replay.data.deletion_vector_reads.dv_batches`), with one request per DV file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import Protocol, TypeVar

import pyarrow as pa

from replay.data.deletion_vector_reads import dv_batches
from replay.dml.commit import DmlResult, discard_unless_committed
from replay.dml.context import DmlTable
from replay.dml.outputs import Sinks
from replay.dml.rewrite import FileChange
from replay.log.concurrency import Work, executor
from replay.protocol.actions import AddFile
from replay.protocol.arrow_actions import add_actions
from replay.txn.transaction import Transaction

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


class FilePlan(Protocol):
    """An operation's plan as the runner sees it: the table and the work on one file."""

    @property
    def table(self) -> DmlTable: ...

    def process_file(self, file: AddFile, sinks: Sinks) -> FileChange: ...


def run_plan(
    txn: Transaction,
    plan: FilePlan,
    candidates: pa.Table,
    started_ns: int,
    finish: Callable[[list[FileChange], Sinks, int], DmlResult],
) -> DmlResult:
    """Run ``plan`` on each file of ``candidates`` (several at once, :func:`run_files`), then commit
    with ``finish(changes, sinks, scanned_ns)``; the files written are deleted unless ``txn``
    committed (:func:`~replay.dml.commit.discard_unless_committed`)."""
    sinks = Sinks(plan.table)
    with discard_unless_committed(txn, sinks):
        reader = plan.table.reader
        changes: list[FileChange] = []
        for files in dv_batches(add_actions(candidates)):  # the DVs of a run at a time, bounded
            reader.prefetch_deletion_vectors(files)  # one request per DV file, not per file
            changes += run_files(lambda f: plan.process_file(f, sinks), files, plan.table.threads)
            reader.dv_cache.forget(files)
        return finish(changes, sinks, time.perf_counter_ns() - started_ns)
