"""``sql(spark, statement)``: Delta's SQL statements without Delta's Spark session extension.

Each statement is read once (:mod:`replay.spark.sql_parse`) and runs through the Spark
``DeltaTable`` API (:mod:`replay.spark.delta_table`), returning the DataFrame Delta's statement
returns: DESCRIBE HISTORY / DETAIL as ``history()`` / ``detail()``; OPTIMIZE and REORG ... APPLY
(PURGE) Delta's ``path, metrics``; VACUUM the table's path (DRY RUN: the files it would delete);
RESTORE its metrics; DELETE and UPDATE ``num_affected_rows``; MERGE Delta 4's four counts;
ALTER TABLE an empty DataFrame; a query Spark's own result (:mod:`replay.spark.sql_query`).

On a classic session, MERGE, UPDATE and DELETE are first parsed by Spark's own SQL parser, whose
grammar has them: a statement Spark cannot parse fails with Spark's ``PARSE_SYNTAX_ERROR`` and
position. Spark Connect has no parser on the client; there the library's grammar alone decides.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from replay.dml.assignments import check_unique
from replay.maintenance.alter_clustering import cluster_by
from replay.maintenance.alter_columns import change_column_type
from replay.maintenance.alter_constraints import add_constraint, drop_constraint
from replay.maintenance.alter_mapped_columns import drop_columns, rename_column
from replay.maintenance.optimize_plan import OptimizeMode
from replay.maintenance.vacuum import vacuum
from replay.protocol.constraints import column_path_name
from replay.spark import sql_ast as ast
from replay.spark.delta_table import DeltaTable
from replay.spark.dml_scan import SparkTarget
from replay.spark.optimize_builder import run_optimize
from replay.spark.sql_ast import StatementParseError
from replay.spark.sql_parse import parse_statement
from replay.spark.sql_query import delta_view, run_query
from replay.spark.sql_tables import registered, resolve

logger = logging.getLogger(__name__)

_SPARK_PARSED = ("merge", "update", "delete")
_SPARK_POSITION = re.compile(r"\(line (\d+), pos (\d+)\)")


def sql(spark: Any, statement: str) -> Any:
    """Run one of Delta's SQL statements (see the module docstring and the README's table) on
    ``spark``; tables are ``delta.`uri``` or names given with
    :func:`~replay.spark.sql_tables.register_table`. Returns a DataFrame.

    Raises :class:`~replay.spark.sql_ast.StatementParseError` for a statement that does not parse,
    :class:`~replay.spark.sql_ast.UnsupportedStatementError` (naming the API to use instead) for a
    statement not run here, :class:`~replay.spark.sql_tables.UnknownTableError` for a name not
    registered, and the errors of the operation itself."""
    if not isinstance(statement, str):
        raise TypeError(f"statement must be a string, not {type(statement).__name__}")
    first = statement.lstrip().split(None, 1)[0].lower() if statement.strip() else ""
    if first in _SPARK_PARSED:
        spark_parse_check(spark, statement)
    parsed = parse_statement(statement)
    logger.debug("running %s", type(parsed).__name__)
    return _run(spark, parsed)


def spark_parse_check(spark: Any, statement: str) -> None:
    """Parse ``statement`` with Spark's own parser (classic sessions); Spark's syntax error becomes
    a :class:`StatementParseError` at Spark's position."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return
    try:
        jsession.sessionState().sqlParser().parsePlan(statement)
    except Exception as error:  # noqa: BLE001 - only Spark's ParseException is ours to report
        java = getattr(error, "java_exception", None)  # py4j's error, or PySpark's captured one
        name = str(java.getClass().getName()) if java is not None else type(error).__name__
        if "ParseException" not in name:
            logger.debug("Spark's parser could not check the statement: %s", error)
            return
        text = str(java.getMessage()) if java is not None else str(error)
        message = next(line.strip() for line in [*text.strip().splitlines(), ""] if line.strip() or not line)
        found = _SPARK_POSITION.search(message)
        position = 0
        if found:
            line, column = int(found.group(1)), int(found.group(2))
            lines = statement.split("\n")
            position = sum(len(text) + 1 for text in lines[: line - 1]) + column
            message = message[: found.start()].rstrip()
        raise StatementParseError(message, statement, position) from None


def _table(spark: Any, ref: ast.TableRef) -> DeltaTable:
    table = resolve(spark, ref)
    found = DeltaTable.forPath(spark, table.path, dict(table.options))
    return found.alias(ref.alias) if ref.alias else found


def _target(spark: Any, ref: ast.TableRef) -> SparkTarget:
    table = resolve(spark, ref)
    _table(spark, ref)  # the table exists
    return SparkTarget(spark, table.path, dict(table.options))


def _empty(spark: Any) -> Any:
    return spark.createDataFrame([], "path STRING").select()


