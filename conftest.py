"""Shared test fixtures: golden tables, one local SparkSession, emulator servers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import GOLDEN_ROOT, REPO_ROOT

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # never probe cloud metadata services
os.environ.setdefault("NO_GCE_CHECK", "True")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# The installed plugins (entry points ``pytest11``) are named here too, so the suite also runs where
# the package is on the path without being installed; pytest loads a plugin once under its name.
pytest_plugins = ["pytester", "logstores.testing", "replay.testing", "tests.store_cases"]
if (REPO_ROOT / "tests" / "cloud_servers.py").exists():
    pytest_plugins.append("tests.cloud_servers")


@pytest.fixture(scope="session")
def golden_root() -> Path:
    """The shared golden tables (``../shared/testdata/delta-golden`` from the repo root)."""
    if not GOLDEN_ROOT.is_dir():
        pytest.fail(f"golden tables not found at {GOLDEN_ROOT}")
    return GOLDEN_ROOT


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One quiet local SparkSession for the whole run (its tests run serially, on one worker)."""
    from replay.spark.session import local_session

    session = local_session(
        "delta-logstores-tests",
        {"spark.driver.memory": "2g", "spark.executorEnv.PYTHONPATH": str(REPO_ROOT)},
    )
    yield session
    session.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist's ``loadgroup``, every test that uses the SparkSession runs on one worker,
    so a run starts one session. A test marked ``own_spark`` drives a Spark of its own in a
    subprocess and may run on any worker, beside the session's tests.

    The session's tests, the longest part of a run, come first (each file's order kept), so their
    worker starts on them at once while the other workers take the rest."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    shared: list[pytest.Item] = []
    others: list[pytest.Item] = []
    for item in items:
        uses_session = "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark")
        if uses_session and not item.get_closest_marker("own_spark"):
            item.add_marker(pytest.mark.xdist_group("spark"))
            shared.append(item)
        else:
            others.append(item)
    items[:] = shared + others
