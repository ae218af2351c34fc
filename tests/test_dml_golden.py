"""DELETE and UPDATE on a copy of every golden table: tables written by Spark, delta-rs and
kernel-rs, with checkpoints, partitions, deletion vectors, constraints and every column type.

On each table one value of its first integer or string column is picked from the rows read before
the change; the operation's result is checked against the same change applied to those rows in
Arrow, read back by us and by delta-rs (where delta-rs reads the table at all). A table this
library may not change (a writer feature it does not support, a row that breaks a constraint) must
refuse with a typed error and be left without a new version. Tables that cannot be read (the
golden set's broken logs) are skipped: the read tests cover them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake.exceptions import DeltaError as RustDeltaError
from deltalake.exceptions import DeltaProtocolError as RustProtocolError

from replay import DeltaTable, InvariantViolationError
from replay.protocol.errors import DeltaError, UnsupportedTableFeatureError
from tests.dml_cases import normalised, rust_rows
from tests.paths import GOLDEN_ROOT as GOLDEN

TABLES = sorted(str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.glob("*/*/delta"))
REFUSALS = (UnsupportedTableFeatureError, InvariantViolationError)
"""What a change the table does not allow raises: nothing is committed."""

Change = Callable[[DeltaTable, str, str], dict[str, object]]


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


def _delete(table: DeltaTable, column: str, value: str) -> dict[str, object]:
    return table.delete(f"`{column}` = {value}")


def _update(table: DeltaTable, column: str, value: str) -> dict[str, object]:
    return table.update({column: f"`{column}` + 1"}, predicate=f"`{column}` = {value}")


def _update_string(table: DeltaTable, column: str, value: str) -> dict[str, object]:
    return table.update({column: f"concat(`{column}`, '!')"}, predicate=f"`{column}` = {value}")


def _expected(rows: pa.Table, field: pa.Field, value: object, operation: str) -> tuple[pa.Table, int]:
    """``rows`` after the operation, and how many rows it deletes or updates."""
    column = rows.column(field.name)
    matched = pc.fill_null(pc.equal(column, pa.scalar(value, field.type)), False)
    count = pc.sum(matched.cast(pa.int64())).as_py() or 0
    if operation == "delete":
        return rows.filter(pc.invert(matched)), count
    if pa.types.is_integer(field.type):
        changed = pc.add(column, pa.scalar(1, field.type))
    else:
        changed = pc.binary_join_element_wise(column, pa.scalar("!"), "")
    new = pc.if_else(matched, changed, column)
    return rows.set_column(rows.schema.get_field_index(field.name), field.name, new), count


@pytest.mark.parametrize("operation", ["delete", "update"])
@pytest.mark.parametrize("name", TABLES)
def test_a_change_to_a_golden_table(name: str, operation: str, tmp_path: Path) -> None:
    uri = str(shutil.copytree(GOLDEN / name / "delta", tmp_path / "table"))
    try:
        table = DeltaTable(uri)
        before = table.to_pyarrow_table()
    except DeltaError as exc:
        pytest.skip(f"not readable: {type(exc).__name__}")
    picked = _picked(before)
    if picked is None:
        pytest.skip("no integer or string column with a value")
    field, value = picked
    try:
        rust_rows(uri)
        rust_reads = True
    except (RustDeltaError, RustProtocolError):
        rust_reads = False  # a feature delta-rs does not read
    change: Change = _delete if operation == "delete" else _update
    if operation == "update" and pa.types.is_string(field.type):
        change = _update_string
    version = table.version()
    row_counts = all(f.stats is not None and '"numRecords"' in f.stats for f in table.snapshot.files())
    try:
        metrics = change(table, field.name, _literal(value))
    except REFUSALS as exc:
        assert exc.args and str(exc).splitlines()[0]
        assert DeltaTable(uri).version() == version
        assert _rows(DeltaTable(uri).to_pyarrow_table()) == _rows(before)
        return
    expected, count = _expected(before, field, value, operation)
    assert count > 0
    counted = "numDeletedRows" if operation == "delete" else "numUpdatedRows"
    # a DELETE that drops whole files counts their rows from statistics; without them Delta
    # leaves the count out
    assert metrics.get(counted, count if not row_counts else None) == count
    assert DeltaTable(uri).version() == version + 1
    after = DeltaTable(uri).to_pyarrow_table()
    assert _rows(after) == _rows(expected.select(after.column_names))
    if rust_reads:
        assert repr(rust_rows(uri, after.column_names)) == _rows(expected.select(after.column_names))
