"""A quiet local SparkSession, as the demo and the tests use it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is imported when a session is made: this module imports without it
    from pyspark.sql import SparkSession

QUIET_LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}
"""Settings for a small local session: no UI, no progress bars, few shuffle partitions, UTC."""


def local_session(
    app_name: str, conf: Mapping[str, str] | None = None, master: str = "local[2]"
) -> SparkSession:
    """Get or create a local SparkSession with :data:`QUIET_LOCAL_CONF` plus ``conf``.

    Returns the active session if one exists (its settings are then left as they are). Spark's
    own log level is set to ``ERROR`` for a new session.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**QUIET_LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
