"""The SQL expression grammar on constants: every literal, operator, function and cast against
what Spark 4 computes (``tests/sql_spark_cases.py``), and the errors with their positions."""

from __future__ import annotations

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from replay.protocol.predicates import InvalidFilterError
from replay.protocol.sql import (
    FUNCTIONS,
    ExpressionError,
    ExpressionEvaluationError,
    PredicateError,
    parse_expression,
)
from replay.protocol.sql import syntax as sx
from tests.sql_spark_cases import ERRORS, VALUES

ONE_ROW = pa.table({"_": [0]})
NOW = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)


def spark_type(data_type: pa.DataType) -> str:
    """Spark's ``typeof`` name of an Arrow type."""
    if pa.types.is_decimal(data_type):
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_timestamp(data_type):
        return "timestamp" if data_type.tz else "timestamp_ntz"
    if pa.types.is_duration(data_type):  # what Spark types a computed day-time interval
        return "interval day to second"
    names = {
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.binary(): "binary",
        pa.null(): "void",
    }
    return names[data_type]


def constant(text: str, rows: pa.Table = ONE_ROW) -> tuple[list[object], str]:
    bound = parse_expression(text).bind(pa.schema([]), now=NOW)
    values = bound.evaluate(rows).to_pylist()
    return [v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v for v in values], spark_type(
        bound.type
    )


def same(left: object, right: object) -> bool:
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    if isinstance(left, decimal.Decimal) and isinstance(right, decimal.Decimal):
        return str(left) == str(right)  # the scale too
    return (type(left) is type(right) and left == right) or (left is None and right is None)


@pytest.mark.parametrize(("text", "value", "spark_type_name"), VALUES, ids=[v[0] for v in VALUES])
def test_constant_expressions_compute_what_spark_computes(
    text: str, value: object, spark_type_name: str
) -> None:
    values, type_name = constant(text, pa.table({"_": [0, 1]}))
    assert type_name == spark_type_name
    assert all(same(got, value) for got in values), (values, value)


@pytest.mark.parametrize(("text", "error_class"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_spark_errors(text: str, error_class: str) -> None:
    with pytest.raises(ExpressionError) as info:
        constant(text)
    assert info.value.error_class == error_class
    assert f"[{error_class}]" in str(info.value)
    assert isinstance(info.value, PredicateError | InvalidFilterError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Cannot parse an empty expression"),
        ("a +", "Cannot parse the expression 'a +': expected a column or a value, found the end"),
        ("a = 1 b", "expected AND, OR or the end, found 'b' at position 6"),
        ("a ~ 1", "unexpected input at position 2: '~ 1'"),
        ("(a = 1", "expected ')', found the end"),
        ("a NOT 1", "expected IN, BETWEEN or LIKE after NOT, found '1' at position 6"),
        ("CASE a END", "expected WHEN, found 'END' at position 7"),
        ("CAST(a AS lots)", "[UNSUPPORTED_DATATYPE] Unsupported data type 'LOTS' at position 10"),
        ("a = DATE 'soon'", "[INVALID_TYPED_LITERAL] 'soon' is not a valid DATE at position 9"),
        ("a = X'0G'", "[INVALID_TYPED_LITERAL] '0G' is not a valid BINARY at position 4"),
        (
            "300Y",
            "[INVALID_NUMERIC_LITERAL_RANGE] Numeric literal 300Y is outside the valid range for tinyint",
        ),
        ("a + nope(1)", "[UNRESOLVED_ROUTINE] Cannot resolve function `nope` at position 4"),
        (
            "1 + substr('a')",
            "[WRONG_NUM_ARGS.WITHOUT_SUGGESTION] The `substr` requires [2, 3] parameters but the actual "
            "number is 1 at position 4",
        ),
        ("coalesce()", "The `coalesce` requires > 0 parameters but the actual number is 0 at position 0"),
        ("a LIKE 'x' ESCAPE 'ab'", "the ESCAPE of LIKE must be a string of one character at position 18"),
        ("s.", "expected a field name after '.', found the end"),
    ],
)
def test_syntax_errors_name_the_text_and_the_position(text: str, message: str) -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "'a' + 1",
            "Cannot evaluate the expression \"'a' + 1\": [CAST_INVALID_INPUT] The value 'a' of the type "
            '"STRING" cannot be cast to "BIGINT" because it is malformed at position 0',
        ),
        ("1 + 2 / 0", "[DIVIDE_BY_ZERO] Division by zero at position 6"),
        ("1 + (2147483647 + 1)", "[ARITHMETIC_OVERFLOW] overflow at position 16"),
        (
            "1 = TRUE",
            "Cannot resolve the expression '1 = TRUE': [DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES] Cannot "
            'resolve "(1 = TRUE)" due to data type mismatch: the left and right operands of the binary '
            'operator have incompatible types ("INT" and "BOOLEAN") at position 2',
        ),
        (
            "year(1)",
            '[DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] Cannot resolve "year(1)" due to data type mismatch: '
            'The first parameter requires the "DATE" type, however "1" has the type "INT" at position 0',
        ),
        ("'x' LIKE 'a\\\\b'", "[INVALID_FORMAT.ESC_IN_THE_MIDDLE] The format is invalid: 'a\\\\b'."),
    ],
)
def test_type_and_evaluation_errors_name_the_position(text: str, message: str) -> None:
    with pytest.raises(ExpressionError) as info:
        constant(text)
    assert message in str(info.value)


