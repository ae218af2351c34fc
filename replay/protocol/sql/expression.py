"""SQL expressions: parse once, bind to the columns in scope, evaluate over Arrow data, prune.

::

    condition = parse_expression("target.id = source.id AND source.amount > 10")
    bound = condition.bind({"target": target_schema, "source": source_schema})
    keys, rest = join_keys(bound, "target", "source")       # target.id = source.id; the rest
    pruning = bound.to_predicate(scope="target")             # for the target's files
    matches = bound.evaluate(joined, columns={("target", "id"): "t_id", ("source", "id"): "s_id", ...})

An unbound :class:`SqlExpression` knows its text, syntax tree and the names it mentions; a
:class:`BoundExpression` knows its result type and, for each reference, the scope and column
path it resolved to. Both are immutable.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from replay.protocol.predicates import Predicate
from replay.protocol.sql import coercion, syntax
from replay.protocol.sql import datatypes as types
from replay.protocol.sql.binder import Binder, Scopes
from replay.protocol.sql.bound import BAnd, BCompare, BLiteral, Bound, references
from replay.protocol.sql.casts import can_cast, can_store_assign
from replay.protocol.sql.errors import ExpressionError
from replay.protocol.sql.evaluate import Context, batch_source, broadcast, evaluate
from replay.protocol.sql.parser import parse
from replay.protocol.sql.to_predicate import bound_to_predicate, syntax_to_predicate

ColumnNames = Mapping[tuple[str, str], str]
"""``(scope, top-level column as in the scope's schema)`` -> the column's name in the data."""


@dataclass(frozen=True)
class ColumnReference:
    """A name as written in the text (``("target", "id")`` for ``target.id``) and its position."""

    parts: tuple[str, ...]
    position: int


@dataclass(frozen=True)
class Reference:
    """A resolved reference: the scope, the column path in the scope's spelling, the position."""

    scope: str
    path: tuple[str, ...]
    position: int


@dataclass(frozen=True)
class SqlExpression:
    """A parsed SQL expression (not yet bound to any columns)."""

    text: str
    tree: syntax.Node
    kind: str = field(default="expression", compare=False)

    @property
    def columns(self) -> tuple[ColumnReference, ...]:
        """Every name the expression mentions, in order of appearance, as written."""
        return tuple(
            ColumnReference(n.parts, n.position) for n in self.tree.walk() if isinstance(n, syntax.Column)
        )

    def to_sql(self, *, spark_names: bool = False) -> str:
        """SQL text (fully parenthesised) that parses back to the same tree; names backquoted,
        or with ``spark_names`` only where needed, as Spark's ``Expression.sql`` writes them (what
        Delta's constraint errors show)."""
        return syntax.to_sql(self.tree, syntax.quote_if_needed if spark_names else None)

    def bind(
        self,
        scopes: pa.Schema | Mapping[str, pa.Schema],
        *,
        unqualified: Sequence[str] | None = None,
        now: _dt.datetime | None = None,
    ) -> BoundExpression:
        """Resolve names and types against ``scopes``: one schema (scope ``""``) or a schema per
        qualifier; ``unqualified`` lists the scopes an unqualified name may come from (default:
        all). ``now`` is ``current_timestamp()`` (default: the time of binding). Raises
        :class:`ExpressionError` naming the text and position of an unknown column, an ambiguous
        one or a type error."""
        moment = now or _dt.datetime.now(_dt.UTC)
        try:
            node = Binder(Scopes.of(scopes, unqualified), moment).bind(self.tree)
        except ExpressionError as exc:
            raise exc.located(self.text, self.kind) from None
        return BoundExpression(self.text, node, self.kind)

    def to_predicate(self) -> Predicate:
        """The predicate tree without types (what ``parse_predicate(...).tree`` is): literals stay
        Python values, converted to each column's type where the tree is applied."""
        return syntax_to_predicate(self.tree, self.text, self.kind, _constant_value)

    def conjuncts(self) -> list[SqlExpression]:
        """The parts of a top-level ``AND`` chain (``[self]`` if it is none)."""
        return [SqlExpression(self.text, part, self.kind) for part in _split_and(self.tree)]


def _split_and(node: syntax.Node) -> list[syntax.Node]:
    if isinstance(node, syntax.Binary) and node.op == "AND":
        return [*_split_and(node.left), *_split_and(node.right)]
    return [node]


def _constant_value(node: syntax.Node) -> tuple[bool, object]:
    """``(True, value)`` for a syntax tree without columns that computes; else ``(False, None)``."""
    if any(isinstance(n, syntax.Column) for n in node.walk()):
        return False, None
    try:
        bound = Binder(Scopes.of({}, ()), _dt.datetime.now(_dt.UTC)).bind(node)
    except ExpressionError:
        return False, None
    if not isinstance(bound, BLiteral):
        return False, None
    return True, bound.value.as_py()


def parse_expression(text: str, *, kind: str = "expression") -> SqlExpression:
    """Parse ``text`` (Spark SQL's expression syntax); :class:`ExpressionError` naming the
    position of a syntax error, an unknown function or a wrong number of arguments."""
    return SqlExpression(text, parse(text, kind), kind)


@dataclass(frozen=True, eq=False)
class BoundExpression:
    """An expression bound to columns: typed, ready to evaluate and to prune files with."""

    text: str
    node: Bound
    kind: str = "expression"

    @property
    def type(self) -> pa.DataType:
        """The Arrow type of the result."""
        return self.node.type

    @cached_property
    def references(self) -> tuple[Reference, ...]:
        """Every column read, in order of appearance (scope, path as in the schema, position)."""
        return tuple(Reference(n.scope, n.path, n.position) for n in references(self.node))

    def scopes(self) -> set[str]:
        """The scopes the expression reads columns of."""
        return {reference.scope for reference in self.references}

    def columns(self, scope: str | None = None) -> list[str]:
        """Top-level columns read (of ``scope`` if given), in order, without repeats."""
        return list(dict.fromkeys(r.path[0] for r in self.references if scope is None or r.scope == scope))

    def evaluate(
        self, data: pa.Table | pa.RecordBatch, columns: ColumnNames | None = None
    ) -> pa.Array | pa.ChunkedArray:
        """The value for every row of ``data``: a ``ChunkedArray`` for a table, an ``Array`` for a
        record batch, of the data's length. ``columns`` maps ``(scope, column)`` to the data's
        column name (default: the column's own name). Raises :class:`ExpressionEvaluationError`
        (``DIVIDE_BY_ZERO``, ``ARITHMETIC_OVERFLOW``, ``CAST_INVALID_INPUT``, ...) for a row that
        fails."""
        try:
            if isinstance(data, pa.RecordBatch):
                return self._batch(data, columns)
            names = [columns.get(key, key[1]) if columns else key[1] for key in self._keys]
            table = data.select(list(dict.fromkeys(n for n in names if n in data.column_names)))
            if table.num_columns == 0:
                table = pa.table({"_": pa.nulls(data.num_rows)})
            chunks = [self._batch(batch, columns) for batch in table.to_batches() if batch.num_rows]
            return pa.chunked_array(chunks, type=self.type)
        except ExpressionError as exc:
            raise exc.located(self.text, self.kind) from None

    @cached_property
    def _keys(self) -> tuple[tuple[str, str], ...]:
        return tuple(dict.fromkeys((r.scope, r.path[0]) for r in self.references))

    def _batch(self, batch: pa.RecordBatch, columns: ColumnNames | None) -> pa.Array:
        value = evaluate(self.node, Context(batch.num_rows, batch_source(batch, columns)))
        return broadcast(value, batch.num_rows)

    def matches(
        self, data: pa.Table | pa.RecordBatch, columns: ColumnNames | None = None
    ) -> pa.Array | pa.ChunkedArray:
        """Where a boolean expression is true (``False`` where it is false or null)."""
        self._require_boolean()
        result = self.evaluate(data, columns)
        if pa.types.is_null(result.type):
            result = result.cast(types.BOOLEAN)
        return result.fill_null(False) if result.null_count else result

    def to_predicate(self, scope: str | None = None) -> Predicate:
        """The predicate tree for pruning files by the columns of ``scope`` (required when the
        expression reads more than one scope); parts that read other scopes, or that pruning
        cannot express exactly, are :class:`~replay.protocol.predicates.Opaque`."""
        self._require_boolean()
        if scope is None and len(self.scopes()) > 1:
            raise ValueError(f"the expression reads scopes {sorted(self.scopes())}: name the one to prune")
        return bound_to_predicate(self.node, self.text, scope)

    def _require_boolean(self) -> None:
        if not (pa.types.is_boolean(self.type) or pa.types.is_null(self.type)):
            raise ExpressionError(
                f'[DATATYPE_MISMATCH] the {self.kind} is of type "{types.type_name(self.type)}", '
                'not "BOOLEAN"',
                text=self.text,
                position=self.node.position,
                error_class="DATATYPE_MISMATCH",
                kind=self.kind,
            )

    def conjuncts(self) -> list[BoundExpression]:
        """The parts of a top-level ``AND`` chain (``[self]`` if it is none)."""
        return [BoundExpression(self.text, part, self.kind) for part in _split_bound(self.node)]

    def cast(self, target: pa.DataType) -> BoundExpression:
        """This expression cast to ``target`` as ``CAST(... AS target)`` casts (ANSI)."""
        if not can_cast(self.type, target):
            raise self._cast_error("DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION", "cannot cast", target)
        return BoundExpression(self.text, coercion.cast_to(self.node, target), self.kind)

    def assign(self, target: pa.DataType, column: str = "") -> BoundExpression:
        """This expression as a value stored into a column of ``target`` (``UPDATE SET c = ...``,
        MERGE's assignments): Spark's ANSI store assignment, which takes numbers into any number
        type (failing at run time on overflow), any value into a string, dates and timestamps
        into each other, and nothing else (a string is not stored into an INT column)."""
        if not can_store_assign(self.type, target):
            where = f" `{column}`" if column else ""
            raise self._cast_error(
                "INCOMPATIBLE_DATA_FOR_TABLE.CANNOT_SAFELY_CAST", f"Cannot safely cast{where}", target
            )
        return BoundExpression(self.text, coercion.cast_to(self.node, target), self.kind)

    def _cast_error(self, error_class: str, what: str, target: pa.DataType) -> ExpressionError:
        return ExpressionError(
            f'[{error_class}] {what} "{types.type_name(self.type)}" to "{types.type_name(target)}"',
            text=self.text,
            error_class=error_class,
            kind=self.kind,
        )


def _split_bound(node: Bound) -> list[Bound]:
    if isinstance(node, BAnd):
        return [*_split_bound(node.left), *_split_bound(node.right)]
    return [node]


def conjunction(parts: Sequence[BoundExpression]) -> BoundExpression | None:
    """``AND`` of ``parts`` (``None`` for none); all must come from one text."""
    if not parts:
        return None
    node = parts[0].node
    for part in parts[1:]:
        node = BAnd(types.BOOLEAN, part.node.position, node, part.node)
    return BoundExpression(parts[0].text, node, parts[0].kind)


@dataclass(frozen=True)
class JoinKey:
    """An equality of the condition that a join can use: ``target`` reads only the target scope,
    ``source`` only the source scope, both of the type they are compared in; ``null_safe`` for
    ``<=>`` (nulls match each other)."""

    target: BoundExpression
    source: BoundExpression
    null_safe: bool = False


def join_keys(
    condition: BoundExpression, target: str, source: str
) -> tuple[list[JoinKey], BoundExpression | None]:
    """Split a MERGE condition into join keys (conjuncts ``t = s`` / ``t <=> s`` whose sides read
    one scope each) and the remaining conjuncts (``None`` if none remain)."""
    keys: list[JoinKey] = []
    rest: list[BoundExpression] = []
    for part in condition.conjuncts():
        node = part.node
        if isinstance(node, BCompare) and node.op in ("=", "<=>"):
            sides = {_only_scope(node.left): node.left, _only_scope(node.right): node.right}
            if target in sides and source in sides and target != source:
                keys.append(
                    JoinKey(
                        BoundExpression(condition.text, sides[target], condition.kind),
                        BoundExpression(condition.text, sides[source], condition.kind),
                        node.op == "<=>",
                    )
                )
                continue
        rest.append(part)
    return keys, conjunction(rest)


def _only_scope(node: Bound) -> str | None:
    scopes = {column.scope for column in references(node)}
    return scopes.pop() if len(scopes) == 1 else None
