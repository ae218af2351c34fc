"""The ``deltalog`` command line: printed values, JSON output, exit codes and error lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay.cdc import table_changes
from replay.cli import main
from replay.cli.demo import build_demo_table
from replay.cli.main import build_parser
from replay.delta_log import DeltaLog
from replay.txn.write import write_table
from tests.cloud_servers import MotoServer

V0_MS, V1_MS = 1_600_000_000_000, 1_600_000_060_000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def basic_append(golden_root: Path, tmp_path: Path) -> Path:
    """A copy of DAT's basic_append (versions 0 and 1) with known commit times."""
    table = tmp_path / "basic_append"
    shutil.copytree(golden_root / "dat" / "basic_append" / "delta", table)
    for version, ms in ((0, V0_MS), (1, V1_MS)):
        os.utime(table / "_delta_log" / f"{version:020d}.json", (ms / 1000, ms / 1000))
    return table


@pytest.fixture
def demo_table(tmp_path: Path) -> Path:
    table = tmp_path / "demo"
    table.mkdir()
    build_demo_table(str(table), {})
    return table


def test_snapshot_prints_the_table_state(capsys: pytest.CaptureFixture[str], basic_append: Path) -> None:
    code, out, err = run(capsys, "snapshot", str(basic_append))
    assert (code, err) == (0, "")
    assert "│ version           │ 1 " in out
    assert "reader 1, writer 2" in out
    assert "2020-09-13 12:27:40.000 UTC" in out  # V1_MS
    for column in ("letter", "number", "a_float"):
        assert f"│ {column}" in out
    assert "│ files             │ 2 (" in out


def test_snapshot_json_matches_the_api(capsys: pytest.CaptureFixture[str], basic_append: Path) -> None:
    snapshot = DeltaLog.for_table(str(basic_append)).snapshot()
    summary = run_json(capsys, "snapshot", str(basic_append), "--files")
    assert summary["version"] == snapshot.version == 1
    assert summary["timestamp"] == V1_MS
    assert summary["protocol"] == {
        "min_reader_version": 1,
        "min_writer_version": 2,
        "reader_features": [],
        "writer_features": [],
    }
    assert [field["name"] for field in summary["schema"]["fields"]] == ["letter", "number", "a_float"]
    assert summary["partition_columns"] == []
    assert summary["properties"] == {}
    assert summary["num_files"] == 2
    assert summary["size_bytes"] == sum(f.size for f in snapshot.files())
    assert sorted(f["path"] for f in summary["files"]) == sorted(f.path for f in snapshot.files())


def test_snapshot_time_travel(capsys: pytest.CaptureFixture[str], basic_append: Path) -> None:
    assert run_json(capsys, "snapshot", str(basic_append), "--version", "0")["num_files"] == 1
    assert run_json(capsys, "snapshot", str(basic_append), "--timestamp", str(V0_MS + 30_000))["version"] == 0
    assert (
        run_json(capsys, "snapshot", str(basic_append), "--timestamp", "2020-09-13T12:27:40Z")["version"] == 1
    )
    code, _, err = run(capsys, "snapshot", str(basic_append), "--timestamp", "2020-09-13T12:27:45+00:00")
    assert code == 2
    assert "[DELTA_TIMESTAMP_GREATER_THAN_COMMIT]" in err


def test_history(capsys: pytest.CaptureFixture[str], basic_append: Path) -> None:
    entries = run_json(capsys, "history", str(basic_append))
    assert [entry["version"] for entry in entries] == [1, 0]
    assert [entry["timestamp"] for entry in entries] == [V1_MS, V0_MS]
    assert entries[1]["operation"] == "WRITE"
    assert entries[1]["operation_parameters"] == {"mode": "ErrorIfExists", "partitionBy": "[]"}
    assert entries[1]["operation_metrics"]["numOutputRows"] == "3"
    assert entries[1]["engine_info"] == "Apache-Spark/3.5.1 Delta-Lake/3.1.0"
    api = DeltaLog.for_table(str(basic_append)).history()
    assert [entry["commit_info"] for entry in entries] == [
        {key: value for key, value in commit.items() if key not in ("version", "timestamp")} for commit in api
    ]
    limited = run_json(capsys, "history", str(basic_append), "--limit", "1")
    assert [entry["version"] for entry in limited] == [1]
    code, out, _ = run(capsys, "history", str(basic_append))
    assert code == 0
    assert "ErrorIfExists" in out
    assert "2020-09-13 12:26:40.000 UTC" in out  # V0_MS


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    records = table.to_pylist()
    return sorted((r["id"], r["city"], r["_change_type"], r["_commit_version"]) for r in records)


