"""The row-level change tests' shared cases and helpers: the DELETE, UPDATE and MERGE cases every
front end runs (``replay.DeltaTable``, delta-rs, the Spark ``DeltaTable``), the same table for
this library and delta-rs, and the rows and change feeds of both, normalised for comparison."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable as RustTable
from deltalake import QueryBuilder

from replay import DeltaLog, DeltaTable, table_changes, write_table
from replay.data.reader import TableReader
from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, ClauseSpec
from replay.protocol.paths import resolve_path

CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
DV_CDF = {**DV, **CDF}
CHANGE_COLUMNS = ("_change_type", "_commit_version")

# -- the cases ---------------------------------------------------------------------------------------
ROWS = pa.table(
    {
        "id": pa.array([*range(12), None], pa.int64()),
        "v": ["a", "b", None, "d", "e", "f", "g", None, "i", "j", "k", "l", "m"],
        "p": pa.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, None, 2], pa.int32()),
        "x": [i / 12 for i in range(13)],
    }
)
"""The table of the DELETE and UPDATE cases."""

DELETE_CASES: list[tuple[list[str] | None, str | None]] = [
    (None, "id > 6"),
    (None, "v IS NULL"),
    (None, "id % 3 = 0 AND x < 0.5"),
    (["p"], "p = 1"),
    (["p"], "p = 1 AND id > 4"),
    (["p"], "p IS NULL OR v = 'a'"),
    (["p"], "id > 100"),
    (["p"], None),
    (None, None),
]
"""(partition columns, predicate) of each DELETE case."""

UPDATE_CASES: list[tuple[list[str] | None, dict[str, str], str | None]] = [
    (None, {"v": "upper(v)"}, "id > 6"),
    (None, {"x": "x * 2", "v": "'z'"}, None),
    (None, {"id": "id + 100"}, "v IS NULL"),
    (["p"], {"x": "x + 1", "v": "lower(v)"}, "p = 1"),
    (["p"], {"p": "p + 10"}, "id % 2 = 0"),
    (["p"], {"p": "1"}, "p IS NULL OR id = 0"),
    (["p"], {"v": "'never'"}, "id > 100"),
]
"""(partition columns, assignments, predicate) of each UPDATE case."""

MERGE_TARGET = pa.table(
    {
        "id": pa.array([*range(10), None], pa.int64()),
        "v": pa.array([0, 10, 20, None, 40, 50, 60, 70, 80, 90, 100], pa.int64()),
        "p": pa.array([i % 3 for i in range(11)], pa.int32()),
    }
)
MERGE_SOURCE = pa.table(
    {
        "id": pa.array([1, 3, 5, 7, 11, 12, None], pa.int64()),
        "v": pa.array([11, 33, None, 77, 111, 122, 999], pa.int64()),
        "p": pa.array([1, 0, 2, 1, 2, 0, 1], pa.int32()),
    }
)
MERGE_CONDITION = "t.id = s.id"
"""The ON condition of the MERGE cases (target alias ``t``, source alias ``s``)."""

MERGE_CASES: dict[str, list[ClauseSpec]] = {
    "upsert": [ClauseSpec(MATCHED, "update"), ClauseSpec(NOT_MATCHED, "insert")],
    "update-only": [ClauseSpec(MATCHED, "update", None, {"v": "s.v + t.v"})],
    "conditional": [
        ClauseSpec(MATCHED, "update", "s.v > t.v", {"v": "s.v"}),
        ClauseSpec(MATCHED, "delete", "t.v >= 50"),
        ClauseSpec(NOT_MATCHED, "insert", "s.v < 500", {"id": "s.id", "v": "s.v", "p": "s.p"}),
    ],
    "by-source": [
        ClauseSpec(MATCHED, "update"),
        ClauseSpec(NOT_MATCHED_BY_SOURCE, "update", "t.p = 0", {"v": "t.v * 2"}),
        ClauseSpec(NOT_MATCHED_BY_SOURCE, "delete"),
    ],
    "delete-matched": [ClauseSpec(MATCHED, "delete")],
    "insert-only": [ClauseSpec(NOT_MATCHED, "insert")],
    "move-partition": [ClauseSpec(MATCHED, "update", None, {"p": "s.p", "v": "s.v"})],
    "by-source-only": [ClauseSpec(NOT_MATCHED_BY_SOURCE, "delete", "t.v > 30")],
}
"""The WHEN clauses of each MERGE case (``updates`` ``None``: ``*``)."""


def python_merge(merger: Any, specs: list[ClauseSpec]) -> Any:
    """Add ``specs`` to a merger with delta-rs's API (``replay.DeltaTable`` or delta-rs)."""
    for spec in specs:
        star = spec.updates is None
        if spec.kind == MATCHED and spec.action == "update":
            merger = (
                merger.when_matched_update_all(spec.predicate)
                if star
                else merger.when_matched_update(spec.updates, spec.predicate)
            )
        elif spec.kind == MATCHED:
            merger = merger.when_matched_delete(spec.predicate)
        elif spec.kind == NOT_MATCHED:
            merger = (
                merger.when_not_matched_insert_all(spec.predicate)
                if star
                else merger.when_not_matched_insert(spec.updates, spec.predicate)
            )
        elif spec.action == "update":
            merger = merger.when_not_matched_by_source_update(spec.updates, spec.predicate)
        else:
            merger = merger.when_not_matched_by_source_delete(spec.predicate)
    return merger


