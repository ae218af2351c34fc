"""The SQL expressions of a row-level change, as values that travel to the per-file work.

A bound expression holds its kernels (functions) and is bound once per process; what a plan
carries is :class:`SqlText` (the text, the schemas of the scopes it reads, the moment
``current_timestamp()`` stands for) or :class:`LiteralValue` (a Python value, UPDATE's
``new_values``), both picklable. The driver binds each once while planning, so that an unknown
column or function fails before anything is read, naming it and its position.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.sql import BoundExpression, parse_expression
from replay.protocol.sql.bound import BLiteral


class _Bindable:
    """Drops the bound expression when pickled (it is bound again where it is used)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("bound", None)
        return state


@dataclass(frozen=True, eq=False)
class SqlText(_Bindable):
    """A SQL expression over ``scopes`` (one schema per qualifier; ``""`` for a single table read
    without qualifiers), stored into a column of ``target`` type when given (Spark's store
    assignment, named ``column`` in errors)."""

    text: str
    scopes: Mapping[str, pa.Schema]
    kind: str = "expression"
    target: pa.DataType | None = None
    column: str = ""
    now: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.UTC))

    @cached_property
    def bound(self) -> BoundExpression:
        parsed = parse_expression(self.text, kind=self.kind)
        scopes = self.scopes[""] if list(self.scopes) == [""] else dict(self.scopes)
        bound = parsed.bind(scopes, now=self.now)
        return bound.assign(self.target, self.column) if self.target is not None else bound


@dataclass(frozen=True, eq=False)
class LiteralValue(_Bindable):
    """A Python value stored into a column of ``target`` type (UPDATE's ``new_values``)."""

    value: Any
    target: pa.DataType
    column: str = ""

    @cached_property
    def bound(self) -> BoundExpression:
        scalar = self.value if isinstance(self.value, pa.Scalar) else pa.scalar(self.value)
        literal = BoundExpression(repr(self.value), BLiteral(scalar.type, 0, scalar))
        return literal.assign(self.target, self.column)


Assignment = SqlText | LiteralValue


def true_positions(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Where a boolean array is true (nulls are not), as int64 positions."""
    return pc.indices_nonzero(mask).to_numpy().view(np.int64)
