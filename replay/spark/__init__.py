"""PySpark integration: distributed state reconstruction and data sources."""

from replay.spark.datasource import register
from replay.spark.reconstruct import reconstruct_state

__all__ = ["reconstruct_state", "register"]
