"""``DeltaTable``: a table with delta-rs's Python API, on this library's log and storage settings.

Code written for ``deltalake.DeltaTable`` ports with its import changed: the reads (``version``,
``schema``, ``files``, ``file_uris``, ``to_pyarrow_table``, ``to_pandas``, ``history``,
``load_as_version``, ``load_cdf``), the row-level changes (``delete``, ``update``, ``merge``) and
the maintenance operations (``optimize``, ``vacuum``, ``restore``, ``alter``,
``create_checkpoint``, ``cleanup_metadata``). Storage settings are the same ``conf`` every other
entry point takes (a Spark-style mapping: ``spark.delta.logStore.*``, ``fs.s3a.*`` ...).

Like delta-rs's, a ``DeltaTable`` is loaded at one version: reads and the operations work from
that version, an operation that commits moves the object to the version it committed, and
:meth:`update_incremental` moves it to the latest. The operations live below this facade
(:mod:`replay.dml`, :mod:`replay.maintenance`) and commit through a
:class:`~replay.txn.transaction.Transaction`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from logstores.conf import ConfLike
from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.maintenance.optimize import TableOptimizer
from replay.protocol.actions import Metadata, Protocol
from replay.protocol.schema import StructType
from replay.protocol.timestamps import Timestamp
from replay.state.scan import Filter
from replay.state.snapshot import Snapshot
from replay.txn.checkpoint_writer import CheckpointResult
from replay.txn.transaction import Transaction

if TYPE_CHECKING:  # pandas is optional: to_pandas imports it
    import pandas as pd


class DeltaTable:
    """The Delta table at ``table_uri``, loaded at ``version`` (default: the latest).

    Raises :class:`~replay.protocol.errors.TableNotFoundError` if there is no table and the
    errors of :meth:`replay.DeltaLog.snapshot` for a version that cannot be loaded.
    """

    def __init__(self, table_uri: str, version: int | None = None, conf: ConfLike | None = None) -> None:
        self._log = DeltaLog.for_table(table_uri, conf)
        self._snapshot = self._log.snapshot(version) if version is not None else self._log.update()

    @staticmethod
    def is_deltatable(table_uri: str, conf: ConfLike | None = None) -> bool:
        """Whether ``table_uri`` holds a Delta table (a log with at least one commit)."""
        return DeltaLog.for_table(table_uri, conf).table_exists()

    def __repr__(self) -> str:
        return f"DeltaTable({self._log.io.shown_path!r}, version={self.version()})"

    # -- the loaded version ----------------------------------------------------------------------
    @property
    def table_uri(self) -> str:
        return self._log.table_path

    @property
    def delta_log(self) -> DeltaLog:
        """The table's log (commits, checkpoints, time travel)."""
        return self._log

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot this object is loaded at."""
        return self._snapshot

    def version(self) -> int:
        return self._snapshot.version

    def schema(self) -> StructType:
        return self._snapshot.schema

    def metadata(self) -> Metadata:
        return self._snapshot.metadata

    def protocol(self) -> Protocol:
        return self._snapshot.protocol

    def partition_columns(self) -> list[str]:
        return self._snapshot.partition_columns

    def files(self) -> list[str]:
        """The active files' paths as the log spells them (relative to the table)."""
        return self._snapshot.file_paths()

    def file_uris(self) -> list[str]:
        """The active files' absolute URIs."""
        return self._snapshot.file_uris()

    def load_as_version(self, version: int | Timestamp) -> None:
        """Load the table at ``version``, or at the version active at a timestamp (a datetime, an
        ISO string or milliseconds since the epoch given as a string)."""
        if isinstance(version, int):
            self._snapshot = self._log.snapshot(version)
        else:
            self._snapshot = self._log.snapshot(timestamp=version)

    def update_incremental(self) -> None:
        """Load the latest version."""
        self._snapshot = self._log.update()

    def _moved_to(self, version: int | None) -> None:
        """After an operation committed ``version`` (``None``: nothing committed), load it."""
        if version is not None:
            self._snapshot = self._log.update()

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information, newest first (``commitInfo`` fields with version and timestamp)."""
        return self._log.history(limit)

    # -- rows ---------------------------------------------------------------------------------------
    def to_pyarrow_table(
        self, columns: Sequence[str] | None = None, filters: Filter | None = None
    ) -> pa.Table:
        """The rows of the loaded version; ``filters`` are DNF tuples, a pyarrow expression or a
        predicate tree (files that cannot match are never opened)."""
        return self._snapshot.to_arrow(columns=columns, filter=filters)

    to_arrow = to_pyarrow_table

    def to_pandas(self, columns: Sequence[str] | None = None, filters: Filter | None = None) -> pd.DataFrame:
        return self._snapshot.to_pandas(columns=columns, filter=filters)

    def load_cdf(  # noqa: PLR0917 - delta-rs's signature
        self,
        starting_version: int = 0,
        ending_version: int | None = None,
        starting_timestamp: _dt.datetime | str | None = None,
        ending_timestamp: _dt.datetime | str | None = None,
        columns: Sequence[str] | None = None,
        allow_out_of_range: bool = False,
    ) -> pa.Table:
        """The change data feed between two versions or timestamps (delta-rs's ``load_cdf``)."""
        return table_changes(
            self._log,
            starting_version if starting_timestamp is None else None,
            ending_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=columns,
            allow_out_of_range=allow_out_of_range,
        )

    # -- transactions -------------------------------------------------------------------------------
    def transaction(self, *, operation: str = "WRITE") -> Transaction:
        """A :class:`~replay.txn.transaction.Transaction` reading the loaded version."""
        return Transaction(self._log.io, self._snapshot, operation=operation)

    def create_checkpoint(self) -> CheckpointResult:
        """Write a checkpoint of the loaded version."""
        return self._log.checkpoint(self._snapshot.version)

    def cleanup_metadata(self) -> list[str]:
        """Delete expired log files (Delta's metadata cleanup); returns their paths."""
        return self._log.cleanup_expired_logs()

    # -- row-level changes (replay.dml) -----------------------------------------------------------

    # -- maintenance (replay.maintenance) ---------------------------------------------------------

    # compaction, Z-order, deletion-vector purge (replay.maintenance.optimize)
    @property
    def optimize(self) -> TableOptimizer:
        """delta-rs's ``TableOptimizer``: ``compact``, ``z_order``, and ``purge_deletion_vectors``
        (Delta's ``REORG TABLE ... APPLY (PURGE)``), each from the loaded version."""
        return TableOptimizer(lambda: self._snapshot, self._moved_to)
