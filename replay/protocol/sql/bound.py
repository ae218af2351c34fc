"""Bound expressions: names resolved to (scope, column path), every node typed, casts explicit.

The binder (:mod:`replay.protocol.sql.binder`) builds these from a syntax tree; the evaluator
(:mod:`replay.protocol.sql.evaluate`) computes them over Arrow data; :mod:`replay.protocol.sql.
to_predicate` reads them for file pruning. Operands of an operator already have the type the
operator works in (implicit casts are :class:`BCast` nodes), so evaluation never coerces.
Nodes compare by identity (evaluation caches results per node).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa

Value: TypeAlias = pa.Array | pa.ChunkedArray | pa.Scalar
"""What evaluation yields: an array with one value per row, or one scalar for every row."""


@dataclass(frozen=True, eq=False)
class Bound:
    type: pa.DataType
    position: int

    def children(self) -> tuple[Bound, ...]:
        return ()

    def walk(self) -> Iterator[Bound]:
        yield self
        for child in self.children():
            yield from child.walk()


@dataclass(frozen=True, eq=False)
class BColumn(Bound):
    """A column of a scope, ``path`` spelled as in the scope's schema (top-level name first)."""

    scope: str
    path: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class BLiteral(Bound):
    value: pa.Scalar


@dataclass(frozen=True, eq=False)
class BCast(Bound):
    """An ANSI cast of ``child`` to ``type`` (explicit ``CAST`` or an implicit coercion)."""

    child: Bound
    explicit: bool = False

    def children(self) -> tuple[Bound, ...]:
        return (self.child,)


Kernel = Callable[[Sequence[Value], "BCall"], Value]
"""A vectorised implementation: the evaluated arguments and the node -> the result."""


@dataclass(frozen=True, eq=False)
class BCall(Bound):
    """An operator or function computed by ``kernel`` from its evaluated arguments.

    ``null_skips``: null in, null out, and (as Spark's binary expressions do) an argument is
    evaluated only for rows where the ones before it are not null."""

    name: str
    args: tuple[Bound, ...]
    kernel: Kernel
    options: tuple[object, ...] = ()
    null_skips: bool = False

    def children(self) -> tuple[Bound, ...]:
        return self.args


@dataclass(frozen=True, eq=False)
class BCompare(Bound):
    """``left <op> right`` for ``= <=> != < <= > >=``; both sides have one type."""

    op: str
    left: Bound
    right: Bound

    def children(self) -> tuple[Bound, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class BAnd(Bound):
    left: Bound
    right: Bound

    def children(self) -> tuple[Bound, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class BOr(Bound):
    left: Bound
    right: Bound

    def children(self) -> tuple[Bound, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class BNot(Bound):
    child: Bound

    def children(self) -> tuple[Bound, ...]:
        return (self.child,)


@dataclass(frozen=True, eq=False)
class BIsNull(Bound):
    child: Bound
    negated: bool = False

    def children(self) -> tuple[Bound, ...]:
        return (self.child,)


@dataclass(frozen=True, eq=False)
class BIsBool(Bound):
    """``child IS [NOT] TRUE|FALSE``: two-valued."""

    child: Bound
    value: bool
    negated: bool = False

    def children(self) -> tuple[Bound, ...]:
        return (self.child,)


@dataclass(frozen=True, eq=False)
class BIn(Bound):
    """``value IN (items)``; every item has ``value``'s type."""

    value: Bound
    items: tuple[Bound, ...]

    def children(self) -> tuple[Bound, ...]:
        return (self.value, *self.items)


@dataclass(frozen=True, eq=False)
class BLike(Bound):
    """``value LIKE pattern``, the pattern written with ``escape`` as its escape character."""

    value: Bound
    pattern: Bound
    escape: str

    def children(self) -> tuple[Bound, ...]:
        return (self.value, self.pattern)


@dataclass(frozen=True, eq=False)
class BCase(Bound):
    """``CASE WHEN c1 THEN v1 ... ELSE e END``: branches are evaluated only where chosen."""

    whens: tuple[tuple[Bound, Bound], ...]
    otherwise: Bound

    def children(self) -> tuple[Bound, ...]:
        parts: list[Bound] = []
        for when, then in self.whens:
            parts += [when, then]
        return (*parts, self.otherwise)


def references(node: Bound) -> list[BColumn]:
    """Every column ``node`` reads, in order of appearance (repeats included)."""
    return [n for n in node.walk() if isinstance(n, BColumn)]


def is_constant(node: Bound) -> bool:
    return not references(node)
