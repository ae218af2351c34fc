"""Spark columns of a row-level change: conditions, the first clause that applies, stored values,
and the columns the writing tasks receive (:mod:`replay.spark.dml_tasks`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from replay.spark.dml_tasks import ACTION_COLUMN, CLAUSE_COLUMN, new_column
from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN


def functions() -> Any:
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

    return F


def holds(sql: str | None) -> Any:
    """Whether the condition ``sql`` is true (null counts as false; no condition: true)."""
    F = functions()  # noqa: N806 - PySpark's convention
    if sql is None:
        return F.lit(True)
    return F.coalesce(F.expr(sql), F.lit(False))


def first_clause(clauses: Sequence[tuple[int, str | None]]) -> Any:
    """The index of the first clause whose condition holds (``None`` conditions always do), or
    null. A condition is evaluated only for rows no earlier clause took."""
    F = functions()  # noqa: N806 - PySpark's convention
    chosen: Any = None
    for index, condition in clauses:
        branch = holds(condition)
        chosen = F.when(branch, F.lit(index)) if chosen is None else chosen.when(branch, F.lit(index))
        if condition is None:
            break
    return chosen if chosen is not None else F.lit(None).cast("int")


def spark_types(schema: pa.Schema) -> list[Any]:
    """The Spark type of each column of an Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_type

    return [from_arrow_type(field.type) for field in schema]


def stored(sql: str, data_type: Any) -> Any:
    """The value of ``sql`` stored into a column of ``data_type`` (an ANSI cast; the assignment
    was checked against Spark's store assignment rules when it was bound)."""
    return functions().expr(sql).cast(data_type)


def decided(action: Any, clause: Any, new: Sequence[Any]) -> list[Any]:
    """The columns a writing task receives: file, row, action, clause and assigned values."""
    F = functions()  # noqa: N806 - PySpark's convention
    return [
        F.col(FILE_COLUMN),
        F.col(ROW_COLUMN),
        action.cast("int").alias(ACTION_COLUMN),
        clause.cast("int").alias(CLAUSE_COLUMN),
        *(value.alias(new_column(i)) for i, value in enumerate(new)),
    ]
