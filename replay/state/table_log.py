"""``TableLog``: what the layers above ``state`` need from a table's log, as a protocol.

The change data feed and the streaming source work on a table whose latest snapshot is cached
and whose commit times are known; :class:`replay.delta_log.DeltaLog` provides exactly this. They
depend on this protocol, not on the facade, so that nothing below the facade imports it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from typing import Protocol

from replay.log.commit_timestamps import CommitRecord
from replay.log.table_io import TableIO
from replay.protocol.actions import Action
from replay.protocol.timestamps import UTC, Timestamp
from replay.state.snapshot import Snapshot


class TableLog(Protocol):
    """A table's log: its IO, versions, snapshots (the latest one cached), commits and their times."""

    @property
    def io(self) -> TableIO: ...

    @property
    def table_path(self) -> str: ...

    def latest_version(self) -> int:
        """The newest committed version (:class:`TableNotFoundError` if there is none)."""
        ...

    def earliest_version(self) -> int:
        """The earliest version a snapshot can be built for."""
        ...

    def earliest_commit_version(self) -> int:
        """The oldest commit file still in the log (it may not be recreatable)."""
        ...

    def update(self) -> Snapshot:
        """The latest snapshot, reusing the cached one while the log has not moved on."""
        ...

    def snapshot(self, version: int | None = None, timestamp: Timestamp | None = None) -> Snapshot:
        """The table at ``version``, at the version active at ``timestamp``, or the latest one."""
        ...

    def get_changes(
        self, start_version: int, end_version: int | None = None, fail_on_data_loss: bool = True
    ) -> Iterator[tuple[int, list[Action]]]:
        """Commits ``start_version..end_version`` in order as ``(version, actions)``."""
        ...

    def commit_records(self) -> list[CommitRecord]:
        """Every recreatable commit with its effective timestamp, oldest first."""
        ...

    def commit_timestamp(self, version: int) -> int:
        """The effective timestamp (ms) of commit ``version``."""
        ...

    def version_at_timestamp(
        self,
        timestamp_ms: int,
        *,
        can_return_last_commit: bool = False,
        can_return_earliest_commit: bool = False,
        zone: _dt.tzinfo = UTC,
    ) -> int:
        """The version active at ``timestamp_ms`` (Delta's ``getActiveCommitAtTime``); errors show
        times in ``zone``."""
        ...
