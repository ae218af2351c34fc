"""Row filters as data: what a filter says, in a form that file pruning can reason about.

A :data:`Predicate` is a small tree of comparisons of one column with literals (``=``, ``!=``,
``<``, ``<=``, ``>``, ``>=``, ``IN``, ``IS NULL``, ``STARTS WITH``) joined by ``AND``, ``OR`` and
``NOT``, with SQL semantics (a comparison with a null is not true). Four front ends build one:

* :func:`from_dnf`: pyarrow/deltalake DNF filters, ``[("part", "=", 3), ("id", ">", 10)]`` (AND)
  or a list of such lists (OR of ANDs);
* :func:`replay.protocol.predicate_expressions.from_expression`: a
  :class:`pyarrow.compute.Expression`, read from its printed form; any part that is not read with
  certainty becomes :class:`Opaque` (no pruning, never a wrong one);
* :mod:`replay.protocol.sql` reads SQL expressions (``replaceWhere``, ``deltalog read --filter``,
  DML conditions) and gives their prunable part;
* the Spark data source converts Spark's pushed filters (``replay.spark``).

:func:`to_expression` turns a predicate without opaque parts back into a pyarrow expression for
exact row filtering. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

Op = Literal["=", "!=", "<", "<=", ">", ">="]
_NEGATED: dict[Op, Op] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Compare:
    """``column <op> value`` (``value`` a Python value or a pyarrow scalar, never null)."""

    column: tuple[str, ...]
    op: Op
    value: object


@dataclass(frozen=True)
class CompareColumns:
    """``left <op> right``: two columns compared (SQL's ``p1 = p2``); pruning cannot use it."""

    left: tuple[str, ...]
    op: Op
    right: tuple[str, ...]


@dataclass(frozen=True)
class In:
    """``column IN values`` (``negated``: ``NOT IN``); no value is null."""

    column: tuple[str, ...]
    values: tuple[object, ...]
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    """``column IS NULL`` (``negated``: ``IS NOT NULL``)."""

    column: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True)
class StartsWith:
    """``column`` (a string) starts with ``prefix``."""

    column: tuple[str, ...]
    prefix: str


@dataclass(frozen=True)
class And:
    children: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    child: Predicate


@dataclass(frozen=True)
class Opaque:
    """A part of a filter that pruning cannot reason about (it may match anything)."""

    text: str


Predicate = Compare | CompareColumns | In | IsNull | StartsWith | And | Or | Not | Opaque
PREDICATE_TYPES = (Compare, CompareColumns, In, IsNull, StartsWith, And, Or, Not, Opaque)
"""The node types of a :data:`Predicate`, for ``isinstance``."""
TRUE: Predicate = And(())
"""The predicate every row satisfies."""
FALSE: Predicate = Or(())
"""The predicate no row satisfies."""


class InvalidFilterError(ValueError):
    """A filter given by the caller is malformed (the message names the offending part)."""


def columns_of(predicate: Predicate) -> set[tuple[str, ...]]:
    """Every column path the predicate reads."""
    if isinstance(predicate, And | Or):
        return set().union(*(columns_of(child) for child in predicate.children))
    if isinstance(predicate, Not):
        return columns_of(predicate.child)
    if isinstance(predicate, Opaque):
        return set()
    if isinstance(predicate, CompareColumns):
        return {predicate.left, predicate.right}
    return {predicate.column}


def has_opaque(predicate: Predicate) -> bool:
    if isinstance(predicate, Opaque):
        return True
    if isinstance(predicate, And | Or):
        return any(has_opaque(child) for child in predicate.children)
    if isinstance(predicate, Not):
        return has_opaque(predicate.child)
    return False


