"""The syntax tree of a SQL expression, and its SQL text.

Nodes are frozen dataclasses that compare by content; ``position`` (the 0-based character offset
of the node in the text it was parsed from) is left out of comparisons, so a tree printed with
:func:`to_sql` and parsed again equals the original. Column names stay as written (resolution and
qualifiers are decided when binding); function names are lowercase.

Literals hold Python values with their SQL type: ``int`` (INT/BIGINT/SMALLINT/TINYINT),
``decimal.Decimal``, ``float`` (DOUBLE/FLOAT), ``str``, ``bytes``, ``bool``, ``datetime.date``,
``datetime.datetime`` (aware in UTC for TIMESTAMP, naive for TIMESTAMP_NTZ) or ``None`` (VOID);
``INTERVAL`` literals are :class:`Interval` nodes.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

import pyarrow as pa

from replay.protocol.sql import datatypes as types
from replay.protocol.sql.interval_literals import IntervalLiteral


@dataclass(frozen=True, kw_only=True)
class Node:
    position: int = field(default=-1, compare=False, repr=False)

    def children(self) -> tuple[Node, ...]:
        return ()

    def walk(self) -> Iterator[Node]:
        """This node and every node below it, depth first, left to right."""
        yield self
        for child in self.children():
            yield from child.walk()


@dataclass(frozen=True)
class Literal(Node):
    value: object
    type: pa.DataType


@dataclass(frozen=True)
class Interval(Node):
    """An ``INTERVAL`` literal (:mod:`replay.protocol.sql.intervals`)."""

    value: IntervalLiteral


@dataclass(frozen=True)
class Column(Node):
    """A name as written: ``id``, ``t.id`` (a qualifier or a struct field: decided when binding)."""

    parts: tuple[str, ...]


@dataclass(frozen=True)
class Unary(Node):
    op: str  # "-" or "NOT"
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Node):
    """Arithmetic (``+ - * / % ||``), comparison (``= <=> != < <= > >=``), ``AND`` or ``OR``."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class IsNull(Node):
    operand: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class IsBool(Node):
    """``operand IS [NOT] TRUE|FALSE`` (two-valued: never null)."""

    operand: Node
    value: bool
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class InList(Node):
    operand: Node
    items: tuple[Node, ...]
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand, *self.items)


@dataclass(frozen=True)
class Between(Node):
    operand: Node
    low: Node
    high: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.low, self.high)


@dataclass(frozen=True)
class Like(Node):
    operand: Node
    pattern: Node
    escape: str = "\\"
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand, self.pattern)


@dataclass(frozen=True)
class Case(Node):
    """``CASE [operand] WHEN .. THEN .. [ELSE ..] END``."""

    operand: Node | None
    whens: tuple[tuple[Node, Node], ...]
    otherwise: Node | None = None

    def children(self) -> tuple[Node, ...]:
        parts: list[Node] = [] if self.operand is None else [self.operand]
        for when, then in self.whens:
            parts += [when, then]
        return (*parts, *(() if self.otherwise is None else (self.otherwise,)))


@dataclass(frozen=True)
class Cast(Node):
    operand: Node
    type: pa.DataType

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Call(Node):
    name: str
    args: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.args


