"""``deltalog delete`` and ``deltalog update``: the committed version and Delta's metrics, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from replay import DeltaTable, write_table
from replay.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array(range(6), pa.int64()), "status": ["new"] * 6}))
    return uri


def test_delete_prints_the_version_and_metrics(capsys: pytest.CaptureFixture[str], table: str) -> None:
    code, out, err = run(capsys, "delete", table, "--where", "id >= 4", "--json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed["version"] == 1 and printed["numDeletedRows"] == 2 and printed["numCopiedRows"] == 4
    code, out, _ = run(capsys, "delete", table, "--where", "id > 100")
    assert code == 0 and "DELETE: no change" in out and "numDeletedRows" in out
    assert sorted(DeltaTable(table).to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3]


def test_update_sets_every_column_given(capsys: pytest.CaptureFixture[str], table: str) -> None:
    code, out, err = run(
        capsys, "update", table, "--set", "status='done'", "--set", "id = id * 10", "--where", "id < 2"
    )
    assert code == 0, err
    assert "UPDATE committed version 1" in out and "numUpdatedRows" in out
    rows = sorted(DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows[:3] == [{"id": 0, "status": "done"}, {"id": 2, "status": "new"}, {"id": 3, "status": "new"}]
    assert {"id": 10, "status": "done"} in rows


def test_usage_and_table_errors(capsys: pytest.CaptureFixture[str], table: str) -> None:
    code, _, err = run(capsys, "update", table, "--set", "status")
    assert code == 1 and "COLUMN=EXPRESSION" in err
    code, _, err = run(capsys, "delete", table)
    assert code == 1 and "--where" in err
    code, _, err = run(capsys, "delete", table, "--where", "nope = 1")
    assert code == 2 and "UNRESOLVED_COLUMN" in err and "nope" in err
