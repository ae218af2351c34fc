"""SQL predicate text read into a :mod:`replay.protocol.predicates` tree, on the one SQL grammar.

``replaceWhere`` (writes) and ``deltalog read --filter`` take a predicate as SQL text::

    part = 3 AND id > 10
    city IN ('Oslo', 'Lima') OR amount >= 2.5
    day BETWEEN DATE '2024-01-01' AND '2024-01-31' AND NOT name IS NULL
    upper(city) LIKE 'O%' OR coalesce(amount, 0) * 2 > 5

The grammar is the one of :mod:`replay.protocol.sql` (Spark SQL expressions). A predicate names
the columns of one table, without qualifiers (``a.b`` is field ``b`` of column ``a``).
:func:`parse_predicate` gives a :class:`SqlPredicate`: its ``tree`` is the predicate scans prune
files with (parts it cannot express are opaque), and :meth:`SqlPredicate.matching` /
:meth:`SqlPredicate.violating` evaluate it exactly, with Spark's types and three-valued logic
(``x NOT IN (1, NULL)`` is never true, ``x <=> 1`` is false, not null, for a null ``x``,
``'2024-01-31'`` is a date next to a date column). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.predicates import (
    And,
    Compare,
    CompareColumns,
    In,
    InvalidFilterError,
    IsNull,
    Not,
    Or,
    Predicate,
    StartsWith,
    to_expression,
)
from replay.protocol.sql import syntax
from replay.protocol.sql.errors import ExpressionError, PredicateError
from replay.protocol.sql.expression import BoundExpression, SqlExpression, parse_expression

__all__ = ["PredicateError", "SqlPredicate", "parse_predicate"]


@dataclass(frozen=True)
class SqlPredicate:
    """A parsed SQL predicate: its text, its tree and the columns it names (in order, as written)."""

    text: str
    tree: Predicate
    paths: tuple[tuple[str, ...], ...] = field(default=())
    parsed: SqlExpression | None = field(default=None, compare=False, repr=False)

    @property
    def columns(self) -> list[str]:
        """Top-level column names as written, in order of appearance, without duplicates."""
        return list(dict.fromkeys(path[0] for path in self.paths))

    def resolve(self, names: Sequence[str]) -> SqlPredicate:
        """The predicate with top-level column names spelled as in ``names`` (matched
        case-insensitively, as Spark does). Raises :class:`PredicateError` naming a column that
        is not among ``names``."""
        by_lower = {name.lower(): name for name in names}
        missing = [name for name in self.columns if name.lower() not in by_lower]
        if missing:
            raise PredicateError(
                f"Cannot resolve column {missing[0]!r} of the predicate {self.text!r} among {list(names)}"
            )

        def spell(path: tuple[str, ...]) -> tuple[str, ...]:
            return (by_lower[path[0].lower()], *path[1:])

        paths = tuple(spell(path) for path in self.paths)
        parsed = self.parsed
        if parsed is not None:
            tree = syntax.map_columns(
                parsed.tree, lambda c: syntax.Column(spell(c.parts), position=c.position)
            )
            parsed = SqlExpression(parsed.text, tree, parsed.kind)
        return SqlPredicate(self.text, _rename(self.tree, spell), paths, parsed)

    def bind(self, schema: pa.Schema) -> BoundExpression:
        """The predicate bound to the columns of ``schema`` (Spark's types and coercions)."""
        parsed = self.parsed or parse_expression(self.text, kind="predicate")
        return parsed.bind(schema)

    def expression(self, schema: pa.Schema) -> pc.Expression:
        """The ``pyarrow.compute`` expression of :attr:`tree` over columns of ``schema`` (literals
        converted to the column types); :class:`PredicateError` for an opaque part."""
        try:
            return to_expression(self.tree, schema)
        except (InvalidFilterError, KeyError) as exc:
            detail = exc.args[0] if exc.args else exc
            raise PredicateError(f"Cannot evaluate the predicate {self.text!r}: {detail}") from None

    def _true(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return self.bind(table.schema).matches(table)

    def matching(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is true."""
        return table.filter(self._true(table))

    def violating(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is false or null."""
        return table.filter(pc.invert(self._true(table)))


def _rename(predicate: Predicate, spell: Callable[[tuple[str, ...]], tuple[str, ...]]) -> Predicate:
    if isinstance(predicate, And | Or):
        return type(predicate)(tuple(_rename(child, spell) for child in predicate.children))
    if isinstance(predicate, Not):
        return Not(_rename(predicate.child, spell))
    if isinstance(predicate, Compare):
        return Compare(spell(predicate.column), predicate.op, predicate.value)
    if isinstance(predicate, CompareColumns):
        return CompareColumns(spell(predicate.left), predicate.op, spell(predicate.right))
    if isinstance(predicate, In):
        return In(spell(predicate.column), predicate.values, predicate.negated)
    if isinstance(predicate, IsNull):
        return IsNull(spell(predicate.column), predicate.negated)
    if isinstance(predicate, StartsWith):
        return StartsWith(spell(predicate.column), predicate.prefix)
    return predicate


_NOT_CONDITIONS = ("+", "-", "*", "/", "%", "||")


def _check_condition(expression: SqlExpression) -> None:
    """A predicate whose top is plainly not a condition (arithmetic, a number) is an error."""
    node = expression.tree
    while isinstance(node, syntax.Unary) and node.op == "NOT":
        node = node.operand
    if (isinstance(node, syntax.Binary) and node.op in _NOT_CONDITIONS) or isinstance(node, syntax.Unary):
        raise ExpressionError(
            f"{syntax.to_sql(node)} is not a condition",
            text=expression.text,
            position=node.position,
            action="parse",
            kind="predicate",
        )


def parse_predicate(text: str) -> SqlPredicate:
    """Parse a SQL predicate; :class:`PredicateError` naming the predicate and the spot if it is not valid."""
    expression = parse_expression(text, kind="predicate")
    _check_condition(expression)
    tree = expression.to_predicate()
    paths = tuple(reference.parts for reference in expression.columns)
    return SqlPredicate(text, tree, paths, expression)
