"""Conditions and values of the Spark ``DeltaTable`` as SQL text: strings as given, ``Column``\\ s
written out as SQL.

The planning of a row-level change is shared with the Python DML (:mod:`replay.dml`), which
binds SQL text with the project's grammar (:mod:`replay.protocol.sql`): that is where unknown
columns and functions fail, with the same errors as ``replay.DeltaTable``, and where the files
to read are pruned. Spark then evaluates the same text (``F.expr``), so both sides read one
expression.

A ``Column`` is turned into SQL as follows:

* classic PySpark: Spark analyses the column against the columns it may read (the target and,
  for MERGE, the source, with their aliases) and the resolved expression's ``sql`` is used:
  ``col("t.id") == col("s.id")`` becomes ``(t.id = s.id)``, ``lit(1)`` compared with a long
  becomes ``CAST(1 AS BIGINT)``;
* Spark Connect: the client holds the column as an unresolved expression tree, which is written
  out here (column references, literals, operators, functions, ``CAST``, ``CASE WHEN``,
  ``expr(...)`` text). Anything else (a Python UDF, a lambda, a window) raises
  :class:`UnsupportedColumnError`: pass the condition as a SQL string.

Columns are referred to by name in the text: ``df["id"]``-style references bound to a
DataFrame become their (qualified) name.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import Any

from replay.protocol.errors import DeltaError
from replay.protocol.naming import split_column_path


class UnsupportedColumnError(DeltaError, TypeError):
    """A ``Column`` that cannot be written as SQL text (Spark Connect only)."""


def sql_of(value: object, context: Any, argument: str = "'condition'") -> str:
    """``value`` (a SQL string or a ``Column``) as SQL text; ``context`` is a DataFrame whose
    columns the expression may read (used to resolve a classic ``Column``)."""
    if isinstance(value, str):
        return value
    if getattr(value, "_jc", None) is not None:  # classic PySpark
        return _resolved_sql(value, context)
    expression = getattr(value, "_expr", None)
    if expression is not None and type(value).__module__.startswith("pyspark.sql.connect"):
        return _connect_sql(expression)
    raise TypeError(
        f"{argument} must be a Spark SQL Column or a string (expression in SQL syntax), found to be of "
        f"type {type(value)}"
    )


def is_column(value: object) -> bool:
    """Whether ``value`` is a PySpark ``Column`` (classic or Spark Connect)."""
    return getattr(value, "_jc", None) is not None or (
        getattr(value, "_expr", None) is not None and type(value).__module__.startswith("pyspark.sql.connect")
    )


def checked_mapping(values: object, argument: str) -> dict[str, Any]:
    """A ``set`` / ``values`` argument checked as ``delta.tables`` checks it: a dict of column names
    to SQL strings or ``Column``\\ s."""
    if values is None:
        raise ValueError(f"{argument} cannot be None")
    if not isinstance(values, dict):
        raise TypeError(f"{argument} must be a dict, found to be {type(values)}")
    for column, value in values.items():
        if not isinstance(column, str):
            raise TypeError(
                f"Keys of dict in {argument} must contain only strings with column names, found "
                f"'{column}' of type '{type(column)}"
            )
        if not isinstance(value, str) and not is_column(value):
            raise TypeError(
                f"Values of dict in {argument} must contain only Spark SQL Columns or strings (expressions "
                f"in SQL syntax) as values, found '{value}' of type '{type(value)}'"
            )
    return {attribute_name(column): value for column, value in values.items()}


def attribute_name(key: str) -> str:
    """A column key as Delta reads it (an attribute name: ``t.`a name``` is ``t.a name``): backquoted
    parts unquoted. A key whose unquoted parts would hold a dot, or that does not split, is kept
    as given."""
    parts = split_column_path(key)
    if parts is None or any("." in part for part in parts):
        return key
    return ".".join(parts)


def _resolved_sql(column: Any, context: Any) -> str:
    """The SQL of a classic ``Column`` resolved against ``context``'s columns."""
    analyzed = context.select(column)._jdf.queryExecution().analyzed()
    item = analyzed.projectList().head()
    child = item.child() if item.getClass().getSimpleName() == "Alias" else item
    return str(child.sql())


