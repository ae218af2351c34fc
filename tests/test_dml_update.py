"""UPDATE from Python: rows and change feed as delta-rs makes them, deletion vectors, partition
columns that move rows, literal values, Delta's metrics and errors."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable

from replay import AppendOnlyTableError, DeltaTable, write_table
from replay.dml.errors import InvalidDmlArgumentError
from replay.protocol.sql import ExpressionError, ExpressionEvaluationError
from replay.txn.constraint_checks import InvariantViolationError
from tests.dml_cases import (
    CDF,
    DV_CDF,
    ROWS,
    UPDATE_CASES,
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
CASES = UPDATE_CASES


@pytest.mark.parametrize(("partition_by", "updates", "predicate"), CASES)
def test_rows_and_changes_are_delta_rs(
    tmp_path: Path, partition_by: list[str] | None, updates: dict[str, str], predicate: str | None
) -> None:
    ours, rust = twin_tables(tmp_path, DATA, partition_by=partition_by, max_rows_per_file=5)
    metrics = DeltaTable(ours).update(updates, predicate=predicate)
    rust_metrics = RustTable(rust).update(updates, predicate=predicate)
    assert our_rows(ours) == rust_rows(rust) == rust_rows(ours)
    assert latest_version(ours) == latest_version(rust)
    assert metrics["numUpdatedRows"] == rust_metrics["num_updated_rows"]
    if latest_version(ours) == 1:
        assert rust_changes(ours, 1) == our_changes(ours, 1)
        # delta-rs leaves out the images of rows whose values did not change; Delta writes them
        assert changed_images(our_changes(ours, 1)) == rust_changes(rust, 1)


def changed_images(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The change rows without the pre-/post-image pairs of rows an update left as they were."""

    def data(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((k, v) for k, v in sorted(row.items()) if k != "_change_type")

    pre = [data(r) for r in changes if r["_change_type"] == "update_preimage"]
    post = [data(r) for r in changes if r["_change_type"] == "update_postimage"]
    same = set(pre) & set(post)
    return [r for r in changes if not (r["_change_type"].startswith("update_") and data(r) in same)]


@pytest.mark.parametrize(("partition_by", "updates", "predicate"), CASES)
def test_deletion_vectors_give_the_rows_and_changes_of_copy_on_write(
    tmp_path: Path, partition_by: list[str] | None, updates: dict[str, str], predicate: str | None
) -> None:
    cow, _ = twin_tables(tmp_path / "cow", DATA, partition_by=partition_by, max_rows_per_file=5)
    dv, _ = twin_tables(
        tmp_path / "dv", DATA, partition_by=partition_by, configuration=DV_CDF, max_rows_per_file=5
    )
    DeltaTable(cow).update(updates, predicate=predicate)
    metrics = DeltaTable(dv).update(updates, predicate=predicate)
    assert our_rows(dv) == our_rows(cow) == rust_rows(dv)
    assert latest_version(dv) == latest_version(cow)
    if latest_version(dv) == 1:
        assert our_changes(dv, 1) == our_changes(cow, 1) == rust_changes(dv, 1)
        assert metrics["numAddedChangeFiles"] > 0  # a DV UPDATE writes its pre- and post-images
        assert metrics["numCopiedRows"] == 0


def test_deletion_vector_update_writes_only_the_updated_rows(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA, configuration=DV_CDF, max_rows_per_file=5)
    metrics = DeltaTable(uri).update({"v": "'new'"}, predicate="id IN (1, 7)")
    assert metrics["numUpdatedRows"] == 2 and metrics["numCopiedRows"] == 0
    assert metrics["numDeletionVectorsAdded"] == 2 and metrics["numRemovedFiles"] == 0
    assert metrics["numAddedFiles"] == 1  # the two new rows, together
    info = last_commit_info(uri)
    assert info["operation"] == "UPDATE"
    assert json.loads(info["operationParameters"]["predicate"]) == ["id IN (1, 7)"]
    changes = our_changes(uri, 1, ["id", "v"])
    assert sorted((c["id"], c["_change_type"], c["v"] or "") for c in changes) == [
        (1, "update_postimage", "new"), (1, "update_preimage", "b"),
        (7, "update_postimage", "new"), (7, "update_preimage", ""),
    ]  # fmt: skip


def test_new_values_are_stored_as_their_columns_types(tmp_path: Path) -> None:
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "s": ["a", "b"],
            "d": pa.array([dt.date(2024, 1, 1)] * 2),
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 2, pa.timestamp("us", "UTC")),
            "f": [1.5, 2.5],
            "b": [True, False],
        }
    )
    uri = str(tmp_path / "t")
    write_table(uri, data)
    values: dict[str, Any] = {
        "id": 7,
        "s": "it's",
        "d": dt.date(2025, 2, 3),
        "ts": dt.datetime(2025, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        "f": None,
        "b": True,
    }
    DeltaTable(uri).update(new_values=values, predicate="id = 2")
    rows = {r["id"]: r for r in DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert rows[7] == values
    assert rows[1]["s"] == "a"


def test_argument_errors_follow_delta_rs(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA)
    table = DeltaTable(uri)
    with pytest.raises(InvalidDmlArgumentError, match="Passing updates and new_values at same time"):
        table.update({"v": "'a'"}, new_values={"v": "a"})
    with pytest.raises(InvalidDmlArgumentError, match="Either updates or new_values"):
        table.update()
    with pytest.raises(TypeError, match="must all be SQL strings"):
        table.update({"id": 3})  # type: ignore[dict-item]
    with pytest.raises(ExpressionError, match=r"UNRESOLVED_COLUMN.*nope"):
        table.update({"nope": "1"})
    with pytest.raises(ExpressionError, match=r"UNRESOLVED_COLUMN.*vv"):
        table.update({"v": "upper(vv)"})
    with pytest.raises(ExpressionError, match="CANNOT_SAFELY_CAST"):
        table.update({"id": "'text'"})
    with pytest.raises(Exception, match="DELTA_CONFLICT_SET_COLUMN"):
        table.update({"v": "'a'", "V": "'b'"})
    assert latest_version(uri) == 0


def test_only_matching_rows_are_evaluated(tmp_path: Path) -> None:
    """An assignment that fails on other rows (ANSI division by zero) is not evaluated there."""
    uri, _ = twin_tables(tmp_path, DATA)
    DeltaTable(uri).update({"x": "1 / (id - 5)"}, predicate="id <> 5")
    with pytest.raises(ExpressionEvaluationError, match="DIVIDE_BY_ZERO"):
        DeltaTable(uri).update({"x": "1 / (id - 5)"})


def test_column_names_are_matched_case_insensitively(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, DATA)
    DeltaTable(uri).update({"V": "'q'"}, predicate="ID = 3")
    assert [r["v"] for r in our_rows(uri) if r["id"] == 3] == ["q"]


def test_not_null_columns_refuse_nulls(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2]}))
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":false,"metadata":{}}]}'
    log = Path(uri) / "_delta_log" / "00000000000000000000.json"
    text = log.read_text()
    meta = next(json.loads(line) for line in text.splitlines() if "metaData" in line)
    text = text.replace(json.dumps(meta["metaData"]["schemaString"]), json.dumps(schema))
    log.write_text(text)
    before = files_under(uri)
    with pytest.raises(InvariantViolationError, match="NOT NULL"):
        DeltaTable(uri).update({"id": "NULL"}, predicate="id = 2")
    assert files_under(uri) == before and latest_version(uri) == 0


