"""Streaming reads of the ``deltalog`` source: the change feed or the table's appends, with Delta's
offsets (``DeltaSourceOffset`` JSON) and admission control (``maxFilesPerTrigger``,
``maxBytesPerTrigger``, ``Trigger.AvailableNow``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from replay.cdc import BASE_INDEX, AdmissionLimits, DeltaSource, DeltaSourceOffset
from replay.data import TableReader
from replay.delta_log import DeltaLog
from replay.spark.partitions import FilesPartition, record_batches, split_reads
from replay.spark.settings import ReadSettings
from replay.spark.worker_errors import errors_first


class DeltaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A Delta streaming source: change feed or appends, with admission control.

    Picklable: the :class:`DeltaSource` (log, caches) is rebuilt lazily on each side.
    """

    def __init__(self, settings: ReadSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema
        self._source: DeltaSource | None = None
        self._reader: TableReader | None = None
        self._available_now_end: DeltaSourceOffset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_source"] = None
        return state

    @property
    def source(self) -> DeltaSource:
        if self._source is None:
            settings = self.settings
            self._source = DeltaSource(
                DeltaLog.for_table(settings.path, settings.conf),
                read_change_feed=settings.read_change_feed,
                starting_version=settings.starting_version,
                starting_timestamp=settings.starting_timestamp,
                fail_on_data_loss=settings.fail_on_data_loss,
                exclude_regex=settings.exclude_regex,
                stream_options=settings.stream_options,
                allow_out_of_range=settings.allow_out_of_range,
            )
        return self._source

    @errors_first
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        return self.source.initial_offset().to_dict()

    @errors_first
    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        settings = self.settings
        if settings.max_bytes_per_trigger is not None and settings.max_files_per_trigger is None:
            return ReadMaxBytes(settings.max_bytes_per_trigger)
        return ReadMaxFiles(settings.max_files_per_trigger or 1000)

    def _limits(self, limit: ReadLimit | None) -> AdmissionLimits | None:
        settings = self.settings
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxFiles):
            return AdmissionLimits(max_files=limit.max_files, max_bytes=settings.max_bytes_per_trigger)
        if isinstance(limit, ReadMaxBytes):
            return AdmissionLimits(max_files=settings.max_files_per_trigger, max_bytes=limit.max_bytes)
        return AdmissionLimits(
            max_files=settings.max_files_per_trigger, max_bytes=settings.max_bytes_per_trigger
        )

    @errors_first
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        source = self.source
        start_offset = source.parse_offset(start)
        return source.latest_offset(start_offset, self._limits(limit), self._available_now_end).to_dict()

    @errors_first
    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """Freeze the end at the latest version now: later commits wait for the next run."""
        source = self.source
        latest = source.delta_log.update().version
        self._available_now_end = DeltaSourceOffset(source.table_id, latest + 1, BASE_INDEX, False)

    @errors_first
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        source = self.source
        start_offset, end_offset = source.parse_offset(start), source.parse_offset(end)
        if end_offset <= start_offset and end_offset.is_initial_snapshot == start_offset.is_initial_snapshot:
            return []
        reads = source.batch_reads(start_offset, end_offset)
        self._reader = source.reader()
        return split_reads(reads)

    @errors_first
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesPartition)
        reader = self._reader or self.source.reader()
        yield from record_batches(reader, partition, self.settings.read_change_feed, self.schema)

    @errors_first
    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: offsets carry all state."""
