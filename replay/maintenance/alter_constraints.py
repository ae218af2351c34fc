"""ALTER TABLE ADD / DROP CONSTRAINT: CHECK constraints, stored and validated as Delta does.

A constraint is the table property ``delta.constraints.<name>`` (the name in lower case: Delta's
names are case-insensitive) holding a SQL boolean expression over the table's columns, read with
the project's SQL grammar (:func:`replay.protocol.sql_predicate.parse_predicate`). Adding one reads
every row first: a row for which the expression is false or null is a violation, and any
violation refuses the constraint with Delta's ``DELTA_NEW_CHECK_CONSTRAINT_VIOLATION`` and the
count. The commit reads the whole table, so data written concurrently makes it conflict instead
of slipping past the check. Writers enforce constraints on later writes (the row-level
operations); this module stores and validates them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pyarrow as pa

from replay.log.table_io import TableIO
from replay.maintenance.alter_commit import commit_alter
from replay.protocol.errors import DeltaError
from replay.protocol.sql_predicate import SqlPredicate, parse_predicate
from replay.state.snapshot import Snapshot

CONSTRAINT_PREFIX = "delta.constraints."
RESERVED_NAMES = frozenset({"__char_varchar_string_length_check__"})
ASSUME_DROP_IF_EXISTS_KEY = "spark.databricks.delta.constraints.assumesDropIfExists.enabled"


class ConstraintError(DeltaError, ValueError):
    """A CHECK constraint Delta refuses: existing rows violate it, its name is taken or unknown."""

    def __init__(
        self, message: str, *, table: str | None = None, constraint: str = "", violations: int = 0
    ) -> None:
        super().__init__(message, table=table)
        self.constraint = constraint
        self.violations = violations


def constraint_key(name: str) -> str:
    return f"{CONSTRAINT_PREFIX}{name.lower()}"


def constraints_of(configuration: Mapping[str, str]) -> dict[str, str]:
    """The table's CHECK constraints by (lower-case) name."""
    return {
        key[len(CONSTRAINT_PREFIX) :]: value
        for key, value in configuration.items()
        if key.lower().startswith(CONSTRAINT_PREFIX)
    }


def add_constraint(io: TableIO, snapshot: Snapshot, name: str, expression: str) -> int:
    """Add the CHECK constraint ``name`` after checking every row of ``snapshot`` (the latest
    version, files replayed); returns the committed version.

    Raises :class:`ConstraintError` (Delta's ``DELTA_CONSTRAINT_ALREADY_EXISTS``,
    ``DELTA_NEW_CHECK_CONSTRAINT_VIOLATION`` naming the constraint and the number of violating
    rows, a reserved name), :class:`~replay.protocol.sql_predicate.PredicateError` for an
    expression the grammar cannot read or naming an unknown column, and Delta's conflict
    exceptions.
    """
    table = io.shown_path
    if not name or name.lower() in RESERVED_NAMES:
        raise ConstraintError(
            f"Cannot use '{name}' as the name of a CHECK constraint.", table=table, constraint=name
        )
    configuration = dict(snapshot.metadata.configuration or {})
    existing = constraints_of(configuration)
    if name.lower() in existing:
        raise ConstraintError(
            f"[DELTA_CONSTRAINT_ALREADY_EXISTS] Constraint '{name}' already exists. Please delete the old "
            f"constraint first.\nOld constraint:\n{existing[name.lower()]}",
            table=table,
            constraint=name,
        )
    predicate = parse_predicate(expression).resolve(snapshot.schema.field_names)
    violations = count_violations(snapshot, predicate)
    if violations:
        raise ConstraintError(
            f"[DELTA_NEW_CHECK_CONSTRAINT_VIOLATION] {violations} rows in {table} violate the new CHECK "
            f"constraint ({expression}) (constraint {name})",
            table=table,
            constraint=name,
            violations=violations,
        )
    configuration[constraint_key(name)] = expression
    metadata = dataclasses.replace(snapshot.metadata, configuration=configuration)
    parameters = {"name": name, "expr": expression}
    return commit_alter(io, snapshot, "ADD CONSTRAINT", parameters, metadata, reads_whole_table=True)


def count_violations(snapshot: Snapshot, predicate: SqlPredicate) -> int:
    """How many rows of ``snapshot`` make ``predicate`` false or null (read batch by batch, only
    the columns the predicate names)."""
    scan = snapshot.scan(columns=predicate.columns or None)
    return sum(predicate.violating(pa.Table.from_batches([batch])).num_rows for batch in scan.to_batches())


def drop_constraint(io: TableIO, snapshot: Snapshot, name: str, *, raise_if_not_exists: bool = True) -> int:
    """Drop the CHECK constraint ``name``; returns the committed version. A missing constraint is
    Delta's ``DELTA_CONSTRAINT_DOES_NOT_EXIST`` unless ``raise_if_not_exists=False`` (IF EXISTS) or
    the session sets ``spark.databricks.delta.constraints.assumesDropIfExists.enabled``; as in
    Delta, the commit happens either way."""
    table = io.shown_path
    configuration = dict(snapshot.metadata.configuration or {})
    existing = constraints_of(configuration)
    expression = existing.get(name.lower())
    assume_if_exists = (io.conf.get(ASSUME_DROP_IF_EXISTS_KEY) or "").strip().lower() == "true"
    if expression is None and raise_if_not_exists and not assume_if_exists:
        raise ConstraintError(
            f"[DELTA_CONSTRAINT_DOES_NOT_EXIST] Cannot drop nonexistent constraint {name} from table "
            f"{table}. To avoid throwing an error, provide the parameter IF EXISTS or set the SQL session "
            f"configuration {ASSUME_DROP_IF_EXISTS_KEY} to true.",
            table=table,
            constraint=name,
        )
    for key in [k for k in configuration if k.lower() == constraint_key(name)]:
        del configuration[key]
    metadata = dataclasses.replace(snapshot.metadata, configuration=configuration)
    if expression is None:
        parameters = {"name": name, "existed": "false"}
    else:
        parameters = {"name": name, "expr": expression, "existed": "true"}
    return commit_alter(io, snapshot, "DROP CONSTRAINT", parameters, metadata)