def negate(predicate: Predicate) -> Predicate:
    """``NOT predicate`` with the negation pushed to the leaves (SQL semantics).

    ``NOT (c < v)`` is ``c >= v``: for a null ``c`` both are not true. ``NOT`` of a prefix test or
    of an opaque part stays opaque.
    """
    if isinstance(predicate, Compare):
        return Compare(predicate.column, _NEGATED[predicate.op], predicate.value)
    if isinstance(predicate, CompareColumns):
        return CompareColumns(predicate.left, _NEGATED[predicate.op], predicate.right)
    if isinstance(predicate, In):
        return In(predicate.column, predicate.values, not predicate.negated)
    if isinstance(predicate, IsNull):
        return IsNull(predicate.column, not predicate.negated)
    if isinstance(predicate, And):
        return Or(tuple(negate(child) for child in predicate.children))
    if isinstance(predicate, Or):
        return And(tuple(negate(child) for child in predicate.children))
    if isinstance(predicate, Not):
        return predicate.child
    return Opaque(f"NOT {predicate}")


def column_name(path: tuple[str, ...]) -> str:
    """``("a", "b")`` -> ``a.b``."""
    return ".".join(path)


# -- DNF filters ----------------------------------------------------------------------------------
DnfTerm = tuple[str, str, object]
_DNF_OPS: dict[str, Op] = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def from_dnf(filters: Sequence[DnfTerm] | Sequence[Sequence[DnfTerm]]) -> Predicate:
    """A predicate from pyarrow/deltalake DNF filters.

    A list of ``(column, op, value)`` tuples is their conjunction; a list of such lists is the
    disjunction of the conjunctions. ``op`` is one of ``=``, ``==``, ``!=``, ``<``, ``<=``,
    ``>``, ``>=``, ``in``, ``not in``; ``= None`` means ``IS NULL``, ``!= None`` ``IS NOT NULL``.
    ``column`` may name a nested field as ``a.b``. Raises :class:`InvalidFilterError` naming
    the malformed term.
    """
    if not filters:
        return TRUE
    if all(isinstance(term, tuple) for term in filters):
        return And(tuple(_dnf_term(term) for term in filters))
    if all(isinstance(conjunction, list) for conjunction in filters):
        return Or(tuple(And(tuple(_dnf_term(term) for term in conjunction)) for conjunction in filters))
    raise InvalidFilterError(
        f"filters must be a list of (column, op, value) tuples or a list of such lists, got {filters!r}"
    )


def _dnf_term(term: object) -> Predicate:
    if not (
        isinstance(term, tuple) and len(term) == 3 and isinstance(term[0], str) and isinstance(term[1], str)
    ):
        raise InvalidFilterError(f"a filter term must be (column, op, value), got {term!r}")
    name, op, value = term
    path = tuple(name.split("."))
    lowered = op.strip().lower()
    if lowered in ("in", "not in"):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise InvalidFilterError(f"the value of {term!r} must be a list of values")
        values = tuple(value)
        present = tuple(v for v in values if v is not None)
        test: Predicate = In(path, present, negated=lowered == "not in")
        if len(present) == len(values):
            return test
        # a null in the list: ``IN`` also matches nulls (pyarrow's is_in), ``NOT IN`` never does
        return Or((test, IsNull(path))) if lowered == "in" else And((test, IsNull(path, negated=True)))
    if lowered not in _DNF_OPS:
        raise InvalidFilterError(f"unknown operator {op!r} in {term!r} (use =, !=, <, <=, >, >=, in, not in)")
    if value is None:
        if lowered in ("=", "=="):
            return IsNull(path)
        if lowered == "!=":
            return IsNull(path, negated=True)
        raise InvalidFilterError(f"cannot compare with None in {term!r}")
    return Compare(path, _DNF_OPS[lowered], value)


# -- to pyarrow -----------------------------------------------------------------------------------
def _field(path: tuple[str, ...]) -> pc.Expression:
    return pc.field(*path)


