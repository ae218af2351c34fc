"""DELETE, UPDATE, MERGE and OPTIMIZE on a copy of every golden table: tables written by Spark,
delta-rs and kernel-rs, with checkpoints, partitions, deletion vectors, constraints and every
column type.

On each table one value of its first integer or string column is picked from the rows read before
the change. DELETE removes the rows with that value, UPDATE changes it, MERGE upserts two rows
(one with that value, updated; one with a new value, inserted with every other column of a row of
the table) and OPTIMIZE compacts; DELETE and MERGE also with deletion vectors turned on first
(then no unchanged row may be copied). The result is checked against the same change applied to the
rows in Arrow, read back by us and by delta-rs (where delta-rs reads the table at all). A table this
library may not change (a writer feature it does not support, a row that breaks a constraint) must
refuse with a typed error and be left without a new version. Tables that cannot be read (the
golden set's broken logs) are skipped: the read tests cover them.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake.exceptions import DeltaError as RustDeltaError
from deltalake.exceptions import DeltaProtocolError as RustProtocolError

from replay import (
    DeltaTable,
    IcebergCompatError,
    IdentityColumnError,
    InvalidTableSchemaError,
    InvariantViolationError,
    MissingProtocolOrMetadataError,
    MissingVersionsError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
from replay.data import DataFileNotFoundError, DeletionVectorNotFoundError
from tests.dml_cases import normalised, rust_rows
from tests.paths import GOLDEN_ROOT as GOLDEN

TABLES = sorted(str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.glob("*/*/delta"))
REFUSALS = (UnsupportedTableFeatureError, InvariantViolationError, IdentityColumnError, IcebergCompatError)
"""What a change the table does not allow raises (an UPDATE of an identity column among them, as
Delta refuses it): nothing is committed."""
SHIPPED_BROKEN = (
    DataFileNotFoundError,
    DeletionVectorNotFoundError,
    InvalidTableSchemaError,
    MissingProtocolOrMetadataError,
    MissingVersionsError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
"""How the golden tables shipped incomplete or too new fail to read (``test_golden_tables`` pins
which fail and how); any other error fails the test here."""

Change = Callable[[DeltaTable], Mapping[str, Any]]
COUNTED = {"delete": "numDeletedRows", "update": "numUpdatedRows", "merge": "numTargetRowsUpdated"}
"""The metric that counts the rows an operation deleted or updated."""
COPIED = {"delete": "numCopiedRows", "merge": "numTargetRowsCopied"}
DV_PROPERTY = "delta.enableDeletionVectors"


def _literal(value: object) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else str(value)


def _rows(table: pa.Table) -> str:
    """Rows in a canonical order, as text (so that NaN equals NaN)."""
    return repr(normalised(table))


def _picked(rows: pa.Table) -> tuple[pa.Field, object] | None:
    """The first integer or string column with a value, and its middle value."""
    for field in rows.schema:
        if pa.types.is_integer(field.type) or pa.types.is_string(field.type):
            values = [v for v in rows.column(field.name).to_pylist() if v is not None]
            if values:
                return field, values[len(values) // 2]
    return None


def _change(operation: str, rows: pa.Table, field: pa.Field, value: object) -> Change:
    """The operation on the picked column and value, as a function of the table."""
    column = f"`{field.name}`"
    condition = f"{column} = {_literal(value)}"

    def assigned(name: str) -> str:
        return f"{name} + 1" if pa.types.is_integer(field.type) else f"concat({name}, '!')"

    def delete(table: DeltaTable) -> Mapping[str, Any]:
        return table.delete(condition)

    def update(table: DeltaTable) -> Mapping[str, Any]:
        return table.update({field.name: assigned(column)}, predicate=condition)

    def merge(table: DeltaTable) -> Mapping[str, Any]:
        source = _merge_source(rows, field, value)
        return (
            table.merge(source, f"t.{column} = s.{column}", source_alias="s", target_alias="t")
            .when_matched_update({field.name: assigned(f"s.{column}")})
            .when_not_matched_insert_all()
            .execute()
        )

    def optimize(table: DeltaTable) -> Mapping[str, Any]:
        return table.optimize.compact()

    return {"delete": delete, "update": update, "merge": merge, "optimize": optimize}[operation]


def _changed(column: pa.ChunkedArray | pa.Array, data_type: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """What UPDATE and MERGE set the picked column to: ``+ 1``, or ``'!'`` appended."""
    if pa.types.is_integer(data_type):
        return pc.add(column, pa.scalar(1, data_type))
    return pc.binary_join_element_wise(column, pa.scalar("!"), "")


def _new_key(rows: pa.Table, field: pa.Field) -> object:
    """A value of the picked column that no row has."""
    values = [v for v in rows.column(field.name).to_pylist() if v is not None]
    if pa.types.is_string(field.type):
        return max(values) + "#new"
    top = max(values)
    return top + 1 if top < 2 ** (field.type.bit_width - 1) - 1 else min(values) - 1


def _merge_source(rows: pa.Table, field: pa.Field, value: object) -> pa.Table:
    """Two rows of the table: one with the picked value, one with a new value."""
    first = pc.index(rows.column(field.name), pa.scalar(value, field.type)).as_py()
    keys = pa.array([value, _new_key(rows, field)], field.type)
    source = rows.take([first, first])
    return source.set_column(source.schema.get_field_index(field.name), field, keys)


def _expected(rows: pa.Table, field: pa.Field, value: object, operation: str) -> tuple[pa.Table, int]:
    """``rows`` after the operation, and how many rows it deletes or updates."""
    column = rows.column(field.name)
    matched = pc.fill_null(pc.equal(column, pa.scalar(value, field.type)), False)
    count = pc.sum(matched.cast(pa.int64())).as_py() or 0
    if operation == "optimize":
        return rows, 0
    if operation == "delete":
        return rows.filter(pc.invert(matched)), count
    new = pc.if_else(matched, _changed(column, field.type), column)
    updated = rows.set_column(rows.schema.get_field_index(field.name), field.name, new)
    if operation == "update":
        return updated, count
    inserted = _merge_source(rows, field, value).slice(1)
    return pa.concat_tables([updated, inserted.cast(updated.schema)]), count


@functools.cache
def _golden(name: str) -> tuple[pa.Table, pa.Field, object, bool] | str:
    """The rows of golden table ``name`` (read where it lies: reading writes nothing), its picked
    column and value, and whether delta-rs reads it; or why the table is skipped."""
    source = str(GOLDEN / name / "delta")
    try:
        rows = DeltaTable(source).to_pyarrow_table()
    except SHIPPED_BROKEN as exc:
        return f"not readable: {type(exc).__name__}"
    picked = _picked(rows)
    if picked is None:
        return "no integer or string column with a value"
    try:
        rust_rows(source)
        rust_reads = True
    except (RustDeltaError, RustProtocolError):
        rust_reads = False  # a feature delta-rs does not read
    return rows, *picked, rust_reads


@pytest.mark.parametrize(
    ("operation", "mode"),
    [(operation, "as-is") for operation in ("delete", "update", "merge", "optimize")]
    + [(operation, "dv") for operation in ("delete", "merge")],
)
@pytest.mark.parametrize("name", TABLES)
def test_a_change_to_a_golden_table(name: str, operation: str, mode: str, tmp_path: Path) -> None:
    """``mode``: the table as it is, or with deletion vectors turned on first (ALTER)."""
    golden = _golden(name)
    if isinstance(golden, str):
        pytest.skip(golden)
    before, field, value, rust_reads = golden
    uri = str(shutil.copytree(GOLDEN / name / "delta", tmp_path / "table"))
    table = DeltaTable(uri)
    if mode == "dv":
        try:
            table.alter.set_table_properties({DV_PROPERTY: "true"})
        except REFUSALS:
            pytest.skip("deletion vectors cannot be turned on")
    change = _change(operation, before, field, value)
    version = table.version()
    row_counts = all(f.stats is not None and '"numRecords"' in f.stats for f in table.snapshot.files())
    try:
        metrics = change(table)
    except REFUSALS as exc:
        assert exc.args and str(exc).splitlines()[0]
        written = {"columnMapping", "typeWidening", "typeWidening-preview", "v2Checkpoint"}  # written to
        assert not written & set(getattr(exc, "features", []))
        assert DeltaTable(uri).version() == version
        assert _rows(DeltaTable(uri).to_pyarrow_table()) == _rows(before)
        return
    expected, count = _expected(before, field, value, operation)
    changed = DeltaTable(uri)
    if operation == "optimize":
        assert metrics["numFilesAdded"] <= metrics["numFilesRemoved"]
        assert changed.version() == version + (1 if metrics["numFilesRemoved"] else 0)
    else:
        assert count > 0
        counted = COUNTED[operation]
        # a DELETE that drops whole files counts their rows from statistics; without them Delta
        # leaves the count out
        assert metrics.get(counted, count if not row_counts else None) == count
        assert operation != "merge" or metrics["numTargetRowsInserted"] == 1
        if mode == "dv":  # unchanged rows stay where they are, hidden by deletion vectors
            assert metrics.get(COPIED[operation], 0) == 0
        assert changed.version() == version + 1
    after = changed.to_pyarrow_table()
    assert _rows(after) == _rows(expected.select(after.column_names))
    if rust_reads:
        assert repr(rust_rows(uri, after.column_names)) == _rows(expected.select(after.column_names))
