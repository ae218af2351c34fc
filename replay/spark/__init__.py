"""PySpark integration: the ``deltalog`` data source, Delta's ``DeltaTable`` API without Delta's
JARs, and distributed state reconstruction."""

from replay.spark.datasource import register
from replay.spark.delta_table import DeltaTable
from replay.spark.merge_builder import DeltaMergeBuilder
from replay.spark.optimize_builder import DeltaOptimizeBuilder
from replay.spark.reconstruct import reconstruct_state

__all__ = ["DeltaMergeBuilder", "DeltaOptimizeBuilder", "DeltaTable", "reconstruct_state", "register"]
