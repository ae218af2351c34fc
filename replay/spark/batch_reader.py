"""Batch reads of the ``deltalog`` source: a snapshot (optionally pruned by pushed filters) or a
range of the change feed, planned on the driver side and read file by file in Spark tasks."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from replay.cdc import ChangeRead, change_read_snapshot, plan_changes, resolve_change_range
from replay.data import TableReader
from replay.delta_log import DeltaLog
from replay.protocol.arrow_actions import add_actions
from replay.protocol.predicates import TRUE, And, Predicate
from replay.spark.filters import to_predicate
from replay.spark.partitions import FilesPartition, record_batches, split_reads
from replay.spark.row_ids import row_id_batches
from replay.spark.settings import ReadSettings
from replay.spark.worker_errors import errors_first
from replay.state.pruning import decided_by_partition_values, prune
from replay.state.snapshot import Snapshot

logger = logging.getLogger(__name__)


class DeltaLogBatchReader(DataSourceReader):
    """Reads a snapshot or a change range; the plan is made once, on the driver side.

    ``version`` pins the snapshot that ``schema()`` resolved, so the files read are those of the
    schema Spark planned with even if the table changed since.
    """

    def __init__(self, settings: ReadSettings, schema: StructType, version: int | None = None) -> None:
        self.settings = settings
        self.schema = schema
        self.version = version
        self.pushed: Predicate = TRUE
        self._plan: tuple[TableReader, list[ChangeRead]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Tasks need the table reader, not the whole plan (their partition carries the reads)."""
        state = dict(self.__dict__)
        if self._plan is not None:
            state["_plan"] = (self._plan[0], [])
        return state

    def _snapshot(self, delta_log: DeltaLog) -> Snapshot:
        if self.version is not None:
            return delta_log.snapshot(version=self.version)
        return table_snapshot(delta_log, self.settings)

    def _make_plan(self) -> tuple[TableReader, list[ChangeRead]]:
        settings = self.settings
        delta_log = DeltaLog.for_table(settings.path, settings.conf)
        if settings.read_change_feed:
            resolved = change_range(delta_log, settings)
            if resolved is None:
                return TableReader.for_metadata(delta_log.table_path, delta_log.update().metadata), []
            plan = plan_changes(delta_log, *resolved)
            return plan.reader(settings.conf), plan.reads
        return self._snapshot_plan(self._snapshot(delta_log), self.pushed)

    def _snapshot_plan(self, snapshot: Snapshot, pushed: Predicate) -> tuple[TableReader, list[ChangeRead]]:
        """The files of ``snapshot`` that may hold rows matching ``pushed``, as reads."""
        reader = TableReader.for_metadata(
            snapshot.table_path, snapshot.metadata, snapshot.protocol, self.settings.conf
        )
        files = snapshot.files_table()
        if self.settings.only_files is not None:
            wanted = pa.array(self.settings.only_files, pa.string())
            files = files.filter(pc.is_in(files.column("path"), value_set=wanted))
        if pushed != TRUE:
            kept = prune(files, pushed, snapshot.config)
            logger.debug("pushed filters keep %d of %d files of %s", kept.num_rows, files.num_rows, snapshot)
            files = kept
        return reader, [ChangeRead(add, None, snapshot.version, 0) for add in add_actions(files)]

    @errors_first
    def partitions(self) -> Sequence[InputPartition]:
        if self._plan is None:
            self._plan = self._make_plan()
        return split_reads(self._plan[1])

    @errors_first
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilesPartition):  # Spark plans one empty partition for none
            return
        reader, _ = self._plan or self._make_plan()
        if self.settings.row_ids:
            yield from row_id_batches(reader, partition, self.schema, self.settings.only_files)
        else:
            yield from record_batches(reader, partition, self.settings.read_change_feed, self.schema)


class DeltaLogPushdownReader(DeltaLogBatchReader):
    """A snapshot reader that takes Spark's pushed filters (used while Spark pushes them).

    Spark makes a new reader for each ``pushFilters`` call, so its state belongs to one query on
    the Python side; PySpark 4.3 itself keeps the resulting read with the relation for later
    queries (see :data:`~replay.spark.settings.PUSHDOWN_KEY`), which is why pushdown is off
    unless the user turns it on.

    The filters prune the snapshot's files by partition values and statistics before partitions
    are planned. Spark still applies every filter that this does not decide exactly: all but the
    filters on partition columns that partition values alone decide for every file
    (:func:`~replay.state.pruning.decided_by_partition_values`), since statistics only say which
    files may hold a matching row.
    """

    @errors_first
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - PySpark's name
        delta_log = DeltaLog.for_table(self.settings.path, self.settings.conf)
        snapshot = self._snapshot(delta_log)
        predicates = [to_predicate(spark_filter, self.schema) for spark_filter in filters]
        self.pushed = And(tuple(predicates)) if predicates else TRUE
        self._plan = self._snapshot_plan(snapshot, self.pushed)
        files, config = snapshot.files_table(), snapshot.config
        return [
            spark_filter
            for spark_filter, predicate in zip(filters, predicates, strict=True)
            if not decided_by_partition_values(files, predicate, config)
        ]


def change_range(delta_log: DeltaLog, settings: ReadSettings) -> tuple[int, int] | None:
    """The versions a batch change read covers (``None``: nothing to read), from its options."""
    return resolve_change_range(
        delta_log,
        settings.starting_version if isinstance(settings.starting_version, int) else None,
        settings.ending_version,
        settings.starting_timestamp,
        settings.ending_timestamp,
        allow_out_of_range=settings.allow_out_of_range,
    )


def change_read_snapshot_of(delta_log: DeltaLog, settings: ReadSettings) -> Snapshot:
    """The snapshot whose schema a change read uses: the latest, or the end version's for a
    bounded batch read of a column-mapping table (as :func:`replay.cdc.plan_changes` reads)."""
    if settings.ending_version is None and settings.ending_timestamp is None:
        return delta_log.update()
    resolved = change_range(delta_log, settings)
    return delta_log.update() if resolved is None else change_read_snapshot(delta_log, *resolved)


def table_snapshot(delta_log: DeltaLog, settings: ReadSettings) -> Snapshot:
    """The snapshot a snapshot read names: ``versionAsOf``, ``timestampAsOf`` or the latest."""
    if settings.version_as_of is not None:
        return delta_log.snapshot(version=settings.version_as_of)
    if settings.timestamp_as_of is not None:
        return delta_log.snapshot(timestamp=settings.timestamp_as_of)
    return delta_log.update()
