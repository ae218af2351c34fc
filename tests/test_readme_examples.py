"""The README's examples run as written.

Each code block preceded by ``<!-- readme-test: NAME -->`` becomes the file ``NAME`` of a small
project that pytest runs (the store without fsspec, the "Testing your pipeline" tests). Every other
example runs here too, on the emulators and the test session's Spark, with only what the machine
needs substituted (the bucket, the endpoint, local paths, stand-ins for the example's own
modules) and the variables a fragment uses defined first; the few that cannot run here (installs,
packaging metadata) are listed in :data:`EXEMPT` with the reason and the test that covers them.
:func:`test_every_readme_example_is_run_or_exempt` keeps that true as the README changes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # noqa: F401
import pyarrow as pa
import pytest

import logstores.s3
import logstores.s3_dynamodb  # noqa: F401
from tests.cloud_servers import MotoServer
from tests.paths import REPO_ROOT
from tests.spark_settings import session_settings

# pytester's in-process runs drop the modules first imported inside them when they end; those the
# S3 examples import are imported here, so every run uses the same classes (botocore's errors).

MARKED_BLOCK = re.compile(r"<!-- readme-test: (\S+) -->\n```python\n(.*?)```", re.DOTALL)


def readme_files() -> dict[str, str]:
    files: dict[str, str] = {}
    for name, code in MARKED_BLOCK.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8")):
        files[name] = files.get(name, "") + code
    return files


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project holding every marked README block as a file."""
    files = readme_files()
    assert {
        "sqlite_log_store.py",
        "test_sqlite_log_store.py",
        "test_readme_s3.py",
        "test_readme_spark.py",
    } <= set(files)
    for name, code in files.items():
        (pytester.path / name).write_text(code, encoding="utf-8")
    return pytester


