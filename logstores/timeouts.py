"""Time and retry bounds of every storage request, from one key of ours and the Hadoop keys.

Every request a store sends has a connect timeout, a read timeout (the longest wait for the next
bytes of an answer) and a bounded number of attempts with exponential backoff and jitter between
them. A request that exhausts its attempts fails with the store's typed error naming the endpoint
and the path; nothing waits forever.

Where the values come from, first match winning:

* read timeout: ``delta.logstores.requestTimeoutMs`` (also with ``spark.``; one key for every
  store), else the service's Hadoop key, else :data:`DEFAULT_REQUEST_TIMEOUT_MS`;
* connect timeout: the service's Hadoop key, else :data:`DEFAULT_CONNECT_TIMEOUT_MS`; never more
  than the read timeout;
* attempts: 1 + the service's Hadoop retry count, else :data:`DEFAULT_ATTEMPTS`.

The Hadoop keys (read timeout, connect timeout, retries) per service:


* S3 (and DynamoDB): ``fs.s3a.connection.timeout``, ``fs.s3a.connection.establish.timeout``,
  ``fs.s3a.attempts.maximum``;
* GCS: ``fs.gs.http.read-timeout``, ``fs.gs.http.connect-timeout``, ``fs.gs.http.max.retry``;
* Azure: ``fs.azure.http.read.timeout``, ``fs.azure.http.connection.timeout``,
  ``fs.azure.io.retry.max.retries``.

Hadoop durations are milliseconds unless they carry a unit (``30s``, ``2m``, ``500ms``), as
Hadoop's ``Configuration.getTimeDuration`` reads them. DynamoDB (S3DynamoDBLogStore) uses the S3
row; other fsspec filesystems get the bounds where they accept timeouts.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from logstores.conf import get_delta_conf, hadoop_conf
from logstores.errors import LogStoreConfError

REQUEST_TIMEOUT_KEY = "spark.delta.logstores.requestTimeoutMs"
"""Our per-request (read) timeout in milliseconds, for every store; also read without ``spark.``."""

DEFAULT_REQUEST_TIMEOUT_MS = 60_000
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
DEFAULT_ATTEMPTS = 3
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class HadoopTimeoutKeys:
    """The Hadoop connector keys of one service that bound its requests."""

    read_timeout: str
    connect_timeout: str
    retries: str


HADOOP_TIMEOUT_KEYS: dict[str, HadoopTimeoutKeys] = {
    "s3": HadoopTimeoutKeys(
        "fs.s3a.connection.timeout", "fs.s3a.connection.establish.timeout", "fs.s3a.attempts.maximum"
    ),
    "gcs": HadoopTimeoutKeys("fs.gs.http.read-timeout", "fs.gs.http.connect-timeout", "fs.gs.http.max.retry"),
    "azure": HadoopTimeoutKeys(
        "fs.azure.http.read.timeout", "fs.azure.http.connection.timeout", "fs.azure.io.retry.max.retries"
    ),
}
"""Service -> its Hadoop keys (``s3`` also serves DynamoDB)."""


@dataclass(frozen=True, slots=True)
class RequestBounds:
    """How long one request may take and how often it is tried."""

    connect_timeout_s: float
    read_timeout_s: float
    attempts: int
    backoff_base_s: float = BACKOFF_BASE_S
    backoff_max_s: float = BACKOFF_MAX_S

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry ``retry`` (1 for the first): capped exponential, with jitter."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2 ** max(retry - 1, 0)))
        return random.uniform(ceiling / 2, ceiling)

    @property
    def worst_case_s(self) -> float:
        """An upper bound on the time all attempts of one request can take, backoff included."""
        waits = sum(
            min(self.backoff_max_s, self.backoff_base_s * 2 ** (retry - 1))
            for retry in range(1, self.attempts)
        )
        return self.attempts * (self.connect_timeout_s + self.read_timeout_s) + waits

    def describe(self) -> str:
        """``2 s read timeout, 3 attempts`` for error messages."""
        plural = "s" if self.attempts > 1 else ""
        return f"{self.read_timeout_s:g} s read timeout, {self.attempts} attempt{plural}"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3, "d": 86400e3}


def parse_duration_ms(key: str, value: str) -> float:
    """Milliseconds from a Hadoop duration (``500``, ``500ms``, ``30s``, ``2m``).

    Raises :class:`LogStoreConfError` naming ``key`` for anything else or a value that is not positive.
    """
    match = _DURATION.match(value)
    millis = float(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()] if match else 0.0
    if millis <= 0:
        raise LogStoreConfError(
            f"{key} must be a positive duration in milliseconds (or with a unit), got {value!r}"
        )
    return millis


def _retry_count(key: str, value: str) -> int:
    try:
        count = int(value.strip())
    except ValueError:
        count = -1
    if count < 0:
        raise LogStoreConfError(f"{key} must be a non-negative integer, got {value!r}")
    return count


def request_bounds(conf: Mapping[str, str], service: str) -> RequestBounds:
    """The bounds of ``service``'s requests (``s3``, ``gcs``, ``azure``, or another name) under ``conf``.

    Raises :class:`LogStoreConfError` naming the key of an invalid value.
    """
    hadoop = hadoop_conf(conf)
    keys = HADOOP_TIMEOUT_KEYS.get(service)
    ours = get_delta_conf(conf, REQUEST_TIMEOUT_KEY)
    if ours is not None:
        read_ms = parse_duration_ms(REQUEST_TIMEOUT_KEY, ours)
    elif keys is not None and hadoop.get(keys.read_timeout):
        read_ms = parse_duration_ms(keys.read_timeout, hadoop[keys.read_timeout])
    else:
        read_ms = DEFAULT_REQUEST_TIMEOUT_MS
    connect_ms: float = DEFAULT_CONNECT_TIMEOUT_MS
    if keys is not None and hadoop.get(keys.connect_timeout):
        connect_ms = parse_duration_ms(keys.connect_timeout, hadoop[keys.connect_timeout])
    attempts = DEFAULT_ATTEMPTS
    if keys is not None and hadoop.get(keys.retries):
        attempts = 1 + _retry_count(keys.retries, hadoop[keys.retries])
    return RequestBounds(min(connect_ms, read_ms) / 1000, read_ms / 1000, attempts)


def endpoint_address(url: str | None, default: str = "(default endpoint)") -> str:
    """``host:port`` of an endpoint URL (the port from the scheme when missing); ``default`` if none."""
    if not url:
        return default
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{host}:{port}" if host else default


def fsspec_timeout_options(protocol: str, bounds: RequestBounds) -> dict[str, object]:
    """Storage options bounding the requests of generic fsspec filesystems that accept timeouts.

    ``hdfs`` (pyarrow/libhdfs) gets Hadoop's client timeouts in ``extra_conf``; ``sftp`` its connect
    timeouts; ``ftp`` its socket timeout; ``http(s)`` an aiohttp timeout. Other protocols: none.
    """
    connect_ms, read_ms = int(bounds.connect_timeout_s * 1000), int(bounds.read_timeout_s * 1000)
    if protocol == "hdfs":
        return {
            "extra_conf": {
                "ipc.client.connect.timeout": str(connect_ms),
                "ipc.client.connect.max.retries.on.timeouts": str(bounds.attempts - 1),
                "dfs.client.socket-timeout": str(read_ms),
            }
        }
    if protocol == "sftp":
        return {
            "timeout": bounds.connect_timeout_s,
            "banner_timeout": bounds.read_timeout_s,
            "auth_timeout": bounds.read_timeout_s,
        }
    if protocol == "ftp":
        return {"timeout": bounds.read_timeout_s}
    if protocol in ("http", "https"):
        import aiohttp  # fsspec's http filesystem needs it anyway

        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=bounds.connect_timeout_s, sock_read=bounds.read_timeout_s
        )
        return {"client_kwargs": {"timeout": timeout}}
    return {}
