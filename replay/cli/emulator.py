"""``deltalog emulator s3|gcs|azure``: a local object store to try tables on, in the foreground.

It starts the emulator the pytest plugin uses (:mod:`logstores.testing.servers`: ``moto_server``
for S3, fake-gcs-server for GCS, Azurite for Azure), creates one bucket or container, prints the
settings that reach it (Spark keys, ``deltalog --conf`` arguments, a Python and a PySpark
snippet) and waits. Ctrl-C (SIGINT) or SIGTERM stops it: the server runs in a process group of
its own, which is terminated, and nothing is left running. The only credentials printed are the
emulators' public, well-known development ones.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the servers module is imported when the command runs (it needs the testing extra)
    from logstores.testing.servers import Azurite, GCSServer, MotoServer

EMULATOR_HELP = "Run a local S3, GCS or Azure emulator with a bucket, and print the settings to use it."
DEFAULT_BUCKET = "delta"
DEFAULT_PORTS = {"s3": 9000, "gcs": 4443, "azure": 10000}
POLL_INTERVAL_S = 0.5
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
TESTING_EXTRA = "pip install -e '.[testing]' (from a checkout of delta-logstores)"
AZURE_EXTRA = "pip install -e '.[testing,azure]' (from a checkout of delta-logstores)"


class EmulatorError(Exception):
    """The emulator cannot run here (something missing, a port taken, a server that died)."""


@dataclass(frozen=True)
class Running:
    """A started emulator: what to print about it, and the process to watch."""

    label: str
    endpoint: str
    pid: int
    scheme: str
    spark_scheme: str
    bucket: str
    conf: dict[str, str]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``deltalog emulator``."""
    parser.add_argument("kind", choices=list(DEFAULT_PORTS), help="which object store to emulate")
    parser.add_argument(
        "--bucket",
        type=_bucket_name,
        default=DEFAULT_BUCKET,
        metavar="NAME",
        help=f"the bucket (Azure: container) to create (default: {DEFAULT_BUCKET})",
    )
    parser.add_argument(
        "--port",
        type=_port,
        metavar="N",
        help="the port to listen on, 0 for any free port (default: "
        + ", ".join(f"{kind} {port}" for kind, port in DEFAULT_PORTS.items())
        + ")",
    )


def cmd_emulator(args: argparse.Namespace, conf: dict[str, str]) -> int:
    """Run the emulator until SIGINT or SIGTERM; 0 when stopped so, 2 if it could not run or died."""
    port = DEFAULT_PORTS[args.kind] if args.port is None else args.port
    if port:
        _check_port_free(port)
    with _stop_on_signals():
        try:
            with _start(args.kind, port, args.bucket) as running:
                try:
                    _print_usage(running)
                    _wait_while_alive(running)
                finally:
                    _ignore_stop_signals()  # a second Ctrl-C must not interrupt the server's stop
        except KeyboardInterrupt:
            print("Stopped.", file=sys.stderr, flush=True)
            return 0
    return 0  # not reached: _wait_while_alive returns only by raising


# -- starting ----------------------------------------------------------------------------------
def _start(kind: str, port: int, bucket: str) -> AbstractContextManager[Running]:
    """The emulator of ``kind``, its bucket created. A missing program or package raises the
    servers module's ``EmulatorNotInstalledError``, which names what to install."""
    try:
        from logstores.testing import servers
    except ImportError as exc:
        raise EmulatorError(
            f"deltalog emulator needs the emulators of the testing extra ({exc}): {TESTING_EXTRA}"
        ) from None
    if kind == "s3":
        return _s3(servers.running_moto(port=port), bucket)
    if kind == "gcs":
        return _gcs(servers.running_fake_gcs(port=port), bucket)
    return _azure(servers.running_azurite(_azurite_roots(), port=port), bucket)


@contextlib.contextmanager
def _s3(server_context: AbstractContextManager[MotoServer], bucket: str) -> Iterator[Running]:
    _require("boto3", f"the bucket is created with boto3, part of the testing extra: {TESTING_EXTRA}")
    with server_context as server:
        server.create_bucket(bucket)
        yield Running("S3 (moto_server)", server.endpoint, server.pid, "s3", "s3a", bucket, server.s3a_conf())


