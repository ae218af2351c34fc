"""Reading a :class:`pyarrow.compute.Expression` back into a :data:`~replay.protocol.predicates.Predicate`.

pyarrow offers no public way to walk an expression, so the reader works on its printed form and
keeps only what it reads with certainty; anything else becomes
:class:`~replay.protocol.predicates.Opaque` (it prunes nothing, and never prunes wrongly). Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.predicates import (
    TRUE,
    And,
    Compare,
    In,
    IsNull,
    Not,
    Op,
    Opaque,
    Or,
    Predicate,
    StartsWith,
    column_type,
)

_FLIPPED: dict[Op, Op] = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
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
            column_type(self.schema, path)
        except KeyError:
            return None
        return path

    def _literal(self, text: str, path: tuple[str, ...]) -> pa.Scalar:
        arrow_type = column_type(self.schema, path)
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
        arrow_type = column_type(self.schema, path)
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
        if match is None or not pa.types.is_string(column_type(self.schema, path)):
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