# -- Spark Connect expression trees ----------------------------------------------------------------
_INFIX = {
    "==": "=",
    "!=": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "<=>": "<=>",
    "and": "AND",
    "or": "OR",
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "%": "%",
    "like": "LIKE",
    "ilike": "ILIKE",
    "rlike": "RLIKE",
}
_POSTFIX = {"isnull": "IS NULL", "isnotnull": "IS NOT NULL"}


def _connect_sql(node: Any) -> str:
    """SQL text of a Spark Connect expression tree (see the module docstring)."""
    kind = type(node).__name__
    if kind == "ColumnReference":
        return str(node._unparsed_identifier)
    if kind == "SQLExpression":
        return f"({node._expr})"
    if kind == "LiteralExpression":
        return _literal(node._value, type(node._dataType).__name__)
    if kind == "ColumnAlias":
        return _connect_sql(node._child)
    if kind == "CastExpression":
        target = node._data_type
        spelled = target if isinstance(target, str) else target.simpleString()
        return f"CAST({_connect_sql(node._expr)} AS {spelled})"
    if kind == "CaseWhen":
        branches = " ".join(
            f"WHEN {_connect_sql(condition)} THEN {_connect_sql(value)}"
            for condition, value in node._branches
        )
        otherwise = f" ELSE {_connect_sql(node._else_value)}" if node._else_value is not None else ""
        return f"CASE {branches}{otherwise} END"
    if kind == "UnresolvedFunction":
        return _function_sql(str(node._name), [_connect_sql(arg) for arg in node._args], node._is_distinct)
    raise UnsupportedColumnError(
        f"Cannot write a Spark Connect column of kind {kind} ({node!r}) as SQL: pass the condition or "
        "value as a SQL string"
    )


def _function_sql(name: str, args: list[str], distinct: bool) -> str:
    lowered = name.lower()
    if lowered in _INFIX and len(args) == 2:
        return f"({args[0]} {_INFIX[lowered]} {args[1]})"
    if lowered in _POSTFIX and len(args) == 1:
        return f"({args[0]} {_POSTFIX[lowered]})"
    if lowered in ("not", "!") and len(args) == 1:
        return f"(NOT {args[0]})"
    if lowered == "negative" and len(args) == 1:
        return f"(- {args[0]})"
    if lowered == "in" and args:
        return f"({args[0]} IN ({', '.join(args[1:])}))"
    prefix = "DISTINCT " if distinct else ""
    return f"{name}({prefix}{', '.join(args)})"


_EPOCH = _dt.datetime(1970, 1, 1)


def _literal(value: object, data_type: str = "") -> str:
    """A Spark Connect literal (its value as the client holds it, and its type's class name) as
    SQL. Dates and timestamps are held as days and microseconds since the epoch."""
    if value is None:
        return "NULL"
    if data_type == "DateType" and isinstance(value, int):
        return f"DATE '{(_EPOCH + _dt.timedelta(days=value)).date().isoformat()}'"
    if data_type in ("TimestampType", "TimestampNTZType") and isinstance(value, int):
        moment = _EPOCH + _dt.timedelta(microseconds=value)
        prefix = "TIMESTAMP" if data_type == "TimestampType" else "TIMESTAMP_NTZ"
        zone = "+00:00" if data_type == "TimestampType" else ""
        return f"{prefix} '{moment.isoformat(sep=' ')}{zone}'"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        narrow = {"ByteType": "TINYINT", "ShortType": "SMALLINT"}.get(data_type)
        return f"CAST({value} AS {narrow})" if narrow else str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS {'FLOAT' if data_type == 'FloatType' else 'DOUBLE'})"
    if isinstance(value, decimal.Decimal):
        return f"{value}BD"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            return f"TIMESTAMP '{value.astimezone(_dt.UTC).isoformat(sep=' ')}'"
        return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'"
    if isinstance(value, _dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    raise UnsupportedColumnError(f"Cannot write the literal {value!r} ({type(value).__name__}) as SQL")
