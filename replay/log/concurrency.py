"""The one concurrency policy of the library: which pool runs a read, and how many threads it has.

Reads overlap on thread pools: on object stores to hide request latency, locally because
parsing (orjson, pyarrow) and decoding (pyarrow) release the GIL. Pools are process-wide, one
per :class:`Work` kind and size, created on first use and bounded in number (sizes are clamped
to :data:`MAX_THREADS`). A task running on a pool that asks the same pool for more work runs
that work inline, so nested use can never deadlock. :func:`gc_paused` is the other piece of
process-wide state: the cyclic collector is paused while any thread builds large acyclic data.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from enum import Enum
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 32
"""The largest pool this library creates (larger requests are clamped)."""
REMOTE_THREADS = 8
"""Threads for reads from object stores and remote filesystems (requests overlap)."""


class Work(Enum):
    """Kinds of work, each on pools of its own (a scan may wait on data reads, never on itself)."""

    LOG = "log"
    DATA = "data"
    SCAN = "scan"
    REWRITE = "rewrite"
    """Rewrites of groups of data files (compaction): each reads through the data and scan pools."""


def default_threads(work: Work, local: bool) -> int:
    """Threads for ``work`` on local (or in-memory) storage or on remote storage.

    Locally, log parsing uses up to 4 cores; data decoding a little more than the cores, which
    keeps them busy while each file is opened; rewrites one per core (each encodes its own
    output). Remotely, :data:`REMOTE_THREADS` requests overlap.
    """
    cpus = os.cpu_count() or 4
    if work is Work.REWRITE:
        return max(2, min(cpus, REMOTE_THREADS))
    if not local:
        return REMOTE_THREADS
    return min(cpus, 4) if work is Work.LOG else max(4, min(8, cpus))


_POOLS: dict[tuple[Work, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
_WORKER = threading.local()


def _mark_worker(key: tuple[Work, int]) -> None:
    _WORKER.pool = key


def executor(work: Work, threads: int) -> Executor | None:
    """The shared pool of ``threads`` threads for ``work``, or ``None`` to run inline.

    ``None`` when ``threads`` is 1 or less, and when the calling thread is itself a worker of
    that pool (nested use runs inline instead of waiting on its own pool).
    """
    size = max(1, min(int(threads), MAX_THREADS))
    if size == 1:
        return None
    key = (work, size)
    if getattr(_WORKER, "pool", None) == key:
        return None
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(
                max_workers=size,
                thread_name_prefix=f"delta-{work.value}-{size}",
                initializer=_mark_worker,
                initargs=(key,),
            )
        return pool


def map_concurrently(function: Callable[[T], R], items: Sequence[T], work: Work, threads: int) -> list[R]:
    """``[function(item) for item in items]`` on the shared ``work`` pool, order kept."""
    pool = executor(work, threads) if len(items) > 1 else None
    if pool is None:
        return [function(item) for item in items]
    return list(pool.map(function, items))


def prefetch(
    pool: Executor | None,
    function: Callable[[T], R],
    items: Sequence[T],
    window: int,
    batch: int = 1,
) -> Iterator[R]:
    """``map(function, items)`` in order, with at most ``window`` tasks of ``batch`` items running ahead.

    Batching amortises the per-task cost of the pool when the items are many and small.
    Without a pool the items are processed inline, lazily.
    """
    if pool is None:
        yield from map(function, items)
        return
    groups = [items[i : i + batch] for i in range(0, len(items), max(batch, 1))]
    pending: deque[Future[list[R]]] = deque()
    iterator = iter(groups)

    def run(group: Sequence[T]) -> list[R]:
        return [function(item) for item in group]

    for group in iterator:
        pending.append(pool.submit(run, group))
        if len(pending) >= window:
            break
    try:
        while pending:
            results = pending.popleft().result()
            nxt = next(iterator, None)
            if nxt is not None:
                pending.append(pool.submit(run, nxt))
            yield from results
    finally:
        for future in pending:  # an abandoned or failed read: do not leave work queued
            future.cancel()


_GC_LOCK = threading.Lock()
_GC_PAUSES = 0
_GC_WAS_ENABLED = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Replay allocates no reference cycles; without this, CPython's generational collector
    rescans the growing heap over and over and dominates the load time. Safe across threads:
    the collector is paused by the first caller and restored by the last one to leave.
    """
    global _GC_PAUSES, _GC_WAS_ENABLED  # noqa: PLW0603 - the pause count is process-wide by nature
    with _GC_LOCK:
        if _GC_PAUSES == 0:
            _GC_WAS_ENABLED = gc.isenabled()
            gc.disable()
        _GC_PAUSES += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES -= 1
            if _GC_PAUSES == 0 and _GC_WAS_ENABLED:
                gc.enable()
