"""The tree stays lint- and type-clean (ruff and mypy with the project's configuration), and every
library module stays under :data:`MAX_MODULE_LINES` lines (one concern per module)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500
"""The most lines a module of ``replay`` or ``logstores`` may have; a longer one is split by concern."""


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


def test_library_modules_stay_small() -> None:
    too_long = {
        str(path.relative_to(REPO_ROOT)): lines
        for package in ("replay", "logstores")
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {too_long}"
