"""Properties of the SQL expression grammar, on random input.

1. Printing a random syntax tree and parsing it back gives the same tree.
2. Vectorised evaluation over random tables with nulls equals a slow row-by-row evaluator written
   here from SQL's rules (arithmetic, comparisons, AND/OR/NOT, IS NULL, IN, BETWEEN, CASE,
   COALESCE), errors included: a row fails (division by zero, overflow) exactly when SQL evaluates
   the failing operand for it.
3. Pruning with ``to_predicate()`` never drops a file holding a row for which the condition is
   true (``tests/test_sql_expression_pruning.py``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Callable

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replay.protocol.sql import FUNCTIONS, ExpressionError, ExpressionEvaluationError, parse_expression
from replay.protocol.sql import datatypes as sqltypes
from replay.protocol.sql import syntax as sx
from replay.protocol.sql.interval_literals import MICROS, IntervalLiteral

UTC = dt.UTC

# -- 1. printing and parsing back ------------------------------------------------------------------
names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=5)


def _decimal(unscaled: int, scale: int) -> sx.Literal:
    value = decimal.Decimal(unscaled).scaleb(-scale)
    return sx.Literal(value, sqltypes.decimal_literal_type(value))


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _interval(kind: str, count: int, micros: int) -> sx.Interval:
    """A literal of fields ``kind`` (``year``, ``year-month``, ``day-second`` ...) whose value its
    smallest field can hold: ``count`` of that field, or ``micros`` for seconds."""
    start, _, end = kind.partition("-")
    end = end or start
    if start in ("year", "month"):
        return sx.Interval(IntervalLiteral(count * (12 if end == "year" else 1), 0, start, end))
    size = MICROS[end] if end != "second" else 1
    value = (micros if end == "second" else count) * size
    return sx.Interval(IntervalLiteral(0, value, start, end))


INTERVAL_KINDS = [
    "year",
    "month",
    "year-month",
    "day",
    "hour",
    "minute",
    "second",
    "day-hour",
    "day-minute",
    "day-second",
    "hour-minute",
    "hour-second",
    "minute-second",
]
intervals = st.builds(
    _interval,
    st.sampled_from(INTERVAL_KINDS),
    st.integers(-(10**6), 10**6),
    st.integers(-(10**15), 10**15),
)
literals = st.one_of(
    intervals,
    st.integers(-(2**31), 2**31 - 1).map(lambda v: sx.Literal(v, pa.int32())),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: sx.Literal(v, pa.int64())),
    st.integers(-(2**15), 2**15 - 1).map(lambda v: sx.Literal(v, pa.int16())),
    st.integers(-128, 127).map(lambda v: sx.Literal(v, pa.int8())),
    st.builds(_decimal, st.integers(-(10**20), 10**20), st.integers(0, 12)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: sx.Literal(v, pa.float64())),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(
        lambda v: sx.Literal(_float32(v), pa.float32())
    ),
    (st.text() | st.text(alphabet="a\\'\"%_\x00\x01017\n\t`u")).map(lambda v: sx.Literal(v, pa.string())),
    st.binary(max_size=6).map(lambda v: sx.Literal(v, pa.binary())),
    st.booleans().map(lambda v: sx.Literal(v, pa.bool_())),
    st.just(sx.Literal(None, pa.null())),
    st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)).map(lambda v: sx.Literal(v, pa.date32())),
    st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 30), timezones=st.just(UTC)).map(
        lambda v: sx.Literal(v, pa.timestamp("us", tz="UTC"))
    ),
    st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 30)).map(
        lambda v: sx.Literal(v, pa.timestamp("us"))
    ),
)
columns = st.lists(names, min_size=1, max_size=3).map(lambda parts: sx.Column(tuple(parts)))
CAST_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(10, 2),
    pa.decimal128(38, 0),
    pa.string(),
    pa.binary(),
    pa.bool_(),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("us"),
]
OPERATORS = ["+", "-", "*", "/", "%", "||", "=", "<=>", "!=", "<", "<=", ">", ">=", "AND", "OR"]


def _call(children: st.SearchStrategy[sx.Node]) -> st.SearchStrategy[sx.Node]:
    def with_args(name: str) -> st.SearchStrategy[sx.Node]:
        spec = FUNCTIONS[name]
        high = spec.max_args if spec.max_args is not None else spec.min_args + 2
        return st.lists(children, min_size=spec.min_args, max_size=high).map(
            lambda args: sx.Call(name, tuple(args))
        )

    return st.sampled_from(sorted(FUNCTIONS)).flatmap(with_args)


def _extend(children: st.SearchStrategy[sx.Node]) -> st.SearchStrategy[sx.Node]:
    some = st.lists(children, min_size=1, max_size=3).map(tuple)
    return st.one_of(
        st.builds(sx.Unary, st.sampled_from(["-", "NOT"]), children),
        st.builds(sx.Binary, st.sampled_from(OPERATORS), children, children),
        st.builds(sx.IsNull, children, st.booleans()),
        st.builds(sx.IsBool, children, st.booleans(), st.booleans()),
        st.builds(sx.InList, children, some, st.booleans()),
        st.builds(sx.Between, children, children, children, st.booleans()),
        st.builds(sx.Like, children, children, st.characters(codec="utf-8"), st.booleans()),
        st.builds(
            sx.Case,
            st.none() | children,
            st.lists(st.tuples(children, children), min_size=1, max_size=3).map(tuple),
            st.none() | children,
        ),
        st.builds(sx.Cast, children, st.sampled_from(CAST_TYPES)),
        _call(children),
    )


trees = st.recursive(literals | columns, _extend, max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
@example(sx.Literal(_float32(3.4025001647762064e38), pa.float32()))  # its short forms round past FLT_MAX
def test_printed_trees_parse_back_to_themselves(tree: sx.Node) -> None:
    text = sx.to_sql(tree)
    assert parse_expression(text).tree == tree, text


# -- 2. vectorised evaluation equals row-by-row evaluation --------------------------------------------
LONG = (-(2**63), 2**63 - 1)
INTS = ("a", "b", "c")
BOOLS = ("p", "q")


class RowError(Exception):
    """A row SQL fails on (division by zero, overflow)."""


def long(value: int) -> sx.Literal:
    return sx.Literal(value, pa.int64())


int_leaves = st.one_of(
    st.sampled_from(INTS).map(lambda name: sx.Column((name,))),
    st.integers(-4, 4).map(long),
    st.sampled_from([2**62, -(2**62), 2**31]).map(long),
    st.just(sx.Literal(None, pa.null())),
)
bool_leaves = st.one_of(
    st.sampled_from(BOOLS).map(lambda name: sx.Column((name,))),
    st.booleans().map(lambda v: sx.Literal(v, pa.bool_())),
)


def _integers(
    ints: st.SearchStrategy[sx.Node], bools: st.SearchStrategy[sx.Node]
) -> st.SearchStrategy[sx.Node]:
    return st.one_of(
        st.builds(sx.Binary, st.sampled_from(["+", "-", "*", "%"]), ints, ints),
        st.builds(sx.Unary, st.just("-"), ints),
        st.builds(
            sx.Case, st.none(), st.lists(st.tuples(bools, ints), min_size=1, max_size=2).map(tuple), ints
        ),
        st.lists(ints, min_size=1, max_size=3).map(lambda args: sx.Call("coalesce", tuple(args))),
    )


def _numbers(
    numbers: st.SearchStrategy[sx.Node], bools: st.SearchStrategy[sx.Node]
) -> st.SearchStrategy[sx.Node]:
    """Numbers with DOUBLEs (``/``); ``%`` only of integers (a DOUBLE ``%`` is approximate)."""
    return st.one_of(
        st.builds(sx.Binary, st.just("/"), numbers, numbers),
        st.builds(sx.Binary, st.sampled_from(["+", "-", "*"]), numbers, numbers),
        st.builds(sx.Unary, st.just("-"), numbers),
        st.builds(
            sx.Case,
            st.none(),
            st.lists(st.tuples(bools, numbers), min_size=1, max_size=2).map(tuple),
            numbers,
        ),
        st.lists(numbers, min_size=1, max_size=3).map(lambda args: sx.Call("coalesce", tuple(args))),
    )


def _conditions(
    numbers: st.SearchStrategy[sx.Node], bools: st.SearchStrategy[sx.Node]
) -> st.SearchStrategy[sx.Node]:
    return st.one_of(
        st.builds(sx.Binary, st.sampled_from(["=", "<=>", "!=", "<", "<=", ">", ">="]), numbers, numbers),
        st.builds(sx.Binary, st.sampled_from(["AND", "OR", "=", "<"]), bools, bools),
        st.builds(sx.Unary, st.just("NOT"), bools),
        st.builds(sx.IsNull, numbers | bools, st.booleans()),
        st.builds(sx.IsBool, bools, st.booleans(), st.booleans()),
        st.builds(sx.InList, numbers, st.lists(numbers, min_size=1, max_size=3).map(tuple), st.booleans()),
        st.builds(sx.Between, numbers, numbers, numbers, st.booleans()),
        st.builds(
            sx.Case, st.none(), st.lists(st.tuples(bools, bools), min_size=1, max_size=2).map(tuple), bools
        ),
        st.lists(bools, min_size=1, max_size=3).map(lambda args: sx.Call("coalesce", tuple(args))),
    )


integers: st.SearchStrategy[sx.Node] = st.deferred(lambda: int_leaves | _integers(integers, conditions))
numbers: st.SearchStrategy[sx.Node] = st.deferred(lambda: integers | _numbers(numbers, conditions))
conditions: st.SearchStrategy[sx.Node] = st.deferred(lambda: bool_leaves | _conditions(numbers, conditions))
int_values = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([2**62, -(2**62)]))
tables = st.integers(1, 6).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            **{name: st.lists(int_values, min_size=n, max_size=n) for name in INTS},
            **{name: st.lists(st.none() | st.booleans(), min_size=n, max_size=n) for name in BOOLS},
        }
    )
)


def kind(node: sx.Node) -> str:
    """The static type: ``int``, ``double``, ``bool`` or ``null``."""
    if isinstance(node, sx.Column):
        return "int" if node.parts[0] in INTS else "bool"
    if isinstance(node, sx.Literal):
        return "null" if node.value is None else ("bool" if isinstance(node.value, bool) else "int")
    if isinstance(node, sx.Binary) and node.op in "+-*%/":
        kinds = {kind(node.left), kind(node.right)}
        return "double" if node.op == "/" or "double" in kinds or kinds == {"null"} else "int"
    if isinstance(node, sx.Unary) and node.op == "-":
        return "int" if kind(node.operand) == "int" else "double"
    if isinstance(node, sx.Case | sx.Call):
        branches = list(node.args) if isinstance(node, sx.Call) else [then for _, then in node.whens]
        if isinstance(node, sx.Case) and node.otherwise is not None:
            branches.append(node.otherwise)
        found = {kind(b) for b in branches}
        return next((k for k in ("double", "int", "bool") if k in found), "null")
    return "bool"


def checked(value: int) -> int:
    if not LONG[0] <= value <= LONG[1]:
        raise RowError("overflow")
    return value


def arithmetic(op: str, left: object, right: object, double: bool) -> object:
    assert isinstance(left, int | float) and isinstance(right, int | float)
    if double or op == "/":
        left, right = float(left), float(right)
    if op in "/%" and right == 0:
        raise RowError("zero")
    if op == "/":
        return left / right
    if op == "%" and double:  # the library's documented DOUBLE remainder: a - trunc(a / b) * b
        assert isinstance(left, float) and isinstance(right, float)
        return left - math.trunc(left / right) * right
    if op == "%":
        assert isinstance(left, int) and isinstance(right, int)
        quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right > 0) else -1)
        return left - right * quotient
    result = {"+": left + right, "-": left - right, "*": left * right}[op]
    return result if double else checked(int(result))


def compare(op: str, left: object, right: object) -> bool:
    if isinstance(left, float) or isinstance(right, float):
        left, right = float(left), float(right)  # type: ignore[arg-type]
    ops: dict[str, Callable[[object, object], bool]] = {
        "=": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
        "<": lambda x, y: x < y,  # type: ignore[operator]
        "<=": lambda x, y: x <= y,  # type: ignore[operator]
        ">": lambda x, y: x > y,  # type: ignore[operator]
        ">=": lambda x, y: x >= y,  # type: ignore[operator]
    }
    return ops[op](left, right)


def reference(node: sx.Node, row: dict[str, object]) -> object:
    """One row's value, evaluated as SQL evaluates it (operands only where SQL evaluates them)."""
    if isinstance(node, sx.Column):
        return row[node.parts[0]]
    if isinstance(node, sx.Literal):
        return node.value
    if isinstance(node, sx.Unary):
        value = reference(node.operand, row)
        if value is None:
            return None
        return (not value) if node.op == "NOT" else (checked(-value) if isinstance(value, int) else -value)  # type: ignore[operator]
    if isinstance(node, sx.Binary):
        return _binary(node, row)
    if isinstance(node, sx.IsNull):
        return (reference(node.operand, row) is None) != node.negated
    if isinstance(node, sx.IsBool):
        return (reference(node.operand, row) is node.value) != node.negated
    if isinstance(node, sx.InList):
        value = reference(node.operand, row)
        if value is None:
            return None
        saw_null = False
        for item in node.items:
            listed = reference(item, row)
            if listed is None:
                saw_null = True
            elif compare("=", value, listed):
                return not node.negated
        return None if saw_null else node.negated
    if isinstance(node, sx.Between):
        inside = _binary(
            sx.Binary(
                "AND", sx.Binary(">=", node.operand, node.low), sx.Binary("<=", node.operand, node.high)
            ),
            row,
        )
        return None if inside is None else inside != node.negated
    if isinstance(node, sx.Case):
        for condition, value in node.whens:
            if reference(condition, row) is True:
                return _as(reference(value, row), kind(node))
        return _as(reference(node.otherwise, row), kind(node)) if node.otherwise is not None else None
    assert isinstance(node, sx.Call) and node.name == "coalesce"
    for arg in node.args:
        value = reference(arg, row)
        if value is not None:
            return _as(value, kind(node))
    return None


