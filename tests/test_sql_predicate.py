"""SQL predicate text (``replaceWhere``, ``deltalog read --filter``): one grammar, three-valued logic."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from replay.protocol.predicates import FALSE, CompareColumns, In, IsNull, Or
from replay.protocol.sql_predicate import PredicateError, parse_predicate

TABLE = pa.table(
    {
        "x": pa.array([1, 2, None], pa.int64()),
        "y": pa.array([1, 3, None], pa.int32()),
        "flag": [True, False, None],
        "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 2, 1), None]),
        "at": pa.array([dt.datetime(2024, 1, 1, 10), None, None], pa.timestamp("us", tz="UTC")),
        "s": pa.array([{"a": 1}, {"a": 2}, None], pa.struct([("a", pa.int64())])),
    }
)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        # a NULL in an IN list: true when listed, otherwise null, never false
        ("x IN (1, NULL)", [1]),
        ("NOT x IN (1, NULL)", []),
        ("x NOT IN (2, NULL)", []),
        ("NOT (x NOT IN (1, NULL))", [1]),
        # comparisons with NULL are null, and so are their negations
        ("x = NULL OR NOT x = NULL", []),
        ("x NOT BETWEEN NULL AND 1", [2]),
        # <=> is never null
        ("x <=> 1", [1]),
        ("NOT x <=> 1", [2, None]),
        ("x <=> NULL", [None]),
        ("x <=> y", [1, None]),
        ("NOT x <=> y", [2]),
        # De Morgan under NOT, columns compared with columns, nested fields, bare booleans
        ("NOT (x > 1 OR x IS NULL)", [1]),
        ("NOT (x >= 2 AND y = 3)", [1]),
        ("x < y", [2]),
        ("s.a = 2", [2]),
        ("flag", [1]),
        ("NOT flag", [2]),
        ("TRUE", [1, 2, None]),
        ("NOT TRUE OR FALSE", []),
        # literals converted to their column's type
        ("day >= '2024-01-15'", [2]),
        ("day = DATE '2024-01-01'", [1]),
        ("at = TIMESTAMP '2024-01-01 10:00:00'", [1]),
        ("at > '2024-01-01T11:00:00+02:00'", [1]),
        ("1 < x", [2]),
        ("`x` BETWEEN 1.0 AND 2d", [1, 2]),
    ],
)
def test_predicates_keep_sql_three_valued_logic(text: str, rows: list[int | None]) -> None:
    predicate = parse_predicate(text)
    assert predicate.matching(TABLE)["x"].to_pylist() == rows
    violating = predicate.violating(TABLE)["x"].to_pylist()
    assert sorted(violating, key=repr) == sorted(set(TABLE["x"].to_pylist()) - set(rows), key=repr)


def test_not_is_pushed_to_the_leaves() -> None:
    assert parse_predicate("NOT x IN (1, NULL)").tree == FALSE
    assert parse_predicate("NOT (x IS NULL OR x = y)").tree == (
        parse_predicate("x IS NOT NULL AND x != y").tree
    )
    assert parse_predicate("x NOT IN (1, 2)").tree == In(("x",), (1, 2), negated=True)
    assert parse_predicate("NOT x <=> NULL").tree == IsNull(("x",), negated=True)
    assert parse_predicate("x == y or x <> y").tree == Or(
        (CompareColumns(("x",), "=", ("y",)), CompareColumns(("x",), "!=", ("y",)))
    )


def test_columns_resolve_case_insensitively_in_order() -> None:
    predicate = parse_predicate("B = 1 AND (a > 2 OR b IS NULL)")
    assert predicate.columns == ["B", "a", "b"]
    resolved = predicate.resolve(["a", "b"])
    assert resolved.columns == ["b", "a"]
    assert resolved.matching(pa.table({"a": [3, 1], "b": [1, 1]}))["a"].to_pylist() == [3]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Cannot parse an empty predicate"),
        ("x = ", "expected a column or a value, found the end"),
        ("x = 1 AND", "expected a column or a value, found the end"),
        ("x ~ 1", "unexpected input at position 2: '~ 1'"),
        ("x = 1 y", "expected AND, OR or the end, found 'y' at position 6"),
        ("x NOT 1", "expected IN, BETWEEN or LIKE after NOT, found '1' at position 6"),
        ("x + 1", "(`x` + 1) is not a condition"),
        ("d = DATE 'soon'", "'soon' is not a valid DATE"),
        ("(x = 1", "expected ')', found the end"),
    ],
)
def test_parse_errors_name_the_predicate_and_the_spot(text: str, message: str) -> None:
    with pytest.raises(PredicateError, match="predicate") as info:
        parse_predicate(text)
    assert message in str(info.value)


def test_a_literal_that_does_not_fit_its_column_is_named() -> None:
    # as in Spark: an INT column compared with 2.5 compares as DECIMAL (never equal), and a
    # string compared with it is read as a BIGINT, which 'a' is not
    assert parse_predicate("x = 2.5").matching(TABLE).num_rows == 0
    message = r"""Cannot evaluate the predicate "x = 'a'": \[CAST_INVALID_INPUT\] The value 'a' of the type"""
    with pytest.raises(PredicateError, match=message):
        parse_predicate("x = 'a'").matching(TABLE)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("x + y > 3", [2]),
        ("coalesce(y, 0) * 2 = 0", [None]),
        ("upper(CAST(x AS STRING)) LIKE '1%'", [1]),
        ("CASE WHEN x > 1 THEN NOT flag ELSE flag END", [1, 2]),
        ("1 = 2 OR x IS NULL", [None]),
    ],
)
def test_predicates_take_any_boolean_expression(text: str, rows: list[int | None]) -> None:
    predicate = parse_predicate(text)
    assert predicate.matching(TABLE)["x"].to_pylist() == rows


def test_spark_non_reserved_keywords_name_columns() -> None:
    """As in Spark (keywords are non-reserved unless ``spark.sql.ansi.enforceReservedKeywords``),
    ``when``, ``end`` or ``in`` name columns where a value is expected."""
    table = pa.table({"when": [1, 5], "end": [2, 2], "in": [0, 9]})
    predicate = parse_predicate("when > end AND in = 9").resolve(table.column_names)
    assert predicate.matching(table).column("when").to_pylist() == [5]
    case = parse_predicate("CASE WHEN when > 1 THEN end = 2 ELSE false END").resolve(table.column_names)
    assert case.matching(table).column("when").to_pylist() == [5]
