"""PySpark integration: the ``deltalog`` data source, Delta's ``DeltaTable`` API without Delta's
JARs, Delta's SQL statements (``sql``), and distributed state reconstruction."""

from replay.spark.datasource import register
from replay.spark.delta_table import DeltaTable
from replay.spark.merge_builder import DeltaMergeBuilder
from replay.spark.optimize_builder import DeltaOptimizeBuilder
from replay.spark.reconstruct import reconstruct_state
from replay.spark.sql_statements import sql
from replay.spark.sql_tables import register_table, unregister_table

__all__ = [
    "DeltaMergeBuilder",
    "DeltaOptimizeBuilder",
    "DeltaTable",
    "reconstruct_state",
    "register",
    "register_table",
    "sql",
    "unregister_table",
]
