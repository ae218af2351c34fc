"""Test-only helpers around the cloud emulators of :mod:`logstores.testing`.

The emulators themselves (``moto_server``, ``gcs_server``, ``azurite_server``) are the session
fixtures of the installed pytest plugin :mod:`logstores.testing`; this repository requires them
(``logstores_require_emulators = true``), so a missing emulator fails its tests instead of
skipping them. Here: a moto server that checks credentials, per-test stores on fresh buckets
(``s3_store``, ``gcs_store``, ...), a recording, fault-injecting HTTP proxy (``fault_proxy``) and
an endpoint that never answers (``stalled_endpoint``).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from logstores.testing.servers import (
    AWS_TEST_KEY,
    AWS_TEST_SECRET,
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    Azurite,
    GCSServer,
    MotoServer,
    free_port,
    running_moto,
    unique_name,
)
from tests.store_cases import StoreUnderTest

__all__ = [
    "AWS_TEST_KEY",
    "AWS_TEST_SECRET",
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "CLOUD_STORE_FIXTURES",
    "Azurite",
    "Fault",
    "FaultProxy",
    "GCSServer",
    "MotoServer",
    "StalledEndpoint",
    "dynamodb_settings",
    "free_port",
    "s3_settings",
    "unique_name",
]


@pytest.fixture(scope="module")
def moto_server_checking_credentials() -> Iterator[MotoServer]:
    """A moto_server that enforces IAM authentication: every access key is unknown to it."""
    with running_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as moto:
        yield moto


# -- a recording, fault-injecting proxy ------------------------------------------------------------
@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str  # path and query string
    headers: dict[str, str]


@dataclass
class Fault:
    """Make matching requests fail: ``landed=True`` forwards first (the response is lost).

    ``stall_s > 0`` makes the proxy hold the request that long without answering, then drop
    the connection (after forwarding it when ``landed``).
    """

    method: str
    path_contains: str
    status: int = 503
    landed: bool = True
    times: int = 1
    stall_s: float = 0.0
    body_contains: bytes = b""


@dataclass
class FaultProxy:
    """Forwards HTTP to ``upstream``, records every request, applies faults and header filters."""

    upstream: str
    endpoint: str = ""
    requests: list[ProxiedRequest] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    dropped_headers: set[str] = field(default_factory=set)
    close: Callable[[], None] = lambda: None
    """Stop the proxy: connections to :attr:`endpoint` are refused, open ones dropped."""
    closed: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def matching(self, method: str, path_contains: str = "") -> list[ProxiedRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == method and path_contains in r.path]

    def take_fault(self, method: str, path: str, body: bytes = b"") -> Fault | None:
        with self._lock:
            for fault in self.faults:
                matches = (
                    fault.method == method and fault.path_contains in path and fault.body_contains in body
                )
                if fault.times > 0 and matches:
                    fault.times -= 1
                    return fault
            return None


def _proxy_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _handle(self) -> None:
            if proxy.closed.is_set():  # a dead endpoint: kept-alive connections die too
                self.close_connection = True
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {
                key: value
                for key, value in self.headers.items()
                if key.lower() not in proxy.dropped_headers | {"connection", "keep-alive"}
            }
            with proxy._lock:
                proxy.requests.append(ProxiedRequest(self.command, self.path, dict(self.headers.items())))
            fault = proxy.take_fault(self.command, self.path, body)
            if fault is not None and fault.stall_s > 0 and not fault.landed:
                self._stall(fault.stall_s)
                return
            if fault is not None and not fault.landed:
                self._reply(fault.status, {}, b"")
                return
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                status, reply_headers = response.status, dict(response.getheaders())
            finally:
                connection.close()
            if fault is not None and fault.stall_s > 0:
                self._stall(fault.stall_s)
                return
            if fault is not None:
                status, reply_headers, data = fault.status, {}, b""
            self._reply(status, reply_headers, data)

        def _stall(self, seconds: float) -> None:
            time.sleep(seconds)
            self.close_connection = True

        def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
            self.send_response(status)
            length = str(len(data))
            for key, value in headers.items():
                lowered = key.lower()
                if lowered == "content-length" and self.command == "HEAD":
                    length = value  # a HEAD answer describes the object it did not send
                elif lowered not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                    self.send_header(key, value)
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle  # noqa: N815 (http.server names)

    return Handler


class _QuietHTTPServer(ThreadingHTTPServer):
    """Clients that time out and hang up on a stalled request are expected, not worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@contextlib.contextmanager
