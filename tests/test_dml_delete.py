"""DELETE from Python: rows and change feed as delta-rs makes them, deletion vectors, metadata-only
deletes, Delta's metrics and the no-op rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable as RustTable

from replay import AppendOnlyTableError, DeltaTable, write_table
from replay.protocol.sql import ExpressionError
from tests.dml_cases import (
    CDF,
    DELETE_CASES,
    DV_CDF,
    ROWS,
    files_under,
    last_commit_info,
    latest_version,
    our_changes,
    our_rows,
    rust_changes,
    rust_rows,
    twin_tables,
)

DATA = ROWS
CASES = DELETE_CASES


@pytest.mark.parametrize(("partition_by", "predicate"), CASES)
def test_rows_and_changes_are_delta_rs(
    tmp_path: Path, partition_by: list[str] | None, predicate: str | None
) -> None:
    ours, rust = twin_tables(tmp_path, DATA, partition_by=partition_by, max_rows_per_file=5)
    metrics = DeltaTable(ours).delete(predicate)
    rust_metrics = RustTable(rust).delete(predicate)
    assert our_rows(ours) == rust_rows(rust) == rust_rows(ours)
    assert latest_version(ours) == latest_version(rust)
    if latest_version(ours) == 1:
        assert our_changes(ours, 1) == rust_changes(rust, 1) == rust_changes(ours, 1)
    if "num_deleted_rows" in rust_metrics and "numDeletedRows" in metrics:
        assert metrics["numDeletedRows"] == rust_metrics["num_deleted_rows"]


@pytest.mark.parametrize(("partition_by", "predicate"), CASES)
def test_deletion_vectors_give_the_rows_and_changes_of_copy_on_write(
    tmp_path: Path, partition_by: list[str] | None, predicate: str | None
) -> None:
    cow, _ = twin_tables(tmp_path / "cow", DATA, partition_by=partition_by, max_rows_per_file=5)
    dv, _ = twin_tables(
        tmp_path / "dv", DATA, partition_by=partition_by, configuration=DV_CDF, max_rows_per_file=5
    )
    DeltaTable(cow).delete(predicate)
    metrics = DeltaTable(dv).delete(predicate)
    assert our_rows(dv) == our_rows(cow) == rust_rows(dv)
    assert latest_version(dv) == latest_version(cow)
    if latest_version(dv) == 1:
        assert our_changes(dv, 1) == our_changes(cow, 1) == rust_changes(dv, 1)
        assert metrics["numAddedChangeFiles"] == 0  # Delta: a DV DELETE writes no change data
        assert not (Path(dv) / "_change_data").exists()


def test_data_predicate_writes_deletion_vectors_and_no_new_files(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA, configuration=DV_CDF, max_rows_per_file=5)
    before = files_under(uri)
    metrics = DeltaTable(uri).delete("id IN (1, 2, 6)")
    assert metrics["numDeletionVectorsAdded"] == 2 and metrics["numAddedFiles"] == 0
    assert metrics["numDeletedRows"] == 3 and metrics["numRemovedFiles"] == 0
    new = files_under(uri) - before
    assert new and all(name.startswith("deletion_vector_") for name in new)
    assert [r["id"] for r in our_rows(uri, ["id"])] == [0, 3, 4, 5, 7, 8, 9, 10, 11, None]
    # a second delete in a file that has a DV updates it
    metrics = DeltaTable(uri).delete("id = 0")
    assert (metrics["numDeletionVectorsUpdated"], metrics["numDeletionVectorsAdded"]) == (1, 1)
    assert metrics["numDeletionVectorsRemoved"] == 1
    assert rust_rows(uri, ["id"]) == our_rows(uri, ["id"])


def test_metadata_only_delete_reads_no_data_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri, _ = twin_tables(tmp_path, DATA, partition_by=["p"], configuration=CDF)
    from replay.data.reader import TableReader

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a metadata-only delete read a data file")

    monkeypatch.setattr(TableReader, "read_file", refuse)
    metrics = DeltaTable(uri).delete("p = 1 OR p IS NULL")
    monkeypatch.undo()
    assert metrics["numRemovedFiles"] == 2 and metrics["numDeletedRows"] == 5
    assert not (Path(uri) / "_change_data").exists()
    assert sorted(r["p"] for r in our_rows(uri, ["p"])) == [0, 0, 0, 0, 2, 2, 2, 2]
    assert [c["_change_type"] for c in our_changes(uri, 1)] == ["delete"] * 5


def test_commit_info_has_delta_operation_parameters_and_metrics(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA, max_rows_per_file=5)
    metrics = DeltaTable(uri).delete("id > 6")
    info = last_commit_info(uri)
    assert info["operation"] == "DELETE"
    assert json.loads(info["operationParameters"]["predicate"]) == ["id > 6"]
    assert info["operationMetrics"] == {key: str(value) for key, value in metrics.items()}
    assert set(metrics) == {
        "numAddedFiles", "numRemovedFiles", "numDeletionVectorsAdded", "numDeletionVectorsRemoved",
        "numDeletionVectorsUpdated", "numAddedChangeFiles", "numDeletedRows", "numCopiedRows",
        "executionTimeMs", "scanTimeMs", "rewriteTimeMs", "numRemovedBytes", "numAddedBytes",
    }  # fmt: skip
    assert (metrics["numDeletedRows"], metrics["numCopiedRows"], metrics["numAddedChangeFiles"]) == (5, 3, 1)
    assert all(isinstance(value, int) for value in metrics.values())


def test_nothing_to_delete_commits_nothing(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA, max_rows_per_file=5)
    before = files_under(uri)
    table = DeltaTable(uri)
    metrics = table.delete("id > 100")
    assert metrics["numDeletedRows"] == 0 and metrics["numRemovedFiles"] == 0
    assert latest_version(uri) == 0 and table.version() == 0
    assert files_under(uri) == before


def test_delete_without_rows_to_count_leaves_out_row_metrics(tmp_path: Path) -> None:
    """Delta leaves out the row counts of a whole-file delete it cannot count (no statistics)."""
    uri = str(tmp_path / "t")
    write_table(uri, DATA, partition_by=["p"])
    log = Path(uri) / "_delta_log" / "00000000000000000000.json"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        if "add" in line:
            line["add"].pop("stats", None)
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    metrics = DeltaTable(uri).delete("p = 2")
    assert "numDeletedRows" not in metrics and "numCopiedRows" not in metrics
    assert metrics["numRemovedFiles"] == 1


def test_table_object_moves_to_the_committed_version(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA)
    table = DeltaTable(uri)
    table.delete("id = 1")
    assert table.version() == 1
    # the new version's files are replayed when first used, and then hold the change
    assert not table.snapshot.files_replayed
    assert 1 not in table.to_pyarrow_table()["id"].to_pylist()
    assert table.snapshot.files_replayed
    assert len(table.files()) == len(DeltaTable(uri).files())


def test_append_only_table_refuses_before_writing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration={"delta.appendOnly": "true", **CDF})
    before = files_under(uri)
    with pytest.raises(AppendOnlyTableError, match="DELTA_CANNOT_MODIFY_APPEND_ONLY"):
        DeltaTable(uri).delete("id = 1")
    assert files_under(uri) == before and latest_version(uri) == 0


def test_unknown_column_and_function_are_named_with_their_position(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA)
    with pytest.raises(ExpressionError, match="nope") as caught:
        DeltaTable(uri).delete("id > 1 AND nope = 2")
    assert caught.value.position == 11
    with pytest.raises(ExpressionError, match="frobnicate") as caught:
        DeltaTable(uri).delete("frobnicate(id) = 1")
    assert caught.value.position == 0
    assert latest_version(uri) == 0


def test_copy_on_write_over_files_that_have_deletion_vectors(tmp_path: Path) -> None:
    """A table whose DVs were turned off after some were written: DML rewrites those files (their
    deleted rows stay deleted) and counts the DVs it removes, as Delta does."""
    from dataclasses import replace

    from replay import DeltaLog

    uri, _ = twin_tables(tmp_path, DATA, configuration=DV_CDF, max_rows_per_file=5)
    DeltaTable(uri).delete("id IN (1, 6)")
    log = DeltaLog.for_table(uri)
    metadata = log.update().metadata
    configuration = {**metadata.configuration, "delta.enableDeletionVectors": "false"}
    log.commit([replace(metadata, configuration=configuration)], operation="SET TBLPROPERTIES")
    metrics = DeltaTable(uri).delete("id IN (2, 7, 11)")
    assert metrics["numDeletionVectorsRemoved"] == 2 and metrics["numDeletionVectorsAdded"] == 0
    assert metrics["numRemovedFiles"] == 3 and metrics["numDeletedRows"] == 3
    expected = [0, 3, 4, 5, 8, 9, 10, None]
    assert [r["id"] for r in our_rows(uri, ["id"])] == expected == [r["id"] for r in rust_rows(uri, ["id"])]
    assert sorted(c["id"] for c in our_changes(uri, 3) if c["_change_type"] == "delete") == [2, 7, 11]
