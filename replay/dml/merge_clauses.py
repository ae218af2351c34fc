"""MERGE's WHEN clauses: what each may read and set, ``*`` expansion and schema evolution.

As in Delta (``ResolveDeltaMergeInto``):

* a ``WHEN MATCHED`` clause reads the target and the source, ``WHEN NOT MATCHED`` (insert) the
  source only, ``WHEN NOT MATCHED BY SOURCE`` the target only;
* within each kind clauses apply in order, the first whose condition holds wins, and only the
  last one may omit its condition (``DELTA_NON_LAST_*_CLAUSE_OMIT_CONDITION``);
* ``UPDATE SET *`` / ``INSERT *`` assign every target column its source column of the same name
  (a target column without one is ``DELTA_MERGE_UNRESOLVED_EXPRESSION``); with schema evolution
  they assign every source column instead, adding the ones the target lacks, and leave target
  columns the source lacks unchanged (update) or null (insert);
* with schema evolution an update or insert may also set a column the target lacks if the
  source has a column of that name; the new columns take the source's types and are appended
  to the schema (Delta's ``filterSchema`` + ``mergeSchemas``). ``NOT MATCHED BY SOURCE`` clauses
  never add columns. Nested struct fields are not evolved here (top-level columns only).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from replay.dml.assignments import check_unique, find_column, quote
from replay.dml.errors import missing_when_error, unconditional_not_last_error, unresolved_error
from replay.dml.expressions import SqlText
from replay.protocol.constraints import GENERATION_EXPRESSION_KEY
from replay.protocol.identity_columns import IdentityColumn, explicit_insert_error, update_error
from replay.protocol.schema import StructType
from replay.protocol.type_widening import widened_columns
from replay.txn.schema_merge import as_nullable, merge_schemas
from replay.txn.write import delta_schema

MATCHED = "MATCHED"
NOT_MATCHED = "NOT_MATCHED"
NOT_MATCHED_BY_SOURCE = "NOT_MATCHED_BY_SOURCE"
KINDS = (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE)


@dataclass(frozen=True)
class ClauseSpec:
    """A WHEN clause as the caller gave it: ``updates`` maps target columns to SQL expressions
    (``None``: ``*``, all columns but ``except_columns``)."""

    kind: str
    action: str
    predicate: str | None = None
    updates: Mapping[str, str] | None = None
    except_columns: tuple[str, ...] = ()

    @property
    def clause_name(self) -> str:
        """``UPDATE`` / ``INSERT`` / ``DELETE``, as Delta's errors name a clause."""
        return self.action.upper()

    def operation_parameter(self) -> dict[str, str]:
        """Delta's ``MergePredicate``: the condition (when there is one) and the action type."""
        entry = {"predicate": self.predicate} if self.predicate is not None else {}
        return {**entry, "actionType": self.action}


@dataclass(frozen=True)
class MergeClause:
    """A clause bound to the scopes it reads: its condition and its column assignments (target
    column after the merge -> value)."""

    spec: ClauseSpec
    condition: SqlText | None
    assignments: Mapping[str, SqlText]

    @property
    def action(self) -> str:
        return self.spec.action


@dataclass(frozen=True)
class Aliases:
    target: str
    source: str


def check_clause_order(specs: Sequence[ClauseSpec], table: str) -> None:
    """Delta's checks: at least one clause, and only the last clause of a kind without a condition."""
    if not specs:
        raise missing_when_error(table)
    for kind in KINDS:
        of_kind = [spec for spec in specs if spec.kind == kind]
        if any(spec.predicate is None for spec in of_kind[:-1]):
            raise unconditional_not_last_error(kind, table)


def _strip_alias(name: str, alias: str) -> str:
    prefix = alias.lower() + "."
    return name[len(prefix) :] if name.lower().startswith(prefix) else name


def _pairs(
    spec: ClauseSpec,
    target: pa.Schema,
    source: pa.Schema,
    aliases: Aliases,
    *,
    evolve: bool,
    table: str,
    generated: Collection[str] = (),
) -> list[tuple[str, str]]:
    """The clause's ``(target column, SQL value)`` pairs, ``*`` expanded (new columns spelled as in
    the source; a ``generated`` column the source lacks is left to be computed)."""
    excluded = {c.lower() for c in spec.except_columns}
    source_ref = quote(aliases.source)
    if spec.updates is None:  # * (update all / insert all)
        if evolve:
            names = [name for name in source.names if name.lower() not in excluded]
            return [(find_column(target.names, n) or n, f"{source_ref}.{quote(n)}") for n in names]
        pairs = []
        for column in target.names:
            if column.lower() in excluded:
                continue
            match = find_column(source.names, column)
            if match is None and column in generated:
                continue  # computed from the row's other columns (Delta's rule for generated columns)
            if match is None:
                raise unresolved_error(column, spec.clause_name, aliases.source, source.names, table)
            pairs.append((column, f"{source_ref}.{quote(match)}"))
        return pairs
    pairs = []
    can_add = evolve and spec.kind in (MATCHED, NOT_MATCHED)
    for given, value in spec.updates.items():
        if not isinstance(value, str):
            raise TypeError(f"MERGE assignments are SQL strings; {given!r} was given {value!r}")
        name = _strip_alias(str(given), aliases.target)
        column = find_column(target.names, name)
        if column is None and can_add:
            column = find_column(source.names, name)
        if column is None:
            raise unresolved_error(name, spec.clause_name, aliases.target, target.names, table)
        pairs.append((column, value))
    return pairs