def running_fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``upstream`` for the duration of the ``with`` block."""
    with contextlib.ExitStack() as stack:
        yield _start_fault_proxy(upstream, stack)


def _start_fault_proxy(upstream: str, stack: contextlib.ExitStack) -> FaultProxy:
    """Start a proxy in front of ``upstream``; ``stack`` stops it (unless :attr:`FaultProxy.close` did)."""
    proxy = FaultProxy(upstream)
    server = _QuietHTTPServer(("127.0.0.1", 0), _proxy_handler(proxy))
    server.daemon_threads = True
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True).start()
    running = [True]

    def close() -> None:
        proxy.closed.set()
        if running[0]:
            running[0] = False
            server.shutdown()
            server.server_close()

    proxy.close = close
    stack.callback(close)
    return proxy


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str], FaultProxy]]:
    """A factory: ``fault_proxy(upstream_endpoint)`` starts a proxy, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda upstream: _start_fault_proxy(upstream, stack)


# -- an endpoint that never answers -----------------------------------------------------------------
@dataclass
class StalledEndpoint:
    """A TCP server that accepts connections and never answers on them."""

    endpoint: str
    port: int


@pytest.fixture
def stalled_endpoint() -> Iterator[StalledEndpoint]:
    """``http://127.0.0.1:<port>``: accepts every connection, reads nothing, answers nothing."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.settimeout(0.2)
    port = int(listener.getsockname()[1])
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(connection)

    thread = threading.Thread(target=accept, name="stalled-endpoint", daemon=True)
    thread.start()
    yield StalledEndpoint(f"http://127.0.0.1:{port}", port)
    stop.set()
    thread.join(timeout=5)
    listener.close()
    for connection in accepted:
        connection.close()


# -- per-test stores -----------------------------------------------------------------------------
def service_root(
    request: pytest.FixtureRequest, service: str
) -> tuple[str, str, Callable[..., dict[str, str]]]:
    """(root URI on a new bucket or container, the emulator's endpoint, its storage settings for an
    endpoint: the emulator's own without one) of ``service``: ``s3``, ``gcs`` or ``azure``."""
    if service == "s3":
        moto = request.getfixturevalue("moto_server")
        return f"s3a://{moto.create_bucket()}", moto.endpoint, moto.s3a_conf
    if service == "gcs":
        gcs = request.getfixturevalue("gcs_server")
        return f"gs://{gcs.create_bucket()}", gcs.endpoint, gcs.conf
    azurite = request.getfixturevalue("azurite_server")
    return f"abfs://{azurite.create_container()}", azurite.endpoint, azurite.conf


def s3_settings(moto: MotoServer, endpoint: str | None = None, **extra: str) -> dict[str, str]:
    """The S3A settings of ``moto`` (or of ``endpoint`` in front of it) plus ``extra``."""
    return {**moto.s3a_conf(endpoint), **extra}


def dynamodb_settings(moto: MotoServer, table: str, endpoint: str | None = None) -> dict[str, str]:
    """:func:`s3_settings` plus the S3DynamoDBLogStore settings of DynamoDB table ``table``."""
    prefix = "spark.io.delta.storage.S3DynamoDBLogStore."
    return {
        **moto.s3a_conf(endpoint),
        f"{prefix}ddb.tableName": table,
        f"{prefix}ddb.region": "us-east-1",
        f"{prefix}ddb.endpoint": endpoint or moto.endpoint,
    }


@pytest.fixture
def s3_store(moto_server: MotoServer) -> StoreUnderTest:
    from logstores.s3 import S3LogStore

    return StoreUnderTest(S3LogStore(s3_settings(moto_server)), f"s3://{moto_server.create_bucket()}/table")


@pytest.fixture
def s3_single_driver_store(moto_server: MotoServer) -> StoreUnderTest:
    from logstores.s3 import S3SingleDriverLogStore

    store = S3SingleDriverLogStore(s3_settings(moto_server))
    return StoreUnderTest(store, f"s3a://{moto_server.create_bucket()}/table")


@pytest.fixture
def s3_dynamodb_store(moto_server: MotoServer) -> StoreUnderTest:
    from logstores.s3_dynamodb import S3DynamoDBLogStore

    store = S3DynamoDBLogStore(dynamodb_settings(moto_server, unique_name("delta-log")))
    return StoreUnderTest(store, f"s3a://{moto_server.create_bucket()}/table")


@pytest.fixture
def gcs_store(gcs_server: GCSServer) -> StoreUnderTest:
    from logstores.gcs import GCSLogStore

    return StoreUnderTest(GCSLogStore(gcs_server.conf()), f"gs://{gcs_server.create_bucket()}/table")


@pytest.fixture
def azure_store(azurite_server: Azurite) -> StoreUnderTest:
    from logstores.azure import AzureLogStore

    store = AzureLogStore(azurite_server.conf())
    return StoreUnderTest(store, f"abfs://{azurite_server.create_container()}/table")


CLOUD_STORE_FIXTURES = ("s3_store", "s3_single_driver_store", "s3_dynamodb_store", "gcs_store", "azure_store")
"""Every per-test cloud store fixture defined here."""
