"""Progress of long operations (reading thousands of commits, writing checkpoints).

The library never draws anything: it reports ``(task, completed, total)`` to a listener that
a front end installs for the duration of a call, as the ``deltalog`` command does with a
progress bar. Listeners are per context (a :class:`contextvars.ContextVar`), so concurrent
callers do not see each other's progress, and reporting without a listener costs nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TypeVar

ProgressListener = Callable[[str, int, int | None], None]
"""Called with a task description, the units completed so far, and the total (if known)."""

_LISTENER: ContextVar[ProgressListener | None] = ContextVar("replay_progress_listener", default=None)

T = TypeVar("T")


@contextlib.contextmanager
def listening(listener: ProgressListener) -> Iterator[None]:
    """Send the progress of operations run inside the ``with`` block to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def report(task: str, completed: int, total: int | None) -> None:
    """Tell the current listener, if any, that ``completed`` of ``total`` units of ``task`` are done."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(task, completed, total)


def track(task: str, items: Iterable[T], total: int | None) -> Iterator[T]:
    """Yield ``items``, reporting one unit of ``task`` done after each (nothing without a listener)."""
    listener = _LISTENER.get()
    if listener is None:
        yield from items
        return
    listener(task, 0, total)
    for completed, item in enumerate(items, start=1):
        yield item
        listener(task, completed, total)
