"""Writes to a Python data source from any Python thread: each write runs with its session active.

Why writes from a second thread fail in PySpark 4.3. With PySpark's pinned threads (the
default), every Python thread talks to its own JVM thread. ``DataFrameWriter.save`` and
``DataStreamWriter.start`` resolve the format by name in that thread
(``DataSource.lookupDataSource``), and a name that is not a JVM class counts as a Python data
source only if ``SparkSession.getActiveSession`` - a JVM thread-local - names a session that
knows it. The thread that built the session has it active; a thread of a pool has none, so
``df.write.format("deltalog").save(...)`` fails there with ``[DATA_SOURCE_NOT_FOUND]``. Reads do
not: ``DataFrameReader.load`` and ``DataStreamReader.load`` only build an unresolved plan, and
Spark analyses a new DataFrame with its session active, so the name is found.

Why not Spark's static registration. Spark also registers every ``DefaultSource`` of a
top-level ``pyspark_<name>`` module it finds at the first data-source lookup, but it keeps them
in the same per-session manager and looks them up through the same active-session test, so a
thread without an active session still gets ``[DATA_SOURCE_NOT_FOUND]`` (checked on PySpark
4.3.0). Such a source would also miss the session settings :func:`replay.spark.register`
records.

What works, and what this module does: the write runs with its DataFrame's session active in
its JVM thread, as Spark's own ``SparkSession.withActive`` does for its internal work.
:func:`install` wraps the entry points of PySpark's classic writers
(``DataFrameWriter.save``/``saveAsTable``/``insertInto``, ``DataStreamWriter.start``/``toTable``):
before the call, the writer's session becomes the JVM thread's active session; after it, the
session active before (or none) is restored, so the thread is left as it was. The cost is two to
four local Py4J calls per write. Spark Connect sessions resolve names on the server and are left
alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

_WRAPPED = "__deltalog_active_session__"
"""Marks a method already wrapped, so :func:`install` can be called again."""


@contextlib.contextmanager
def active_in_jvm_thread(spark: Any) -> Iterator[None]:
    """Make ``spark`` the active session of this Python thread's JVM thread while the block runs.

    ``spark`` is a classic ``SparkSession``; for anything else (Spark Connect) nothing changes.
    """
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is None or jvm is None:
        yield
        return
    try:
        sessions = jvm.org.apache.spark.sql.SparkSession
        before = sessions.getActiveSession()
        previous = before.get() if before.isDefined() else None
        switch = previous is None or not previous.equals(jsession)
        if switch:
            sessions.setActiveSession(jsession)
    except Exception as exc:  # noqa: BLE001 - a JVM that cannot be asked: write as PySpark would
        logger.debug("cannot make the Spark session active in this thread: %s", exc)
        yield
        return
    try:
        yield
    finally:
        if switch:
            _restore(sessions, previous)


def _restore(sessions: Any, previous: Any) -> None:
    """Make ``previous`` the JVM thread's active session again (``None``: no active session)."""
    try:
        if previous is None:
            sessions.clearActiveSession()
        else:
            sessions.setActiveSession(previous)
    except Exception as exc:  # noqa: BLE001 - never hide the write's own outcome
        logger.debug("cannot restore the active Spark session of this thread: %s", exc)


def _with_active_session(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with active_in_jvm_thread(getattr(self, "_spark", None)):
            return method(self, *args, **kwargs)

    setattr(call, _WRAPPED, True)
    return call


WRITE_ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "pyspark.sql.readwriter.DataFrameWriter": ("save", "saveAsTable", "insertInto"),
    "pyspark.sql.streaming.readwriter.DataStreamWriter": ("start", "toTable"),
}
"""The classic PySpark writer methods that resolve a data source by name in the calling thread."""


def install() -> None:
    """Wrap :data:`WRITE_ENTRY_POINTS` so each write runs with its session active (idempotent)."""
    import importlib

    for qualified, methods in WRITE_ENTRY_POINTS.items():
        module_name, class_name = qualified.rsplit(".", 1)
        writer_class = getattr(importlib.import_module(module_name), class_name)
        for name in methods:
            method = getattr(writer_class, name, None)
            if method is not None and not getattr(method, _WRAPPED, False):
                setattr(writer_class, name, _with_active_session(method))
