"""``deltalog vacuum``, ``deltalog restore`` and ``deltalog alter``: output, JSON and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay import DeltaTable, write_table
from replay.cli import main

NO_CHECK = ("--conf", "spark.databricks.delta.retentionDurationCheck.enabled=false")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def two_versions(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1, 2]}))
    write_table(uri, pa.table({"a": [3]}), mode="overwrite")
    return uri


def test_vacuum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = two_versions(tmp_path)
    code, _, err = run(capsys, "vacuum", uri, "--retain-hours", "0")
    assert code == 2 and "DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT" in err
    dry = run_json(capsys, "vacuum", uri, "--retain-hours", "0", "--dry-run", *NO_CHECK)
    assert dry["dry_run"] is True and len(dry["files"]) == 1 and dry["version"] == 1
    code, out, _ = run(capsys, "vacuum", uri, "--retain-hours", "0", *NO_CHECK)
    assert code == 0 and out.splitlines() == [*dry["files"], "vacuum deleted 1 files (table at version 3)"]
    assert not (tmp_path / "t" / dry["files"][0]).exists()
    code, _, err = run(capsys, "vacuum", uri, "--retain-hours", "soon")
    assert code == 1 and "expected a number of hours" in err
    (tmp_path / "t" / "orphan.parquet").write_bytes(b"x")  # not a tombstone: a lite vacuum keeps it
    os.utime(tmp_path / "t" / "orphan.parquet", (0, 0))
    assert (
        run_json(capsys, "vacuum", uri, "--retain-hours", "0", "--dry-run", "--lite", *NO_CHECK)["files"]
        == []
    )
    assert run_json(capsys, "vacuum", uri, "--retain-hours", "0", "--dry-run", *NO_CHECK)["files"] == [
        "orphan.parquet"
    ]


def test_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = two_versions(tmp_path)
    shown = run_json(capsys, "restore", uri, "--version", "0")
    assert shown["version"] == 2 and shown["numRestoredFiles"] == 1 and shown["numRemovedFiles"] == 1
    assert DeltaTable(uri).to_pyarrow_table()["a"].to_pylist() == [1, 2]
    code, _, err = run(capsys, "restore", uri)
    assert code == 1 and "--version" in err
    code, _, err = run(capsys, "restore", uri, "--version", "9")
    assert code == 2 and "DELTA_CANNOT_RESTORE_TABLE_VERSION" in err
    code, _, err = run(capsys, "restore", uri, "--timestamp", "2000-01-01")
    assert code == 2 and "DELTA_CANNOT_RESTORE_TIMESTAMP_EARLIER" in err


def test_alter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = two_versions(tmp_path)
    shown = run_json(capsys, "alter", uri, "--set", "delta.enableChangeDataFeed=true", "--set", "owner=me")
    assert shown["version"] == 2 and shown["protocol"] == "1,4"
    assert shown["properties"] == {"delta.enableChangeDataFeed": "true", "owner": "me"}
    shown = run_json(capsys, "alter", uri, "--add-constraint", "positive=a > 0", "--unset", "owner")
    assert shown["version"] == 4 and shown["properties"] == {
        "delta.enableChangeDataFeed": "true",
        "delta.constraints.positive": "a > 0",
    }
    shown = run_json(
        capsys, "alter", uri, "--drop-constraint", "positive", "--add-feature", "deletionVectors"
    )
    assert shown["protocol"] == "3,7" and shown["reader_features"] == ["deletionVectors"]
    code, _, err = run(capsys, "alter", uri, "--set", "delta.nope=1")
    assert code == 2 and "DELTA_UNKNOWN_CONFIGURATION" in err
    code, _, err = run(capsys, "alter", uri)
    assert code == 1 and "nothing to change" in err
    code, _, err = run(capsys, "alter", uri, "--set", "novalue")
    assert code == 1 and "KEY=VALUE" in err
    code, _, _ = run(capsys, "alter", uri, "--unset", "missing", "--if-exists")
    assert code == 0