def test_evaluation_errors_are_their_own_type() -> None:
    with pytest.raises(ExpressionEvaluationError) as info:
        constant("10 % 0")
    assert (info.value.error_class, info.value.position) == ("REMAINDER_BY_ZERO", 3)


@pytest.mark.parametrize(
    ("text", "value", "data_type"),
    [
        ("7", 7, pa.int32()),
        ("-2147483648", -(2**31), pa.int32()),
        ("2147483648", 2**31, pa.int64()),
        ("7L", 7, pa.int64()),
        ("7S", 7, pa.int16()),
        ("-7Y", -7, pa.int8()),
        ("1.50", decimal.Decimal("1.50"), pa.decimal128(3, 2)),
        ("1.5BD", decimal.Decimal("1.5"), pa.decimal128(2, 1)),
        ("12BD", decimal.Decimal("12"), pa.decimal128(2, 0)),
        ("1e3", 1000.0, pa.float64()),
        ("1.5D", 1.5, pa.float64()),
        ("0.5F", 0.5, pa.float32()),
        ("'it''s'", "it's", pa.string()),
        ('"dq"', "dq", pa.string()),
        ("'a\\tb\\u0041\\101\\%'", "a\tbAA\\%", pa.string()),
        ("'a' 'b'", "ab", pa.string()),
        ("'\\u000012\\\\%'", "\x0012\\%", pa.string()),
        ("X'0aFF'", b"\n\xff", pa.binary()),
        ("TRUE", True, pa.bool_()),
        ("NULL", None, pa.null()),
        ("DATE '2024-1-3'", dt.date(2024, 1, 3), pa.date32()),
        (
            "TIMESTAMP '2024-01-01 10:00:00+02:00'",
            dt.datetime(2024, 1, 1, 8, tzinfo=dt.UTC),
            pa.timestamp("us", "UTC"),
        ),
        (
            "TIMESTAMP_NTZ '2024-01-01T10:00:00.5'",
            dt.datetime(2024, 1, 1, 10, 0, 0, 500000),
            pa.timestamp("us"),
        ),
    ],
)
def test_literals_are_typed_as_spark_types_them(text: str, value: object, data_type: pa.DataType) -> None:
    tree = parse_expression(text).tree
    assert isinstance(tree, sx.Literal)
    assert (tree.value, tree.type) == (value, data_type)
    assert parse_expression(sx.to_sql(tree)).tree == tree  # and print back to the same literal


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("a + b * c - d", "((`a` + (`b` * `c`)) - `d`)"),
        ("1 + 2 || 3", "((1 + 2) || 3)"),
        ("-a * b", "((-(`a`)) * `b`)"),
        ("NOT a = 1 AND b OR c", "(((NOT (`a` = 1)) AND `b`) OR `c`)"),
        ("a = b = TRUE", "((`a` = `b`) = TRUE)"),
        ("a BETWEEN 1 AND 2 AND b", "((`a` BETWEEN 1 AND 2) AND `b`)"),
        ("NOT a IS NULL", "(NOT (`a` IS NULL))"),
        ("a + 1 IN (1, b)", "((`a` + 1) IN (1, `b`))"),
        ("a NOT LIKE 'x%' ESCAPE '!'", "(`a` NOT LIKE 'x%' ESCAPE '!')"),
        ("a IS NOT TRUE", "(`a` IS NOT TRUE)"),
        ("a == b <> c", "((`a` = `b`) != `c`)"),
        ("CASE a WHEN 1 THEN 'x' END", "CASE `a` WHEN 1 THEN 'x' END"),
        ("cast(a as Decimal(5, 2))", "CAST(`a` AS DECIMAL(5,2))"),
        ("`we``ird`.`x y`.z", "`we``ird`.`x y`.`z`"),
        ("Upper(date)", "upper(`date`)"),
    ],
)
def test_precedence_is_sparks(text: str, printed: str) -> None:
    assert parse_expression(text).to_sql() == printed


