"""Enforcing a table's constraints on the rows a write produces, as Delta's invariant checker does.

:func:`compile_constraints` binds a :class:`~replay.protocol.constraints.TableConstraints` (texts)
to the table's Arrow schema with the project's SQL grammar, once per writer (a Spark task binds
its own: the compiled form is never pickled). :meth:`RowConstraints.enforce` then takes a batch
already conformed to the table's columns and

1. computes the generated columns the incoming data did not have from their expressions;
2. checks, vectorised over the whole batch, Delta's constraints in Delta's order: CHECK
   constraints, NOT NULL fields, invariants, and for each generated column the data did provide
   ``column <=> expression`` (Delta's ``Generated Column`` constraint).

A CHECK constraint, an invariant or a generated column's check is violated where its expression
is ``false`` or ``NULL`` (Delta's ``CheckDeltaInvariant``); a NOT NULL field where it, or a struct
around it, is null. Last, a null where an array or map declares its elements, keys, values or
their fields NOT NULL is refused too (Delta does not enforce these, a Parquet file cannot store
them). The error is Delta's for the first violating row (for that row, the first
constraint in the order above), naming the table, the constraint, its expression and the values
the row has for the columns the expression reads (sorted by name, as Delta lists them).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logstores.redaction import redact_url
from replay.protocol.constraints import TableConstraints, column_path_name
from replay.protocol.errors import DeltaError, UnsupportedTableFeatureError
from replay.protocol.sql import BoundExpression, ExpressionError, parse_expression
from replay.protocol.sql.syntax import quote_name

GENERATED_COLUMN_CONSTRAINT = "Generated Column"
"""The name Delta gives the check of a generated column whose value the data provides."""


class InvariantViolationError(DeltaError, ValueError):
    """A written row violates a rule of the table or of the write: a CHECK constraint, an invariant,
    a NOT NULL column, a generated column's expression, or the ``replaceWhere`` predicate.

    ``error_class`` is Delta's (``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES``,
    ``DELTA_NOT_NULL_CONSTRAINT_VIOLATED``, ...), ``constraint`` the constraint's name as Delta
    reports it (``NOT NULL`` for a null in a NOT NULL column), ``expression`` its SQL (the column
    path for NOT NULL) and ``values`` the violating row's values of the columns it reads.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        error_class: str | None = None,
        constraint: str | None = None,
        expression: str | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, table=table)
        self.error_class = error_class
        self.constraint = constraint
        self.expression = expression
        self.values = dict(values or {})