def _check_identity(
    spec: ClauseSpec, assigned: Sequence[str], identity: Sequence[IdentityColumn], table: str
) -> None:
    """Delta's rules for identity columns in a clause: an insert may give one values only when it
    is GENERATED BY DEFAULT, an update never assigns one."""
    lowered = {name.lower() for name in assigned}
    for column in identity:
        if column.name.lower() not in lowered:
            continue
        if spec.kind != NOT_MATCHED:
            raise update_error(column.name, table)
        if not column.allow_explicit_insert:
            raise explicit_insert_error(column.name, table)


def evolved_schema(target: StructType, source: pa.Schema, new_columns: Sequence[str]) -> StructType:
    """The target schema with the source's ``new_columns`` (nullable, source types) appended."""
    if not new_columns:
        return target
    added = pa.schema([source.field(name) for name in new_columns])
    return merge_schemas(target, as_nullable(delta_schema(added)), allow_implicit_casts=True)


def resolve_clauses(
    specs: Sequence[ClauseSpec],
    target: StructType,
    source: pa.Schema,
    aliases: Aliases,
    *,
    evolve: bool,
    table: str,
    now: _dt.datetime | None = None,
    widen: bool = False,
    identity: Sequence[IdentityColumn] = (),
) -> tuple[list[MergeClause], StructType]:
    """Bind ``specs`` (see the module docstring); returns the clauses and the target schema after
    the merge (the table's own unless ``evolve`` adds columns, or with ``widen``, a table with type
    widening, widens the columns ``*`` clauses assign from a wider source type). Unknown columns,
    functions and types fail here, naming them. ``now`` is what ``current_timestamp()`` stands for."""
    check_clause_order(specs, table)
    moment = now or _dt.datetime.now(_dt.UTC)
    target_arrow = target.to_arrow()
    generated = [f.name for f in target.fields if GENERATION_EXPRESSION_KEY in (f.metadata or {})]
    generated += [column.name for column in identity]  # generated for an insert that lacks them
    expanded = [
        _pairs(spec, target_arrow, source, aliases, evolve=evolve, table=table, generated=generated)
        if spec.action != "delete"
        else []
        for spec in specs
    ]
    for spec, pairs in zip(specs, expanded, strict=True):
        _check_identity(spec, [column for column, _ in pairs], identity, table)
    new_columns: list[str] = []
    for pairs in expanded:
        for column, _ in pairs:
            if find_column(target_arrow.names, column) is None and find_column(new_columns, column) is None:
                new_columns.append(column)
    final = evolved_schema(target, source, new_columns)
    if evolve and widen:
        starred = [
            name
            for spec in specs
            if spec.action != "delete" and spec.updates is None
            for name in source.names
            if name.lower() not in {c.lower() for c in spec.except_columns}
        ]
        final = widened_columns(final, delta_schema(source), starred)
    final_arrow = final.to_arrow()
    scopes = {
        MATCHED: {aliases.target: target_arrow, aliases.source: source},
        NOT_MATCHED: {aliases.source: source},
        NOT_MATCHED_BY_SOURCE: {aliases.target: target_arrow},
    }
    clauses = []
    for spec, pairs in zip(specs, expanded, strict=True):
        check_unique([column for column, _ in pairs], table)
        scope = scopes[spec.kind]
        condition = (
            SqlText(spec.predicate, scope, kind="predicate", now=moment)
            if spec.predicate is not None
            else None
        )
        assignments = {}
        for column, value in pairs:
            resolved = find_column(final_arrow.names, column) or column
            target_type = final_arrow.field(resolved).type
            assignments[resolved] = SqlText(value, scope, target=target_type, column=resolved, now=moment)
        clause = MergeClause(spec, condition, assignments)
        if condition is not None:  # a condition must be a boolean: to_predicate checks it
            condition.bound.to_predicate(scope=next(iter(scope)))
        for assignment in assignments.values():
            _ = assignment.bound
        clauses.append(clause)
    return clauses, final
