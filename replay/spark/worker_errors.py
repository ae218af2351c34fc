"""How a Delta error raised in a Spark Python worker reaches the user: as its own first line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from replay.protocol.errors import DeltaError


@contextlib.contextmanager
def delta_errors_first() -> Iterator[None]:
    """Let a Delta error raised in a Spark Python worker reach the user as its own first line.

    Spark reports an exception of a Python data source as the worker's formatted traceback, so the
    Delta error class and message would come last, after every frame. A :class:`DeltaError` says
    what failed and names the thing; its frames only bury it. For such an error the worker is told
    to report the exception without its traceback (``SPARK_HIDE_TRACEBACK``, read by PySpark when
    it reports the exception; the worker process ends right after). Other exceptions, bugs
    included, keep their traceback; outside a Spark worker nothing changes.
    """
    try:
        yield
    except DeltaError:
        if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise
