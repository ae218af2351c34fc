"""Cross-check with delta-rs: our snapshots of tables it writes, and its reads of tables we write.

delta-rs scans data on background threads that may abort the interpreter at exit (a known
delta-rs/Arrow shutdown-order problem), so every delta-rs *data read* runs in a child process
that leaves with ``os._exit``. Writes and log-only calls run in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.delta_log import DeltaLog
from replay.protocol.paths import resolve_path
from replay.txn.write import delete_files, write_table

_READ_IN_CHILD = """
import json, os, sys
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
rows = dt.to_pyarrow_table().to_pylist()
out = {"version": dt.version(), "files": sorted(dt.file_uris()), "rows": rows}
sys.stdout.write(json.dumps(out, default=str))
sys.stdout.flush()
os._exit(0)
"""


def deltars_read(table: str | Path) -> dict[str, Any]:
    """What delta-rs sees: ``version``, sorted ``files`` (URIs) and ``rows`` (read in a child process)."""
    result = subprocess.run(
        [sys.executable, "-c", _READ_IN_CHILD, str(table)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


def our_file_uris(table: str | Path) -> list[str]:
    """Our snapshot's active files as delta-rs spells them (absolute local paths)."""
    log = DeltaLog.for_table(str(table))
    snapshot = log.snapshot()
    return sorted(resolve_path(log.table_path, add.path).removeprefix("file://") for add in snapshot.files())


# -- our snapshots of tables delta-rs writes --------------------------------------------------------
def _append(path: str) -> None:
    write_deltalake(path, pa.table({"a": [4], "p": ["z"]}), mode="append")


def _overwrite(path: str) -> None:
    write_deltalake(path, pa.table({"a": [7, 8], "p": ["q", "q"]}), mode="overwrite")


def _delete(path: str) -> None:
    DeltaTable(path).delete("a = 2")


def _update(path: str) -> None:
    DeltaTable(path).update(updates={"a": "a + 10"}, predicate="a = 1")


def _merge(path: str) -> None:
    source = pa.table({"a": [3, 9], "p": ["x", "w"]})
    (
        DeltaTable(path)
        .merge(source, "t.a = s.a", source_alias="s", target_alias="t")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )


def _checkpoint_then_append(path: str) -> None:
    DeltaTable(path).delete("a = 1")
    DeltaTable(path).create_checkpoint()
    _append(path)