# -- rendering values as Delta's message does --------------------------------------------------
def render_value(value: Any) -> str:
    """A value as Delta's constraint error lists it (``null``, ``true``, ``1.0``, ``NaN``, text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, decimal.Decimal | _dt.date):
        return str(value)
    if isinstance(value, bytes):
        return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {render_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    return str(value)


def _value_at(table: pa.Table, row: int, path: Sequence[str]) -> Any:
    value: Any = table.column(path[0])[row].as_py()
    for name in path[1:]:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


# -- compiled rules ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Check:
    """A bound boolean expression with what its error reports."""

    name: str
    sql: str
    bound: BoundExpression
    columns: tuple[tuple[str, tuple[str, ...]], ...]
    """(the column as the expression writes it, its path in the table) for each column read."""

    def first_violation(self, table: pa.Table) -> int | None:
        return _first_false_or_null(self.bound.evaluate(table))

    def error(self, table: pa.Table, row: int, shown: str) -> InvariantViolationError:
        values = {name: _value_at(table, row, path) for name, path in self.columns}
        lines = "\n".join(f" - {name} : {render_value(values[name])}" for name in sorted(values))
        return InvariantViolationError(
            f"[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK constraint {self.name} {self.sql} violated by "
            f"row with values (table {shown}):\n{lines}",
            table=shown,
            error_class="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES",
            constraint=self.name,
            expression=self.sql,
            values=values,
        )


@dataclass(frozen=True)
class _NotNull:
    path: tuple[str, ...]

    def first_violation(self, table: pa.Table) -> int | None:
        column = table.column(self.path[0])
        if len(self.path) == 1:
            return None if column.null_count == 0 else _first_true(pc.is_null(column))
        valid = pc.is_valid(column)
        value = column
        for name in self.path[1:]:
            value = pc.struct_field(value, name)
            valid = pc.and_(valid, pc.is_valid(value))
        return None if pc.all(valid).as_py() is not False else _first_true(pc.invert(valid))

    def error(self, table: pa.Table, row: int, shown: str) -> InvariantViolationError:
        name = column_path_name(self.path)
        return InvariantViolationError(
            f"[DELTA_NOT_NULL_CONSTRAINT_VIOLATED] NOT NULL constraint violated for column: {name}. "
            f"(table {shown})",
            table=shown,
            error_class="DELTA_NOT_NULL_CONSTRAINT_VIOLATED",
            constraint="NOT NULL",
            expression=name,
            values={name: None},
        )


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int:
    return int(pc.index(mask, True).as_py())


def _first_false_or_null(result: pa.Array | pa.ChunkedArray) -> int | None:
    if len(result) == 0:
        return None
    if pa.types.is_null(result.type):
        return 0
    if result.null_count == 0 and pc.all(result).as_py():
        return None
    return _first_true(pc.invert(pc.fill_null(result, False)))


@dataclass(frozen=True)
class _Generated:
    column: str
    compute: BoundExpression
    check: _Check


class RowConstraints:
    """A table's constraints bound to its Arrow schema (see the module docstring)."""

    def __init__(
        self,
        table: str,
        *,
        checks: Sequence[_Check] = (),
        not_null: Sequence[_NotNull] = (),
        invariants: Sequence[_Check] = (),
        generated: Sequence[_Generated] = (),
        collections: Mapping[str, pa.DataType] | None = None,
    ) -> None:
        self._rules: tuple[_Check | _NotNull, ...] = (*checks, *not_null, *invariants)
        self._generated = {g.column.lower(): g for g in generated}
        self._collections = dict(collections or {})
        """Columns with NOT NULL parts inside arrays or maps, with their declared (strict) types."""
        self._shown = redact_url(table)

    def enforce(self, table: pa.Table, missing: Collection[str] = ()) -> pa.Table:
        """``table`` (the table's columns, in order and type) with the generated columns named in
        ``missing`` (columns the incoming data lacked, any case) computed; raises
        :class:`InvariantViolationError` for the first row that violates a constraint."""
        lowered = {name.lower() for name in missing}
        rules: list[_Check | _NotNull] = list(self._rules)
        for key, generated in self._generated.items():
            if key in lowered:
                index = table.schema.get_field_index(generated.column)
                field = table.schema.field(index)
                values = generated.compute.evaluate(table)
                if values.type != field.type:
                    values = values.cast(field.type)
                table = table.set_column(index, field, values)
            else:
                rules.append(generated.check)
        if table.num_rows == 0:
            return table
        first: tuple[int, _Check | _NotNull] | None = None
        for rule in rules:
            row = rule.first_violation(table)
            if row is not None and (first is None or row < first[0]):
                first = (row, rule)
        if first is not None:
            raise first[1].error(table, first[0], self._shown)
        for column, declared in self._collections.items():
            path = _null_in_collection(table.column(column), declared, (column,))
            if path is not None:
                raise _NotNull(path).error(table, 0, self._shown)
        return table


def _null_in_collection(
    data: pa.Array | pa.ChunkedArray, data_type: pa.DataType, path: tuple[str, ...], inside: bool = False
) -> tuple[str, ...] | None:
    """The path (``column.element.field``, ``column.value``, ...) of the first NOT NULL element,
    key, value, or field of one, that holds a null inside an array or map of ``data``."""
    if isinstance(data, pa.ChunkedArray):
        chunks = (_null_in_collection(chunk, data_type, path, inside) for chunk in data.chunks)
        return next((found for found in chunks if found is not None), None)
    if pa.types.is_struct(data_type):
        for field in data_type:
            child = pc.struct_field(data, field.name)  # null where the struct is
            if (
                inside
                and not field.nullable
                and pc.any(pc.and_(pc.is_valid(data), pc.is_null(child))).as_py()
            ):
                return (*path, field.name)
            found = _null_in_collection(child, field.type, (*path, field.name), inside)
            if found is not None:
                return found
        return None
    if pa.types.is_map(data_type):
        entry = pa.struct([data.type.key_field, data.type.item_field])  # the data's, maybe looser
        entries = data.cast(pa.list_(pa.field("entries", entry, False))).flatten()
        for index, name, field in ((0, "key", data_type.key_field), (1, "value", data_type.item_field)):
            values = entries.field(index)
            if not field.nullable and values.null_count:
                return (*path, name)
            found = _null_in_collection(values, field.type, (*path, name), True)
            if found is not None:
                return found
        return None
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        elements = data.flatten()
        if not data_type.value_field.nullable and elements.null_count:
            return (*path, "element")
        return _null_in_collection(elements, data_type.value_type, (*path, "element"), True)
    return None


