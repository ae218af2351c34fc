"""The SQL expression grammar against a real Spark: the recorded constants of
``tests/sql_spark_cases.py`` are what Spark computes, and expressions over columns with nulls
(lazy branches, Spark's null short-circuit, three-valued IN/BETWEEN/LIKE, decimals, NaN) agree."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa
import pytest

from replay.protocol.sql import parse_expression
from tests.sql_spark_cases import VALUES

D = decimal.Decimal
ROWS = [
    (0, 1, 3, "xa", dt.date(2024, 1, 31), D("1.50"), 0.5, True),
    (1, None, 0, None, dt.date(2024, 2, 1), D("-2.25"), float("nan"), False),
    (2, None, 5, "xb", None, None, None, None),
    (3, 4, None, "y", dt.date(2024, 1, 1), D("0.00"), -1.0, True),
    (4, None, 0, "%_", dt.date(2023, 12, 31), D("9.99"), 1e300, False),
]
DDL = "id INT, a BIGINT, b INT, s STRING, d DATE, m DECIMAL(5,2), f DOUBLE, flag BOOLEAN"
ARROW = pa.schema(
    [
        ("id", pa.int32()),
        ("a", pa.int64()),
        ("b", pa.int32()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("m", pa.decimal128(5, 2)),
        ("f", pa.float64()),
        ("flag", pa.bool_()),
    ]
)
# No two expressions share a division: Spark evaluates a subexpression shared by several columns
# for every row (common subexpression elimination), which would fail where one of them skips it.
EXPRESSIONS = [
    "a + 10 / b",
    "CASE WHEN b = 0 THEN -1 ELSE 11 / b END",
    "b <> 0 AND 12 / b > 2",
    "b = 0 OR 13 / b > 2",
    "coalesce(b, 100 / a, -1)",
    "a IN (1, NULL)",
    "a NOT IN (2, 4)",
    "a BETWEEN b AND 5",
    "s LIKE 'x%'",
    "s LIKE '\\%\\_'",
    "d = '2024-01-31'",
    "d > '2024-01'",
    "m * 2 + a",
    "m / 3",
    "round(m, 1)",
    "f = CAST('NaN' AS DOUBLE)",
    "f > 100",
    "a <=> b",
    "NOT flag OR b > 1",
    "flag IS NOT TRUE",
    "if(flag, s, upper(s)) || '!'",
    "substring(s, -1, 1)",
    "CAST(f AS STRING)",
    "CAST(m AS STRING)",
    "date_add(d, b)",
    "datediff(d, '2024-01-01')",
    "year(d) * 100 + month(d)",
    "nullif(b, 0)",
    "a % 3",
    "d + INTERVAL 1 MONTH",
    "d - INTERVAL '1 12' DAY TO HOUR",
    "d - DATE '2024-01-01'",
    "d + INTERVAL 1 DAY * b",
    "d - INTERVAL 1 MONTH * b",
]


def normal(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    return value


@pytest.mark.spark
def test_expressions_agree_with_spark(spark: Any) -> None:
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    # the recorded constants are what this Spark computes
    selected = ", ".join(f"{text} AS v{i}, typeof({text}) AS t{i}" for i, (text, _, _) in enumerate(VALUES))
    row = spark.sql(f"SELECT {selected}").collect()[0]
    for i, (text, value, type_name) in enumerate(VALUES):
        assert (normal(row[f"v{i}"]), row[f"t{i}"]) == (normal(value), type_name), text
    # expressions over columns with nulls
    spark.createDataFrame(ROWS, DDL).createOrReplaceTempView("sql_expression_rows")
    columns = ", ".join(f"{text} AS e{i}" for i, text in enumerate(EXPRESSIONS))
    spark_rows = spark.sql(f"SELECT {columns} FROM sql_expression_rows ORDER BY id").collect()
    table = pa.Table.from_pylist([dict(zip(ARROW.names, r, strict=True)) for r in ROWS], schema=ARROW)
    for i, text in enumerate(EXPRESSIONS):
        ours = parse_expression(text).bind(table.schema).evaluate(table).to_pylist()
        theirs = [r[f"e{i}"] for r in spark_rows]
        assert [normal(v) for v in ours] == [normal(v) for v in theirs], text
