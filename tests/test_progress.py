"""Progress reports of long operations reach the listener a front end installs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from replay import progress
from replay.delta_log import DeltaLog
from replay.txn.write import write_table


def test_reports_reach_only_the_installed_listener(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for value in range(3):
        write_table(uri, pa.table({"x": [value]}))
    seen: list[tuple[str, int, int | None]] = []
    log = DeltaLog.for_table(uri)
    log.snapshot()  # no listener: nothing to report to, nothing fails
    with progress.listening(lambda *event: seen.append(event)):
        log.history()
        log.checkpoint()
    assert [event for event in seen if event[0] == "Reading history"] == [
        ("Reading history", done, 3) for done in range(4)
    ]
    assert [event for event in seen if event[0] == "Writing checkpoint parts"] == [
        ("Writing checkpoint parts", 0, 1),
        ("Writing checkpoint parts", 1, 1),
    ]
    seen.clear()
    log.history()
    assert seen == []  # the listener is gone after the with block


def test_snapshot_loading_reports_commits_read(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for value in range(4):
        write_table(uri, pa.table({"x": [value]}))
    seen: list[tuple[str, int, int | None]] = []
    with progress.listening(lambda *event: seen.append(event)):
        DeltaLog.for_table(uri).snapshot()
    commits = [event for event in seen if event[0] == "Reading commits"]
    assert commits[0] == ("Reading commits", 0, 4)
    assert commits[-1] == ("Reading commits", 4, 4)