def _run(spark: Any, statement: ast.Statement) -> Any:
    if isinstance(statement, ast.Query):
        return run_query(spark, statement)
    if isinstance(statement, ast.DescribeHistory):
        return _table(spark, statement.table).history(statement.limit)
    if isinstance(statement, ast.DescribeDetail):
        return _table(spark, statement.table).detail()
    if isinstance(statement, ast.Optimize):
        builder = _table(spark, statement.table).optimize()
        if statement.where is not None:
            builder = builder.where(statement.where)
        if statement.zorder:
            return builder.executeZOrderBy(list(statement.zorder))
        if statement.full:  # Delta's OPTIMIZE ... FULL: recluster every file of a clustered table
            conditions = [statement.where] if statement.where is not None else []
            return run_optimize(
                _target(spark, statement.table), conditions, OptimizeMode.COMPACT, [], full=True
            )
        return builder.executeCompaction()
    if isinstance(statement, ast.Reorg):
        conditions = [statement.where] if statement.where is not None else []
        return run_optimize(_target(spark, statement.table), conditions, OptimizeMode.PURGE, [])
    if isinstance(statement, ast.Vacuum):
        return _vacuum(spark, statement)
    if isinstance(statement, ast.Restore):
        table = _table(spark, statement.table)
        if statement.version is not None:
            return table.restoreToVersion(statement.version)
        return table.restoreToTimestamp(str(statement.timestamp))
    if isinstance(statement, ast.SetProperties):
        _table(spark, statement.table).setProperties(dict(statement.properties))
        return _empty(spark)
    if isinstance(statement, ast.UnsetProperties):
        _table(spark, statement.table).unsetProperties(list(statement.keys), ifExists=statement.if_exists)
        return _empty(spark)
    if isinstance(statement, ast.AddConstraint | ast.DropConstraint):
        log = _target(spark, statement.table).log()
        if isinstance(statement, ast.AddConstraint):
            add_constraint(log.io, log.update(), statement.name, statement.expression)
        else:
            drop_constraint(log.io, log.update(), statement.name, raise_if_not_exists=not statement.if_exists)
        return _empty(spark)
    if isinstance(statement, ast.RenameColumn | ast.DropColumns):
        log = _target(spark, statement.table).log()
        if isinstance(statement, ast.RenameColumn):
            rename_column(log.io, log.update(), column_path_name(statement.column), statement.new_name)
        else:
            paths = [column_path_name(path) for path in statement.columns]
            drop_columns(log.io, log.update(), paths, if_exists=statement.if_exists)
        return _empty(spark)
    if isinstance(statement, ast.ChangeColumnType):
        log = _target(spark, statement.table).log()
        change_column_type(log.io, log.update(), column_path_name(statement.column), statement.data_type)
        return _empty(spark)
    if isinstance(statement, ast.ClusterBy):
        log = _target(spark, statement.table).log()
        cluster_by(log.io, log.update(), [column_path_name(path) for path in statement.columns])
        return _empty(spark)
    if isinstance(statement, ast.Delete):
        return _table(spark, _default_alias(statement.table)).delete(statement.condition)
    if isinstance(statement, ast.Update):
        ref = _default_alias(statement.table)
        assignments = _assignments(statement.assignments, ref)
        return _table(spark, ref).update(statement.condition, assignments)
    return _merge(spark, statement)


def _vacuum(spark: Any, statement: ast.Vacuum) -> Any:
    """Delta's VACUUM result: the table's path, or in a dry run the files it would delete."""
    log = _target(spark, statement.table).log()
    result = vacuum(
        log.io,
        log.update(),
        retention_hours=statement.retain_hours,
        dry_run=statement.dry_run,
        lite=statement.lite,
    )
    root = log.table_path.rstrip("/")
    rows = [(f"{root}/{path}",) for path in result.files] if statement.dry_run else [(log.table_path,)]
    return spark.createDataFrame(rows, "path STRING")


def _default_alias(ref: ast.TableRef) -> ast.TableRef:
    """A table named by a name is also called by (the last part of) it in conditions, as in Spark."""
    if ref.alias is None and ref.name is not None:
        return ast.aliased(ref, ref.name[-1])
    return ref


def _assignments(pairs: Sequence[tuple[str, str]], ref: ast.TableRef) -> dict[str, str]:
    """``SET`` columns without the target's alias (``t.v`` -> ``v``), each set once."""
    prefix = (ref.alias or "").lower() + "."
    columns = [
        column[len(prefix) :] if ref.alias and column.lower().startswith(prefix) else column
        for column, _ in pairs
    ]
    check_unique(columns, ref.text)
    return {column: value for column, (_, value) in zip(columns, pairs, strict=True)}


def _merge(spark: Any, statement: ast.Merge) -> Any:
    target = _default_alias(statement.target)
    source = statement.source
    if source.query is not None:
        frame = run_query(spark, ast.Query(source.query))
        alias = source.alias or "source"
    else:
        assert source.table is not None
        ref = source.table
        delta = ref.path is not None or registered(spark, ref.name or ()) is not None
        frame = spark.table(delta_view(spark, ref)) if delta else spark.table(".".join(ref.name or ()))
        alias = source.alias or (ref.name[-1] if ref.name else "source")
    builder = _table(spark, target).merge(frame.alias(alias), statement.condition)
    if statement.schema_evolution:
        builder = builder.withSchemaEvolution()
    for clause in statement.clauses:
        values = _assignments(clause.assignments, target) if clause.assignments is not None else None
        if clause.kind == ast.MATCHED:
            if clause.action == "delete":
                builder = builder.whenMatchedDelete(clause.condition)
            elif values is None:
                builder = builder.whenMatchedUpdateAll(clause.condition)
            else:
                builder = builder.whenMatchedUpdate(clause.condition, values)
        elif clause.kind == ast.NOT_MATCHED:
            if values is None:
                builder = builder.whenNotMatchedInsertAll(clause.condition)
            else:
                builder = builder.whenNotMatchedInsert(clause.condition, values)
        elif clause.action == "delete":
            builder = builder.whenNotMatchedBySourceDelete(clause.condition)
        else:
            builder = builder.whenNotMatchedBySourceUpdate(clause.condition, values)
    return builder.execute()
