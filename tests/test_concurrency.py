"""The library's one concurrency policy: shared bounded pools, safe nesting, a thread-safe GC pause."""

from __future__ import annotations

import gc
import threading

from replay.log.concurrency import MAX_THREADS, Work, executor, gc_paused, map_concurrently, prefetch


def test_nested_use_of_a_pool_runs_inline_instead_of_deadlocking() -> None:
    def inner(item: int) -> int:
        return sum(map_concurrently(lambda x: x * item, list(range(10)), Work.DATA, 2))

    # every worker of the 2-thread pool asks the same pool for more work: inline, not a deadlock
    assert map_concurrently(inner, list(range(8)), Work.DATA, 2) == [45 * i for i in range(8)]


def test_pools_are_shared_and_bounded() -> None:
    assert executor(Work.LOG, 1) is None
    assert executor(Work.LOG, 3) is executor(Work.LOG, 3)
    assert executor(Work.LOG, 3) is not executor(Work.DATA, 3)
    huge = executor(Work.SCAN, 10_000)
    assert huge is executor(Work.SCAN, MAX_THREADS)


def test_prefetch_keeps_order_and_a_bounded_window() -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def work(item: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        with lock:
            running -= 1
        return item * 2

    assert list(prefetch(executor(Work.LOG, 4), work, list(range(100)), window=3)) == [
        2 * i for i in range(100)
    ]
    assert most <= 3


def test_gc_pause_is_restored_only_when_the_last_thread_leaves() -> None:
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with gc_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with gc_paused():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first thread left, this one is still inside

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [False]
    assert gc.isenabled()
