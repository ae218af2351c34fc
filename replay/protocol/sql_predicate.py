"""SQL predicate text read into a :mod:`replay.protocol.predicates` tree: one grammar for every front end.

``replaceWhere`` (writes) and ``deltalog read --filter`` take a predicate as SQL text. This module
reads the subset of Spark SQL's boolean expressions that such predicates use::

    part = 3 AND id > 10
    city IN ('Oslo', 'Lima') OR amount >= 2.5
    day BETWEEN DATE '2024-01-01' AND '2024-01-31' AND NOT name IS NULL

Comparisons (``= == <=> != <> < <= > >=``), ``IS [NOT] NULL``, ``[NOT] IN (...)``,
``[NOT] BETWEEN ... AND ...``, ``AND``, ``OR`` (``AND`` binds tighter), ``NOT`` and parentheses,
over columns (``name``, ``a.b`` for a nested field, ```quoted name```) and literals (numbers,
``'strings'`` or ``"strings"`` with ``''`` or ``\\'`` for a quote, ``TRUE``, ``FALSE``, ``NULL``,
``DATE '...'``, ``TIMESTAMP '...'``). Keywords are case-insensitive; literals are converted to their
column's type when the predicate is applied (``'2024-01-31'`` becomes a date for a date column).

SQL's three-valued logic is kept exactly: ``NOT`` is pushed down to the leaves as SQL defines it,
so a comparison with ``NULL`` and ``x NOT IN (1, NULL)`` are never true, and ``x <=> 1`` is false
(not null) for a null ``x``. :func:`parse_predicate` gives a :class:`SqlPredicate`; its ``tree``
is an ordinary predicate that scans prune files with. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.errors import DeltaError
from replay.protocol.predicates import (
    FALSE,
    TRUE,
    And,
    Compare,
    CompareColumns,
    In,
    InvalidFilterError,
    IsNull,
    Not,
    Op,
    Or,
    Predicate,
    StartsWith,
    negate,
    to_expression,
)


class PredicateError(InvalidFilterError, DeltaError):
    """A predicate cannot be parsed or does not fit the table (the message names the predicate)."""


# -- tokens ---------------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?[lLdD]?)
      | '(?P<string>(?:[^'\\]|\\.|'')*)'
      | "(?P<dstring>(?:[^"\\]|\\.|"")*)"
      | `(?P<quoted>(?:[^`]|``)+)`
      | (?P<op><=>|==|!=|<>|<=|>=|=|<|>|\(|\)|,|\.)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset(
    {"and", "or", "not", "is", "null", "in", "between", "true", "false", "date", "timestamp"}
)
_OPS: dict[str, str] = {"==": "=", "<>": "!="}
_FLIP: dict[str, str] = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, ident, op, keyword
    text: str
    position: int


def _unescape(body: str, quote: str) -> str:
    return re.sub(r"\\(.)", r"\1", body.replace(quote * 2, quote))


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while text[position:].strip():
        match = _TOKEN.match(text, position)
        if match is None:
            start = len(text) - len(text[position:].lstrip())
            raise PredicateError(
                f"Cannot parse the predicate {text!r}: unexpected input at position {start}: {text[start:]!r}"
            )
        kind = match.lastgroup or ""
        value = match.group(kind)
        start = match.start(kind) - (1 if kind in ("string", "dstring", "quoted") else 0)
        position = match.end()
        if kind in ("string", "dstring"):
            tokens.append(_Token("string", _unescape(value, "'" if kind == "string" else '"'), start))
        elif kind == "quoted":
            tokens.append(_Token("ident", value.replace("``", "`"), start))
        elif kind == "word" and value.lower() in _KEYWORDS:
            tokens.append(_Token("keyword", value.lower(), start))
        else:
            tokens.append(_Token("ident" if kind == "word" else kind, value, start))
    return tokens


def _number(text: str) -> int | float | decimal.Decimal:
    """A numeric literal as Spark types it: integral, ``d``/exponent -> double, else decimal."""
    body = text.rstrip("lLdD")
    if re.fullmatch(r"-?\d+", body):
        return int(body)
    if text[-1] in "dD" or "e" in body.lower():
        return float(body)
    return decimal.Decimal(body)


# -- operands -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Column:
    path: tuple[str, ...]


@dataclass(frozen=True)
class _Literal:
    value: object  # None for NULL


_Operand = _Column | _Literal


# -- parser ---------------------------------------------------------------------------------------
class _Parser:
    """Recursive descent that builds the predicate with ``NOT`` already pushed to the leaves.

    Each rule gets ``negated``: whether an odd number of ``NOT`` encloses it. ``AND``/``OR``
    swap under negation (De Morgan holds in three-valued logic); a leaf negates itself.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0
        self.columns: list[tuple[str, ...]] = []

    def error(self, expected: str) -> PredicateError:
        if self.index < len(self.tokens):
            token = self.tokens[self.index]
            found = f"{token.text!r} at position {token.position}"
        else:
            found = "the end"
        return PredicateError(f"Cannot parse the predicate {self.text!r}: expected {expected}, found {found}")

    def take(self, kind: str, text: str | None = None) -> _Token | None:
        if self.index < len(self.tokens):
            token = self.tokens[self.index]
            if token.kind == kind and (text is None or token.text == text):
                self.index += 1
                return token
        return None

    def expect(self, kind: str, text: str, what: str | None = None) -> None:
        if self.take(kind, text) is None:
            raise self.error(what or repr(text))

    def parse(self) -> Predicate:
        if not self.tokens:
            raise PredicateError("Cannot parse an empty predicate")
        predicate = self.disjunction(False)
        if self.index != len(self.tokens):
            raise self.error("AND, OR or the end")
        return predicate

    def disjunction(self, negated: bool) -> Predicate:
        parts = [self.conjunction(negated)]
        while self.take("keyword", "or"):
            parts.append(self.conjunction(negated))
        return _combine(parts, And if negated else Or)

    def conjunction(self, negated: bool) -> Predicate:
        parts = [self.negation(negated)]
        while self.take("keyword", "and"):
            parts.append(self.negation(negated))
        return _combine(parts, Or if negated else And)

    def negation(self, negated: bool) -> Predicate:
        if self.take("keyword", "not"):
            return self.negation(not negated)
        return self.condition(negated)

    def condition(self, negated: bool) -> Predicate:
        if self.take("op", "("):
            predicate = self.disjunction(negated)
            self.expect("op", ")")
            return predicate
        left = self.operand()
        if self.take("keyword", "is"):
            is_not = self.take("keyword", "not") is not None
            self.expect("keyword", "null", "NULL")
            return self.null_test(left, is_not != negated)
        not_in = self.take("keyword", "not") is not None
        if self.take("keyword", "in"):
            if not isinstance(left, _Column):
                raise self.invalid("IN needs a column on its left")
            return self.in_list(left, not_in != negated)
        if self.take("keyword", "between"):
            low = self.operand()
            self.expect("keyword", "and", "AND")
            high = self.operand()
            between = And((self.compare(left, ">=", low, False), self.compare(left, "<=", high, False)))
            return _negated(between) if not_in != negated else between
        if not_in:
            raise self.error("IN or BETWEEN after NOT")
        for op in ("<=>", "==", "!=", "<>", "<=", ">=", "=", "<", ">"):
            if self.take("op", op):
                return self.compare(left, _OPS.get(op, op), self.operand(), negated)
        return self.bare(left, negated)

    def operand(self) -> _Operand:
        token = self.take("ident")
        if token is not None:
            path = [token.text]
            while self.take("op", "."):
                part = self.take("ident") or self.take("keyword")
                if part is None:
                    raise self.error("a field name after '.'")
                path.append(part.text)
            self.columns.append(tuple(path))
            return _Column(tuple(path))
        return _Literal(self.literal())

    def literal(self) -> object:
        if (token := self.take("number")) is not None:
            return _number(token.text)
        if (token := self.take("string")) is not None:
            return token.text
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.take("keyword", word):
                return value
        for kind in ("date", "timestamp"):
            if self.take("keyword", kind):
                token = self.take("string")
                if token is None:
                    raise self.error(f"a string after {kind.upper()}")
                return self.typed(token.text, kind)
        raise self.error("a column or a value")

    def typed(self, text: str, kind: str) -> _dt.date | _dt.datetime:
        try:
            parsed = _dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise self.invalid(f"{text!r} is not a valid {kind.upper()}") from None
        return parsed.date() if kind == "date" else parsed

    def null_test(self, operand: _Operand, negated: bool) -> Predicate:
        if isinstance(operand, _Literal):
            return TRUE if (operand.value is None) != negated else FALSE
        return IsNull(operand.path, negated)

    def in_list(self, operand: _Column, negated: bool) -> Predicate:
        self.expect("op", "(")
        values = [self.literal()]
        while self.take("op", ","):
            values.append(self.literal())
        self.expect("op", ")")
        present = tuple(value for value in values if value is not None)
        if len(present) < len(values):  # with a NULL listed: true when listed, else null, never false
            return FALSE if negated or not present else In(operand.path, present)
        return In(operand.path, present, negated)

    def compare(self, left: _Operand, op: str, right: _Operand, negated: bool) -> Predicate:
        if isinstance(left, _Literal) and isinstance(right, _Column):
            left, right = right, left
            op = _FLIP.get(op, op)
        if not isinstance(left, _Column):
            raise self.invalid("a comparison needs a column on one side")
        if op == "<=>":
            return self.null_safe_equal(left, right, negated)
        comparison: Predicate
        if isinstance(right, _Column):
            comparison = CompareColumns(left.path, _op(op), right.path)
        elif isinstance(right, _Literal) and right.value is None:
            return FALSE  # a comparison with NULL is null, and so is its negation
        else:
            comparison = Compare(left.path, _op(op), right.value)
        return negate(comparison) if negated else comparison

    def null_safe_equal(self, left: _Column, right: _Operand, negated: bool) -> Predicate:
        both: Predicate
        if isinstance(right, _Literal) and right.value is None:
            both = IsNull(left.path)
        elif isinstance(right, _Literal):
            both = And((IsNull(left.path, negated=True), Compare(left.path, "=", right.value)))
        else:
            both = Or(
                (
                    And((IsNull(left.path), IsNull(right.path))),
                    And(
                        (
                            IsNull(left.path, negated=True),
                            IsNull(right.path, negated=True),
                            CompareColumns(left.path, "=", right.path),
                        )
                    ),
                )
            )
        return negate(both) if negated else both  # two-valued: negation is exact

    def bare(self, operand: _Operand, negated: bool) -> Predicate:
        """A lone operand as a condition: a (boolean) column, ``TRUE``, ``FALSE`` or ``NULL``."""
        if isinstance(operand, _Column):
            return Compare(operand.path, "!=" if negated else "=", True)
        if operand.value is None:
            return FALSE
        if isinstance(operand.value, bool):
            return TRUE if operand.value != negated else FALSE
        raise self.invalid(f"{operand.value!r} is not a condition")

    def invalid(self, reason: str) -> PredicateError:
        return PredicateError(f"Cannot parse the predicate {self.text!r}: {reason}")


