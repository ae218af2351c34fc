"""Row ids survive rewrites: on a table with ``delta.enableRowTracking`` every row keeps its row id
through copy-on-write DELETE, UPDATE and MERGE, deletion vectors, OPTIMIZE and Z-order, as Delta's
protocol requires; an updated row gets the commit's version as its row commit version, a copied
or compacted row keeps its own, and an inserted row a fresh id.

The oracle (:func:`tests.dml_cases.row_lineage`) reads each file's hidden columns with pyarrow
itself and derives the rest from the log, so it does not share the code it checks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

from replay import DeltaTable, write_table
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.table_config import TableConfiguration
from tests.dml_cases import our_rows, row_lineage, rust_rows

TRACKED = {"delta.enableRowTracking": "true"}
MODES = {
    "copy-on-write": {},
    "deletion vectors": {"delta.enableDeletionVectors": "true"},
    "column mapping": {"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true"},
}


@pytest.mark.parametrize("mode", list(MODES))
def test_rows_keep_their_ids_through_every_rewrite(tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "t")
    first = pa.table({"id": pa.array(range(10), pa.int64()), "v": [f"v{i}" for i in range(10)]})
    write_table(uri, first, configuration={**TRACKED, **MODES[mode]})
    write_table(uri, pa.table({"id": pa.array(range(10, 15), pa.int64()), "v": ["w"] * 5}), mode="append")
    expected = {i: (i, 0 if i < 10 else 1) for i in range(15)}
    assert row_lineage(uri) == expected

    table = DeltaTable(uri)
    table.update({"v": "upper(v)"}, predicate="id IN (2, 11)")  # version 2
    expected.update({2: (2, 2), 11: (11, 2)})
    assert row_lineage(uri) == expected

    DeltaTable(uri).delete("id = 3")  # version 3: the file's other rows are copied or kept
    del expected[3]
    assert row_lineage(uri) == expected

    source = pa.table({"id": pa.array([4, 20, 21], pa.int64()), "v": ["m", "n", "o"]})
    merged = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    merged.when_matched_update_all().when_not_matched_insert_all().execute()  # version 4
    after = row_lineage(uri)
    expected[4] = (4, 4)
    fresh = {after[20], after[21]}
    assert {version for _, version in fresh} == {4}
    assert min(row_id for row_id, _ in fresh) >= 15  # after the high water mark before the merge
    assert {k: v for k, v in after.items() if k < 20} == expected
    expected = after

    DeltaTable(uri).optimize.compact()  # version 5: every row keeps its id and commit version
    assert len(DeltaTable(uri).snapshot.files()) == 1
    assert row_lineage(uri) == expected
    DeltaTable(uri).optimize.z_order(["v"])
    assert row_lineage(uri) == expected

    rows = our_rows(uri)
    assert rows == rust_rows(uri)
    assert sorted(r["id"] for r in rows) == sorted(expected)
    assert {r["v"] for r in rows if r["id"] in (2, 11)} == {"V2", "W"}


def test_change_data_and_new_rows_carry_no_hidden_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    settings = {**TRACKED, "delta.enableChangeDataFeed": "true"}
    write_table(
        uri, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}), configuration=settings
    )
    DeltaTable(uri).update({"v": "'z'"}, predicate="id = 2")
    changes = DeltaTable(uri).load_cdf(starting_version=1)
    assert changes.column_names == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert sorted(changes.column("_change_type").to_pylist()) == ["update_postimage", "update_preimage"]
    assert DeltaTable(uri).schema().to_arrow().names == ["id", "v"]
    assert row_lineage(uri) == {1: (0, 0), 2: (1, 1), 3: (2, 0)}


def test_a_table_without_the_column_names_is_refused_before_writing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array([1, 2], pa.int64())}), configuration=TRACKED)
    table = DeltaTable(uri)
    configuration = dict(table.metadata().configuration)
    del configuration["delta.rowTracking.materializedRowIdColumnName"]
    metadata = dataclasses.replace(table.metadata(), configuration=configuration)
    config = TableConfiguration(table.protocol(), metadata, uri)
    with pytest.raises(UnsupportedTableFeatureError, match="materializedRowIdColumnName"):
        _ = config.materialized_row_tracking_columns


def test_turning_row_tracking_on_backfills_the_files_there_already(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(
        uri,
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_table(uri, pa.table({"id": pa.array([4, 5], pa.int64())}), mode="append")
    DeltaTable(uri).alter.set_table_properties({"delta.enableRowTracking": "true"})
    table = DeltaTable(uri)
    operations = [entry["operation"] for entry in reversed(table.history())]
    assert operations[2:] == ["UPGRADE PROTOCOL", "ROW TRACKING BACKFILL", "SET TBLPROPERTIES"]
    assert table.history(2)[1]["operationParameters"] == {"batchId": "0"}
    assert {"domainMetadata", "rowTracking"} <= set(table.protocol().writer_features or [])
    files = sorted(table.snapshot.files(), key=lambda add: add.base_row_id or 0)
    spans = [
        (add.base_row_id, add.num_records, add.default_row_commit_version, add.data_change) for add in files
    ]
    assert spans in ([(0, 3, 3, False), (3, 2, 3, False)], [(0, 2, 3, False), (2, 3, 3, False)])
    backfilled = row_lineage(uri)
    assert sorted(backfilled.values()) == [(i, 3) for i in range(5)]
    assert table.load_cdf(starting_version=2).num_rows == 0  # the backfill changed no row
    DeltaTable(uri).update({"id": "id * 10"}, predicate="id = 4")  # and now rows keep their ids
    assert row_lineage(uri)[40] == (backfilled[4][0], 5)
    assert our_rows(uri) == rust_rows(uri)
    DeltaTable(uri).alter.set_table_properties({"delta.enableRowTracking": "true"})  # nothing to backfill
    assert DeltaTable(uri).history(1)[0]["operation"] == "SET TBLPROPERTIES"