@contextlib.contextmanager
def _gcs(server_context: AbstractContextManager[GCSServer], bucket: str) -> Iterator[Running]:
    with server_context as server:
        server.create_bucket(bucket)
        yield Running("GCS (fake-gcs-server)", server.endpoint, server.pid, "gs", "gs", bucket, server.conf())


@contextlib.contextmanager
def _azure(server_context: AbstractContextManager[Azurite], bucket: str) -> Iterator[Running]:
    _require("azure.storage.blob", f"the container is created with the azure extra's SDK: {AZURE_EXTRA}")
    with server_context as server:
        server.create_container(bucket)
        conf = {"spark.hadoop.fs.azure.storage.connection.string": server.connection_string()}
        yield Running(
            "Azure Blob Storage (Azurite)", server.endpoint, server.pid, "abfs", "abfs", bucket, conf
        )


def _require(module: str, install: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise EmulatorError(f"{module} cannot be imported; {install}") from None


def _azurite_roots() -> list[Path]:
    """Where Azurite may be installed: the working directory and the checkout of this package."""
    return list(dict.fromkeys([Path.cwd(), Path(__file__).resolve().parents[2]]))


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise EmulatorError(
                f"port {port} on 127.0.0.1 is not free ({exc.strerror}): choose another with --port N "
                "(--port 0 picks a free one)"
            ) from None


# -- printing ----------------------------------------------------------------------------------
def _print_usage(running: Running) -> None:
    table = f"{running.scheme}://{running.bucket}/demo"
    spark_table = f"{running.spark_scheme}://{running.bucket}/demo"
    conf = json.dumps(running.conf)
    width = max(len(key) for key in running.conf)
    conf_args = " \\\n".join(
        f"    --conf {shlex.quote(f'{key}={value}')}" for key, value in running.conf.items()
    )
    python = (
        "import pyarrow as pa\n"
        "from replay import DeltaLog, write_table\n"
        f"conf = {conf}\n"
        f'write_table("{table}", pa.table({{"id": [1, 2, 3]}}), mode="append", conf=conf)\n'
        f'print(DeltaLog.for_table("{table}", conf).snapshot().to_arrow())'
    )
    lines = [
        f"{running.label} is running on {running.endpoint} (process {running.pid}).",
        f"Bucket: {running.bucket}. Tables go under {running.scheme}://{running.bucket}/ "
        "(in memory: they are gone when the emulator stops).",
        "",
        "Spark settings:",
        *(f"  {key.ljust(width)}  {value}" for key, value in running.conf.items()),
        "",
        "Write a table from Python, then read it:",
        f"  python -c {shlex.quote(python)}",
        "",
        "Look at it with deltalog:",
        f"  deltalog snapshot {table} \\\n{conf_args}",
        "",
        "From PySpark:",
        "  from pyspark.sql import SparkSession",
        "  from replay.spark import register",
        f"  conf = {conf}",
        "  spark = SparkSession.builder.config(map=conf).getOrCreate()",
        "  register(spark)",
        f'  spark.range(3).write.format("deltalog").mode("append").save("{spark_table}")',
        f'  spark.read.format("deltalog").load("{spark_table}").show()',
        "",
        "Press Ctrl-C to stop.",
    ]
    print("\n".join(lines), flush=True)


# -- waiting and stopping ----------------------------------------------------------------------
def _wait_while_alive(running: Running) -> None:
    """Return never: raise :class:`EmulatorError` if the server exits on its own."""
    while True:
        if _has_ended(running.pid):
            raise EmulatorError(f"{running.label} on {running.endpoint} ended by itself")
        time.sleep(POLL_INTERVAL_S)


def _has_ended(pid: int) -> bool:
    """Whether our child ``pid`` has exited; it stays unreaped, for the servers module to wait on."""
    waitid = getattr(os, "waitid", None)
    if waitid is not None:
        return waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    try:  # no waitid (macOS): an exited child is still signalable until reaped, so this errs on "alive"
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt, also where the shell started us ignoring SIGINT."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


# -- argument types ----------------------------------------------------------------------------
def _bucket_name(text: str) -> str:
    if not _BUCKET_NAME.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a bucket name valid on every emulator: 3 to 63 lower-case letters, digits "
            "and dashes, starting and ending with a letter or digit"
        )
    return text


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)