def _op(op: str) -> Op:
    assert op in ("=", "!=", "<", "<=", ">", ">=")
    return op  # type: ignore[return-value]


def _negated(between: And) -> Predicate:
    """``NOT`` of a ``BETWEEN``: a bound that is ``NULL`` made its comparison ``FALSE`` (never
    true), and its negation is never true either, so it drops out of the disjunction."""
    parts = tuple(negate(child) for child in between.children if child != FALSE)
    return parts[0] if len(parts) == 1 else Or(parts)


def _combine(parts: Sequence[Predicate], kind: type[And] | type[Or]) -> Predicate:
    return parts[0] if len(parts) == 1 else kind(tuple(parts))


# -- the predicate --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SqlPredicate:
    """A parsed SQL predicate: its text, its tree and the columns it names (in order, as written)."""

    text: str
    tree: Predicate
    paths: tuple[tuple[str, ...], ...] = field(default=())

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
        return SqlPredicate(self.text, _rename(self.tree, spell), paths)

    def expression(self, schema: pa.Schema) -> pc.Expression:
        """The ``pyarrow.compute`` expression of the predicate over columns of ``schema``."""
        try:
            return to_expression(self.tree, schema)
        except (InvalidFilterError, KeyError) as exc:
            detail = exc.args[0] if exc.args else exc
            raise PredicateError(f"Cannot evaluate the predicate {self.text!r}: {detail}") from None

    def matching(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is true."""
        return table.filter(self.expression(table.schema))

    def violating(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is false or null."""
        satisfied = pc.coalesce(self.expression(table.schema), pa.scalar(False))
        return table.filter(pc.invert(satisfied))


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


def parse_predicate(text: str) -> SqlPredicate:
    """Parse a SQL predicate; :class:`PredicateError` naming the predicate and the spot if it is not valid."""
    parser = _Parser(text)
    tree = parser.parse()
    return SqlPredicate(text, tree, tuple(parser.columns))
