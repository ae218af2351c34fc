"""How an error of ours raised in a Spark Python worker reaches the user: as its own first line.

Spark runs every method of a Python data source (the constructor, ``schema``, ``reader``,
``partitions``, ``read``, ``pushFilters``, the writers' ``write``, ``commit`` and ``abort``, the
stream reader's offsets) in a Python worker, and reports an exception raised there as the text
PySpark's ``handle_worker_exception`` formats: the whole traceback, then the exception. The JVM
puts that text after its own prefix (``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data
source instance: ``, ``[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] ...``, or a task's
``PythonException``), so the user's first line would read ``Traceback (most recent call last):``
and the error itself would come some 30 lines down.

PySpark formats the exception alone (``module.Class: message``) when ``SPARK_HIDE_TRACEBACK`` is
set in the worker's environment as it reports the exception. :func:`errors_first` sets it for the
errors whose message already says what failed and names the thing (:data:`OUR_ERRORS`): Delta's
errors, the stores' typed storage errors (a missing bucket, denied credentials, a timeout, an
unreachable endpoint) and configuration errors. Every other exception, a bug above all, keeps its
traceback. Each worker process reports one exception and ends, so the setting never outlives it;
outside a Spark worker nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from logstores import LogStoreConfError, LogStoreError
from replay.protocol.errors import DeltaError

OUR_ERRORS: tuple[type[BaseException], ...] = (DeltaError, LogStoreError, LogStoreConfError)
"""Errors whose message is the whole story: Delta's (``DeltaError`` and its subclasses, e.g.
``ConcurrentAppendException``, ``InvalidWriteOptionError``), storage (``LogStoreError``:
``BucketNotFoundError``, ``AccessDeniedError``, ``RequestTimeoutError``,
``EndpointUnreachableError``, ...) and configuration (``LogStoreConfError``)."""

HIDE_TRACEBACK_VARIABLE = "SPARK_HIDE_TRACEBACK"
"""Read by PySpark's ``handle_worker_exception`` when a worker reports an exception."""

_F = TypeVar("_F", bound=Callable[..., Any])


def in_spark_worker() -> bool:
    """Whether this process is a Python worker Spark started (for tasks or for planning)."""
    return os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER"


@contextlib.contextmanager
def our_errors_first() -> Iterator[None]:
    """Let an error of :data:`OUR_ERRORS` leaving the block reach the Spark user as one line."""
    try:
        yield
    except OUR_ERRORS:
        if in_spark_worker():
            os.environ[HIDE_TRACEBACK_VARIABLE] = "1"
        raise


def errors_first(method: _F) -> _F:
    """Decorate a data source method so that its errors of ours come first (see module docstring).

    Generator methods (``read``, ``write`` iterators) are wrapped around their iteration.
    """
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with our_errors_first():
                return (yield from method(*args, **kwargs))

        return cast(_F, generator)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with our_errors_first():
            return method(*args, **kwargs)

    return cast(_F, wrapper)