def test_append_only_table_refuses_before_writing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration={"delta.appendOnly": "true", **CDF})
    with pytest.raises(AppendOnlyTableError):
        DeltaTable(uri).update({"v": "'a'"})
    assert latest_version(uri) == 0 and not (Path(uri) / "_change_data").exists()


def test_float_values_are_written_bit_for_bit(tmp_path: Path) -> None:
    # -0.0 equals 0.0 and NaN equals nothing: a column is copied unchanged only when its new values
    # have the old ones' bits, so a sign flipped on zero or NaN must reach the file
    path = str(tmp_path / "floats")
    nan = float("nan")
    write_table(path, pa.table({"id": [1, 2, 3], "x": [0.0, 0.0, 1.5], "y": [0.0, nan, 2.5]}))
    metrics = DeltaTable(path).update({"x": "-x", "y": "y + 0.0"}, predicate="id <= 2")
    assert metrics["numUpdatedRows"] == 2
    rows = DeltaTable(path).to_arrow().sort_by("id")
    bits = {name: rows.column(name).to_numpy().view("<u8").tolist() for name in ("x", "y")}
    assert bits["x"] == pa.array([-0.0, -0.0, 1.5]).to_numpy(zero_copy_only=False).view("<u8").tolist()
    assert bits["y"] == pa.array([0.0, nan, 2.5]).to_numpy(zero_copy_only=False).view("<u8").tolist()
