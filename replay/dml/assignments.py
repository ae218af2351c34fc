"""The columns an UPDATE or a MERGE clause sets, and the values it sets them to.

Column names are matched to the table's columns case-insensitively (Spark's default), each column
may be set once, and every value is stored with Spark's ANSI store assignment into the column's
type (:meth:`~replay.protocol.sql.BoundExpression.assign`).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence

import pyarrow as pa

from replay.dml.errors import conflicting_set_error
from replay.dml.expressions import Assignment
from replay.protocol.constraints import GeneratedColumn
from replay.protocol.sql import BoundExpression, parse_expression


def quote(name: str) -> str:
    """``name`` as a SQL identifier (backquoted)."""
    return "`" + name.replace("`", "``") + "`"


def find_column(names: Iterable[str], name: str) -> str | None:
    """The column of ``names`` that ``name`` spells (case-insensitively), or ``None``."""
    lowered = name.lower()
    return next((column for column in names if column.lower() == lowered), None)


def unresolved_column(name: str, schema: pa.Schema) -> Exception:
    """Spark's ``UNRESOLVED_COLUMN`` error for ``name`` over ``schema`` (with its suggestions)."""
    try:
        parse_expression(quote(name)).bind(schema)
    except Exception as exc:  # noqa: BLE001 - the binder's error is the one to raise
        return exc
    return KeyError(name)  # pragma: no cover - the name resolved after all


def check_unique(columns: Sequence[str], table: str) -> None:
    """Raise Delta's ``DELTA_CONFLICT_SET_COLUMN`` if a column is set twice."""
    seen: dict[str, str] = {}
    clashes: list[str] = []
    for column in columns:
        key = column.lower()
        if key in seen:
            clashes.append(column)
        seen[key] = column
    if clashes:
        raise conflicting_set_error(clashes, table)


def apply_assignments(
    rows: pa.Table, assignments: Mapping[str, Assignment], columns: Sequence[str]
) -> pa.Table:
    """The rows' new values: ``columns`` (the table's after the change) from ``assignments``
    evaluated over ``rows``, other columns copied from ``rows`` (nulls where ``rows`` has none)."""
    arrays: list[pa.Array | pa.ChunkedArray] = []
    names = set(rows.column_names)
    for column in columns:
        assignment = assignments.get(column)
        if assignment is not None:
            arrays.append(assignment.bound.evaluate(rows))
        elif column in names:
            arrays.append(rows.column(column))
        else:
            arrays.append(pa.nulls(rows.num_rows))
    return pa.Table.from_arrays(arrays, names=list(columns))


def regenerate(
    rows: pa.Table,
    generated: Sequence[GeneratedColumn],
    assigned: Collection[str],
    *,
    insert: bool,
) -> pa.Table:
    """Generated columns of changed rows, as Delta's UPDATE and MERGE compute them
    (``GeneratedColumn.generateUpdateExpressions``): a generated column the clause does not set
    itself gets its expression over the row's new values when the row is inserted, or when the
    clause sets a column the expression reads; otherwise it keeps its value. The data writer then
    checks every generated column as usual."""
    lowered = {name.lower() for name in assigned}
    for column in generated:
        name = find_column(rows.column_names, column.column)
        if name is None or name.lower() in lowered:
            continue
        bound = _bind_generation(column.expression, rows.schema)
        if insert or any(read.lower() in lowered for read in bound.columns()):
            value = bound.assign(rows.schema.field(name).type, name).evaluate(rows)
            rows = rows.set_column(rows.column_names.index(name), rows.schema.field(name), value)
    return rows


@functools.lru_cache(maxsize=64)
def _bind_generation(expression: str, schema: pa.Schema) -> BoundExpression:
    return parse_expression(expression).bind(schema)
