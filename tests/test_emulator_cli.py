"""``deltalog emulator``: a real emulator in the foreground, its printed settings used to write and
read a table, and nothing left running once it is stopped by SIGINT or SIGTERM."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from logstores.testing.servers import EmulatorNotInstalledError, find_azurite
from replay import DeltaLog, write_table
from replay.cli import emulator, main
from tests.paths import REPO_ROOT

READY_LINE = "Press Ctrl-C to stop."


@dataclass
class Emulator:
    process: subprocess.Popen[str]
    banner: str

    @property
    def server_pid(self) -> int:
        match = re.search(r"is running on http://127\.0\.0\.1:\d+ \(process (\d+)\)", self.banner)
        assert match, self.banner
        return int(match.group(1))

    def conf(self) -> dict[str, str]:
        """The settings of the printed ``deltalog ... --conf KEY=VALUE`` command, as a shell reads it."""
        command = re.search(r"^  (deltalog snapshot .*?)\n\n", self.banner, re.S | re.M)
        assert command, self.banner
        words = shlex.split(command.group(1))
        pairs = [words[index + 1] for index, word in enumerate(words) if word == "--conf"]
        return dict(pair.split("=", 1) for pair in pairs)

    def spark_settings(self) -> dict[str, str]:
        block = self.banner.split("Spark settings:\n", 1)[1].split("\n\n", 1)[0]
        return dict(line.split(None, 1) for line in block.splitlines())


@pytest.fixture
def start_emulator() -> Iterator[Callable[..., Emulator]]:
    started: list[subprocess.Popen[str]] = []

    def start(kind: str, *args: str) -> Emulator:
        process = subprocess.Popen(
            [sys.executable, "-m", "replay", "emulator", kind, "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        started.append(process)
        lines = []
        assert process.stdout is not None
        for line in process.stdout:  # the banner ends with READY_LINE; EOF if it failed
            lines.append(line)
            if line.strip() == READY_LINE:
                break
        else:
            _, stderr = process.communicate(timeout=30)
            pytest.fail(f"the emulator did not start:\n{''.join(lines)}{stderr}")
        return Emulator(process, "".join(lines))

    yield start
    for process in started:  # a failed test must not leave an emulator behind
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def round_trip(uri: str, conf: dict[str, str]) -> None:
    rows = pa.table({"id": [1, 2, 3], "city": ["Oslo", "Lima", "Pune"]})
    assert write_table(uri, rows, mode="append", conf=conf) == 0
    assert DeltaLog.for_table(uri, conf).snapshot().to_arrow().sort_by("id") == rows


def stop_and_check_gone(running: Emulator, signum: int) -> None:
    server = running.server_pid
    os.kill(server, 0)  # running now
    running.process.send_signal(signum)
    _, stderr = running.process.communicate(timeout=60)
    assert running.process.returncode == 0, stderr
    assert stderr.strip().endswith("Stopped.")
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)
    with pytest.raises(ProcessLookupError):  # nor anything in its process group
        os.killpg(server, 0)


@pytest.mark.cloud
def test_s3_emulator_settings_reach_a_bucket_and_ctrl_c_stops_it(
    start_emulator: Callable[..., Emulator],
) -> None:
    running = start_emulator("s3", "--bucket", "lake")
    conf = running.conf()
    assert conf == running.spark_settings()
    assert set(conf) == {
        "spark.hadoop.fs.s3a.endpoint",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.path.style.access",
        "spark.hadoop.fs.s3a.endpoint.region",
    }
    assert "Tables go under s3://lake/" in running.banner
    round_trip("s3://lake/events", conf)
    round_trip("s3a://lake/other", conf)
    stop_and_check_gone(running, signal.SIGINT)


@pytest.mark.cloud
def test_gcs_emulator_settings_reach_a_bucket_and_sigterm_stops_it(
    start_emulator: Callable[..., Emulator],
) -> None:
    running = start_emulator("gcs")
    conf = running.conf()
    assert conf["spark.hadoop.fs.gs.auth.type"] == "UNAUTHENTICATED"
    round_trip("gs://delta/events", conf)
    stop_and_check_gone(running, signal.SIGTERM)


@pytest.mark.cloud
def test_azure_emulator_settings_reach_a_container(start_emulator: Callable[..., Emulator]) -> None:
    try:
        find_azurite([REPO_ROOT])
    except EmulatorNotInstalledError as missing:
        pytest.skip(str(missing))
    running = start_emulator("azure", "--bucket", "tables")
    conf = running.conf()
    assert list(conf) == ["spark.hadoop.fs.azure.storage.connection.string"]
    assert "AccountName=devstoreaccount1;" in conf["spark.hadoop.fs.azure.storage.connection.string"]
    round_trip("abfs://tables/events", conf)
    stop_and_check_gone(running, signal.SIGINT)


@pytest.mark.cloud
def test_the_printed_python_snippet_runs(start_emulator: Callable[..., Emulator]) -> None:
    running = start_emulator("s3")
    snippet = re.search(r"^  (python -c .*?)\n\n", running.banner, re.S | re.M)
    assert snippet, running.banner
    words = shlex.split(snippet.group(1))
    result = subprocess.run(
        [sys.executable, *words[1:]],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "id: [[1,2,3]]" in result.stdout
    stop_and_check_gone(running, signal.SIGINT)


def test_a_taken_port_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["emulator", "s3", "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is not free" in capsys.readouterr().err


def test_missing_azurite_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AZURITE_BLOB", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(emulator, "_azurite_roots", lambda: [tmp_path])
    assert main(["emulator", "azure", "--port", "0"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("deltalog: error: EmulatorNotInstalledError: Azurite is not installed")
    assert "npm install --no-save --prefix .tools azurite@3.35.0" in error


@pytest.mark.parametrize("bucket", ["ab", "Upper", "with_underscore", "dash-"])
def test_bucket_names_valid_everywhere(capsys: pytest.CaptureFixture[str], bucket: str) -> None:
    assert main(["emulator", "s3", "--bucket", bucket]) == 1
    assert "is not a bucket name valid on every emulator" in capsys.readouterr().err