def spark_merge(builder: Any, specs: list[ClauseSpec]) -> Any:
    """Add ``specs`` to a Spark ``DeltaMergeBuilder`` (Delta's API)."""
    for spec in specs:
        star = spec.updates is None
        if spec.kind == MATCHED and spec.action == "update":
            builder = (
                builder.whenMatchedUpdateAll(spec.predicate)
                if star
                else builder.whenMatchedUpdate(spec.predicate, dict(spec.updates or {}))
            )
        elif spec.kind == MATCHED:
            builder = builder.whenMatchedDelete(spec.predicate)
        elif spec.kind == NOT_MATCHED:
            builder = (
                builder.whenNotMatchedInsertAll(spec.predicate)
                if star
                else builder.whenNotMatchedInsert(spec.predicate, dict(spec.updates or {}))
            )
        elif spec.action == "update":
            builder = builder.whenNotMatchedBySourceUpdate(spec.predicate, dict(spec.updates or {}))
        else:
            builder = builder.whenNotMatchedBySourceDelete(spec.predicate)
    return builder


def twin_tables(
    tmp_path: Path,
    data: pa.Table,
    *,
    partition_by: Sequence[str] | None = None,
    configuration: Mapping[str, str] | None = None,
    max_rows_per_file: int | None = None,
) -> tuple[str, str]:
    """The same table twice (``ours``, ``rust``): written once by this library, then copied."""
    ours, rust = tmp_path / "ours", tmp_path / "rust"
    write_table(
        str(ours),
        data,
        partition_by=list(partition_by) if partition_by else None,
        configuration=dict(configuration or CDF),
        max_rows_per_file=max_rows_per_file,
    )
    shutil.copytree(ours, rust)
    return str(ours), str(rust)


def _value(value: Any) -> Any:
    return (value is None, str(type(value)), value if value is not None else 0)


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(_value(row[name]) for name in sorted(row))


