"""Row filters as data: what a filter says, in a form that file pruning can reason about.

A :data:`Predicate` is a small tree of comparisons of one column with literals (``=``, ``!=``,
``<``, ``<=``, ``>``, ``>=``, ``IN``, ``IS NULL``, ``STARTS WITH``) joined by ``AND``, ``OR`` and
``NOT``, with SQL semantics (a comparison with a null is not true). Four front ends build one:

* :func:`from_dnf`: pyarrow/deltalake DNF filters, ``[("part", "=", 3), ("id", ">", 10)]`` (AND)
  or a list of such lists (OR of ANDs);
* :func:`from_expression`: a :class:`pyarrow.compute.Expression`, read from its printed form;
  any part that is not read with certainty becomes :class:`Opaque` (no pruning, never a wrong one);
* :mod:`replay.protocol.sql` reads SQL expressions (``replaceWhere``, ``deltalog read --filter``,
  DML conditions) and gives their prunable part;
* the Spark data source converts Spark's pushed filters (``replay.spark``).

:func:`to_expression` turns a predicate without opaque parts back into a pyarrow expression for
exact row filtering. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

Op = Literal["=", "!=", "<", "<=", ">", ">="]
_NEGATED: dict[Op, Op] = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_FLIPPED: dict[Op, Op] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


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
            _column_type(schema, path)
        try:
            return _COMPARISONS[predicate.op](_field(predicate.left), _field(predicate.right))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
            left, right = column_name(predicate.left), column_name(predicate.right)
            raise InvalidFilterError(f"cannot compare columns {left} and {right}: {exc}") from None
    arrow_type = _column_type(schema, predicate.column) if schema is not None else None
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


def _column_type(schema: pa.Schema, path: tuple[str, ...]) -> pa.DataType:
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


# -- from pyarrow ---------------------------------------------------------------------------------
_AMBIGUOUS_NAME = re.compile(r"[()\"',{}\[\]<>=!\n]| and | or ")
_OPS_TEXT: tuple[tuple[str, Op], ...] = (
    (" == ", "="),
    (" != ", "!="),
    (" <= ", "<="),
    (" >= ", ">="),
    (" < ", "<"),
    (" > ", ">"),
)


def from_expression(expression: pc.Expression, schema: pa.Schema) -> Predicate:
    """The predicate of a pyarrow expression on a table of ``schema``, read from its printed form.

    Only forms read with certainty become comparisons: a field of ``schema`` compared with a
    literal of the field's type, ``is_in``, ``is_null``/``is_valid``, ``starts_with``, ``and``,
    ``or`` and ``invert``. Everything else (arithmetic, two fields, binary or floating NaN
    literals, truncated value sets, column names that would make the text ambiguous) becomes
    :class:`Opaque`, which prunes nothing.
    """
    if any(_AMBIGUOUS_NAME.search(name) for name in _all_names(schema)):
        return Opaque(str(expression))
    return _ExpressionReader(schema).read(str(expression))


def _all_names(schema: pa.Schema | pa.StructType) -> Iterable[str]:
    for field in schema:
        yield field.name
        if pa.types.is_struct(field.type):
            yield from _all_names(field.type)


class _ExpressionReader:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def read(self, text: str) -> Predicate:
        try:
            return self._read(text.strip())
        except (ValueError, KeyError, ArithmeticError, pa.ArrowException):
            return Opaque(text)

    def _read(self, text: str) -> Predicate:
        if text == "true":
            return TRUE
        if text == "false":
            return Or(())
        if text.startswith("invert(") and text.endswith(")") and _balanced(text[7:-1]):
            return Not(self._read(text[7:-1]))
        for name, reader in (
            ("is_in(", self._is_in),
            ("is_null(", self._is_null),
            ("is_valid(", self._is_valid),
            ("starts_with(", self._starts_with),
        ):
            if text.startswith(name) and text.endswith(")"):
                return reader(text[len(name) : -1])
        if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
            return self._parenthesised(text[1:-1])
        return Opaque(text)

    def _parenthesised(self, body: str) -> Predicate:
        for separator, combine in ((" or ", Or), (" and ", And)):
            parts = _split_top_level(body, separator)
            if len(parts) > 1:
                return combine(tuple(self.read(part) for part in parts))
        for text, op in _OPS_TEXT:
            parts = _split_top_level(body, text)
            if len(parts) == 2:
                return self._comparison(parts[0], op, parts[1])
        return Opaque(body)

    def _comparison(self, left: str, op: Op, right: str) -> Predicate:
        left_path, right_path = self._field(left), self._field(right)
        if left_path is not None and right_path is None:
            return Compare(left_path, op, self._literal(right, left_path))
        if right_path is not None and left_path is None:
            return Compare(right_path, _FLIPPED[op], self._literal(left, right_path))
        return Opaque(f"{left} {op} {right}")

    def _field(self, text: str) -> tuple[str, ...] | None:
        nested = re.fullmatch(r"FieldRef\.Nested\((.*)\)", text)
        if nested:
            parts = re.findall(r"FieldRef\.Name\(([^()]*)\)", nested.group(1))
            path = tuple(parts)
            if " ".join(f"FieldRef.Name({p})" for p in parts) != nested.group(1):
                return None
        else:
            path = (text,)
        try:
            _column_type(self.schema, path)
        except KeyError:
            return None
        return path

    def _literal(self, text: str, path: tuple[str, ...]) -> pa.Scalar:
        arrow_type = _column_type(self.schema, path)
        if text.startswith("null") or self._field(text) is not None:
            raise ValueError("not a literal")
        return _parse_literal(text, arrow_type)

    def _arguments(self, body: str) -> tuple[tuple[str, ...], str]:
        name, separator, options = body.partition(", {")
        path = self._field(name)
        if path is None or not separator or not options.endswith("}"):
            raise ValueError(f"cannot read the arguments {body!r}")
        return path, options[:-1]

    def _is_in(self, body: str) -> Predicate:
        path, options = self._arguments(body)
        match = re.fullmatch(r"value_set=[^:\[]+:\[\n(.*)\n\], null_matching_behavior=(\w+)", options, re.S)
        if match is None:
            raise ValueError("cannot read the value set")
        arrow_type = _column_type(self.schema, path)
        items = match.group(1).split(",\n")
        if any(not item.startswith("  ") or item.strip() in ("...", "null") for item in items):
            raise ValueError("truncated value set or nulls")
        values = tuple(_parse_literal(item[2:], arrow_type, quoted_raw=True) for item in items)
        return In(path, values)

    def _is_null(self, body: str) -> Predicate:
        path, options = self._arguments(body)
        if options != "nan_is_null=false":
            raise ValueError("is_null with NaN")
        return IsNull(path)

    def _is_valid(self, body: str) -> Predicate:
        path = self._field(body)
        if path is None:
            raise ValueError("not a field")
        return IsNull(path, negated=True)

    def _starts_with(self, body: str) -> Predicate:
        path, options = self._arguments(body)
        match = re.fullmatch(r'pattern=(".*"), ignore_case=false', options, re.S)
        if match is None or not pa.types.is_string(_column_type(self.schema, path)):
            raise ValueError("cannot read starts_with")
        return StartsWith(path, _unquote(match.group(1)))


def _balanced(text: str) -> bool:
    """Whether parentheses outside string literals balance in ``text`` (never going negative)."""
    depth = 0
    for char, quoted in _scan(text):
        if quoted:
            continue
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    return depth == 0


def _scan(text: str) -> Iterable[tuple[str, bool]]:
    """Each character with whether it is inside a (backslash-escaped) string literal."""
    quoted = escaped = False
    for char in text:
        if quoted:
            yield char, True
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
            continue
        if char == '"':
            quoted = True
            yield char, True
            continue
        yield char, False


def _split_top_level(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` where it is outside parentheses and string literals."""
    flags = list(_scan(text))
    parts: list[str] = []
    depth = start = index = 0
    while index < len(text):
        char, quoted = flags[index]
        if not quoted:
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            elif depth == 0 and text.startswith(separator, index):
                parts.append(text[start:index])
                index += len(separator)
                start = index
                continue
        index += 1
    parts.append(text[start:])
    return parts


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