def test_changes_json_rows_equal_table_changes(capsys: pytest.CaptureFixture[str], demo_table: Path) -> None:
    code, out, err = run(capsys, "changes", str(demo_table), "--from", "0", "--json")
    assert (code, err) == (0, "")
    printed = [json.loads(line) for line in out.splitlines()]
    expected = table_changes(DeltaLog.for_table(str(demo_table)), starting_version=0)
    assert len(printed) == expected.num_rows == 18
    assert sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in printed) == sorted(
        (r[0], r[2], r[3]) for r in _rows(expected)
    )
    deletes = [r for r in printed if r["_change_type"] == "delete"]
    assert sorted(r["id"] for r in deletes) == [5, 6, 7, 8, 9]
    assert {r["_commit_version"] for r in deletes} == {3}


def test_changes_range_limit_and_text(capsys: pytest.CaptureFixture[str], demo_table: Path) -> None:
    code, out, _ = run(capsys, "changes", str(demo_table), "--from", "1", "--to", "2", "--json")
    assert code == 0
    assert sorted({json.loads(line)["_commit_version"] for line in out.splitlines()}) == [1, 2]
    code, out, _ = run(capsys, "changes", str(demo_table), "--from", "0", "--limit", "3", "--json")
    assert len(out.splitlines()) == 3
    code, out, _ = run(capsys, "changes", str(demo_table), "--from", "3")
    assert code == 0
    assert out.count("│ delete") == 5


def test_changes_follow_prints_new_commits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    uri = str(tmp_path / "followed")
    batch = pa.table({"id": pa.array([1, 2], pa.int64())})
    write_table(uri, batch, configuration={"delta.enableChangeDataFeed": "true"})
    result: dict[str, int] = {}
    follower = threading.Thread(
        target=lambda: result.update(
            code=main(
                ["changes", uri, "--from", "0", "--follow", "--interval", "0.05", "--json", "--limit", "4"]
            )
        )
    )
    follower.start()
    time.sleep(0.5)
    write_table(uri, pa.table({"id": pa.array([3, 4], pa.int64())}))
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert result["code"] == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["_commit_version"]) for r in printed] == [(1, 0), (2, 0), (3, 1), (4, 1)]