def normalised(table: pa.Table, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows as sorted dicts: view types as plain types, the commit version as int64, no timestamps."""
    if "_commit_timestamp" in table.column_names:
        table = table.drop_columns(["_commit_timestamp"])
    if columns is not None:
        table = table.select(list(columns))
    arrays = []
    for field in table.schema:
        column = table.column(field.name)
        if pa.types.is_string_view(field.type) or pa.types.is_large_string(field.type):
            column = column.cast(pa.string())
        elif field.name == "_commit_version" or pa.types.is_unsigned_integer(field.type):
            column = column.cast(pa.int64())
        arrays.append(column)
    rows = pa.Table.from_arrays(arrays, names=table.column_names).to_pylist()
    return sorted(rows, key=_key)


def our_rows(uri: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    return normalised(DeltaTable(uri).to_pyarrow_table(), columns)


def rust_rows(uri: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """delta-rs's read of a table (through its query engine, which applies deletion vectors)."""
    reader = QueryBuilder().register("t", RustTable(uri)).execute("select * from t")
    return normalised(pa.table(reader.read_all()), columns)


def our_changes(uri: str, start: int, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    changes = table_changes(DeltaLog.for_table(uri), starting_version=start)
    return normalised(changes, [*columns, *CHANGE_COLUMNS] if columns else None)


def rust_changes(uri: str, start: int, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    changes = pa.table(RustTable(uri).load_cdf(starting_version=start).read_all())
    return normalised(changes, [*columns, *CHANGE_COLUMNS] if columns else None)


def latest_version(uri: str) -> int:
    return DeltaLog.for_table(uri).latest_version()


def last_commit_info(uri: str) -> dict[str, Any]:
    return DeltaLog.for_table(uri).history(1)[0]


def files_under(root: str | Path) -> set[str]:
    """Every file below ``root`` but the log (relative paths), to find orphans."""
    base = Path(root)
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


TIMING_METRICS = {"executionTimeMs", "scanTimeMs", "rewriteTimeMs", "materializeSourceTimeMs"}


def commit_summary(uri: str, version: int | None = None, conf: Any = None) -> dict[str, Any]:
    """The ``commitInfo`` parts two front ends must agree on (timings left out)."""
    log = DeltaLog.for_table(uri, conf)
    entry = next(e for e in log.history() if version is None or e["version"] == version)
    metrics = {k: v for k, v in (entry.get("operationMetrics") or {}).items() if k not in TIMING_METRICS}
    return {
        "version": entry["version"],
        "operation": entry.get("operation"),
        "operationParameters": entry.get("operationParameters"),
        "operationMetrics": metrics,
        "isBlindAppend": entry.get("isBlindAppend"),
        "readVersion": entry.get("readVersion"),
        "isolationLevel": entry.get("isolationLevel"),
    }


def row_lineage(uri: str) -> dict[int, tuple[int, int]]:
    """``id`` -> (row id, row commit version) of every live row of a table with row tracking: each
    file's hidden columns read with pyarrow (the names the table's properties give), the rest
    derived from the log (``baseRowId`` plus the physical row index, ``defaultRowCommitVersion``)."""
    table = DeltaTable(uri)
    snapshot = table.snapshot
    configuration = table.metadata().configuration
    names = [
        configuration["delta.rowTracking.materializedRowIdColumnName"],
        configuration["delta.rowTracking.materializedRowCommitVersionColumnName"],
    ]
    reader = TableReader.for_metadata(uri, snapshot.metadata, snapshot.protocol)
    found: dict[int, tuple[int, int]] = {}
    for add in snapshot.files():
        assert add.base_row_id is not None and add.default_row_commit_version is not None
        keys = reader.read_file(add, ["id"], row_filter=False).column("id").to_pylist()
        stored = pq.read_table(resolve_path(uri, add.path))
        count = len(keys)
        ids = np.arange(add.base_row_id, add.base_row_id + count)
        versions = np.full(count, add.default_row_commit_version)
        if names[0] in stored.column_names:
            kept = stored.column(names[0]).to_pylist()
            ids = np.array([k if k is not None else d for k, d in zip(kept, ids, strict=True)])
        if names[1] in stored.column_names:
            kept = stored.column(names[1]).to_pylist()
            versions = np.array([k if k is not None else d for k, d in zip(kept, versions, strict=True)])
        deleted = reader.deletion_filter(add)
        live = deleted.mask(count, uri).to_pylist() if deleted is not None else [True] * count
        for key, row_id, version, alive in zip(keys, ids.tolist(), versions.tolist(), live, strict=True):
            if alive:
                assert key not in found, key
                found[key] = (row_id, version)
    row_ids = [row_id for row_id, _ in found.values()]
    assert len(set(row_ids)) == len(row_ids), "row ids must be unique"
    return found
