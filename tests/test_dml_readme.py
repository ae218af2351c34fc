"""The README's change-feed-to-MERGE pipeline ("Changing rows") runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT


def test_the_cdc_to_merge_pipeline_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Changing rows\n", 1)[1].split("\n## ", 1)[0]
    [pipeline] = [block for block in re.findall(r"```python\n(.*?)```", section, re.S) if "load_cdf" in block]
    monkeypatch.chdir(tmp_path)
    exec(compile(pipeline, "README.md (Changing rows)", "exec"), {})
    assert (tmp_path / "orders_copy" / "_delta_log" / "00000000000000000001.json").exists()
