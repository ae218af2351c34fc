"""The tree stays lint- and type-clean: ruff and mypy run with the project's configuration."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_reports_nothing() -> None:
    ruff = shutil.which("ruff")
    assert ruff, "ruff is installed by the test extra"
    result = subprocess.run(
        [ruff, "check", "--quiet", "."], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_reports_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "logstores", "replay"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
