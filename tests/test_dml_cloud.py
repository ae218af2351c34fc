"""DELETE, UPDATE and MERGE on every object store (moto S3, fake-gcs-server, Azurite): the same rows
and change feed as on local disk, in copy-on-write, deletion-vector and column-mapped tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay import DeltaLog, DeltaTable, table_changes, write_table
from tests.cloud_servers import service_root, unique_name
from tests.dml_cases import CDF, DV_CDF, normalised

pytestmark = pytest.mark.cloud

DATA = pa.table(
    {
        "id": pa.array(range(30), pa.int64()),
        "v": pa.array([f"v{i}" for i in range(30)]),
        "p": pa.array([i % 3 for i in range(30)], pa.int32()),
    }
)
SOURCE = pa.table(
    {
        "id": pa.array([1, 2, 50], pa.int64()),
        "v": ["one", "two", "fifty"],
        "p": pa.array([1, 2, 2], pa.int32()),
    }
)


def _run(
    uri: str, conf: dict[str, str], configuration: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    write_table(uri, DATA, partition_by=["p"], conf=conf, configuration=configuration, max_rows_per_file=4)
    table = DeltaTable(uri, conf=conf)
    table.delete("id % 7 = 0")
    table.update({"v": "upper(v)"}, predicate="id > 20")
    (
        table.merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete("t.id = 29")
        .execute()
    )
    assert table.version() == 3
    rows = normalised(DeltaTable(uri, conf=conf).to_pyarrow_table())
    changes = normalised(table_changes(DeltaLog.for_table(uri, conf), starting_version=1))
    return rows, changes


MAPPED = {**DV_CDF, "delta.columnMapping.mode": "id"}
"""Deletion vectors and the change feed on a table with column mapping (physical names, random
prefix directories)."""


@pytest.mark.parametrize(
    "configuration", [CDF, DV_CDF, MAPPED], ids=["copy-on-write", "deletion-vectors", "column-mapping"]
)
@pytest.mark.parametrize("service", ["s3", "gcs", "azure"])
def test_row_level_changes_on_object_stores(
    request: pytest.FixtureRequest, tmp_path: Path, service: str, configuration: dict[str, str]
) -> None:
    root, _, conf_for = service_root(request, service)
    conf = conf_for()
    remote = _run(f"{root}/{unique_name('table')}", dict(conf), configuration)
    local = _run(str(tmp_path / "local"), {}, configuration)
    assert remote == local
    rows, changes = remote
    assert {r["id"] for r in rows} == ({*range(30), 50} - {0, 7, 14, 21, 28, 29})
    assert {c["_change_type"] for c in changes} == {"delete", "update_preimage", "update_postimage", "insert"}


@pytest.mark.parametrize("service", ["s3", "gcs", "azure"])
def test_updates_rewrite_set_columns_only_on_object_stores(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service: str
) -> None:
    # without the change feed an UPDATE splices the files' other columns in (replay.dml.column_update)
    import replay.dml.update as update_module

    spliced: list[bool] = []
    real = update_module.update_columns

    def counted(*args: Any, **kwargs: Any) -> Any:
        change = real(*args, **kwargs)
        spliced.append(change is not None)
        return change

    monkeypatch.setattr(update_module, "update_columns", counted)
    root, _, conf_for = service_root(request, service)
    conf = dict(conf_for())
    results = []
    for uri, settings in ((f"{root}/{unique_name('table')}", conf), (str(tmp_path / "local"), {})):
        write_table(uri, DATA, partition_by=["p"], conf=settings, max_rows_per_file=4)
        DeltaTable(uri, conf=settings).update({"v": "upper(v)", "id": "id * 10"}, predicate="id > 20")
        results.append(normalised(DeltaTable(uri, conf=settings).to_pyarrow_table()))
    assert results[0] == results[1]
    assert {r["id"] for r in results[0]} == {*range(21), *range(210, 300, 10)}
    assert spliced and all(spliced)
