"""SQL predicates of writes (``replaceWhere``): parsed once, evaluated on rows and on partition values.

A small, strict subset of Spark SQL's boolean expressions, enough for the predicates people give
``replaceWhere``: comparisons (``= == <=> != <> < <= > >=``), ``IS [NOT] NULL``, ``[NOT] IN (...)``,
``[NOT] BETWEEN ... AND ...``, ``AND``, ``OR``, ``NOT`` and parentheses, over column names (plain
or in backticks) and literals (numbers, ``'strings'``, ``TRUE``/``FALSE``, ``NULL``, ``DATE '...'``,
``TIMESTAMP '...'``). Column names match case-insensitively, as in Spark.

:func:`parse_predicate` gives a :class:`Predicate`; :meth:`Predicate.expression` turns it into a
``pyarrow.compute`` expression for given column types (a literal is cast to its column's type,
as Spark casts ``'2024-01-01'`` to a date), which filters Arrow data without Python loops. SQL's
three-valued logic is kept: a row satisfies a predicate only when it evaluates to true.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.errors import DeltaError


class PredicateError(DeltaError, ValueError):
    """A predicate cannot be parsed or does not fit the table (the message names the predicate)."""


# -- syntax tree ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Literal:
    value: Any
    kind: str = ""  # "date" / "timestamp" for typed literals


@dataclass(frozen=True)
class Comparison:
    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    negated: bool


@dataclass(frozen=True)
class InList:
    operand: Operand
    values: tuple[Literal, ...]
    negated: bool


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" / "or"
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    operand: Node


Operand = Column | Literal
Node = Comparison | IsNull | InList | BoolOp | Not | Column | Literal


# -- tokens -----------------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?[lLdD]?)
      | '(?P<string>(?:[^'\\]|\\.|'')*)'
      | "(?P<dstring>(?:[^"\\]|\\.)*)"
      | `(?P<quoted>(?:[^`]|``)+)`
      | (?P<op><=>|==|!=|<>|<=|>=|=|<|>|\(|\)|,)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset(
    {"and", "or", "not", "is", "null", "in", "between", "true", "false", "date", "timestamp"}
)


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, ident, op, keyword
    text: str


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN_RE.match(text, position)
        if match is None:
            rest = text[position:]
            raise PredicateError(f"Cannot parse the predicate {text!r}: unexpected input at {rest!r}")
        position = match.end()
        if match.group("number") is not None:
            tokens.append(_Token("number", match.group("number")))
        elif match.group("string") is not None:
            tokens.append(_Token("string", _unescape(match.group("string"), "'")))
        elif match.group("dstring") is not None:
            tokens.append(_Token("string", _unescape(match.group("dstring"), '"')))
        elif match.group("quoted") is not None:
            tokens.append(_Token("ident", match.group("quoted").replace("``", "`")))
        elif match.group("op") is not None:
            tokens.append(_Token("op", match.group("op")))
        else:
            word = match.group("word")
            kind = "keyword" if word.lower() in _KEYWORDS else "ident"
            tokens.append(_Token(kind, word.lower() if kind == "keyword" else word))
    return tokens


def _unescape(body: str, quote: str) -> str:
    return re.sub(r"\\(.)", r"\1", body.replace(quote * 2, quote))


# -- parser -----------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    def error(self, expected: str) -> PredicateError:
        found = self.tokens[self.index].text if self.index < len(self.tokens) else "the end"
        return PredicateError(
            f"Cannot parse the predicate {self.text!r}: expected {expected}, found {found!r}"
        )

    def peek(self, kind: str, text: str | None = None) -> bool:
        if self.index >= len(self.tokens):
            return False
        token = self.tokens[self.index]
        return token.kind == kind and (text is None or token.text == text)

    def take(self, kind: str, text: str | None = None) -> _Token | None:
        if self.peek(kind, text):
            self.index += 1
            return self.tokens[self.index - 1]
        return None

    def expect(self, kind: str, text: str) -> None:
        if self.take(kind, text) is None:
            raise self.error(repr(text))

    def parse(self) -> Node:
        if not self.tokens:
            raise PredicateError("Cannot parse an empty predicate")
        node = self.disjunction()
        if self.index != len(self.tokens):
            raise self.error("an operator or the end")
        return node

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.take("keyword", "or"):
            node = BoolOp("or", node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.take("keyword", "and"):
            node = BoolOp("and", node, self.negation())
        return node

    def negation(self) -> Node:
        if self.take("keyword", "not"):
            return Not(self.negation())
        return self.comparison()

    def comparison(self) -> Node:
        if self.take("op", "("):
            node = self.disjunction()
            self.expect("op", ")")
            return node
        left = self.operand()
        if self.take("keyword", "is"):
            negated = self.take("keyword", "not") is not None
            self.expect("keyword", "null")
            return IsNull(left, negated)
        negated = self.take("keyword", "not") is not None
        if self.take("keyword", "in"):
            self.expect("op", "(")
            values = [self.literal()]
            while self.take("op", ","):
                values.append(self.literal())
            self.expect("op", ")")
            return InList(left, tuple(values), negated)
        if self.take("keyword", "between"):
            low = self.operand()
            self.expect("keyword", "and")
            high = self.operand()
            between: Node = BoolOp("and", Comparison(">=", left, low), Comparison("<=", left, high))
            return Not(between) if negated else between
        if negated:
            raise self.error("IN or BETWEEN after NOT")
        for op in ("<=>", "==", "!=", "<>", "<=", ">=", "=", "<", ">"):
            if self.take("op", op):
                return Comparison({"==": "=", "<>": "!="}.get(op, op), left, self.operand())
        return left

    def operand(self) -> Operand:
        token = self.take("ident")
        if token is not None:
            return Column(token.text)
        return self.literal()

    def literal(self) -> Literal:
        if (token := self.take("number")) is not None:
            return Literal(_number(token.text))
        if (token := self.take("string")) is not None:
            return Literal(token.text)
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.take("keyword", word):
                return Literal(value)
        for kind in ("date", "timestamp"):
            if self.take("keyword", kind):
                token = self.take("string")
                if token is None:
                    raise self.error(f"a string after {kind.upper()}")
                return Literal(token.text, kind)
        raise self.error("a column or a literal")


def _number(text: str) -> int | float | decimal.Decimal:
    body = text.rstrip("lLdD")
    if re.fullmatch(r"-?\d+", body):
        return int(body)
    if text[-1] in "dD" or "e" in body.lower():
        return float(body)
    return decimal.Decimal(body)


# -- the predicate ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Predicate:
    """A parsed predicate: its text, its syntax tree and the columns it references."""

    text: str
    tree: Node

    @property
    def columns(self) -> list[str]:
        """Referenced column names as written, in order of appearance, without duplicates."""
        found: list[str] = []
        _collect_columns(self.tree, found)
        return list(dict.fromkeys(found))

    def resolve(self, names: Sequence[str]) -> Predicate:
        """The predicate with column names spelled as in ``names`` (matched case-insensitively).

        Raises :class:`PredicateError` naming a column that is not among ``names``.
        """
        by_lower = {name.lower(): name for name in names}
        missing = [name for name in self.columns if name.lower() not in by_lower]
        if missing:
            raise PredicateError(
                f"Cannot resolve column {missing[0]!r} of the predicate {self.text!r} among {list(names)}"
            )
        return Predicate(self.text, _rename(self.tree, lambda name: by_lower[name.lower()]))

    def expression(self, types: Mapping[str, pa.DataType]) -> pc.Expression:
        """The ``pyarrow.compute`` expression of the predicate over columns of ``types``."""
        try:
            return _expression(self.tree, types)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, TypeError) as exc:
            raise PredicateError(f"Cannot evaluate the predicate {self.text!r}: {exc}") from None

    def matching(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is true."""
        return table.filter(self.expression(_types(table)))

    def violating(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` for which the predicate is false or null."""
        satisfied = pc.coalesce(self.expression(_types(table)), pa.scalar(False))
        return table.filter(pc.invert(satisfied))


def _types(table: pa.Table) -> dict[str, pa.DataType]:
    return {field.name: field.type for field in table.schema}


def _collect_columns(node: Node, out: list[str]) -> None:
    if isinstance(node, Column):
        out.append(node.name)
    elif isinstance(node, Comparison):
        _collect_columns(node.left, out)
        _collect_columns(node.right, out)
    elif isinstance(node, IsNull | InList):
        _collect_columns(node.operand, out)
    elif isinstance(node, BoolOp):
        _collect_columns(node.left, out)
        _collect_columns(node.right, out)
    elif isinstance(node, Not):
        _collect_columns(node.operand, out)


def _rename(node: Node, rename: Callable[[str], str]) -> Any:
    if isinstance(node, Column):
        return Column(rename(node.name))
    if isinstance(node, Comparison):
        return Comparison(node.op, _rename(node.left, rename), _rename(node.right, rename))
    if isinstance(node, IsNull):
        return IsNull(_rename(node.operand, rename), node.negated)
    if isinstance(node, InList):
        return InList(_rename(node.operand, rename), node.values, node.negated)
    if isinstance(node, BoolOp):
        return BoolOp(node.op, _rename(node.left, rename), _rename(node.right, rename))
    if isinstance(node, Not):
        return Not(_rename(node.operand, rename))
    return node


def parse_predicate(text: str) -> Predicate:
    """Parse a SQL predicate; :class:`PredicateError` naming the predicate if it is not valid."""
    return Predicate(text, _Parser(text).parse())


# -- evaluation -------------------------------------------------------------------------------
_COMPARE: dict[str, Callable[[pc.Expression, pc.Expression], pc.Expression]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _literal_value(literal: Literal, target: pa.DataType | None) -> pa.Scalar:
    value = literal.value
    if literal.kind == "date":
        value = _dt.date.fromisoformat(value.strip())
    elif literal.kind == "timestamp":
        value = _dt.datetime.fromisoformat(value.strip())
    if target is None:
        return pa.scalar(value)
    if value is None:
        return pa.scalar(None, type=target)
    if isinstance(value, str) and (pa.types.is_date(target) or pa.types.is_timestamp(target)):
        parsed = _dt.datetime.fromisoformat(value.strip())
        value = parsed.date() if pa.types.is_date(target) else parsed
    zoned = pa.types.is_timestamp(target) and target.tz is not None
    if isinstance(value, _dt.datetime) and zoned and value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    return pa.scalar(value).cast(target)


def _operand(operand: Operand, types: Mapping[str, pa.DataType], other: Operand | None) -> pc.Expression:
    if isinstance(operand, Column):
        if operand.name not in types:
            raise ValueError(f"unknown column {operand.name!r}")
        return pc.field(operand.name)
    target = types.get(other.name) if isinstance(other, Column) else None
    return pc.scalar(_literal_value(operand, target))


_NULL_BOOL = pc.scalar(pa.scalar(None, pa.bool_()))


def _expression(node: Node, types: Mapping[str, pa.DataType]) -> pc.Expression:
    if isinstance(node, Comparison):
        left = _operand(node.left, types, node.right)
        right = _operand(node.right, types, node.left)
        if node.op == "<=>":
            both_null = left.is_null() & right.is_null()
            equal = pc.coalesce(left == right, pc.scalar(False))
            return both_null | (left.is_valid() & right.is_valid() & equal)
        return _COMPARE[node.op](left, right)
    if isinstance(node, IsNull):
        value = _operand(node.operand, types, None)
        return value.is_valid() if node.negated else value.is_null()
    if isinstance(node, InList):
        column = node.operand
        target = types.get(column.name) if isinstance(column, Column) else None
        values = [_literal_value(literal, target) for literal in node.values]
        operand = _operand(column, types, None)
        non_null = pa.array([value.as_py() for value in values if value.is_valid], type=target)
        matched = operand.isin(non_null)
        if len(non_null) < len(values):  # x IN (..., NULL) is true or null, never false
            matched = pc.if_else(matched, pc.scalar(True), _NULL_BOOL)
        matched = pc.if_else(operand.is_null(), _NULL_BOOL, matched)
        return ~matched if node.negated else matched
    if isinstance(node, BoolOp):
        left_expr, right_expr = _expression(node.left, types), _expression(node.right, types)
        return left_expr & right_expr if node.op == "and" else left_expr | right_expr
    if isinstance(node, Not):
        return ~_expression(node.operand, types)
    if isinstance(node, Column):
        return pc.field(node.name)
    return pc.scalar(node.value)
