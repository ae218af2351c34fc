"""Session settings for one block of a Spark test, put back afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def session_settings(
    spark: Any, settings: dict[str, str], also_restore: tuple[str, ...] = ()
) -> Iterator[None]:
    """``settings`` set in the session for the block (after ``register``: read when a query is
    planned); those and ``also_restore`` put back after."""
    before = {key: spark.conf.get(key, None) for key in (*settings, *also_restore)}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
