"""The Spark session's settings at the moment a query is planned, read from Spark's planner processes.

Spark runs a Python data source's constructor, ``schema()`` and ``reader()`` in Python processes
that the driver's JVM starts on the driver host to plan a query. No SparkSession exists there
(``SparkSession.getActiveSession()`` is ``None``) and the JVM hands over only the read options,
so settings changed with ``spark.conf.set`` (or SQL ``SET``) after :func:`replay.spark.register`
would never reach the source if they were captured once at registration.

:func:`register` therefore records a :class:`SessionLink`: the local port and secret of the
driver's Py4J gateway (the channel PySpark itself talks to its JVM through) and the id of the
session. A planner process connects to that gateway, reads the session's settings and
disconnects (one short local connection, a few milliseconds). Where there is no gateway (Spark
Connect) or it cannot be reached, the settings captured at registration are used.

The link is for the driver host only: the data source drops it before anything is pickled for
executors, and its ``repr`` leaves the secret out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0
"""How long a planner process waits for the driver's gateway before using the captured settings."""


@dataclass(frozen=True)
class SessionLink:
    """How a planner process on the driver host reaches one session's settings."""

    port: int
    secret: str | None = field(repr=False)
    session_id: str

    @classmethod
    def of(cls, spark: SparkSession) -> SessionLink | None:
        """The link to ``spark`` (``None`` for a session without a local gateway, e.g. Spark Connect)."""
        try:
            gateway: Any = spark.sparkContext._gateway
            parameters = getattr(gateway, "java_parameters", None) or gateway.gateway_parameters
            session_id = str(spark._jsparkSession.sessionUUID())
            return cls(int(parameters.port), parameters.auth_token, session_id)
        except Exception as exc:  # noqa: BLE001 - no classic session: settings captured at registration
            logger.debug("no gateway link to the Spark session: %s", exc)
            return None

    def settings(self, *effective: str) -> dict[str, str] | None:
        """Every setting of the session now (``spark.conf.getAll``), plus the value Spark applies
        for each key of ``effective`` (its default when unset), or ``None`` if they cannot be read."""
        return self._call(lambda session: _all_settings(session, effective))

    def get(self, key: str, default: str) -> str | None:
        """One setting of the session now, or ``None`` if the session cannot be reached."""
        return self._call(lambda session: str(session.conf().get(key, default)))

    def _call(self, read: Any) -> Any:
        try:
            from py4j.java_gateway import GatewayParameters, JavaGateway
        except ImportError:  # pragma: no cover - pyspark always brings py4j
            return None
        gateway = JavaGateway(
            gateway_parameters=GatewayParameters(
                port=self.port, auth_token=self.secret, read_timeout=CONNECT_TIMEOUT_SECONDS
            )
        )
        try:
            session = self._session(gateway)
            if session is None:
                logger.debug("Spark session %s is neither active nor the default one", self.session_id)
                return None
            return read(session)
        except Exception as exc:  # noqa: BLE001 - an unreachable driver falls back to captured settings
            logger.debug("cannot read the settings of Spark session %s: %s", self.session_id, exc)
            return None
        finally:
            gateway.close(keep_callback_server=False, close_callback_server_connections=False)

    def _session(self, gateway: Any) -> Any:
        """The JVM session this link names: the gateway thread's active one or the default one."""
        spark_session = gateway.jvm.org.apache.spark.sql.SparkSession
        for candidate in (spark_session.getActiveSession(), spark_session.getDefaultSession()):
            if candidate.isDefined() and str(candidate.get().sessionUUID()) == self.session_id:
                return candidate.get()
        return None


def _all_settings(session: Any, effective: tuple[str, ...]) -> dict[str, str]:
    """``spark.conf.getAll`` of a JVM session, as PySpark reads it, and ``spark.conf.get`` of the
    ``effective`` keys."""
    conf = session.conf()
    settings = {str(key): str(value) for key, value in dict(conf.getAllAsJava()).items()}
    for key in effective:
        settings[key] = str(conf.get(key))
    return settings