def _unquote(text: str) -> str:
    """A printed string literal ``"..."`` with C-style escapes; :class:`ValueError` otherwise."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError("not a string literal")
    out: list[str] = []
    chars = iter(text[1:-1])
    for char in chars:
        if char == '"':
            raise ValueError("unescaped quote")
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in _ESCAPES:
                raise ValueError("unknown escape")
            out.append(_ESCAPES[escaped])
        else:
            out.append(char)
    return "".join(out)


_INTEGER = re.compile(r"-?\d+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)(Z?)")


def _parse_literal(text: str, arrow_type: pa.DataType, *, quoted_raw: bool = False) -> pa.Scalar:
    """A printed literal read as a scalar of ``arrow_type``; :class:`ValueError` if not certain."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if quoted_raw:  # value sets print strings unescaped: accept only unambiguous ones
            if len(text) < 2 or text[0] != '"' or text[-1] != '"' or '"' in text[1:-1] or "\\" in text:
                raise ValueError("ambiguous string in a value set")
            return pa.scalar(text[1:-1], arrow_type)
        return pa.scalar(_unquote(text), arrow_type)
    if pa.types.is_boolean(arrow_type):
        if text not in ("true", "false"):
            raise ValueError("not a boolean")
        return pa.scalar(text == "true")
    if pa.types.is_integer(arrow_type):
        if not _INTEGER.fullmatch(text):
            raise ValueError("not an integer")
        return pa.scalar(int(text)).cast(arrow_type)
    if pa.types.is_floating(arrow_type):
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("NaN or infinite literal")
        return pa.scalar(value, pa.float64())  # compared with slack by pruning (printing may round)
    if pa.types.is_decimal(arrow_type):
        return pa.scalar(decimal.Decimal(text)).cast(arrow_type)
    if pa.types.is_date(arrow_type):
        if not _DATE.fullmatch(text):
            raise ValueError("not a date")
        return pa.scalar(_dt.date.fromisoformat(text)).cast(arrow_type)
    if pa.types.is_timestamp(arrow_type):
        match = _TIMESTAMP.fullmatch(text)
        if match is None or bool(match.group(2)) != bool(arrow_type.tz):
            raise ValueError("not a timestamp of the column's kind")
        naive = pa.array([match.group(1)]).cast(pa.timestamp("ns"))
        return naive.cast(pa.timestamp("ns", tz="UTC") if arrow_type.tz else pa.timestamp("ns"))[0]
    raise ValueError(f"literals of type {arrow_type} are not read")
