"""``DeltaTable``: a table with delta-rs's Python API, on this library's log and storage settings.

Code written for ``deltalake.DeltaTable`` ports with its import changed: the reads (``version``,
``schema``, ``files``, ``file_uris``, ``to_pyarrow_table``, ``to_pandas``, ``history``,
``load_as_version``, ``load_cdf``), the row-level changes (``delete``, ``update``, ``merge``) and
the maintenance operations (``optimize``, ``vacuum``, ``restore``, ``alter``,
``create_checkpoint``, ``cleanup_metadata``), ``create`` and the inspections (``get_add_actions``,
``partitions``, ``count``, ``transaction_version``), and :func:`write_deltalake`. Storage settings are
the same ``conf`` every other entry point takes (a Spark-style mapping:
``spark.delta.logStore.*``, ``fs.s3a.*`` ...), or delta-rs's ``storage_options``
(:mod:`logstores.delta_rs_options`), or both.

Like delta-rs's, a ``DeltaTable`` is loaded at one version: reads and the operations work from
that version, an operation that commits moves the object to the version it committed, and
:meth:`update_incremental` moves it to the latest. The operations live below this facade
(:mod:`replay.dml`, :mod:`replay.maintenance`) and commit through a
:class:`~replay.txn.transaction.Transaction`.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from logstores.conf import ConfLike
from logstores.delta_rs_options import with_storage_options
from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from replay.dml.delete import delete_rows
from replay.dml.merge_builder import TableMerger
from replay.dml.update import update_rows
from replay.maintenance.alter import TableAlterer
from replay.maintenance.optimize import TableOptimizer
from replay.maintenance.restore import restore as restore_table
from replay.maintenance.vacuum import vacuum as vacuum_table
from replay.protocol.actions import Metadata, Protocol
from replay.protocol.deltalake_options import check_deltalake_options
from replay.protocol.paths import resolve_path
from replay.protocol.predicates import And
from replay.protocol.schema import StructType
from replay.protocol.sql import parse_expression
from replay.protocol.timestamps import Timestamp
from replay.state.add_actions import add_actions_table, record_counts
from replay.state.loader import load_snapshot
from replay.state.scan import Filter, read_predicate
from replay.state.snapshot import Snapshot
from replay.txn.checkpoint_writer import CheckpointResult
from replay.txn.commit_properties import commit_properties, deltalake_arguments
from replay.txn.transaction import Transaction
from replay.txn.write import (
    ArrowData,
    ArrowSchemaExportable,
    create_table,
)

if TYPE_CHECKING:  # pandas is optional (to_pandas imports it), and pyarrow.dataset imports it
    import pandas as pd
    import pyarrow.dataset as pa_ds


class DeltaTable:
    """The Delta table at ``table_uri``, loaded at ``version`` (default: the latest).

    Raises :class:`~replay.protocol.errors.TableNotFoundError` if there is no table and the
    errors of :meth:`replay.DeltaLog.snapshot` for a version that cannot be loaded.
    """

    def __init__(
        self,
        table_uri: str | os.PathLike[str],
        version: int | None = None,
        conf: ConfLike | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        uri = os.fspath(table_uri)
        self._log = DeltaLog.for_table(uri, with_storage_options(uri, conf, storage_options))
        self._snapshot = self._log.snapshot(version) if version is not None else self._log.update()

    @classmethod
    def create(  # noqa: PLR0917 - deltalake's signature
        cls,
        table_uri: str | os.PathLike[str],
        schema: pa.Schema | StructType | ArrowSchemaExportable,
        mode: str = "error",
        partition_by: list[str] | str | None = None,
        name: str | None = None,
        description: str | None = None,
        configuration: Mapping[str, str | None] | None = None,
        storage_options: Mapping[str, str] | None = None,
        *,
        conf: ConfLike | None = None,
    ) -> DeltaTable:
        """Create an empty table with ``schema`` (Delta's ``CREATE TABLE``), as deltalake's
        ``DeltaTable.create``: ``mode`` ``error`` (the default) or ``append`` refuse an existing
        table, ``ignore`` leaves it as it is, ``overwrite`` replaces it (``CREATE OR REPLACE``).
        Returns the table, loaded at its latest version."""
        uri = os.fspath(table_uri)
        arrow_schema = schema.to_arrow() if isinstance(schema, StructType) else pa.schema(schema)
        settings = with_storage_options(uri, conf, storage_options)
        create_table(
            uri,
            arrow_schema,
            mode,
            [partition_by] if isinstance(partition_by, str) else partition_by,
            settings,
            {key: value for key, value in (configuration or {}).items() if value is not None},
            name=name,
            description=description,
        )
        return cls(uri, conf=settings)

    @staticmethod
    def is_deltatable(
        table_uri: str | os.PathLike[str],
        storage_options: Mapping[str, str] | None = None,
        conf: ConfLike | None = None,
    ) -> bool:
        """Whether ``table_uri`` holds a Delta table (a log with at least one commit)."""
        uri = os.fspath(table_uri)
        return DeltaLog.for_table(uri, with_storage_options(uri, conf, storage_options)).table_exists()

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

    def to_pyarrow_dataset(self, partitions: Filter | None = None) -> pa_ds.Dataset:
        """The files of the loaded version (those ``partitions`` selects, if given) as a
        ``pyarrow.dataset``, as deltalake makes it; refused for tables with deletion vectors or
        column mapping (:class:`UnsupportedTableFeatureError`), which ``to_pyarrow_table`` reads."""
        return self._snapshot.scan(filter=partitions).to_pyarrow_dataset()

    def get_add_actions(self, flatten: bool = False) -> pa.Table:
        """The active files with their size, record count, typed statistics (``null_count``,
        ``min``, ``max``) and partition values, as deltalake returns them (one column per value
        with ``flatten``)."""
        return add_actions_table(self._snapshot.files_table(), self._snapshot.config, flatten=flatten)

    def partitions(self, partition_filters: Filter | None = None) -> list[dict[str, str | None]]:
        """The distinct partition values of the active files (as the log spells them), of the
        files ``partition_filters`` selects if given."""
        files = self._snapshot.scan(filter=partition_filters).files() if partition_filters else None
        table = files if files is not None else self._snapshot.files_table()
        seen = {tuple(sorted(dict(row).items())) for row in table.column("partition_values").to_pylist()}
        return [dict(values) for values in sorted(seen, key=repr)]

    def count(self) -> int:
        """The number of rows: the files' ``numRecords`` less their deletion vectors' rows, or
        the rows of the files read when some file has no statistics."""
        files = self._snapshot.files_table()
        counts = record_counts(files.column("stats").combine_chunks())
        if counts.null_count:
            first = self._snapshot.schema.fields[0].name
            return sum(batch.num_rows for batch in self._snapshot.scan(columns=[first]).to_batches())
        deleted = pc.struct_field(files.column("deletion_vector").combine_chunks(), "cardinality")
        return int(pc.sum(counts).as_py() or 0) - int(pc.sum(deleted).as_py() or 0)

    def transaction_version(self, app_id: str) -> int | None:
        """The last version application ``app_id`` committed (``SetTransaction``), if any."""
        return self._snapshot.set_transactions.get(app_id)

    def file_uris(self, partition_filters: Filter | None = None) -> list[str]:
        """The active files' absolute URIs (of the files ``partition_filters`` selects, if given)."""
        if partition_filters is None:
            return self._snapshot.file_uris()
        paths = self._snapshot.scan(filter=partition_filters).files().column("path").to_pylist()
        return [resolve_path(self._snapshot.table_path, path) for path in paths]

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
        """After an operation committed ``version`` (``None``: nothing committed), load the latest
        version; its files are replayed when first used (an operation's caller often reads
        nothing more)."""
        if version is not None:
            self._snapshot = self._log.update(files=False)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information, newest first (``commitInfo`` fields with version and timestamp)."""
        return self._log.history(limit)

    # -- rows ---------------------------------------------------------------------------------------
    def to_pyarrow_table(
        self,
        columns: Sequence[str] | None = None,
        filters: Filter | None = None,
        *,
        partitions: Filter | None = None,
        filesystem: object | None = None,
    ) -> pa.Table:
        """The rows of the loaded version; ``filters`` (and deltalake's ``partitions``, both
        applied) are DNF tuples, a pyarrow expression or a predicate tree (files that cannot
        match are never opened). A ``filesystem`` is refused: files are read with the table's
        storage settings."""
        check_deltalake_options("to_pyarrow_table", filesystem=filesystem)
        return self._snapshot.to_arrow(columns=columns, filter=self._both(partitions, filters))

    to_arrow = to_pyarrow_table

    def to_pandas(
        self,
        columns: Sequence[str] | None = None,
        filters: Filter | None = None,
        *,
        partitions: Filter | None = None,
        filesystem: object | None = None,
        types_mapper: Callable[[pa.DataType], Any] | None = None,
    ) -> pd.DataFrame:
        """:meth:`to_pyarrow_table` as a pandas DataFrame (``types_mapper`` as pyarrow takes it)."""
        table = self.to_pyarrow_table(columns, filters, partitions=partitions, filesystem=filesystem)
        return table.to_pandas(types_mapper=types_mapper)

    def _both(self, partitions: Filter | None, filters: Filter | None) -> Filter | None:
        if partitions is None or filters is None:
            return filters if partitions is None else partitions
        schema = self._snapshot.config.metadata.arrow_schema
        return And((read_predicate(partitions, schema)[0], read_predicate(filters, schema)[0]))

    def load_cdf(  # noqa: PLR0917 - delta-rs's signature
        self,
        starting_version: int = 0,
        ending_version: int | None = None,
        starting_timestamp: _dt.datetime | str | None = None,
        ending_timestamp: _dt.datetime | str | None = None,
        columns: Sequence[str] | None = None,
        predicate: str | None = None,
        allow_out_of_range: bool = False,
    ) -> pa.Table:
        """The change data feed between two versions or timestamps (delta-rs's ``load_cdf``),
        only the change rows ``predicate`` (SQL, over the table's and the change columns) is true
        for if given. A pyarrow ``Table``: deltalake returns a reader, ``pa.table()`` takes both."""
        changes = table_changes(
            self._log,
            starting_version if starting_timestamp is None else None,
            ending_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=columns,
            allow_out_of_range=allow_out_of_range,
        )
        if predicate is None:
            return changes
        return changes.filter(
            pc.fill_null(parse_expression(predicate).bind(changes.schema).evaluate(changes), False)
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
    def delete(self, predicate: str | None = None, **deltalake_options: object) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (a SQL predicate; every row without one).

        Returns Delta's DELETE metrics (the commit's ``operationMetrics``, as ints); nothing is
        committed when no row matches. Raises :class:`~replay.protocol.sql.ExpressionError` naming
        an unknown column or function and its position,
        :class:`~replay.protocol.errors.AppendOnlyTableError` (before anything is written) and
        Delta's conflict exceptions (:class:`~replay.protocol.errors.ConcurrentModificationError`).
        deltalake's engine arguments are taken as :mod:`replay.protocol.deltalake_options` says.
        """
        with commit_properties(deltalake_arguments("delete", deltalake_options)):
            result = delete_rows(self._snapshot, predicate)
        self._moved_to(result.version)
        return result.metrics

    def update(
        self,
        updates: Mapping[str, str] | None = None,
        new_values: Mapping[str, Any] | None = None,
        predicate: str | None = None,
        **deltalake_options: object,
    ) -> dict[str, int]:
        """Set columns of the rows matching ``predicate`` (every row without one): ``updates`` maps
        columns to SQL expressions, ``new_values`` to Python values (one of the two). Values are
        stored into the columns' types with Spark's ANSI store assignment; a row whose partition
        column changes moves to its new partition. Returns Delta's UPDATE metrics and raises as
        :meth:`delete` does."""
        with commit_properties(deltalake_arguments("update", deltalake_options)):
            result = update_rows(self._snapshot, updates, new_values, predicate)
        self._moved_to(result.version)
        return result.metrics

    def merge(
        self,
        source: ArrowData,
        predicate: str,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
        **deltalake_options: object,
    ) -> TableMerger:
        """A MERGE of ``source`` (anything ``write_table`` writes) into the table on ``predicate``
        (a SQL condition over ``target_alias`` and ``source_alias``): add WHEN clauses to the
        returned :class:`~replay.dml.merge_builder.TableMerger`, then ``execute()`` it. ``merge_schema``
        adds the source columns that ``*`` clauses or assignments name to the table."""
        properties = deltalake_arguments("merge", deltalake_options)
        return TableMerger(
            self._snapshot,
            source,
            predicate,
            source_alias=source_alias,
            target_alias=target_alias,
            merge_schema=merge_schema,
            on_commit=self._moved_to,
            commit_properties=properties,
        )

    # -- maintenance (replay.maintenance) ---------------------------------------------------------
    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention_duration: bool = True,
        *,
        full: bool = True,
        **deltalake_options: object,
    ) -> list[str]:
        """Delete the files no version within the retention needs (Delta's VACUUM, see
        :mod:`replay.maintenance.vacuum`); returns their paths relative to the table root, or in a
        dry run (the default, as deltalake's) the paths it would delete.

        ``retention_hours`` defaults to the table's ``delta.deletedFileRetentionDuration``; a
        shorter one raises :class:`~replay.maintenance.vacuum.VacuumRetentionError` unless
        ``enforce_retention_duration=False``. Works on the latest version, whatever version this
        object is loaded at. ``full=True`` (the default) is Delta's VACUUM, which also deletes old
        files no commit ever added (a failed writer's); ``full=False`` is deltalake's default lite
        mode, which deletes only the files of expired tombstones.
        """
        with commit_properties(deltalake_arguments("vacuum", deltalake_options)):
            result = vacuum_table(
                self._log.io,
                self._log.update(),
                retention_hours=retention_hours,
                dry_run=dry_run,
                enforce_retention_duration=enforce_retention_duration,
                lite=not full,
            )
        if result.end_version is not None:  # its commits change no file: files replayed on first use
            self._snapshot = load_snapshot(self._log.io, version=result.end_version, files=False)
        return result.files

    def restore(
        self,
        target: int | Timestamp,
        *,
        ignore_missing_files: bool = False,
        protocol_downgrade_allowed: bool = False,
        **deltalake_options: object,
    ) -> dict[str, int]:
        """Restore the table to an earlier version (an ``int``) or to the version active at a time (a
        datetime or an ISO string) in one commit (Delta's RESTORE, see
        :mod:`replay.maintenance.restore`); returns Delta's metrics (``numRestoredFiles``,
        ``numRemovedFiles``, ``restoredFilesSize``, ``removedFilesSize``,
        ``numOfFilesAfterRestore``, ``tableSizeAfterRestore``), also under deltalake's names
        ``numRestoredFile`` and ``numRemovedFile``. Works from the latest version."""
        with commit_properties(deltalake_arguments("restore", deltalake_options)):
            result = restore_table(
                self._log.io,
                self._log.update(),
                target,
                ignore_missing_files=ignore_missing_files,
                protocol_downgrade_allowed=protocol_downgrade_allowed,
            )
        self._snapshot = load_snapshot(
            self._log.io, version=result.version, files=False
        )  # files on first use
        metrics = dict(result.metrics)
        metrics["numRestoredFile"] = metrics["numRestoredFiles"]
        metrics["numRemovedFile"] = metrics["numRemovedFiles"]
        return metrics

    @property
    def alter(self) -> TableAlterer:
        """Changes to the table's properties, protocol features, columns and CHECK constraints
        (deltalake's ``TableAlterer``: ``set_table_properties``, ``add_feature``, ``add_columns``,
        ``add_constraint``, ``drop_constraint``, ``set_column_metadata``, ``set_table_name``,
        ``set_table_description``, plus ``unset_table_properties``); each is one commit on the
        latest version, after which this object is loaded at it."""
        return TableAlterer(self._log.io, self._log.update, self._moved_to)

    # compaction, Z-order, deletion-vector purge (replay.maintenance.optimize)
    @property
    def optimize(self) -> TableOptimizer:
        """delta-rs's ``TableOptimizer``: ``compact``, ``z_order``, and ``purge_deletion_vectors``
        (Delta's ``REORG TABLE ... APPLY (PURGE)``), each from the loaded version."""
        return TableOptimizer(lambda: self._snapshot, self._moved_to)
