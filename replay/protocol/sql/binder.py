"""Binding: a syntax tree resolved against the columns in scope, typed, with implicit casts.

Names resolve as Spark resolves them, case-insensitively. ``a.b.c`` is column ``b`` of scope
``a`` (then field ``c``) when ``a`` names a scope that has a column ``b``; otherwise it is column
``a`` (then fields ``b``, ``c``) of the one scope unqualified names may come from that has it. A
name found in two such scopes is ``AMBIGUOUS_REFERENCE``, in none ``UNRESOLVED_COLUMN``; a
missing field is ``FIELD_NOT_FOUND``. ``current_date`` and ``current_timestamp`` without
parentheses are the functions unless a column has that name.

Every node is typed by the rules of :mod:`replay.protocol.sql.datatypes`; a part without columns
is computed once, here (``'2024-01-31'`` compared with a DATE column becomes a DATE literal), unless
computing it fails, which then happens only if evaluation reaches it.
"""

from __future__ import annotations

import datetime as _dt
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from replay.protocol.sql import coercion, intervals, operators, syntax
from replay.protocol.sql import datatypes as types
from replay.protocol.sql.bound import (
    BAnd,
    BCall,
    BCase,
    BCast,
    BColumn,
    BCompare,
    BIn,
    BIsBool,
    BIsNull,
    BLike,
    BLiteral,
    BNot,
    BOr,
    Bound,
    is_constant,
)
from replay.protocol.sql.casts import can_cast, cast_mismatch_class
from replay.protocol.sql.errors import ExpressionEvaluationError, resolution_error
from replay.protocol.sql.evaluate import Context, evaluate
from replay.protocol.sql.functions import FUNCTIONS, CallSite


@dataclass(frozen=True)
class Scopes:
    """The columns an expression may name: a schema per scope (qualifier) and the scopes an
    unqualified name may come from. A single unnamed scope is ``""``."""

    schemas: Mapping[str, pa.Schema]
    unqualified: tuple[str, ...]

    @classmethod
    def of(
        cls, scopes: pa.Schema | Mapping[str, pa.Schema], unqualified: Sequence[str] | None = None
    ) -> Scopes:
        schemas = {"": scopes} if isinstance(scopes, pa.Schema) else dict(scopes)
        names = tuple(schemas) if unqualified is None else tuple(unqualified)
        unknown = [name for name in names if name not in schemas]
        if unknown:
            raise ValueError(f"unqualified scopes {unknown} are not among the scopes {list(schemas)}")
        return cls(schemas, names)


def _find(names: Sequence[str], wanted: str) -> list[str]:
    exact = [name for name in names if name == wanted]
    return exact or [name for name in names if name.lower() == wanted.lower()]