def test_the_store_without_fsspec_passes_the_contract(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    result = project.runpytest_subprocess("test_sqlite_log_store.py", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=20)


def test_the_store_without_fsspec_serves_a_table_log(project: pytest.Pytester, tmp_path: Path) -> None:
    from replay import AddFile, DeltaLog, Metadata, Protocol

    project.syspathinsert()
    namespace = run_example(
        SQLITE_CONF, {"/var/lib/delta/logs.db": str(tmp_path / "logs.db")}, {"DeltaLog": DeltaLog}
    )
    conf, log = namespace["conf"], namespace["log"]
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
    log.commit([Protocol(1, 2), Metadata(id="t", schema_string=schema, configuration={})], read_version=-1)
    log.commit([AddFile(path="part-0.parquet", size=10, modification_time=1, data_change=True)])
    log.checkpoint()  # Parquet through write_bytes
    fresh = DeltaLog.for_table("sqlite://warehouse/events", conf)
    assert type(fresh.store.get_delegate("sqlite://warehouse/events")).__name__ == "SQLiteLogStore"
    assert fresh.snapshot().version == 1
    assert [add.path for add in fresh.snapshot().files()] == ["part-0.parquet"]
    sys.modules.pop("sqlite_log_store", None)


@pytest.mark.cloud
def test_the_mocked_s3_example(project: pytest.Pytester) -> None:
    result = project.runpytest_inprocess(
        "test_readme_s3.py", "-p", "logstores.testing", "-p", "replay.testing", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


@pytest.mark.spark
@pytest.mark.cloud
def test_the_spark_example(project: pytest.Pytester, spark: Any) -> None:
    """Runs in this process, so the example's ``getOrCreate()`` reuses the test session's Spark; the
    settings it points at its own moto server are put back afterwards."""
    keys = [key for key in readme_s3a_keys() if key.startswith("spark.")]
    before = {key: spark.conf.get(key, None) for key in keys}
    try:
        result = project.runpytest_inprocess(
            "test_readme_spark.py",
            "-p",
            "logstores.testing",
            "-p",
            "replay.testing",
            "-p",
            "no:cacheprovider",
        )
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    result.assert_outcomes(passed=1)


def readme_s3a_keys() -> list[str]:
    from logstores.testing.servers import MotoServer

    return list(MotoServer("http://unused").s3a_conf())


def test_no_readme_block_is_left_untested() -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    marked = len(MARKED_BLOCK.findall(text))
    assert marked == text.count("<!-- readme-test:"), "a readme-test marker must precede a ```python block"


# -- every example: run here or exempt -------------------------------------------------------------
FENCE = re.compile(r"^```(\w*)$")
HEADING = re.compile(r"^#{2,4} (.+)$")
MARKER = re.compile(r"^<!-- readme-test: (\S+) -->$")


@dataclass(frozen=True)
class Example:
    """A fenced block of the README: its language, code, first line number and section."""

    language: str
    code: str
    line: int
    section: str
    marked: bool

    @property
    def key(self) -> tuple[str, str]:
        """(section, first line): how the lists below name an example."""
        return self.section, self.code.splitlines()[0]


def readme_examples() -> list[Example]:
    """Every fenced block of the README (headings inside blocks are not headings)."""
    examples: list[Example] = []
    section, marked, fence, body, start = "", False, None, [], 0
    for number, line in enumerate((REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        if fence is None:
            if (match := FENCE.match(line)) is not None:
                fence, body, start = match.group(1), [], number
            elif (heading := HEADING.match(line)) is not None:
                section = heading.group(1)
            if line.strip():
                marked = MARKER.match(line) is not None or (marked and fence is not None)
        elif line == "```":
            examples.append(Example(fence, "\n".join(body) + "\n", start, section, marked))
            fence, marked = None, False
        else:
            body.append(line)
    return examples


CREATE_LOG_STORE = ("Configuring stores through Spark settings", "from logstores import create_log_store")
SESSION_STORE = ("Configuring stores through Spark settings", "spark = (SparkSession.builder")
LOCK_SERVICE_STORE = ("Writing your own LogStore", "from logstores import FileSystemLogStore")
FSSPEC_SCHEME = ("Schemes fsspec does not know", "import fsspec")
SQLITE_CONF = (
    "A store without fsspec",
    'conf = {"spark.delta.logStore.sqlite.impl": "sqlite_log_store.SQLiteLogStore",',
)
READ_PYTHON = ("From Python", "import pyarrow.compute as pc")
READ_SPARK = ("From PySpark", "from replay.spark import register")
TABLE_CHANGES = ("From PySpark", "from replay.cdc import table_changes")
WRITE_SPARK = ("Writing from Spark", "from replay.spark import register")
WRITE_PYTHON = ("Writing from Python", "from replay import DeltaLog, delete_files, write_table")
TRANSACTION = ("Transactions and concurrent writers", "from replay import DeltaLog, AddFile")
CHANGING_ROWS = ("Changing rows", "from replay import DeltaTable")
FROM_DELTA_RS = (
    "Coming from delta-rs",
    "from replay import DeltaTable, write_deltalake   # was: from deltalake import ...",
)
CDC_TO_MERGE = ("Changing rows", "import pyarrow as pa")
COMPACTION = ("Compaction and Z-order", "from replay import DeltaTable")
VACUUM = ("Vacuum", "from replay import DeltaTable")
RESTORE = (
    "Restore",
    "table.restore(5)                                  # back to version 5, in one new commit",
)
ALTER = (
    "Changing properties and schema",
    'table.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})   # protocol -> (1, 4)',
)
ICEBERG_COMPAT = ("Changing properties and schema", 'write_table(uri, data, partition_by=["day"],')
SPARK_DML = ("Changing rows from Spark", "# from delta.tables import DeltaTable")
SPARK_SQL = ("Delta's SQL statements", "from replay.spark import register_table, sql")
RUN_HERE = {
    CREATE_LOG_STORE: "test_the_store_configuration_examples",
    FSSPEC_SCHEME: "test_the_store_configuration_examples",
    LOCK_SERVICE_STORE: "test_the_lock_service_store_example",
    SQLITE_CONF: "test_the_store_without_fsspec_serves_a_table_log",
    READ_PYTHON: "test_the_python_examples_on_s3",
    TABLE_CHANGES: "test_the_python_examples_on_s3",
    WRITE_PYTHON: "test_the_python_examples_on_s3",
    TRANSACTION: "test_the_python_examples_on_s3",
    CHANGING_ROWS: "test_the_python_examples_on_s3",
    FROM_DELTA_RS: "test_the_delta_rs_port_example_runs_as_written",
    CDC_TO_MERGE: "test_the_cdc_to_merge_pipeline_runs_as_written",
    COMPACTION: "test_the_maintenance_examples_on_s3",
    VACUUM: "test_the_maintenance_examples_on_s3",
    RESTORE: "test_the_maintenance_examples_on_s3",
    ALTER: "test_the_maintenance_examples_on_s3",
    READ_SPARK: "test_the_spark_examples_on_s3",
    WRITE_SPARK: "test_the_spark_examples_on_s3",
    SESSION_STORE: "test_the_spark_examples_on_s3",
    ICEBERG_COMPAT: "test_the_iceberg_compat_example_runs_as_written",
    SPARK_DML: "test_the_spark_dml_example_runs_as_written",
    SPARK_SQL: "test_the_spark_sql_example_runs_as_written",
}
"""The examples run by a test of this module (besides the marked ones), and which test runs each."""

EXEMPT = {
    ("Quick start", "python -m pip install -e '.[all]' && python -m replay demo"): (
        "installs the package from the network into the environment; the demo it runs is "
        "tests/test_cli.py::test_demo_runs_end_to_end"
    ),
    (
        "Quick start",
        "python -m pip install -e '.[all,test]' && npm install --no-save --prefix .tools azurite@3.35.0 "
        "&& python -m pytest",
    ): (
        "installs packages, then runs this whole suite; tests/test_readme_reference.py checks that CI runs it"
    ),
    ("Trying it on a local S3", "python -m pip install -e '.[all,testing]'"): (
        "installs packages, then runs an emulator in the foreground until Ctrl-C; "
        "tests/test_emulator_cli.py starts each emulator and runs the snippets it prints"
    ),
    ("Writing your own LogStore", "[project.entry-points.delta_logstores]"): (
        "packaging metadata of the reader's own distribution; "
        "tests/test_provider.py::test_entry_point_plugins installs a store under this entry-point group"
    ),
    ("Schemes fsspec does not know", '[project.entry-points."fsspec.specs"]'): (
        "packaging metadata of the reader's own distribution; tests/test_provider.py::"
        "test_a_filesystem_from_the_fsspec_specs_entry_point_serves_the_scheme installs one"
    ),
    ("Testing your pipeline", "python -m pip install -e 'path/to/delta-logstores[testing]'"): (
        "installs into the reader's environment from their checkout; "
        "tests/test_testing_plugin.py::test_the_plugin_works_from_a_fresh_virtualenv does it in a new one"
    ),
}
"""Examples that cannot run here, with the reason and the test that covers what they do."""


def test_every_readme_example_is_run_or_exempt() -> None:
    """Every block in a language (Python, shell, TOML) is marked, run by a test here, or exempt; a
    block without a language shows output or a synopsis. Each listed example exists, once."""
    examples = [example for example in readme_examples() if example.language]
    keys = [example.key for example in examples]
    for key in (*RUN_HERE, *EXEMPT):
        assert keys.count(key) == 1, f"the README has {keys.count(key)} examples {key}"
    for test_name in RUN_HERE.values():
        assert callable(globals().get(test_name)), test_name
    for example in examples:
        covered = example.marked or example.key in RUN_HERE or example.key in EXEMPT
        assert covered, f"README line {example.line} ({example.key}) is neither run nor exempt"
    assert not set(RUN_HERE) & set(EXEMPT)


def example_code(key: tuple[str, str], substitutions: dict[str, str] | None = None) -> str:
    """The code of the example ``key``, each substitution checked to apply."""
    (code,) = [example.code for example in readme_examples() if example.key == key]
    for old, new in (substitutions or {}).items():
        assert old in code, f"{old!r} is not in the example {key}"
        code = code.replace(old, new)
    return code


def run_example(
    key: tuple[str, str], substitutions: dict[str, str] | None = None, namespace: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the example in this process, with ``namespace`` (the variables a fragment uses) defined."""
    scope = {"__name__": "readme_example", **(namespace or {})}
    code = example_code(key, substitutions)
    exec(compile(code, f"README.md: {key[0]}: {key[1]}", "exec"), scope)
    return scope


ACME_STORAGE = """
from fsspec.implementations.memory import MemoryFileSystem
from logstores import MemoryLogStore


class OssLogStore(MemoryLogStore):
    \"\"\"Stands in for the README's store of another scheme.\"\"\"


class AcmeFileSystem(MemoryFileSystem):
    protocol = "acme"
"""


def test_the_store_configuration_examples(tmp_path: Path) -> None:
    """Run in new interpreters (they register a scheme process-wide), with ``acme_storage`` (the
    examples' own package) standing in."""
    (tmp_path / "acme_storage.py").write_text(ACME_STORAGE, encoding="utf-8")
    checks = {
        CREATE_LOG_STORE: [
            'print(type(store.get_delegate("s3a://b/t/_delta_log/00000000000000000000.json")).__name__)',
            'print(type(store.get_delegate("s3://b/t/_delta_log/00000000000000000000.json")).__name__)',
            'print(type(store.get_delegate("oss://b/t/_delta_log/00000000000000000000.json")).__name__)',
        ],
        FSSPEC_SCHEME: ['print(type(fsspec.filesystem("acme")).__name__)'],
    }
    printed = {}
    for key, lines in checks.items():
        program = example_code(key) + "\n".join(lines) + "\n"
        environment = {"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        printed[key] = done.stdout.split()
    assert printed[CREATE_LOG_STORE] == ["S3DynamoDBLogStore", "S3SingleDriverLogStore", "OssLogStore"]
    assert printed[FSSPEC_SCHEME] == ["AcmeFileSystem"]


class LockService:
    """Stands in for the example's lock service: one process-wide lock per path."""

    def __init__(self) -> None:
        import threading

        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def lock(self, path: str) -> Iterator[None]:
        import threading

        with self._guard:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:
            yield


def test_the_lock_service_store_example(tmp_path: Path) -> None:
    from replay import DeltaLog, write_table

    namespace = run_example(LOCK_SERVICE_STORE, namespace={"my_lock_service": LockService()})
    store_class = namespace["LockServiceLogStore"]
    store_class.__module__ = __name__  # the store is created by class name below
    globals()["LockServiceLogStore"] = store_class
    try:
        conf = {"spark.delta.logStore.file.impl": f"{__name__}.LockServiceLogStore"}
        table = str(tmp_path / "t")
        write_table(table, pa.table({"id": [1]}), conf=conf)
        write_table(table, pa.table({"id": [2]}), conf=conf)
        log = DeltaLog.for_table(table, conf)
        assert type(log.store.get_delegate(table)).__name__ == "LockServiceLogStore"
        assert sorted(log.update().to_arrow().column("id").to_pylist()) == [1, 2]
        store = store_class({})
        commit = f"{table}/_delta_log/{1:020d}.json"
        with pytest.raises(FileExistsError):
            store.write(commit, ["{}"])
    finally:
        del globals()["LockServiceLogStore"]


# -- the reading and writing examples, on the S3 emulator ----------------------------------------------
@dataclass
class ExampleTables:
    """The tables the examples read: ``s3a://<bucket>/table`` (11 versions, change data feed on)."""

    bucket: str
    conf: dict[str, str]

    def substitutions(self) -> dict[str, str]:
        return {"s3a://bucket/": f"s3a://{self.bucket}/"}


@pytest.fixture(scope="module")
def example_tables(moto_server: MotoServer) -> ExampleTables:
    from replay import write_table

    bucket, conf = moto_server.create_bucket(), moto_server.s3a_conf()
    uri = f"s3a://{bucket}/table"
    properties = {"delta.enableChangeDataFeed": "true"}
    for version in range(11):
        rows = pa.table(
            {
                "part": pa.array([version % 4] * 3, pa.int64()),
                "id": pa.array(range(version * 3, version * 3 + 3), pa.int64()),
                "name": [f"n{version}"] * 3,
            }
        )
        write_table(
            uri, rows, partition_by=["part"], conf=conf, configuration=properties if version == 0 else None
        )
    return ExampleTables(bucket, conf)


@pytest.mark.cloud
@pytest.mark.cloud
def test_the_delta_rs_port_example_runs_as_written(moto_server: MotoServer) -> None:
    from deltalake import DeltaTable as RustTable

    bucket, today = moto_server.create_bucket(), dt.datetime.now(dt.UTC).date()
    days = [today - dt.timedelta(days=age) for age in (200, 100, 10, 0)]
    rows = pa.table({"day": pa.array(days, pa.date32()), "id": pa.array(range(4), pa.int64())})
    more = pa.table({"day": pa.array([today], pa.date32()), "id": pa.array([4], pa.int64()), "note": ["x"]})
    namespace = run_example(
        FROM_DELTA_RS,
        {"http://127.0.0.1:9000": moto_server.endpoint, '"..."': '"test"', "s3://bucket/": f"s3://{bucket}/"},
        {"rows": rows, "more": more},
    )
    uri = f"s3://{bucket}/orders"
    theirs = RustTable(uri, storage_options=namespace["options"]).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == [2, 3, 4]  # 200 and 100 days old: deleted
    assert "note" in theirs.schema.names  # schema_mode="merge" added it


def test_the_python_examples_on_s3(example_tables: ExampleTables) -> None:
    from replay import DeltaLog

    conf, bucket = example_tables.conf, example_tables.bucket
    read = run_example(READ_PYTHON, example_tables.substitutions(), {"conf": conf})
    assert read["snapshot"].version == 10
    assert read["scan"].files().num_rows > 0

    log = DeltaLog.for_table(f"s3a://{bucket}/table", conf)
    changes = run_example(TABLE_CHANGES, namespace={"log": log})
    assert "_change_type" in changes["table_changes"](log, starting_version=5, ending_version=10).column_names

    def day_rows(day: str, ids: list[int], **extra: list[Any]) -> pa.Table:
        return pa.table({"day": [day] * len(ids), "id": pa.array(ids, pa.int64()), **extra})

    def first_file(table: str, prefix: str) -> str:
        """Stands in for the example's elided file name: one file of that partition."""
        return next(
            add.path
            for add in DeltaLog.for_table(table, conf).update().files()
            if add.path.startswith(prefix)
        )

    writing = {
        "conf": conf,
        "arrow_table": pa.concat_tables([day_rows("2024-06-01", [1, 2]), day_rows("2024-06-02", [3])]),
        "fixes": day_rows("2024-06-01", [10]),
        "more": day_rows("2024-06-02", [4], note=["new column"]),
        "batch": day_rows("2024-06-03", [5]),
    }
    table = f"s3://{bucket}/t"
    elided = '"day=2024-06-01/part-00000-....snappy.parquet"'
    run_example(
        WRITE_PYTHON,
        {"s3://bucket/": f"s3://{bucket}/", elided: f"first_file({table!r}, 'day=2024-06-01/')"},
        {**writing, "first_file": first_file},
    )
    snapshot = DeltaLog.for_table(table, conf).update()
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [3, 4, 5]  # the fixed day deleted
    assert snapshot.set_transactions == {"nightly": 42}

    committed = run_example(TRANSACTION, {"s3://bucket/": f"s3://{bucket}/"}, {"conf": conf})
    assert committed["version"] == snapshot.version + 1
    assert "part-0.parquet" in {add.path for add in DeltaLog.for_table(table, conf).update().files()}

    rows = f"s3://{bucket}/rows"
    from replay import write_table

    write_table(
        rows,
        pa.table(
            {
                "id": pa.array([7, 8, 9, 10], pa.int64()),
                "day": ["2023-12-31", "2024-06-01", "2024-06-01", "2024-06-02"],
                "status": ["new"] * 4,
                "n": pa.array([1, 1, 1, 1], pa.int64()),
            }
        ),
        conf=conf,
    )
    updates = pa.table(
        {
            "id": pa.array([8, 11], pa.int64()),
            "day": ["2024-06-01", "2024-06-03"],
            "status": ["merged"] * 2,
            "n": pa.array([5, 6], pa.int64()),
        }
    )
    run_example(CHANGING_ROWS, {"s3://bucket/t": rows}, {"conf": conf, "updates": updates})
    after = sorted(DeltaLog.for_table(rows, conf).update().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["status"]) for r in after] == [(8, "merged"), (9, "new"), (10, "new"), (11, "merged")]


@pytest.mark.cloud
def test_the_maintenance_examples_on_s3(example_tables: ExampleTables) -> None:
    from replay import DeltaLog, write_table

    conf, bucket = example_tables.conf, example_tables.bucket
    events = f"s3://{bucket}/compacted-events"
    for index in range(4):
        rows = pa.table(
            {
                "day": ["2024-06-01", "2024-06-02"],
                "user_id": pa.array([index, index + 10], pa.int64()),
                "ts": pa.array([index, index], pa.int64()),
            }
        )
        write_table(events, rows, partition_by=["day"], conf=conf)
    run_example(COMPACTION, {"s3://bucket/t": events}, {"conf": conf})
    compacted = DeltaLog.for_table(events, conf).update()
    assert compacted.num_files == 2 and compacted.to_arrow().num_rows == 8  # one file per day
    uri = f"s3://{bucket}/maintained"
    for version in range(7):
        rows = pa.table(
            {"id": pa.array([version], pa.int64()), "amount": pa.array([version + 1], pa.int64())}
        )
        write_table(
            uri,
            rows,
            mode="overwrite" if version % 2 else "append",
            conf=conf,
            configuration={"owner": "etl"} if version == 0 else None,
        )
    scope = run_example(VACUUM, {"s3://bucket/t": uri}, {"conf": conf})
    table = scope["table"]
    moment = DeltaLog.for_table(uri, conf).commit_records()[5].timestamp
    at = f"{dt.datetime.fromtimestamp(moment / 1000, dt.UTC):%Y-%m-%d %H:%M:%S.%f}"
    run_example(RESTORE, {"2024-06-01 12:00:00": at}, {"table": table})
    run_example(ALTER, namespace={"table": table, "pa": pa})
    snapshot = DeltaLog.for_table(uri, conf).update()
    assert snapshot.config.change_data_feed_enabled and "owner" not in snapshot.metadata.configuration
    assert snapshot.metadata.column_mapping_mode == "name"
    assert "note" not in snapshot.schema.field_names and "remark" not in snapshot.schema.field_names
    changes = [entry["operation"] for entry in DeltaLog.for_table(uri, conf).history(4)]
    assert changes == ["CLUSTER BY", "DROP COLUMNS", "RENAME COLUMN", "SET TBLPROPERTIES"]
    assert "clustering" in (snapshot.protocol.writer_features or [])


def test_the_cdc_to_merge_pipeline_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_example(CDC_TO_MERGE)
    assert (tmp_path / "orders_copy" / "_delta_log" / "00000000000000000001.json").exists()


@pytest.mark.spark
@pytest.mark.cloud
def test_the_spark_examples_on_s3(
    spark: Any, example_tables: ExampleTables, moto_server: MotoServer, tmp_path: Path
) -> None:
    from pyspark.sql import SparkSession

    from logstores import create_log_store
    from replay import DeltaLog

    conf, bucket = example_tables.conf, example_tables.bucket
    with session_settings(spark, conf):
        read = run_example(READ_SPARK, example_tables.substitutions(), {"spark": spark})
        assert read["df"].count() == 12  # version 3: four commits of three rows
        assert read["df"].where("part = 3 AND id > 10").count() == 1  # id 11, written at version 3
        assert {row["_change_type"] for row in read["changes"].collect()} == {"insert"}
        assert read["stream"].isStreaming

        schema = "country string, day string, n long"
        events_in = tmp_path / "events-in"
        events_in.mkdir()
        (events_in / "0.json").write_text(json.dumps({"country": "se", "day": "2024-06-03", "n": 7}) + "\n")
        frames = {
            "spark": spark,
            "df": spark.createDataFrame([("no", "2024-06-01", 1), ("se", "2024-06-02", 2)], schema),
            "fixes": spark.createDataFrame([("no", "2024-06-01", 10)], schema),
            "events": spark.readStream.schema(schema).json(str(events_in)),
        }
        checkpoints = tmp_path / "checkpoints"
        written = run_example(
            WRITE_SPARK, {**example_tables.substitutions(), "/data/checkpoints": str(checkpoints)}, frames
        )
        query = written["query"]
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        events = DeltaLog.for_table(f"s3a://{bucket}/events", conf).update()
        assert sorted(events.to_arrow().column("n").to_pylist()) == [2, 7, 10]
        assert events.partition_columns == ["country", "day"]
        assert (checkpoints / "events" / "metadata").is_file()  # Spark's checkpoint, on local disk

        session_keys = ("spark.delta.logStore.s3a.impl", "spark.hadoop.fs.s3a.endpoint")
        with session_settings(spark, {}, also_restore=session_keys):  # the example sets them on the session
            configured = run_example(
                SESSION_STORE,
                {"http://127.0.0.1:9000": moto_server.endpoint},
                {"SparkSession": SparkSession, "create_log_store": create_log_store},
            )
            assert configured["spark"] is spark
            delegate = configured["store"].get_delegate(f"s3a://{bucket}/table/_delta_log/0.json")
            assert type(delegate).__name__ == "S3DynamoDBLogStore"


@pytest.mark.spark
def test_the_spark_dml_example_runs_as_written(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    from pyspark.sql.functions import col

    from replay import DeltaTable, write_table

    uri = str(tmp_path / "events")
    write_table(
        uri,
        pa.table(
            {
                "id": pa.array([1, 7, 9], pa.int64()),
                "value": ["a", "b", "c"],
                "n": pa.array([0, 0, 0], pa.int64()),
                "day": ["2023-12-31", "2024-02-01", "2024-03-01"],
                "status": ["new", "new", "new"],
            }
        ),
    )
    updates = spark.createDataFrame(
        [(7, "B", 0, "2024-02-01", "new"), (8, "h", 0, "2024-04-01", "new")],
        "id long, value string, n long, day string, status string",
    )
    run_example(SPARK_DML, {"s3a://bucket/events": uri}, {"spark": spark, "updates": updates, "col": col})
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda row: row["id"])
    assert [(r["id"], r["value"], r["n"], r["status"]) for r in rows] == [
        (7, "B", 1, "shipped"),
        (8, "h", 0, "new"),
        (9, "c", 0, "new"),
    ]
    assert DeltaTable(uri).history(1)[0]["operation"] == "UPDATE"


@pytest.mark.spark
def test_the_spark_sql_example_runs_as_written(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    from replay import DeltaTable, write_table

    uri = str(tmp_path / "events")
    table = pa.table(
        {
            "id": pa.array([1, 7, 9], pa.int64()),
            "day": ["2023-12-31", "2024-02-01", "2024-03-01"],
            "status": ["new", "new", "new"],
        }
    )
    write_table(uri, table)
    spark.createDataFrame(
        [(9, "2024-03-02", "late"), (10, "2024-04-01", "new")], "id long, day string, status string"
    ).createOrReplaceTempView("updates")
    run_example(SPARK_SQL, {"s3a://bucket/events": uri}, {"spark": spark})
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda row: row["id"])
    assert [(r["id"], r["day"], r["status"]) for r in rows] == [
        (7, "2024-02-01", "shipped"),
        (9, "2024-03-02", "late"),
        (10, "2024-04-01", "new"),
    ]
    assert DeltaTable(uri).history(1)[0]["operation"] == "MERGE"


def test_the_iceberg_compat_example_runs_as_written(tmp_path: Path) -> None:
    import pyarrow as pa

    from replay import DeltaTable, write_table

    uri = str(tmp_path / "t")
    data = pa.table({"day": ["2024-06-01", "2024-06-02"], "tags": [[1], [2, 3]]})
    run_example(ICEBERG_COMPAT, namespace={"uri": uri, "data": data, "write_table": write_table})
    metadata = DeltaTable(uri).snapshot.metadata
    assert metadata.configuration["delta.columnMapping.mode"] == "name"
    assert "icebergCompatV2" in (DeltaTable(uri).snapshot.protocol.writer_features or ())
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 2
