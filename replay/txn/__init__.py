"""Writing a table: transactions with Delta's conflict checks, Parquet data files with statistics,
``write_table``/``delete_files``, write planning shared with the Spark writers, checkpoint writing
and the post-commit hooks (automatic checkpoints, expired log cleanup)."""

from replay.txn.checkpoint_writer import CheckpointResult, write_checkpoint
from replay.txn.committer import Committer, FileSystemCommitter
from replay.txn.log_cleanup import cleanup_expired_logs
from replay.txn.post_commit import PostCommitResult, run_post_commit_hooks
from replay.txn.transaction import CommitOutcome, Transaction, commit_actions
from replay.txn.write import delete_files, write_table

__all__ = [
    "CheckpointResult",
    "CommitOutcome",
    "Committer",
    "FileSystemCommitter",
    "PostCommitResult",
    "Transaction",
    "cleanup_expired_logs",
    "commit_actions",
    "delete_files",
    "run_post_commit_hooks",
    "write_checkpoint",
    "write_table",
]
