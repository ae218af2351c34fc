"""``DeltaMergeBuilder``: Delta's MERGE builder for PySpark, run by :mod:`replay.spark.dml_merge`.

Clauses keep the order they are added in, within each kind, and the first whose condition holds
decides a row; ``execute()`` returns Delta 4's result DataFrame (``num_affected_rows``,
``num_updated_rows``, ``num_deleted_rows``, ``num_inserted_rows``). Like Delta's, a builder is
immutable: each method returns a new one.

The source's alias is the DataFrame's own (``updates.alias("s")``); a source without one is
called ``source``, and a target without an alias ``target``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, ClauseSpec
from replay.spark.dml_merge import spark_merge
from replay.spark.dml_scan import SparkTarget
from replay.spark.schema import spark_schema
from replay.spark.sql_text import checked_mapping, is_column, sql_of
from replay.spark.table_info import MERGE_RESULT_SCHEMA, merge_result

DEFAULT_SOURCE_ALIAS = "source"
DEFAULT_TARGET_ALIAS = "target"


@dataclass(frozen=True)
class _Clause:
    kind: str
    action: str
    condition: Any = None
    assignments: dict[str, Any] | None = None


def source_alias_of(frame: Any) -> str | None:
    """The alias of a DataFrame (``df.alias("s")``), or ``None``."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is not None:  # classic PySpark: the analysed plan's top node
        plan = jdf.queryExecution().analyzed()
        return str(plan.alias()) if plan.getClass().getSimpleName() == "SubqueryAlias" else None
    connect_plan: Any = getattr(frame, "_plan", None)  # Spark Connect: the client's plan
    return str(connect_plan._alias) if type(connect_plan).__name__ == "SubqueryAlias" else None


@dataclass(frozen=True)
class DeltaMergeBuilder:
    """A MERGE being built (see the module docstring); made by :meth:`DeltaTable.merge`."""

    _spark: Any
    _target: SparkTarget
    _source: Any
    _condition: Any
    _clauses: tuple[_Clause, ...] = ()
    _schema_evolution: bool = False

    def _with(self, clause: _Clause) -> DeltaMergeBuilder:
        condition = clause.condition
        if condition is not None and not isinstance(condition, str) and not is_column(condition):
            raise TypeError(
                "'condition' must be a Spark SQL Column or a string (expression in SQL syntax), found to be "
                f"of type {type(condition)}"
            )
        return replace(self, _clauses=(*self._clauses, clause))

    def whenMatchedUpdate(  # noqa: N802 - Delta's name
        self, condition: Any = None, set: dict[str, Any] | None = None
    ) -> DeltaMergeBuilder:
        """Update matched target rows: ``set`` maps target columns to SQL strings or ``Column``\\ s
        over the target and the source."""
        values = checked_mapping(set, "'set' in whenMatchedUpdate")
        return self._with(_Clause(MATCHED, "update", condition, values))

    def whenMatchedUpdateAll(self, condition: Any = None) -> DeltaMergeBuilder:  # noqa: N802 - Delta's name
        """Update every column of matched target rows from the source column of the same name."""
        return self._with(_Clause(MATCHED, "update", condition))

    def whenMatchedDelete(self, condition: Any = None) -> DeltaMergeBuilder:  # noqa: N802 - Delta's name
        """Delete matched target rows."""
        return self._with(_Clause(MATCHED, "delete", condition))

    def whenNotMatchedInsert(  # noqa: N802 - Delta's name
        self, condition: Any = None, values: dict[str, Any] | None = None
    ) -> DeltaMergeBuilder:
        """Insert source rows no target row matched: ``values`` maps target columns to SQL strings
        or ``Column``\\ s over the source (other columns are null)."""
        given = checked_mapping(values, "'values' in whenNotMatchedInsert")
        return self._with(_Clause(NOT_MATCHED, "insert", condition, given))

    def whenNotMatchedInsertAll(self, condition: Any = None) -> DeltaMergeBuilder:  # noqa: N802 - Delta's name
        """Insert source rows no target row matched, every column from the source."""
        return self._with(_Clause(NOT_MATCHED, "insert", condition))

    def whenNotMatchedBySourceUpdate(  # noqa: N802 - Delta's name
        self,
        condition: Any = None,
        set: dict[str, Any] | None = None,
    ) -> DeltaMergeBuilder:
        """Update target rows no source row matched (expressions over the target)."""
        values = checked_mapping(set, "'set' in whenNotMatchedBySourceUpdate")
        return self._with(_Clause(NOT_MATCHED_BY_SOURCE, "update", condition, values))

    def whenNotMatchedBySourceDelete(self, condition: Any = None) -> DeltaMergeBuilder:  # noqa: N802 - Delta's name
        """Delete target rows no source row matched."""
        return self._with(_Clause(NOT_MATCHED_BY_SOURCE, "delete", condition))

    def withSchemaEvolution(self) -> DeltaMergeBuilder:  # noqa: N802 - Delta's name
        """Add the source columns that ``*`` clauses or assignments name to the table."""
        return replace(self, _schema_evolution=True)

    def execute(self) -> Any:
        """Run the MERGE and commit it; returns Delta's result DataFrame. Raises
        :class:`~replay.dml.errors.MultipleSourceRowMatchError` when several source rows match one
        target row (nothing is committed)."""
        source_alias = source_alias_of(self._source) or DEFAULT_SOURCE_ALIAS
        target = replace(self._target, alias=self._target.alias or DEFAULT_TARGET_ALIAS)
        context = self._context(target, source_alias)
        condition = sql_of(self._condition, context, "'condition'")
        specs = [
            ClauseSpec(
                clause.kind,
                clause.action,
                sql_of(clause.condition, context, "'condition'") if clause.condition is not None else None,
                {name: sql_of(value, context, "'set'") for name, value in clause.assignments.items()}
                if clause.assignments is not None
                else None,
            )
            for clause in self._clauses
        ]
        result = spark_merge(
            target,
            self._source,
            condition,
            specs,
            source_alias=source_alias,
            merge_schema=self._schema_evolution,
        )
        return self._spark.createDataFrame([merge_result(result.metrics)], MERGE_RESULT_SCHEMA)

    def _context(self, target: SparkTarget, source_alias: str) -> Any:
        """The target's columns (an empty DataFrame) and the source's, under their aliases: what
        ``Column`` conditions and values are resolved against (classic PySpark only)."""
        uses_columns = not isinstance(self._condition, str) or any(
            not isinstance(value, str)
            for clause in self._clauses
            for value in [clause.condition, *(clause.assignments or {}).values()]
            if value is not None
        )
        if not uses_columns or getattr(self._spark, "_jsparkSession", None) is None:
            return None
        snapshot = target.latest()
        schema_string = snapshot.metadata.schema_string or snapshot.schema.to_json()
        empty = self._spark.createDataFrame([], spark_schema(schema_string, False)).alias(target.alias)
        return empty.crossJoin(self._source.alias(source_alias))
