"""The README's reference parts match the code: the command synopsis lists every ``deltalog``
command, the extras table every extra, and CI runs the README's test command."""

from __future__ import annotations

import argparse
import re
import tomllib

from replay.cli.main import build_parser
from tests.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_synopsis_lists_every_command() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    synopsis = section("The command line").split("```", 2)[1]
    listed = re.findall(r"^deltalog (\S+)", synopsis, re.M)
    assert sorted(listed) == sorted(subparsers.choices)


def test_the_extras_table_lists_every_extra() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = list(pyproject["project"]["optional-dependencies"])
    documented = re.findall(r"^\| `([a-z0-9]+)` \|", section("Quick start"), re.M)
    assert documented == extras


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", section("Quick start"), re.S)
    test_command = next(block.strip() for block in blocks if "pytest" in block)
    assert test_command in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
