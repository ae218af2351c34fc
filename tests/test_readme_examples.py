"""The README's examples run as written: the store without fsspec passes the LogStore contract and
serves a table's log, and the "Testing your pipeline" tests pass with the pytest plugin.

Each code block preceded by ``<!-- readme-test: NAME -->`` becomes the file ``NAME`` of a small
project that pytest runs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import boto3  # noqa: F401
import pytest

import logstores.s3
import logstores.s3_dynamodb  # noqa: F401
from tests.paths import REPO_ROOT

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
    conf = {
        "spark.delta.logStore.sqlite.impl": "sqlite_log_store.SQLiteLogStore",
        "spark.delta.logStore.sqlite.database": str(tmp_path / "logs.db"),
    }
    log = DeltaLog.for_table("sqlite://warehouse/events", conf)
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