class Binder:
    def __init__(self, scopes: Scopes, now: _dt.datetime) -> None:
        self.scopes = scopes
        self.now = now
        self._days: dict[int, Bound] = {}
        """The bound intervals of Spark's type ``INTERVAL DAY`` (a DATE plus one is a DATE)."""

    def bind(self, node: syntax.Node) -> Bound:
        bound = self._bind(node)
        return self._fold(bound)

    def _fold(self, node: Bound) -> Bound:
        """A constant node computed once into a literal (kept as is if computing it fails)."""
        if isinstance(node, BLiteral) or not is_constant(node):
            return node
        try:
            value = evaluate(node, Context(1, _no_columns))
        except ExpressionEvaluationError:
            return node
        if not isinstance(value, pa.Scalar):
            value = value[0]
        return self._day(BLiteral(node.type, node.position, value), self._is_day(node))

    def _day(self, node: Bound, day: bool) -> Bound:
        """``node``, remembered as an ``INTERVAL DAY`` if ``day``."""
        if day:
            self._days[id(node)] = node
        return node

    def _is_day(self, node: Bound) -> bool:
        return self._days.get(id(node)) is node

    # -- nodes -------------------------------------------------------------------------------------------
    def _bind(self, node: syntax.Node) -> Bound:
        if isinstance(node, syntax.Literal):
            return BLiteral(node.type, node.position, pa.scalar(node.value, node.type))
        if isinstance(node, syntax.Column):
            return self._column(node)
        if isinstance(node, syntax.Interval):
            literal = node.value
            return self._day(BLiteral(literal.data_type, node.position, literal.scalar()), literal.day)
        if isinstance(node, syntax.Call):
            return self._call(node.name, node.args, node)
        bound_children = {id(child): self.bind(child) for child in node.children()}

        def child(part: syntax.Node) -> Bound:
            return bound_children[id(part)]

        site = coercion.Site(syntax.to_sql(node), node.position)
        if isinstance(node, syntax.Unary):
            operand = child(node.operand)
            if node.op == "NOT":
                return BNot(
                    types.BOOLEAN,
                    node.position,
                    coercion.implicit(operand, coercion.BOOLEAN, site, 0, syntax.to_sql(node.operand)),
                )
            if intervals.is_interval(operand.type):
                return self._day(intervals.negation(operand), self._is_day(operand))
            typed = coercion.implicit(operand, coercion.NUMERIC, site, 0, syntax.to_sql(node.operand))
            return BCall(typed.type, node.position, "negative", (typed,), operators.negate)
        if isinstance(node, syntax.Binary):
            return self._binary(node.op, child(node.left), child(node.right), site, node)
        if isinstance(node, syntax.IsNull):
            return BIsNull(types.BOOLEAN, node.position, child(node.operand), node.negated)
        if isinstance(node, syntax.IsBool):
            _same_kind_or_fail(child(node.operand), BLiteral(types.BOOLEAN, -1, pa.scalar(True)), site)
            operand = coercion.implicit(
                child(node.operand), coercion.BOOLEAN, site, 0, syntax.to_sql(node.operand)
            )
            return BIsBool(types.BOOLEAN, node.position, operand, node.value, node.negated)
        if isinstance(node, syntax.InList):
            listed, _ = coercion.common(
                [child(node.operand), *(child(item) for item in node.items)], site, "in"
            )
            result: Bound = BIn(
                types.BOOLEAN, node.position, listed[0], tuple(self._fold(t) for t in listed[1:])
            )
            return BNot(types.BOOLEAN, node.position, result) if node.negated else result
        if isinstance(node, syntax.Between):
            value = child(node.operand)
            low = self._compare(">=", value, child(node.low), site)
            high = self._compare("<=", value, child(node.high), site)
            between: Bound = BAnd(types.BOOLEAN, node.position, self._fold(low), self._fold(high))
            return BNot(types.BOOLEAN, node.position, between) if node.negated else between
        if isinstance(node, syntax.Like):
            value = coercion.implicit(
                child(node.operand), coercion.STRING, site, 0, syntax.to_sql(node.operand)
            )
            pattern = self._fold(
                coercion.implicit(child(node.pattern), coercion.STRING, site, 1, syntax.to_sql(node.pattern))
            )
            if isinstance(pattern, BLiteral) and pattern.value.is_valid:
                operators.like_pattern(pattern.value.as_py(), node.escape, node.position)  # fail early
            like: Bound = BLike(types.BOOLEAN, node.position, value, pattern, node.escape)
            return BNot(types.BOOLEAN, node.position, like) if node.negated else like
        if isinstance(node, syntax.Case):
            return self._case(node, child, site)
        assert isinstance(node, syntax.Cast), node
        operand = child(node.operand)
        if not can_cast(operand.type, node.type):
            raise site.mismatch(
                f'cannot cast "{types.type_name(operand.type)}" to "{types.type_name(node.type)}"',
                cast_mismatch_class(operand.type, node.type),
            )
        if operand.type == node.type:
            return operand
        return BCast(node.type, node.position, operand, explicit=True)

    def _column(self, node: syntax.Column) -> Bound:
        candidates: list[tuple[str, str, tuple[str, ...]]] = []
        parts = node.parts
        if len(parts) >= 2:
            for scope in _find([s for s in self.scopes.schemas if s], parts[0]):
                for name in _find(self.scopes.schemas[scope].names, parts[1]):
                    candidates.append((scope, name, parts[2:]))
        if not candidates:
            for scope in self.scopes.unqualified:
                for name in _find(self.scopes.schemas[scope].names, parts[0]):
                    candidates.append((scope, name, parts[1:]))
        if len(candidates) > 1:
            spelled = ", ".join(
                f"`{scope}`.`{name}`" if scope else f"`{name}`" for scope, name, _ in candidates
            )
            raise resolution_error(
                "AMBIGUOUS_REFERENCE",
                f"Reference {_quoted(parts)} is ambiguous, could be: [{spelled}]",
                node.position,
            )
        if not candidates:
            if len(parts) == 1 and parts[0].lower() in ("current_date", "current_timestamp"):
                return self._call(parts[0].lower(), (), node)
            raise resolution_error(
                "UNRESOLVED_COLUMN.WITH_SUGGESTION",
                f"A column, variable, or function parameter with name {_quoted(parts)} cannot be resolved. "
                f"Did you mean one of the following? [{self._suggest(parts)}]",
                node.position,
            )
        scope, name, fields = candidates[0]
        schema = self.scopes.schemas[scope]
        data_type = schema.field(name).type
        path = [name]
        for part in fields:
            if not pa.types.is_struct(data_type):
                raise resolution_error(
                    "INVALID_EXTRACT_BASE_FIELD_TYPE",
                    f"Can't extract a value from {_quoted(tuple(path))}. Need a complex type "
                    "[STRUCT, ARRAY, MAP] but "
                    f'got "{types.type_name(data_type)}"',
                    node.position,
                )
            matches = _find([f.name for f in data_type], part)
            if len(matches) != 1:
                fields_list = ", ".join(f"`{f.name}`" for f in data_type)
                raise resolution_error(
                    "FIELD_NOT_FOUND", f"No such struct field `{part}` in {fields_list}", node.position
                )
            path.append(matches[0])
            data_type = data_type.field(matches[0]).type
        return BColumn(data_type, node.position, scope, tuple(path))

    def _suggest(self, parts: tuple[str, ...]) -> str:
        qualified = len(self.scopes.schemas) > 1 or "" not in self.scopes.schemas
        names = [
            f"`{scope}`.`{name}`" if qualified and scope else f"`{name}`"
            for scope, schema in self.scopes.schemas.items()
            for name in schema.names
        ]
        wanted = f"`{parts[-1]}`"
        close = difflib.get_close_matches(wanted, names, n=5, cutoff=0.0)
        return ", ".join(close)

    def _call(self, name: str, args: tuple[syntax.Node, ...], node: syntax.Node) -> Bound:
        spec = FUNCTIONS[name]
        bound = [self.bind(arg) for arg in args]
        call = CallSite(
            coercion.Site(syntax.to_sql(node), node.position),
            tuple(syntax.to_sql(arg) for arg in args),
            self.now,
        )
        return spec.bind(bound, call)

    def _compare(self, op: str, left: Bound, right: Bound, site: coercion.Site) -> Bound:
        if intervals.is_interval(left.type) or intervals.is_interval(right.type):
            left, right = intervals.comparison_operands(left, right, site)
        else:
            left, right = coercion.comparison_operands(left, right, site, op)
        return BCompare(types.BOOLEAN, site.position, op, left, right)

    def _binary(self, op: str, left: Bound, right: Bound, site: coercion.Site, node: syntax.Binary) -> Bound:
        if op in ("AND", "OR"):
            _same_kind_or_fail(left, right, site)
            left = coercion.implicit(left, coercion.BOOLEAN, site, 0, syntax.to_sql(node.left))
            right = coercion.implicit(right, coercion.BOOLEAN, site, 1, syntax.to_sql(node.right))
            return (BAnd if op == "AND" else BOr)(types.BOOLEAN, node.position, left, right)
        if op in ("=", "<=>", "!=", "<", "<=", ">", ">="):
            return self._compare(op, left, right, site)
        if op == "||":
            return FUNCTIONS["concat"].bind(
                [left, right], CallSite(site, (syntax.to_sql(node.left), syntax.to_sql(node.right)), self.now)
            )
        return self._arithmetic(op, left, right, site, node)

    def _arithmetic(
        self, op: str, left: Bound, right: Bound, site: coercion.Site, node: syntax.Binary
    ) -> Bound:
        lt, rt = left.type, right.type
        if pa.types.is_null(lt) and pa.types.is_null(rt):
            left, right = coercion.cast_to(left, types.DOUBLE), coercion.cast_to(right, types.DOUBLE)
        elif pa.types.is_null(lt) or pa.types.is_null(rt):
            known = rt if pa.types.is_null(lt) else lt
            if op in ("*", "/") and intervals.is_interval(known):  # an interval times NULL: a number
                left = coercion.cast_to(left, types.DOUBLE) if pa.types.is_null(lt) else left
                right = coercion.cast_to(right, types.DOUBLE) if pa.types.is_null(rt) else right
            else:
                known = types.DOUBLE if types.is_string(known) else known
                left, right = coercion.cast_to(left, known), coercion.cast_to(right, known)
        lt, rt = left.type, right.type
        if types.is_string(lt) and types.is_string(rt):
            raise site.mismatch(
                f'the binary operator requires the input type "NUMERIC", not "{types.type_name(lt)}"',
                "BINARY_OP_WRONG_TYPE",
            )
        if types.is_string(lt) and types.is_numeric(rt):
            left = coercion.cast_to(left, types.string_in_arithmetic(rt))
        elif types.is_string(rt) and types.is_numeric(lt):
            right = coercion.cast_to(right, types.string_in_arithmetic(lt))
        with_intervals = intervals.bind_arithmetic(op, left, right, site, self._is_day)
        if with_intervals is not None:
            return self._day(*with_intervals)
        if op in ("+", "-") and (pa.types.is_date(left.type) or pa.types.is_date(right.type)):
            return self._date_arithmetic(op, left, right, site, node)
        lt, rt = left.type, right.type
        if not (types.is_numeric(lt) and types.is_numeric(rt)):
            raise site.mismatch(
                "the left and right operands of the binary operator have incompatible types "
                f'("{types.type_name(lt)}" and "{types.type_name(rt)}")',
                "BINARY_OP_DIFF_TYPES",
            )
        decimal = (pa.types.is_decimal(lt) or pa.types.is_decimal(rt)) and not (
            types.is_fractional(lt) or types.is_fractional(rt)
        )
        if decimal:
            left, right = self._as_decimal(left), self._as_decimal(right)
            result = types.decimal_result(op, left.type, right.type)
            return BCall(result, node.position, op, (left, right), operators.arithmetic, null_skips=True)
        common = types.wider_numeric(lt, rt)
        if op == "/":
            common = types.DOUBLE
        left, right = coercion.cast_to(left, common), coercion.cast_to(right, common)
        return BCall(common, node.position, op, (left, right), operators.arithmetic, null_skips=True)

    def _as_decimal(self, node: Bound) -> Bound:
        if pa.types.is_decimal(node.type):
            return node
        literal = node.value.as_py() if isinstance(node, BLiteral) and node.value.is_valid else None
        return coercion.cast_to(node, types.as_decimal(node.type, literal))

    def _date_arithmetic(
        self, op: str, left: Bound, right: Bound, site: coercion.Site, node: syntax.Binary
    ) -> Bound:
        if not pa.types.is_date(left.type) and op == "+":
            left, right = right, left
        if not pa.types.is_date(left.type):
            raise site.mismatch(
                f'the binary operator requires a DATE on its left, not "{types.type_name(left.type)}"',
                "BINARY_OP_WRONG_TYPE",
            )
        days = coercion.implicit(right, coercion.INTEGER, site, 1, syntax.to_sql(node.right))
        return BCall(types.DATE, node.position, op, (left, days), operators.date_arithmetic, null_skips=True)

    def _case(self, node: syntax.Case, child: Callable[[syntax.Node], Bound], site: coercion.Site) -> Bound:
        operand = child(node.operand) if node.operand is not None else None
        conditions: list[Bound] = []
        for when, _ in node.whens:
            if operand is not None:
                conditions.append(self._fold(self._compare("=", operand, child(when), site)))
            else:
                conditions.append(
                    coercion.implicit(child(when), coercion.STRICT_BOOLEAN, site, 0, syntax.to_sql(when))
                )
        otherwise = (
            child(node.otherwise) if node.otherwise is not None else BLiteral(types.VOID, -1, pa.scalar(None))
        )
        values, data_type = coercion.common(
            [*(child(then) for _, then in node.whens), otherwise], site, "casewhen"
        )
        values = [self._fold(value) for value in values]
        whens = tuple(zip(conditions, values[:-1], strict=True))
        return BCase(data_type, node.position, whens, values[-1])


def _same_kind_or_fail(left: Bound, right: Bound, site: coercion.Site) -> None:
    """A BOOLEAN next to a type that cannot become one is Spark's ``BINARY_OP_DIFF_TYPES``."""
    kinds = [coercion.implicit_target(side.type, coercion.BOOLEAN) is not None for side in (left, right)]
    if kinds[0] != kinds[1]:
        raise site.mismatch(
            "the left and right operands of the binary operator have incompatible types "
            f'("{types.type_name(left.type)}" and "{types.type_name(right.type)}")',
            "BINARY_OP_DIFF_TYPES",
        )


def _no_columns(scope: str, name: str) -> pa.Array:
    raise AssertionError("a constant reads no column")


def _quoted(parts: tuple[str, ...]) -> str:
    return ".".join(f"`{part}`" for part in parts)