FUNCTION_EXAMPLES = {
    "upper": ("upper('aB')", "AB"),
    "lower": ("lower('aB')", "ab"),
    "trim": ("trim('  a ')", "a"),
    "ltrim": ("ltrim('  a ')", "a "),
    "rtrim": ("rtrim('  a ')", "  a"),
    "length": ("length('héllo')", 5),
    "char_length": ("char_length(X'0102')", 2),
    "character_length": ("character_length('')", 0),
    "concat": ("concat('a', 1, NULL)", None),
    "substring": ("substring('hello', -3, 2)", "ll"),
    "substr": ("substr('hello', 0, 2)", "he"),
    "abs": ("abs(-2)", 2),
    "round": ("round(-2.5)", decimal.Decimal("-3")),
    "coalesce": ("coalesce(NULL, 2, 1 / 0)", 2),
    "ifnull": ("ifnull(NULL, 'x')", "x"),
    "nvl": ("nvl(1, 2)", 1),
    "nullif": ("nullif(1, 1)", None),
    "if": ("if(1 > 2, 'a', 'b')", "b"),
    "isnull": ("isnull(NULL)", True),
    "isnotnull": ("isnotnull(1)", True),
    "current_date": ("current_date()", NOW.date()),
    "current_timestamp": ("current_timestamp()", NOW.replace(tzinfo=None)),
    "now": ("now()", NOW.replace(tzinfo=None)),
    "date_add": ("date_add('2024-02-28', 2)", dt.date(2024, 3, 1)),
    "date_sub": ("date_sub(DATE '2024-03-01', 1)", dt.date(2024, 2, 29)),
    "datediff": ("datediff('2024-03-01', TIMESTAMP '2024-02-01 23:00:00')", 29),
    "year": ("year('2024-03-01')", 2024),
    "month": ("month(TIMESTAMP '2024-03-01 10:00:00')", 3),
    "day": ("day(DATE '2024-03-07')", 7),
    "dayofmonth": ("dayofmonth(DATE '2024-03-07')", 7),
}


def test_every_function_in_the_registry_computes() -> None:
    assert set(FUNCTION_EXAMPLES) == set(FUNCTIONS)
    for name, (text, value) in FUNCTION_EXAMPLES.items():
        assert constant(text)[0] == [value], name


def test_bare_current_date_is_the_function_unless_a_column_has_the_name() -> None:
    assert constant("current_date")[0] == [NOW.date()]
    schema = pa.schema([("current_date", pa.int64())])
    bound = parse_expression("current_date + 1").bind(schema)
    assert bound.evaluate(pa.table({"current_date": [4]}, schema=schema)).to_pylist() == [5]