def test_checkpoint(capsys: pytest.CaptureFixture[str], basic_append: Path) -> None:
    written = run_json(capsys, "checkpoint", str(basic_append))
    assert written["version"] == 1
    assert written["parts"] == 1
    assert written["num_of_add_files"] == 2
    assert written["paths"][0].endswith(f"_delta_log/{1:020d}.checkpoint.parquet")
    last = json.loads((basic_append / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == 1
    assert run_json(capsys, "snapshot", str(basic_append))["num_files"] == 2


def test_store_names_the_deciding_key_and_redacts(capsys: pytest.CaptureFixture[str]) -> None:
    details = run_json(
        capsys,
        "store",
        "s3a://bucket/table",
        "--conf",
        "spark.delta.logStore.s3a.impl=io.delta.storage.S3DynamoDBLogStore",
        "--conf",
        "spark.hadoop.fs.s3a.secret.key=very-secret",
    )
    assert details["store"] == "logstores.s3_dynamodb.S3DynamoDBLogStore"
    assert details["chosen_by"] == "spark.delta.logStore.s3a.impl = io.delta.storage.S3DynamoDBLogStore"
    assert details["conf"]["spark.hadoop.fs.s3a.secret.key"] == "***"
    code, out, _ = run(
        capsys, "store", "gs://bucket/t", "--conf", "spark.hadoop.fs.s3a.secret.key=very-secret"
    )
    assert code == 0
    assert "very-secret" not in out
    assert "GCSLogStore" in out
    assert "default for scheme 'gs'" in out


def test_conf_file_and_spark_conf_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# defaults\nspark.delta.logStore.fake.impl   tests.custom_stores.CustomLogStore\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    assert run_json(capsys, "store", "fake://x")["store"] == "tests.custom_stores.CustomLogStore"
    override = tmp_path / "override.conf"
    override.write_text("spark.delta.logStore.fake.impl=memory\n")
    details = run_json(capsys, "store", "fake://x", "--conf-file", str(override))
    assert details["store"] == "logstores.memory.MemoryLogStore"
    details = run_json(
        capsys,
        "store",
        "fake://x",
        "--conf-file",
        str(override),
        "--conf",
        "spark.delta.logStore.fake.impl=hdfs",
    )
    assert details["store"] == "logstores.hdfs.HDFSLogStore"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["snapshot", "{empty}"], "{empty}"),
        (["snapshot", "{table}", "--version", "99"], "99"),
        (
            ["history", "{table}", "--conf", "no-equals-sign"],
            "--conf number 1 is not of the form KEY=VALUE",
        ),
        (["snapshot", "{table}", "--conf-file", "{empty}/missing.conf"], "missing.conf"),
        (
            [
                "store",
                "{table}",
                "--conf",
                "delta.logStore.class=local",
                "--conf",
                "delta.logStore.s3.impl=s3",
            ],
            "DELTA_INVALID_LOGSTORE_CONF",
        ),
        (["changes", "{table}", "--from", "5"], "5"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], basic_append: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    empty = tmp_path / "not-a-table"
    empty.mkdir()
    values = {"empty": str(empty), "table": str(basic_append)}
    code, out, err = run(capsys, *(part.format(**values) for part in argv))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("deltalog: error: ")
    assert message.format(**values) in err
    assert "Traceback" not in err


def test_debug_keeps_exit_code_2_and_adds_the_traceback(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-table"
    empty.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "replay", "snapshot", str(empty), "--debug"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("deltalog: error: TableNotFoundError: ") and str(empty) in last


def test_usage_errors_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "snapshot")
    assert code == 1
    assert "the following arguments are required: uri" in err
    code, _, err = run(capsys, "snapshot", "x", "--version", "-1")
    assert code == 1
    assert "argument --version: expected a whole number >= 0, got '-1'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history", "x", "--limit", "many"], "argument --limit: expected a whole number >= 1, got 'many'"),
        (
            ["snapshot", "x", "--timestamp", "yesterday"],
            "'yesterday' is not a time as milliseconds since the epoch",
        ),
        (["read", "x", "--limit", "0"], "expected a whole number >= 1, got '0'"),
    ],
)
def test_bad_values_are_usage_errors_without_internal_names(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    assert message in err and "_non_negative" not in err and "_positive" not in err
    assert len(err.strip().splitlines()) == 1


def test_version_and_timestamp_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("deltalog (delta-logstores) ")
    assert main(["snapshot", "--help"]) == 0
    assert "a time without a zone is UTC" in " ".join(capsys.readouterr().out.split())


def test_multi_line_errors_print_whole_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t"
    write_table(str(path), pa.table({"id": [1]}))
    write_table(str(path), pa.table({"id": [2]}))
    code, _, err = run(capsys, "changes", str(path), "--from", "0")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "as change data was not recorded for version [0]." in err
    assert err.strip().endswith("(delta.enableChangeDataFeed=true)`. (table file://" + str(path) + ")")


def test_wide_values_stay_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from replay.cli import output

    sink = io.StringIO()
    monkeypatch.setattr(
        output, "_console", lambda stderr=False: Console(file=sink, width=100, highlight=False)
    )
    output.emit_history(
        [{"version": 3, "timestamp": 0, "operation": "WRITE", "operationParameters": {"p": "x" * 300}}],
        as_json=False,
    )
    body = [line for line in sink.getvalue().splitlines() if "WRITE" in line]
    assert len(body) == 1 and len(body[0]) <= 100 and "…" in body[0]


def test_unreachable_endpoint_fails_fast_and_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code, _, err = run(
        capsys,
        "snapshot",
        "s3a://bucket/table",
        "--conf",
        "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9",
        "--conf",
        "spark.hadoop.fs.s3a.access.key=test",
        "--conf",
        "spark.hadoop.fs.s3a.secret.key=test",
    )
    assert code == 2
    assert "127.0.0.1:9" in err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - started < 30


def test_console_script_and_module_entry_points(basic_append: Path) -> None:
    for command in (["deltalog"], [sys.executable, "-m", "replay"]):
        result = subprocess.run(
            [*command, "snapshot", str(basic_append), "--json"], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["version"] == 1
    result = subprocess.run(
        ["deltalog", "snapshot", str(basic_append), "--version", "7"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_commands_on_a_table_in_the_s3_emulator(
    capsys: pytest.CaptureFixture[str], moto_server: MotoServer
) -> None:
    bucket = moto_server.create_bucket()
    conf = moto_server.s3a_conf()
    uri = f"s3a://{bucket}/people"
    write_table(
        uri,
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}),
        conf=conf,
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_table(uri, pa.table({"id": pa.array([4], pa.int64())}), conf=conf)
    flags = [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]
    summary = run_json(capsys, "snapshot", uri, *flags)
    assert (summary["version"], summary["num_files"]) == (1, 2)
    assert [entry["version"] for entry in run_json(capsys, "history", uri, *flags)] == [1, 0]
    code, out, _ = run(capsys, "changes", uri, "--from", "0", "--json", *flags)
    assert code == 0
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == [1, 2, 3, 4]
    assert run_json(capsys, "checkpoint", uri, *flags)["version"] == 1
    assert run_json(capsys, "store", uri, *flags)["store"] == "logstores.s3.S3LogStore"
    assert "test" not in json.dumps(run_json(capsys, "store", uri, *flags)["conf"]).replace('"***"', "")


@pytest.mark.spark
def test_demo_runs_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path, spark: object) -> None:
    directory = tmp_path / "demo-table"
    code, out, err = run(capsys, "demo", str(directory))
    assert code == 0, err
    assert "LogStore: logstores.local.LocalLogStore (default for scheme 'file')" in out
    assert "Committed versions 0-3 and a checkpoint at version 3" in out
    assert (directory / "_delta_log" / f"{3:020d}.checkpoint.parquet").is_file()
    assert "4 micro-batches delivered 18 change rows" in out
    assert "Spark committed versions 4-5 through the LogStore" in out
    cities = {f.partition_values["city"] for f in DeltaLog.for_table(str(directory)).snapshot(5).files()}
    assert cities == {"Lisbon", "Lima", "Porto"}
    # Running it again replaces the earlier demo table, but never other content.
    assert main(["demo", str(directory), "--no-spark"]) == 0
    other = tmp_path / "precious"
    other.mkdir()
    (other / "data.txt").write_text("keep me")
    code, _, err = run(capsys, "demo", str(other), "--no-spark")
    assert code == 2
    assert "is not an earlier demo table" in err
    assert (other / "data.txt").read_text() == "keep me"


def test_read_prints_filtered_rows(capsys: pytest.CaptureFixture[str], demo_table: Path) -> None:
    everything = DeltaLog.for_table(str(demo_table)).snapshot().to_arrow()
    rows = [
        json.loads(line)
        for line in run(capsys, "read", str(demo_table), "--filter", "city = 'Lima' or id < 2", "--json")[
            1
        ].splitlines()
    ]
    expected = everything.filter(
        (pa.compute.field("city") == "Lima") | (pa.compute.field("id") < 2)
    ).to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])
    code, out, _ = run(capsys, "read", str(demo_table), "--filter", "id in (0, 11)", "--columns", "id,city")
    assert (code == 0 and "│ id │ city" in out.replace("  ", " ")) or (
        "id" in out and "Lisbon" in out and "Lima" in out
    )
    limited = run(capsys, "read", str(demo_table), "--limit", "2", "--json")[1].splitlines()
    assert len(limited) == 2
    assert run(capsys, "read", str(demo_table), "--filter", "id > 999")[1].strip() == "no rows"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id <", "expected a column or a value, found the end"),
        ("id = 1 and", "expected a column or a value, found the end"),
        ("nope = 1", "filter column nope is not a column"),
        ("id ~ 3", "unexpected input at position 3"),
    ],
)
def test_read_filter_errors_are_usage_errors(
    capsys: pytest.CaptureFixture[str], demo_table: Path, text: str, message: str
) -> None:
    code, out, err = run(capsys, "read", str(demo_table), "--filter", text)
    assert (code, out) == (1, "")
    assert message in err and len(err.strip().splitlines()) == 1
