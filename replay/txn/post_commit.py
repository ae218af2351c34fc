"""Work after a successful commit (Delta's post-commit hooks): automatic checkpoints, log cleanup,
and the hooks layers above register (auto compaction).

After version ``v`` is committed, when ``v > 0`` and ``v`` is a multiple of
``delta.checkpointInterval`` (default 10), a classic checkpoint of ``v`` is written with
``_last_checkpoint``, then, when ``delta.enableExpiredLogCleanup`` is on (the default), expired log
files are deleted (:mod:`replay.txn.log_cleanup`). The table properties are those in force after
the commit. A hook that fails is logged as Delta's ``DELTA_POST_COMMIT_HOOK_FAILED`` and never
fails the commit, which has already happened.

**Registered hooks.** Some post-commit work belongs to a layer above this one: auto compaction
rewrites files with the table maintenance code (``replay.maintenance``), which builds on
transactions and so cannot be imported from here. Such a layer registers its hook with
:func:`register_post_commit_hook` when its package is imported; the ``replay`` package imports
every layer, so in any process that uses the library the hooks are registered before the first
commit. A registered hook receives a :class:`CommittedVersion` (what was committed, by which
operation) after the checkpoint hook, in registration order, and what it returns is kept in
:attr:`PostCommitResult.hooks`.

Every path that commits a new version runs :func:`run_post_commit_hooks` after the commit:
:meth:`replay.txn.transaction.Transaction.commit`, and through it ``write_table``,
``delete_files``, ``DeltaLog.commit``, the Spark writers and the table operations.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from replay.log.table_io import TableIO
from replay.protocol.actions import Action
from replay.protocol.table_config import TableConfiguration
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.checkpoint_writer import CheckpointResult, write_checkpoint
from replay.txn.log_cleanup import cleanup_expired_logs

logger = logging.getLogger(__name__)


@dataclass
class CommittedVersion:
    """A version just committed, as a registered hook sees it."""

    io: TableIO
    version: int
    config: TableConfiguration
    """The table configuration in force after the commit."""
    operation: str = ""
    """The commit's ``commitInfo.operation`` (empty when the committer did not say)."""
    actions: Sequence[Action] = ()
    """The actions committed (without ``commitInfo``); empty when the committer did not say."""
    given_snapshot: Snapshot | None = None

    @cached_property
    def snapshot(self) -> Snapshot:
        """The snapshot of :attr:`version` (loaded on first use)."""
        if self.given_snapshot is not None:
            return self.given_snapshot
        return load_snapshot(self.io, version=self.version)


PostCommitHook = Callable[[CommittedVersion], object]
"""A registered hook: called with the committed version, returns what it did (or ``None``)."""

_HOOKS: dict[str, PostCommitHook] = {}
_HOOKS_LOCK = threading.Lock()


def register_post_commit_hook(name: str, hook: PostCommitHook) -> None:
    """Run ``hook`` after every commit (see the module docstring); registering ``name`` again
    replaces its hook."""
    with _HOOKS_LOCK:
        _HOOKS[name] = hook


def registered_post_commit_hooks() -> dict[str, PostCommitHook]:
    """The registered hooks by name, in the order they run."""
    with _HOOKS_LOCK:
        return dict(_HOOKS)


@dataclass(frozen=True)
class PostCommitResult:
    """What the hooks did after committing :attr:`version`."""

    version: int
    checkpoint: CheckpointResult | None = None
    deleted_log_files: tuple[str, ...] = ()
    error: str | None = None
    """The failure of the checkpoint or cleanup hook (logged, never raised), or ``None``."""
    hooks: Mapping[str, object] = field(default_factory=dict)
    """What each registered hook returned (hooks that returned ``None`` are left out)."""
    hook_errors: Mapping[str, str] = field(default_factory=dict)
    """The failure of each registered hook that failed (logged, never raised)."""


def checkpoint_due(version: int, config: TableConfiguration) -> bool:
    """Whether committing ``version`` triggers an automatic checkpoint (Delta's rule)."""
    return version > 0 and version % config.checkpoint_interval == 0


def hook_failure_message(version: int, hook: str, exc: BaseException) -> str:
    """Delta's ``DELTA_POST_COMMIT_HOOK_FAILED`` for ``hook`` after committing ``version``."""
    return (
        f"[DELTA_POST_COMMIT_HOOK_FAILED] Committing to the Delta table version {version} succeeded "
        f"but error while executing post-commit hook {hook}: {type(exc).__name__}: {exc}"
    )


def run_post_commit_hooks(
    io: TableIO,
    version: int,
    config: TableConfiguration | None = None,
    snapshot: Snapshot | None = None,
    *,
    operation: str = "",
    actions: Sequence[Action] = (),
) -> PostCommitResult:
    """Run the post-commit hooks for the just committed ``version`` (see the module docstring).

    ``config`` is the table configuration in force after the commit (the snapshot of
    ``version`` is loaded when it is not given, or when a checkpoint is due); ``snapshot``, if
    given, must be the snapshot of ``version``. ``operation`` and ``actions`` describe the
    commit to the registered hooks. Never raises for a failing hook.
    """
    hook = "checkpoint"
    checkpoint: CheckpointResult | None = None
    deleted: list[str] = []
    error: str | None = None
    try:
        if config is None:
            snapshot = snapshot or load_snapshot(io, version=version)
            config = snapshot.config
        if checkpoint_due(version, config):
            snapshot = snapshot or load_snapshot(io, version=version)
            checkpoint = write_checkpoint(io, snapshot)
            if snapshot.config.expired_log_cleanup_enabled:
                hook = "log cleanup"
                deleted = cleanup_expired_logs(io, snapshot.config)
    except Exception as exc:  # noqa: BLE001 - the commit has happened: report, never fail it
        error = hook_failure_message(version, hook, exc)
        logger.warning("%s (table %s)", error, io.table_path)
    hooks = registered_post_commit_hooks()
    if not hooks or config is None:
        return PostCommitResult(version, checkpoint, tuple(deleted), error)
    committed = CommittedVersion(io, version, config, operation, actions, snapshot)
    results: dict[str, object] = {}
    failures: dict[str, str] = {}
    for name, registered in hooks.items():
        try:
            outcome = registered(committed)
        except Exception as exc:  # noqa: BLE001 - as above: the commit stands
            failures[name] = hook_failure_message(version, name, exc)
            logger.warning("%s (table %s)", failures[name], io.table_path)
            continue
        if outcome is not None:
            results[name] = outcome
    return PostCommitResult(version, checkpoint, tuple(deleted), error, results, failures)
