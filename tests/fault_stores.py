"""Local stores that fail on purpose, importable by dotted path from Spark's Python workers."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from logstores.local import LocalLogStore

KILL_AFTER_VERSION = "KILL_AFTER_VERSION"
KILL_PROCESS_GROUP = "KILL_PROCESS_GROUP"


class KillingLogStore(LocalLogStore):
    """Kills the process group ``$KILL_PROCESS_GROUP`` right after a streaming sink commits version
    ``$KILL_AFTER_VERSION``: the commit is in the table, Spark's commit log lacks the batch."""

    def write(self, path: str, lines: Sequence[str], overwrite: bool = False) -> None:
        super().write(path, lines, overwrite)
        target = os.environ.get(KILL_AFTER_VERSION)
        if target and path.endswith(f"{int(target):020d}.json") and "STREAMING UPDATE" in lines[0]:
            os.killpg(int(os.environ[KILL_PROCESS_GROUP]), signal.SIGKILL)


class InterruptedCheckpointLogStore(LocalLogStore):
    """Raises ``KeyboardInterrupt`` when a checkpoint's ``_last_checkpoint`` is written: a post-commit
    hook interrupted after its commit landed."""

    def write(self, path: str, lines: Sequence[str], overwrite: bool = False) -> None:
        if path.endswith("_last_checkpoint"):
            raise KeyboardInterrupt(f"interrupted while writing {path}")
        super().write(path, lines, overwrite)