def coerce_literal(value: object, arrow_type: pa.DataType | None) -> pa.Scalar:
    """``value`` as a scalar of ``arrow_type`` (its own type if ``None``), converted as SQL casts it.

    A string compared with a date or timestamp column is read as an ISO date or timestamp; a
    timestamp without a time zone compared with a zoned column is taken as UTC. Raises
    :class:`ValueError` or an Arrow error when the value does not fit.
    """
    if isinstance(value, pa.Scalar):
        scalar = value
    else:
        temporal = arrow_type is not None and (
            pa.types.is_date(arrow_type) or pa.types.is_timestamp(arrow_type)
        )
        if temporal and isinstance(value, str):
            parsed = _dt.datetime.fromisoformat(value.strip())
            value = parsed.date() if pa.types.is_date(arrow_type) else parsed
        zoned = arrow_type is not None and pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None
        if zoned and isinstance(value, _dt.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        scalar = pa.scalar(value)
    if arrow_type is not None and scalar.type != arrow_type:
        scalar = scalar.cast(arrow_type)
    return scalar


_COMPARISONS = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def to_expression(predicate: Predicate, schema: pa.Schema | None = None) -> pc.Expression:
    """The pyarrow expression of ``predicate``; literals are cast to the column types of ``schema``.

    Raises :class:`InvalidFilterError` for an opaque part or a literal that does not fit its
    column, and :class:`KeyError` naming an unknown column.
    """
    if isinstance(predicate, And):
        result = pc.scalar(True)
        for child in predicate.children:
            result = result & to_expression(child, schema)
        return result
    if isinstance(predicate, Or):
        if not predicate.children:
            return pc.scalar(False)
        result = to_expression(predicate.children[0], schema)
        for child in predicate.children[1:]:
            result = result | to_expression(child, schema)
        return result
    if isinstance(predicate, Not):
        return ~to_expression(predicate.child, schema)
    if isinstance(predicate, Opaque):
        raise InvalidFilterError(f"cannot filter rows by an opaque predicate: {predicate.text}")
    if isinstance(predicate, CompareColumns):
        for path in (predicate.left, predicate.right) if schema is not None else ():
            column_type(schema, path)
        try:
            return _COMPARISONS[predicate.op](_field(predicate.left), _field(predicate.right))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
            left, right = column_name(predicate.left), column_name(predicate.right)
            raise InvalidFilterError(f"cannot compare columns {left} and {right}: {exc}") from None
    arrow_type = column_type(schema, predicate.column) if schema is not None else None
    field = _field(predicate.column)
    try:
        if isinstance(predicate, Compare):
            literal = pc.scalar(coerce_literal(predicate.value, arrow_type))
            return _COMPARISONS[predicate.op](field, literal)
        if isinstance(predicate, In):
            scalars = [coerce_literal(value, arrow_type) for value in predicate.values]
            values = pa.array([scalar.as_py() for scalar in scalars], type=arrow_type)
            test = field.isin(values)
            return ~test & field.is_valid() if predicate.negated else test
        if isinstance(predicate, IsNull):
            return field.is_valid() if predicate.negated else field.is_null()
        return pc.starts_with(field, pattern=predicate.prefix)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
        raise InvalidFilterError(
            f"the filter on column {column_name(predicate.column)} does not fit its type {arrow_type}: {exc}"
        ) from None


def column_type(schema: pa.Schema, path: tuple[str, ...]) -> pa.DataType:
    """The Arrow type of the (possibly nested) column ``path`` of ``schema``; :class:`KeyError` if absent."""
    index = schema.get_field_index(path[0])
    if index < 0:
        raise KeyError(
            f"filter column {column_name(path)} is not a column of the table ({', '.join(schema.names)})"
        )
    arrow_type = schema.field(index).type
    for part in path[1:]:
        if not pa.types.is_struct(arrow_type) or arrow_type.get_field_index(part) < 0:
            raise KeyError(f"filter column {column_name(path)} is not a column of the table")
        arrow_type = arrow_type.field(part).type
    return arrow_type