SCENARIOS: dict[str, Callable[[str], None]] = {
    "append": _append,
    "overwrite": _overwrite,
    "delete": _delete,
    "update": _update,
    "merge": _merge,
    "checkpoint": _checkpoint_then_append,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("cdf", [False, True], ids=["plain", "cdf"])
def test_our_snapshot_matches_deltars(tmp_path: Path, scenario: str, cdf: bool) -> None:
    path = str(tmp_path / "t")
    configuration = {"delta.enableChangeDataFeed": "true"} if cdf else None
    write_deltalake(
        path,
        pa.table({"a": [1, 2, 3], "p": ["x", "y", "x"]}),
        partition_by=["p"],
        configuration=configuration,
    )
    SCENARIOS[scenario](path)
    theirs = DeltaTable(path)
    snapshot = DeltaLog.for_table(path).snapshot()

    assert snapshot.version == theirs.version()
    assert our_file_uris(path) == sorted(theirs.file_uris())
    protocol = theirs.protocol()
    assert (snapshot.protocol.min_reader_version, snapshot.protocol.min_writer_version) == (
        protocol.min_reader_version,
        protocol.min_writer_version,
    )
    assert sorted(snapshot.protocol.writer_features or []) == sorted(protocol.writer_features or [])
    metadata = theirs.metadata()
    assert snapshot.metadata.id == metadata.id
    assert snapshot.metadata.partition_columns == list(metadata.partition_columns)
    assert snapshot.metadata.configuration == dict(metadata.configuration)
    assert snapshot.metadata.created_time == metadata.created_time
    assert (
        json.loads(snapshot.metadata.schema_string)["fields"]
        == json.loads(theirs.schema().to_json())["fields"]
    )


# -- delta-rs reads of tables we write ---------------------------------------------------------------
def test_deltars_reads_our_append_overwrite_and_delete(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    first = pa.table({"a": [1, 2, 3, None], "p": ["a b", "x/y", None, "ü%"]})
    assert write_table(path, first, partition_by=["p"]) == 0
    assert write_table(path, pa.table({"a": [5], "p": ["z"]})) == 1
    seen = deltars_read(path)
    assert seen["version"] == 1
    assert seen["files"] == our_file_uris(path)
    assert sorted_rows(seen["rows"]) == sorted_rows([*first.to_pylist(), {"a": 5, "p": "z"}])

    snapshot = DeltaLog.for_table(path).snapshot()
    victim = next(add for add in snapshot.files() if add.partition_values == {"p": "x/y"})
    assert delete_files(path, [victim.path]) == 2
    seen = deltars_read(path)
    assert seen["version"] == 2
    assert seen["files"] == our_file_uris(path)
    assert {row["a"] for row in seen["rows"]} == {1, 3, None, 5}

    assert write_table(path, pa.table({"a": [7], "p": ["q"]}), mode="overwrite") == 3
    seen = deltars_read(path)
    assert (seen["version"], seen["rows"]) == (3, [{"a": 7, "p": "q"}])
    assert seen["files"] == our_file_uris(path)


def test_deltars_reads_cdf_of_our_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_table(
        path,
        pa.table({"a": [1, 2], "p": ["x", "y"]}),
        partition_by=["p"],
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_table(path, pa.table({"a": [3], "p": ["x"]}))
    snapshot = DeltaLog.for_table(path).snapshot()
    delete_files(path, [add.path for add in snapshot.files() if add.partition_values == {"p": "y"}])
    code = """
import json, os, sys
import pyarrow as pa
from deltalake import DeltaTable
table = pa.table(DeltaTable(sys.argv[1]).load_cdf(starting_version=0).read_all())
rows = table.select(["a", "p", "_change_type", "_commit_version"]).to_pylist()
sys.stdout.write(json.dumps(rows)); sys.stdout.flush(); os._exit(0)
"""
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert sorted_rows(json.loads(result.stdout)) == sorted_rows(
        [
            {"a": 1, "p": "x", "_change_type": "insert", "_commit_version": 0},
            {"a": 2, "p": "y", "_change_type": "insert", "_commit_version": 0},
            {"a": 3, "p": "x", "_change_type": "insert", "_commit_version": 1},
            {"a": 2, "p": "y", "_change_type": "delete", "_commit_version": 2},
        ]
    )


def test_deltars_reads_our_checkpoints(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for index in range(5):
        write_table(path, pa.table({"a": [index], "p": [f"v{index % 2}"]}), partition_by=["p"])
    snapshot = DeltaLog.for_table(path).snapshot()
    delete_files(path, [snapshot.files()[0].path])
    log = DeltaLog.for_table(path)
    log.checkpoint()
    write_table(path, pa.table({"a": [9], "p": ["v1"]}))
    expected_files = our_file_uris(path)
    for commit in (tmp_path / "t" / "_delta_log").glob("*.json"):
        if int(commit.name.split(".")[0]) <= 5:
            commit.unlink()  # only the checkpoint can tell what versions 0..5 did
    seen = deltars_read(path)
    assert seen["version"] == 6
    assert seen["files"] == expected_files
    assert our_file_uris(path) == expected_files
    assert len(seen["rows"]) == 5


def test_deltars_reads_our_table_features(tmp_path: Path) -> None:
    import datetime as dt

    path = str(tmp_path / "t")
    data = pa.table(
        {"id": [1, 2], "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)] * 2, pa.timestamp("us"))}
    )
    write_table(path, data, configuration={"delta.enableInCommitTimestamps": "true"})
    write_table(path, data.slice(0, 1))
    protocol = DeltaTable(path).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert sorted(protocol.writer_features) == [
        "appendOnly",
        "inCommitTimestamp",
        "invariants",
        "timestampNtz",
    ]
    history = DeltaTable(path).history()
    assert [entry["version"] for entry in history] == [1, 0]
    assert all("inCommitTimestamp" in entry for entry in history)
    seen = deltars_read(path)
    assert seen["version"] == 1
    assert sorted(row["id"] for row in seen["rows"]) == [1, 1, 2]


def test_we_append_to_and_delete_from_a_deltars_table(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1, 2], "p": ["x", "y"]}), partition_by=["p"])
    assert write_table(path, pa.table({"a": [3], "p": ["x"]})) == 1
    snapshot = DeltaLog.for_table(path).snapshot()
    assert (
        delete_files(path, [add.path for add in snapshot.files() if add.partition_values == {"p": "y"}]) == 2
    )
    seen = deltars_read(path)
    assert seen["version"] == 2
    assert sorted_rows(seen["rows"]) == [{"a": 1, "p": "x"}, {"a": 3, "p": "x"}]
    assert seen["files"] == our_file_uris(path)
