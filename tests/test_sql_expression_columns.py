"""SQL expressions over columns: name resolution in scopes, evaluation with nulls, SQL's lazy
evaluation of branches, the pruning predicate of a condition, and MERGE's join keys."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from replay.protocol.predicates import FALSE, And, Compare, In, IsNull, Opaque, StartsWith
from replay.protocol.sql import (
    ColumnReference,
    ExpressionError,
    ExpressionEvaluationError,
    Reference,
    conjunction,
    join_keys,
    parse_expression,
)

D = decimal.Decimal
NAN = float("nan")
DATA = pa.table(
    {
        "a": pa.array([1, 2, None, 4], pa.int64()),
        "b": pa.array([3, 0, 5, None], pa.int32()),
        "s": pa.array(["xa", None, "xb", "y"]),
        "d": pa.array([dt.date(2024, 1, 31), dt.date(2024, 2, 1), None, dt.date(2024, 1, 1)]),
        "m": pa.array([D("1.50"), D("-2.25"), None, D("0.00")], pa.decimal128(5, 2)),
        "f": pa.array([0.5, NAN, None, -1.0]),
        "flag": pa.array([True, False, None, True]),
        "st": pa.array([{"x": 1}, None, {"x": None}, {"x": 4}], pa.struct([("x", pa.int32())])),
    }
)


def values(text: str, data: pa.Table = DATA) -> list[object]:
    result = parse_expression(text).bind(data.schema).evaluate(data).to_pylist()
    return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in result]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a + b", [4, 2, None, None]),
        ("m * 2 + a", [D("4.00"), D("-2.50"), None, D("4.00")]),
        ("-m", [D("-1.50"), D("2.25"), None, D("0.00")]),
        ("abs(b - 4)", [1, 4, 1, None]),
        ("round(m, 1)", [D("1.5"), D("-2.3"), None, D("0.0")]),
        ("a % 3 - b", [-2, 2, None, None]),
        ("d = '2024-01-31'", [True, False, None, False]),
        ("d > '2024-01'", [True, True, None, False]),
        ("date_add(d, b)", [dt.date(2024, 2, 3), dt.date(2024, 2, 1), None, None]),
        ("year(d) * 100 + month(d)", [202401, 202402, None, 202401]),
        ("a IN (1, NULL)", [True, None, None, None]),
        ("a NOT IN (1, 2)", [False, False, None, True]),
        ("a IN (b, 2)", [False, True, None, None]),
        ("a BETWEEN b AND 5", [False, True, None, None]),
        ("a NOT BETWEEN b AND 3", [True, False, None, True]),
        ("a <=> b", [False, False, False, False]),
        ("NOT a <=> NULL", [True, True, False, True]),
        ("s LIKE 'x%'", [True, None, True, False]),
        ("s NOT LIKE '_a'", [False, None, True, True]),
        ("upper(s) || '!'", ["XA!", None, "XB!", "Y!"]),
        ("substring(s, 2)", ["a", None, "b", ""]),
        ("concat(s, a)", ["xa1", None, None, "y4"]),
        ("f = CAST('NaN' AS DOUBLE)", [False, True, None, False]),
        ("f > 100", [False, True, None, False]),
        ("f < 100", [True, False, None, True]),
        ("flag IS NOT TRUE", [False, True, True, False]),
        ("flag IS FALSE", [False, True, False, False]),
        ("NOT flag", [False, True, None, False]),
        ("flag OR a > 3", [True, False, None, True]),
        ("flag AND a > 3", [False, False, None, True]),
        ("CASE a WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END", ["one", "two", "many", "many"]),
        ("CASE WHEN a > 1 THEN m END", [None, D("-2.25"), None, D("0.00")]),
        ("nullif(b, 0)", [3, None, 5, None]),
        ("if(a > 1, s, 'small')", ["small", None, "small", "y"]),
        ("coalesce(a, b, -1)", [1, 2, 5, 4]),
        ("CAST(m AS STRING)", ["1.50", "-2.25", None, "0.00"]),
        ("CAST(f AS STRING)", ["0.5", "NaN", None, "-1.0"]),
        ("CAST(a AS DECIMAL(3, 1)) / 3", [D("0.333333"), D("0.666667"), None, D("1.333333")]),
        ("st.x + 1", [2, None, None, 5]),
        ("ST.X IS NULL", [False, True, True, False]),
        ("`st`.`x` = a", [True, None, None, True]),
        ("1 + 1", [2, 2, 2, 2]),
    ],
)
def test_columns_evaluate_with_sql_semantics(text: str, expected: list[object]) -> None:
    assert values(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("CASE WHEN b = 0 THEN -1 ELSE a / b END", [1 / 3, -1.0, None, None]),
        ("if(b = 0, 0, 10 / b)", [10 / 3, 0.0, 2.0, None]),
        ("b <> 0 AND a / b > 0", [True, False, None, None]),
        ("b = 0 OR 10 / b > 3", [True, True, False, None]),
        ("coalesce(a, 10 / b)", [1.0, 2.0, 2.0, 4.0]),
        ("a IN (2, 10 / b)", [False, True, None, None]),
        ("CASE WHEN s IS NOT NULL THEN 0 ELSE CAST(s AS INT) END", [0, None, 0, 0]),
    ],
)
def test_operands_sql_does_not_evaluate_cannot_fail(text: str, expected: list[object]) -> None:
    assert values(text) == expected


def test_a_right_operand_is_not_evaluated_where_the_left_is_null() -> None:
    # Spark's binary operators evaluate their right side only for a non-null left side
    data = pa.table({"x": pa.array([None, 1], pa.int64()), "y": pa.array([0, 2], pa.int64())})
    assert values("x + 10 / y", data) == [None, 6.0]
    assert values("x < 10 / y", data) == [None, True]
    assert values("date_add(CAST(NULL AS DATE), CAST(10 / y AS INT))", data) == [None, None]


@pytest.mark.parametrize(
    ("text", "error_class", "position"),
    [
        ("a / b", "DIVIDE_BY_ZERO", 2),
        ("CASE WHEN b = 3 THEN 10 / b ELSE b / 0 END", "DIVIDE_BY_ZERO", 35),
        ("CAST(s AS INT)", "CAST_INVALID_INPUT", 0),
        ("a * 9223372036854775807", "ARITHMETIC_OVERFLOW", 2),
    ],
)
def test_evaluated_rows_fail(text: str, error_class: str, position: int) -> None:
    with pytest.raises(ExpressionEvaluationError) as info:
        values(text)
    assert (info.value.error_class, info.value.position) == (error_class, position)


TARGET = pa.schema(
    [
        ("id", pa.int64()),
        ("Name", pa.string()),
        ("s", pa.struct([("a", pa.struct([("b", pa.int32())]))])),
        ("day", pa.date32()),
        ("amount", pa.decimal128(7, 2)),
        ("flag", pa.bool_()),
        ("my col", pa.int16()),
    ]
)
SOURCE = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("k", pa.string())])
SCOPES = {"target": TARGET, "source": SOURCE}


@pytest.mark.parametrize(
    ("text", "unqualified", "references"),
    [
        ("target.id", None, [("target", ("id",))]),
        ("SOURCE.ID + value", None, [("source", ("id",)), ("source", ("value",))]),
        ("name", None, [("target", ("Name",))]),
        ("id", ["target"], [("target", ("id",))]),
        ("s.a.b", None, [("target", ("s", "a", "b"))]),
        ("target.s.A.B", None, [("target", ("s", "a", "b"))]),
        ("`my col` + 1", None, [("target", ("my col",))]),
    ],
)
def test_names_resolve_in_scopes_like_spark(
    text: str, unqualified: list[str] | None, references: list[tuple[str, tuple[str, ...]]]
) -> None:
    bound = parse_expression(text).bind(SCOPES, unqualified=unqualified)
    assert [(r.scope, r.path) for r in bound.references] == references


@pytest.mark.parametrize(
    ("text", "scopes", "message"),
    [
        (
            "1 + id",
            SCOPES,
            "Cannot resolve the expression '1 + id': [AMBIGUOUS_REFERENCE] Reference `id` is ambiguous, "
            "could be: [`target`.`id`, `source`.`id`] at position 4",
        ),
        (
            "nme = 1",
            TARGET,
            "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name `nme` "
            "cannot be resolved. Did you mean one of the following? [`Name`",
        ),
        ("target.nope", SCOPES, "name `target`.`nope` cannot be resolved"),
        ("s.a.c", TARGET, "[FIELD_NOT_FOUND] No such struct field `c` in `b` at position 0"),
        ("id.x", TARGET, "[INVALID_EXTRACT_BASE_FIELD_TYPE] Can't extract a value from `id`"),
        ("day + day", TARGET, "[DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE]"),
    ],
)
def test_resolution_errors_name_the_column_and_position(
    text: str, scopes: pa.Schema | dict[str, pa.Schema], message: str
) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text).bind(scopes)
    assert message in str(info.value)


def test_names_and_positions_as_written() -> None:
    expression = parse_expression("target.id + `a b` * s.a.b")
    assert expression.columns == (
        ColumnReference(("target", "id"), 0),
        ColumnReference(("a b",), 12),
        ColumnReference(("s", "a", "b"), 20),
    )
    bound = parse_expression("t.id + t.id").bind({"t": TARGET})
    assert bound.references == (Reference("t", ("id",), 0), Reference("t", ("id",), 7))
    assert bound.columns() == ["id"] and bound.scopes() == {"t"}


def test_scopes_evaluate_through_a_column_mapping() -> None:
    bound = parse_expression("target.id = source.id AND source.value > 1").bind(SCOPES)
    joined = pa.table({"t_id": [1, 2, 3], "s_id": [1, 2, None], "v": [2.0, 0.5, 9.0]})
    names = {("target", "id"): "t_id", ("source", "id"): "s_id", ("source", "value"): "v"}
    assert bound.evaluate(joined, names).to_pylist() == [True, False, None]
    assert bound.matches(joined, names).to_pylist() == [True, False, False]
    with pytest.raises(ExpressionEvaluationError, match=r"the column source\.value is not in the data"):
        bound.evaluate(joined, {**names, ("source", "value"): "nope"})


def test_results_have_the_data_s_length_and_layout() -> None:
    bound = parse_expression("a + 1").bind(DATA.schema)
    batch = DATA.to_batches()[0]
    assert isinstance(bound.evaluate(batch), pa.Array)
    chunked = pa.concat_tables([DATA, DATA])
    assert bound.evaluate(chunked).to_pylist() == [2, 3, None, 5] * 2
    assert len(bound.evaluate(DATA.slice(0, 0))) == 0
    constant = parse_expression("'x'").bind(DATA.schema).evaluate(DATA)
    assert isinstance(constant, pa.ChunkedArray) and constant.to_pylist() == ["x"] * 4


def test_assignments_store_values_as_spark_stores_them() -> None:
    assert parse_expression("b + 1").bind(DATA.schema).assign(pa.int64()).evaluate(DATA).to_pylist() == [
        4,
        1,
        6,
        None,
    ]
    assert parse_expression("m").bind(DATA.schema).assign(pa.string()).evaluate(DATA).to_pylist()[0] == "1.50"
    assert parse_expression("d").bind(DATA.schema).assign(pa.timestamp("us", "UTC")).type == pa.timestamp(
        "us", "UTC"
    )
    with pytest.raises(ExpressionEvaluationError, match="CAST_OVERFLOW"):
        parse_expression("a * 1000000000").bind(DATA.schema).assign(pa.int32()).evaluate(DATA)
    with pytest.raises(
        ExpressionError, match=r'CANNOT_SAFELY_CAST\] Cannot safely cast `b` "STRING" to "INT"'
    ):
        parse_expression("s").bind(DATA.schema).assign(pa.int32(), "b")


def test_a_bound_expression_casts_as_cast_does() -> None:
    narrowed = parse_expression("a * 1000000000").bind(DATA.schema).cast(pa.int32())
    with pytest.raises(ExpressionEvaluationError, match="CAST_OVERFLOW"):
        narrowed.evaluate(DATA)
    with pytest.raises(ExpressionError, match="cannot cast"):
        parse_expression("d").bind(DATA.schema).cast(pa.int32())


@pytest.mark.parametrize(
    ("text", "scope", "expected"),
    [
        ("id = 5", None, Compare(("id",), "=", pa.scalar(5, pa.int64()))),
        ("5L > id", None, Compare(("id",), "<", pa.scalar(5, pa.int64()))),
        ("day = '2024-01-31'", None, Compare(("day",), "=", pa.scalar(dt.date(2024, 1, 31)))),
        ("NOT (amount > 1)", None, Compare(("amount",), "<=", pa.scalar(D("1.00"), pa.decimal128(7, 2)))),
        ("amount = 1.5", None, Compare(("amount",), "=", pa.scalar(D("1.50"), pa.decimal128(7, 2)))),
        ("`my col` < 3L", None, Compare(("my col",), "<", pa.scalar(3, pa.int16()))),
        ("id = 2.5", None, FALSE),
        ("id != 2.5", None, IsNull(("id",), negated=True)),
        ("id IN (1, 2.5, NULL)", None, In(("id",), (pa.scalar(1, pa.int64()),))),
        ("NOT id IN (1, 2)", None, In(("id",), (pa.scalar(1, pa.int64()), pa.scalar(2, pa.int64())), True)),
        ("id <=> NULL", None, IsNull(("id",))),
        ("name LIKE 'ab%'", None, StartsWith(("Name",), "ab")),
        (
            "flag AND s.a.b = 1",
            None,
            And((Compare(("flag",), "=", True), Compare(("s", "a", "b"), "=", pa.scalar(1, pa.int32())))),
        ),
        ("id IS NULL OR 1 = 2", None, IsNull(("id",))),
    ],
)
def test_conditions_give_exact_pruning_predicates(text: str, scope: str | None, expected: object) -> None:
    assert parse_expression(text).bind(TARGET).to_predicate(scope) == expected


@pytest.mark.parametrize(
    "text",
    [
        "id > 2.5",
        "upper(name) = 'A'",
        "id + 1 = 3",
        "CAST(name AS INT) = 1",
        "name LIKE '%b'",
        "NOT name LIKE 'a%'",
    ],
)
def test_what_pruning_cannot_express_is_opaque(text: str) -> None:
    # (a literal outside the column's type in an ordering, like ``id > 2.5``, could be rounded
    # to one; it is left opaque, which prunes nothing)
    assert isinstance(parse_expression(text).bind(TARGET).to_predicate(), Opaque)


def test_merge_conditions_split_into_join_keys_target_pruning_and_the_rest() -> None:
    bound = parse_expression(
        "t.id = s.id AND s.k <=> t.name AND s.value > 1 AND t.day >= '2024-01-01' AND t.id + 1 = s.id"
    ).bind({"t": TARGET, "s": SOURCE})
    keys, rest = join_keys(bound, "t", "s")
    assert [(k.target.references[0].path, k.source.references[0].path, k.null_safe) for k in keys] == [
        (("id",), ("id",), False),
        (("Name",), ("k",), True),
        (("id",), ("id",), False),
    ]
    assert all(k.target.type == k.source.type for k in keys)
    assert rest is not None and len(rest.conjuncts()) == 2
    pruning = bound.to_predicate(scope="t")
    assert isinstance(pruning, And) and pruning.children[-2] == Compare(
        ("day",), ">=", pa.scalar(dt.date(2024, 1, 1))
    )
    assert sum(isinstance(child, Opaque) for child in pruning.children) == 4
    with pytest.raises(ValueError, match="name the one to prune"):
        bound.to_predicate()
    assert conjunction([]) is None


def test_conjuncts_split_the_top_and_chain() -> None:
    parts = parse_expression("a = 1 AND (b = 2 OR c = 3) AND NOT d").conjuncts()
    assert [p.to_sql() for p in parts] == ["(`a` = 1)", "((`b` = 2) OR (`c` = 3))", "(NOT `d`)"]
