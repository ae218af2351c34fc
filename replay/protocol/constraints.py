"""The rules a table sets on every row written to it, read from its protocol and metadata.

What Delta's ``Constraints.getAll`` and generated columns collect before a write, as texts (pure
values, picklable; :mod:`replay.txn.constraint_checks` binds and evaluates them):

* **CHECK constraints**: every ``delta.constraints.<name>`` table property (the name as the key
  spells it after the prefix), a SQL boolean expression a row must make true (``false`` and
  ``NULL`` both violate it);
* **NOT NULL**: every non-nullable field reached through structs only (Delta's
  ``filterRecursively(schema, checkComplexTypes = false)``): a top-level column or a struct field,
  which is null also when one of its enclosing structs is. Non-nullable elements, keys and values of
  arrays and maps are not enforced (Delta refuses to create them unless told to ignore them);
* **invariants**: the legacy ``delta.invariants`` field metadata
  (``{"expression": {"expression": "<sql>"}}``) of a field reached through structs, checked like a
  CHECK constraint named ``EXPRESSION(<sql>)``;
* **generated columns**: top-level fields whose metadata holds ``delta.generationExpression``,
  when the protocol supports the ``generatedColumns`` writer feature (writer version 4 or the
  feature listed); on a table whose protocol does not, the key is an inert annotation;
* **identity columns**: top-level fields with ``delta.identity.*`` metadata, when the protocol
  supports the ``identityColumns`` writer feature (:mod:`replay.protocol.identity_columns`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import orjson

from replay.protocol.actions import Metadata, Protocol
from replay.protocol.errors import DeltaError
from replay.protocol.identity_columns import IdentityColumn, identity_columns
from replay.protocol.schema import ArrayType, DataType, MapType, StructField, StructType

CHECK_CONSTRAINT_PREFIX = "delta.constraints."
INVARIANTS_KEY = "delta.invariants"
GENERATION_EXPRESSION_KEY = "delta.generationExpression"


class UnrecognizedInvariantError(DeltaError, ValueError):
    """A field's ``delta.invariants`` is not an expression rule (Delta's ``DELTA_UNRECOGNIZED_INVARIANT``)."""


def column_path_name(path: Sequence[str]) -> str:
    """A column path as Spark names it in errors: parts joined by dots, a part that holds a dot
    backquoted (``UnresolvedAttribute.name``)."""
    return ".".join(f"`{part.replace('`', '``')}`" if "." in part else part for part in path)


@dataclass(frozen=True)
class CheckConstraint:
    """A SQL boolean expression every written row must make true; ``name`` as Delta reports it."""

    name: str
    expression: str


@dataclass(frozen=True)
class GeneratedColumn:
    """A top-level column computed from ``expression`` over the row's other columns."""

    column: str
    expression: str


@dataclass(frozen=True)
class TableConstraints:
    """Everything a writer must enforce on the rows of one table, in Delta's order of checking:
    CHECK constraints, NOT NULL fields, invariants, then generated columns."""

    checks: tuple[CheckConstraint, ...] = ()
    not_null: tuple[tuple[str, ...], ...] = ()
    invariants: tuple[CheckConstraint, ...] = ()
    generated: tuple[GeneratedColumn, ...] = ()
    not_null_in_collections: tuple[str, ...] = ()
    """Top-level columns holding a NOT NULL element, key, value or field inside an array or map.
    Delta's writer does not enforce these (it refuses to create them), but a Parquet file cannot
    store a null there: a writer refuses one with the NOT NULL error naming its path."""
    identity: tuple[IdentityColumn, ...] = ()
    """The identity columns: generated where the data lacks them, refused where it gives values
    to a GENERATED ALWAYS one (:mod:`replay.protocol.identity_columns`)."""

    @property
    def empty(self) -> bool:
        return not (
            self.checks
            or self.not_null
            or self.invariants
            or self.generated
            or self.not_null_in_collections
            or self.identity
        )

    @property
    def not_null_columns(self) -> tuple[str, ...]:
        """The top-level NOT NULL columns."""
        return tuple(path[0] for path in self.not_null if len(path) == 1)


def check_constraints(metadata: Metadata) -> tuple[CheckConstraint, ...]:
    """The table's CHECK constraints (``delta.constraints.<name>`` properties, key in any case)."""
    return tuple(
        CheckConstraint(key[len(CHECK_CONSTRAINT_PREFIX) :], str(text))
        for key, text in (metadata.configuration or {}).items()
        if key.lower().startswith(CHECK_CONSTRAINT_PREFIX)
    )


def _struct_fields(
    schema: StructType, parents: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], StructField]]:
    """Every field reached through structs only, with its path (arrays and maps not entered)."""
    for struct_field in schema.fields:
        path = (*parents, struct_field.name)
        yield path, struct_field
        if isinstance(struct_field.type, StructType):
            yield from _struct_fields(struct_field.type, path)


def _not_null_inside(data_type: DataType, inside: bool) -> bool:
    """Whether a NOT NULL element, key, value or field sits inside an array or map of ``data_type``."""
    if isinstance(data_type, StructType):
        return any((inside and not f.nullable) or _not_null_inside(f.type, inside) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return not data_type.contains_null or _not_null_inside(data_type.element_type, True)
    if isinstance(data_type, MapType):
        return (
            not data_type.value_contains_null
            or _not_null_inside(data_type.key_type, True)
            or _not_null_inside(data_type.value_type, True)
        )
    return False


def invariant_expression(struct_field: StructField, path: Sequence[str]) -> str:
    """The SQL text of a field's ``delta.invariants``; :class:`UnrecognizedInvariantError` if it is
    not ``{"expression": {"expression": "<sql>"}}``."""
    raw = struct_field.metadata[INVARIANTS_KEY]
    try:
        rule = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
        text = rule["expression"]["expression"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        text = None
    if not isinstance(text, str):
        raise UnrecognizedInvariantError(
            f"[DELTA_UNRECOGNIZED_INVARIANT] Unrecognized invariant on column {column_path_name(path)}: "
            f"{raw!r} (expected an expression rule)"
        )
    return text


def table_constraints(protocol: Protocol, metadata: Metadata) -> TableConstraints:
    """The constraints of a table with this protocol and metadata (see the module docstring)."""
    schema = metadata.schema
    fields = list(_struct_fields(schema))
    invariants = tuple(
        CheckConstraint(f"EXPRESSION({text})", text)
        for path, struct_field in fields
        if INVARIANTS_KEY in struct_field.metadata
        for text in (invariant_expression(struct_field, path),)
    )
    generated: tuple[GeneratedColumn, ...] = ()
    if protocol.supports_writer_feature("generatedColumns"):
        generated = tuple(
            GeneratedColumn(f.name, str(f.metadata[GENERATION_EXPRESSION_KEY]))
            for f in schema.fields
            if GENERATION_EXPRESSION_KEY in f.metadata
        )
    identity: tuple[IdentityColumn, ...] = ()
    if protocol.supports_writer_feature("identityColumns"):
        identity = identity_columns(schema)
    return TableConstraints(
        identity=identity,
        checks=check_constraints(metadata),
        not_null=tuple(path for path, struct_field in fields if not struct_field.nullable),
        invariants=invariants,
        generated=generated,
        not_null_in_collections=tuple(f.name for f in schema.fields if _not_null_inside(f.type, False)),
    )
