"""The tree stays lint-clean: ruff runs with the project's configuration."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_reports_nothing() -> None:
    ruff = shutil.which("ruff")
    assert ruff, "ruff is installed by the test extra"
    result = subprocess.run(
        [ruff, "check", "--quiet", "."], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