class _UnbindableError(Exception):
    """An expression this library cannot evaluate; the caller names the constraint."""


def _check(name: str, text: str, schema: pa.Schema, now: _dt.datetime) -> _Check:
    try:
        parsed = parse_expression(text, kind="constraint")
        bound = parsed.bind(schema, now=now)
    except ExpressionError as exc:
        raise _UnbindableError(str(exc)) from None
    if not (pa.types.is_boolean(bound.type) or pa.types.is_null(bound.type)):
        raise _UnbindableError(
            f"[DELTA_NON_BOOLEAN_CHECK_CONSTRAINT] CHECK constraint '{name}' ({text}) should be a "
            "boolean expression."
        )
    written = {column.position: column.parts for column in parsed.columns}
    columns = {column_path_name(written.get(ref.position, ref.path)): ref.path for ref in bound.references}
    return _Check(name, parsed.to_sql(spark_names=True), bound, tuple(columns.items()))


def _generated(column: str, text: str, schema: pa.Schema, now: _dt.datetime) -> _Generated:
    target = schema.field(column).type
    try:
        bound = parse_expression(text, kind="generation expression").bind(schema, now=now)
        compute = bound if bound.type == target else bound.cast(target)
    except ExpressionError as exc:
        raise _UnbindableError(str(exc)) from None
    check = _check(GENERATED_COLUMN_CONSTRAINT, f"{quote_name(column)} <=> ({text})", schema, now)
    return _Generated(column, compute, check)


_WHAT = {
    "checkConstraints": "CHECK constraint",
    "invariants": "invariant",
    "generatedColumns": "generated column",
}


def compile_constraints(
    constraints: TableConstraints, schema: pa.Schema, table: str, now: _dt.datetime | None = None
) -> RowConstraints | None:
    """``constraints`` bound to the table's Arrow ``schema`` (``None`` when there are none, so a
    table without constraints costs nothing per batch). ``now`` is the write's time, what
    ``current_timestamp()`` and ``current_date()`` return in every expression. Raises
    :class:`UnsupportedTableFeatureError` naming the constraint and the feature when an expression
    does not parse or bind with this library's SQL grammar (an unknown function or column) or a
    CHECK constraint is not boolean."""
    if constraints.empty:
        return None
    moment = now or _dt.datetime.now(_dt.UTC)
    shown = redact_url(table)
    compiled: dict[str, list[Any]] = {feature: [] for feature in _WHAT}
    sources = [
        *(("checkConstraints", c.name, c.expression) for c in constraints.checks),
        *(("invariants", c.name, c.expression) for c in constraints.invariants),
        *(("generatedColumns", g.column, g.expression) for g in constraints.generated),
    ]
    for feature, name, text in sources:
        try:
            if feature == "generatedColumns":
                compiled[feature].append(_generated(name, text, schema, moment))
            else:
                compiled[feature].append(_check(name, text, schema, moment))
        except _UnbindableError as exc:
            raise UnsupportedTableFeatureError(
                f"Cannot write to table {shown}: the {_WHAT[feature]} {name} ({text}) cannot be enforced "
                f"by this writer: {exc}",
                table=shown,
                features=[feature],
            ) from None
    return RowConstraints(
        table,
        checks=compiled["checkConstraints"],
        not_null=[_NotNull(path) for path in constraints.not_null],
        invariants=compiled["invariants"],
        generated=compiled["generatedColumns"],
        collections={name: schema.field(name).type for name in constraints.not_null_in_collections},
    )
