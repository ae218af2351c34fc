"""Helpers of the row-level change tests: the same table for this library and delta-rs, and the
rows and change feeds of both, normalised for comparison."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable as RustTable
from deltalake import QueryBuilder

from replay import DeltaLog, DeltaTable, table_changes, write_table

CDF = {"delta.enableChangeDataFeed": "true"}
DV = {"delta.enableDeletionVectors": "true"}
DV_CDF = {**DV, **CDF}
CHANGE_COLUMNS = ("_change_type", "_commit_version")


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
