"""Work after a successful commit (Delta's post-commit hooks): automatic checkpoints and log cleanup.

After version ``v`` is committed, when ``v > 0`` and ``v`` is a multiple of
``delta.checkpointInterval`` (default 10), a classic checkpoint of ``v`` is written with
``_last_checkpoint``, then, when ``delta.enableExpiredLogCleanup`` is on (the default), expired log
files are deleted (:mod:`replay.txn.log_cleanup`). The table properties are those in force after
the commit. A hook that fails is logged as Delta's ``DELTA_POST_COMMIT_HOOK_FAILED`` and never
fails the commit, which has already happened.

Every path that commits a new version runs :func:`run_post_commit_hooks` after the commit:
:func:`replay.txn.write_plan.commit_write` (``write_table`` and the Spark writers),
``delete_files`` and ``DeltaLog.commit``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from replay.log.table_io import TableIO
from replay.protocol.table_config import TableConfiguration
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.checkpoint_writer import CheckpointResult, write_checkpoint
from replay.txn.log_cleanup import cleanup_expired_logs

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PostCommitResult:
    """What the hooks did after committing :attr:`version`."""

    version: int
    checkpoint: CheckpointResult | None = None
    deleted_log_files: tuple[str, ...] = ()
    error: str | None = None
    """The failure of a hook (logged, never raised), or ``None``."""


def checkpoint_due(version: int, config: TableConfiguration) -> bool:
    """Whether committing ``version`` triggers an automatic checkpoint (Delta's rule)."""
    return version > 0 and version % config.checkpoint_interval == 0


def run_post_commit_hooks(
    io: TableIO, version: int, config: TableConfiguration | None = None, snapshot: Snapshot | None = None
) -> PostCommitResult:
    """Run the post-commit hooks for the just committed ``version`` (see the module docstring).

    ``config`` is the table configuration in force after the commit (the snapshot of
    ``version`` is loaded when it is not given, or when a checkpoint is due); ``snapshot``, if
    given, must be the snapshot of ``version``. Never raises for a failing hook.
    """
    hook = "checkpoint"
    try:
        if config is None:
            snapshot = snapshot or load_snapshot(io, version=version)
            config = snapshot.config
        if not checkpoint_due(version, config):
            return PostCommitResult(version)
        snapshot = snapshot or load_snapshot(io, version=version)
        checkpoint = write_checkpoint(io, snapshot)
        deleted: list[str] = []
        if snapshot.config.expired_log_cleanup_enabled:
            hook = "log cleanup"
            deleted = cleanup_expired_logs(io, snapshot.config)
        return PostCommitResult(version, checkpoint, tuple(deleted))
    except Exception as exc:  # noqa: BLE001 - the commit has happened: report, never fail it
        message = (
            f"[DELTA_POST_COMMIT_HOOK_FAILED] Committing to the Delta table version {version} succeeded "
            f"but error while executing post-commit hook {hook}: {type(exc).__name__}: {exc}"
        )
        logger.warning("%s (table %s)", message, io.table_path)
        return PostCommitResult(version, error=message)