def _as(value: object, target: str) -> object:
    return (
        float(value)
        if target == "double" and isinstance(value, int) and not isinstance(value, bool)
        else value
    )


def _binary(node: sx.Binary, row: dict[str, object]) -> object:
    left = reference(node.left, row)
    if node.op in ("AND", "OR"):
        decisive = node.op == "OR"
        if left is decisive:
            return decisive
        right = reference(node.right, row)
        if right is decisive:
            return decisive
        return None if left is None or right is None else not decisive
    if node.op == "<=>":
        right = reference(node.right, row)
        return (left is None and right is None) or (
            left is not None and right is not None and compare("=", left, right)
        )
    if left is None:
        return None  # the right side is not evaluated
    right = reference(node.right, row)
    if right is None:
        return None
    if node.op in "+-*%/":
        return arithmetic(node.op, left, right, kind(node) == "double")
    return compare(node.op, left, right)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions | numbers, tables)
@example(  # a DOUBLE remainder: -NULL is a DOUBLE, and so is the COALESCE that has it
    sx.Binary("%", long(7), sx.Call("coalesce", (long(-2), sx.Unary("-", sx.Literal(None, pa.null()))))),
    {"a": [None], "b": [None], "c": [None], "p": [None], "q": [None]},
)
def test_vectorised_evaluation_equals_row_by_row_evaluation(
    tree: sx.Node, columns: dict[str, list[object]]
) -> None:
    table = pa.table(
        {
            name: pa.array(values, pa.int64() if name in INTS else pa.bool_())
            for name, values in columns.items()
        }
    )
    text = sx.to_sql(tree)
    try:
        bound = parse_expression(text).bind(table.schema)
    except ExpressionError as exc:  # only a CASE condition that is a bare NULL is not a condition
        assert exc.error_class == "DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE", (text, exc)
        return
    rows = table.to_pylist()
    expected: list[object] = []
    failed = False
    for row in rows:
        try:
            expected.append(reference(tree, row))
        except RowError:
            failed = True
    if failed:
        try:
            bound.evaluate(table)
        except ExpressionEvaluationError:
            return
        raise AssertionError(f"{text} should fail on {rows}")
    got = bound.evaluate(table).to_pylist()
    assert len(got) == len(expected)
    for value, want in zip(got, expected, strict=True):
        if isinstance(want, float) and isinstance(value, float) and math.isnan(want):
            assert math.isnan(value), text
        else:
            assert value == want and (want is None or type(value) is type(want)), (text, rows, got, expected)
