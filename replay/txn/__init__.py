"""Writing a table: commits with Delta's conflict checks, Parquet data files with statistics,
``write_table``/``delete_files`` and checkpoint writing."""

from replay.txn.checkpoint_writer import CheckpointResult, write_checkpoint
from replay.txn.committer import commit
from replay.txn.write import delete_files, write_table

__all__ = ["CheckpointResult", "commit", "delete_files", "write_checkpoint", "write_table"]