# -- printing ---------------------------------------------------------------------------------------
def to_sql(node: Node, quote: Callable[[str], str] | None = None) -> str:
    """SQL text that parses back to ``node``: operators fully parenthesised, names backquoted
    (by ``quote`` if given: :func:`quote_if_needed` writes names as Spark's ``Expression.sql`` does)."""
    quote = quote or quote_name

    def sql(child: Node) -> str:
        return to_sql(child, quote)

    if isinstance(node, Literal):
        return literal_sql(node.value, node.type)
    if isinstance(node, Column):
        return ".".join(quote(part) for part in node.parts)
    if isinstance(node, Interval):
        return node.value.sql()
    if isinstance(node, Unary):
        return f"(NOT {sql(node.operand)})" if node.op == "NOT" else f"(-({sql(node.operand)}))"
    if isinstance(node, Binary):
        return f"({sql(node.left)} {node.op} {sql(node.right)})"
    if isinstance(node, IsNull):
        return f"({sql(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
    if isinstance(node, IsBool):
        return f"({sql(node.operand)} IS {'NOT ' if node.negated else ''}{'TRUE' if node.value else 'FALSE'})"
    if isinstance(node, InList):
        items = ", ".join(sql(item) for item in node.items)
        return f"({sql(node.operand)} {'NOT ' if node.negated else ''}IN ({items}))"
    if isinstance(node, Between):
        bounds = f"{sql(node.low)} AND {sql(node.high)}"
        return f"({sql(node.operand)} {'NOT ' if node.negated else ''}BETWEEN {bounds})"
    if isinstance(node, Like):
        escape = "" if node.escape == "\\" else f" ESCAPE {string_sql(node.escape)}"
        return f"({sql(node.operand)} {'NOT ' if node.negated else ''}LIKE {sql(node.pattern)}{escape})"
    if isinstance(node, Case):
        head = "CASE" if node.operand is None else f"CASE {sql(node.operand)}"
        whens = " ".join(f"WHEN {sql(when)} THEN {sql(then)}" for when, then in node.whens)
        otherwise = "" if node.otherwise is None else f" ELSE {sql(node.otherwise)}"
        return f"{head} {whens}{otherwise} END"
    if isinstance(node, Cast):
        return f"CAST({sql(node.operand)} AS {cast_type_sql(node.type)})"
    assert isinstance(node, Call)
    return f"{node.name}({', '.join(sql(arg) for arg in node.args)})"


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")


def quote_if_needed(name: str) -> str:
    """``name`` bare when it is letters, digits and underscores (not only digits), else
    backquoted: Spark's ``quoteIfNeeded``."""
    return name if _PLAIN_NAME.fullmatch(name) and not name.isdigit() else quote_name(name)


def cast_type_sql(data_type: pa.DataType) -> str:
    return types.type_name(data_type)


_STRING_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def string_sql(value: str) -> str:
    """A single-quoted literal that reads back as ``value``."""
    out = []
    for char in value:
        if char in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[char])
        elif ord(char) < 0x20 or 0xD800 <= ord(char) <= 0xDFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "'" + "".join(out) + "'"


def literal_sql(value: object, data_type: pa.DataType) -> str:
    """The literal's SQL spelling; a value whose type its digits do not give is written as a CAST."""
    if value is None:
        return "NULL" if pa.types.is_null(data_type) else f"CAST(NULL AS {cast_type_sql(data_type)})"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int) and types.is_integral(data_type):
        suffix = {8: "Y", 16: "S", 32: "", 64: "L"}[data_type.bit_width]
        return f"{value}{suffix}"
    if isinstance(value, decimal.Decimal):
        text = f"{value:f}"
        try:
            natural = types.decimal_literal_type(value)
        except ValueError:
            natural = None
        if natural == data_type:
            return f"{text}BD"
        return f"CAST({text}BD AS {cast_type_sql(data_type)})"
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"CAST({string_sql(repr(value))} AS {cast_type_sql(data_type)})"
        if pa.types.is_float32(data_type):
            return f"{_shortest_float32(value)}F"
        return f"{value!r}D"
    if isinstance(value, str):
        return string_sql(value)
    if isinstance(value, bytes):
        return f"X'{value.hex().upper()}'"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            moment = value.astimezone(_dt.UTC).replace(tzinfo=None)
            return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
        return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'"
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    raise TypeError(f"no SQL literal for {value!r}")


def _shortest_float32(value: float) -> str:
    """The shortest decimal text that reads back as the same 32-bit float."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        try:
            same = struct.pack("<f", float(text)) == packed
        except OverflowError:  # rounded past the largest 32-bit float (near 3.4e38)
            continue
        if same:
            return text if any(c in text for c in ".e") else text + ".0"
    return repr(value)


def map_columns(node: Node, change: Callable[[Column], Node]) -> Node:
    """``node`` with every column replaced by ``change(column)`` (everything else kept)."""
    if isinstance(node, Column):
        return change(node)
    values: dict[str, Any] = {}
    for item in fields(node):
        value = getattr(node, item.name)
        if isinstance(value, Node):
            value = map_columns(value, change)
        elif isinstance(value, tuple):
            value = tuple(_map_item(part, change) for part in value)
        values[item.name] = value
    return replace(node, **values)


def _map_item(value: object, change: Callable[[Column], Node]) -> object:
    if isinstance(value, Node):
        return map_columns(value, change)
    if isinstance(value, tuple):
        return tuple(_map_item(part, change) for part in value)
    return value
