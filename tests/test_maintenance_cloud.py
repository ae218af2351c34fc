"""VACUUM, RESTORE and ALTER on object stores (moto S3, fake-gcs-server, Azurite): the same files go,
batch deletes, Delta's logging rule per scheme, a restore and a property change on each store."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from logstores import open_filesystem
from replay import DeltaLog, DeltaTable, write_table
from replay.maintenance import restore as restore_module
from replay.maintenance.restore import RestoreError
from replay.maintenance.vacuum import vacuum
from tests.cloud_servers import CLOUD_STORE_FIXTURES
from tests.store_cases import StoreUnderTest

pytestmark = pytest.mark.cloud


@pytest.fixture(params=CLOUD_STORE_FIXTURES)
def cloud(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)


def test_vacuum_and_restore_on_object_stores(cloud: StoreUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = dict(cloud.store.conf)
    uri = cloud.root
    data = pa.table({"a": list(range(12)), "p": [i % 3 for i in range(12)]})
    write_table(uri, data, partition_by=["p"], conf=conf, max_rows_per_file=2)
    write_table(uri, data.slice(0, 3), mode="overwrite", conf=conf)
    fs, root = open_filesystem(uri, conf)
    fs.pipe_file(f"{root}/p=1/orphan.parquet", b"x")
    fs.pipe_file(f"{root}/_delta_log/_ignored", b"x")
    log = DeltaLog.for_table(uri, conf)
    removed = {f.path for f in log.snapshot(0).files()}
    later = int(time.time() * 1000) + 60_000  # every file is older than a zero retention by then
    dry = vacuum(log.io, log.update(), retention_hours=0, enforce_retention_duration=False, now_ms=later)
    assert set(dry.files) == {*removed, "p=1/orphan.parquet"}
    assert len(removed) == 6  # six files of two rows: one delete batch
    lite = vacuum(
        log.io, log.update(), retention_hours=0, enforce_retention_duration=False, now_ms=later, lite=True
    )
    assert set(lite.files) == removed  # the log's removed files only: the orphan waits for a full one
    result = vacuum(
        log.io, log.update(), retention_hours=0, dry_run=False, enforce_retention_duration=False, now_ms=later
    )
    assert sorted(result.files) == sorted(dry.files)
    assert result.metrics["numDeletedFiles"] == 7
    fs.invalidate_cache()
    assert not any(fs.exists(f"{root}/{path}") for path in dry.files)
    assert fs.exists(f"{root}/_delta_log/_ignored")
    logged = not uri.startswith(("s3://", "s3a://"))  # Delta does not log vacuums on S3
    history = [h["operation"] for h in DeltaLog.for_table(uri, conf).history()]
    assert history[:2] == (["VACUUM END", "VACUUM START"] if logged else ["WRITE", "WRITE"])
    table = DeltaTable(uri, conf=conf)
    assert sorted(table.to_pyarrow_table()["a"].to_pylist()) == [0, 1, 2]
    # the files of version 0 are gone: a restore needs ignore_missing_files, whether the check asks
    # for each file or lists their directories
    with pytest.raises(RestoreError, match="not all files from version 0"):
        table.restore(0)
    monkeypatch.setattr(restore_module, "LIST_DIRECTORY_FROM", 1)
    with pytest.raises(RestoreError, match="not all files from version 0") as caught:
        table.restore(0)
    assert all(path in str(caught.value) for path in removed)
    write_table(uri, pa.table({"a": [20], "p": [2]}), conf=conf)
    metrics = DeltaTable(uri, conf=conf).restore(1)
    assert metrics["numRemovedFiles"] == 1 and metrics["numRestoredFiles"] == 0
    table = DeltaTable(uri, conf=conf)
    table.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert table.protocol().min_writer_version == 4
    assert sorted(table.to_pyarrow_table()["a"].to_pylist()) == [0, 1, 2]
