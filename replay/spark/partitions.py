"""Spark partitions of a read: file reads packed as Spark packs files, and the Arrow batches of one.

Batch reads (:mod:`replay.spark.batch_reader`) and micro-batches of streams
(:mod:`replay.spark.stream_reader`) plan their file reads as :class:`~replay.cdc.ChangeRead`
values; :func:`split_reads` groups them into :class:`FilesPartition` tasks and
:func:`record_batches` reads one task's files in the query's schema, the deletion vectors of a
run of them at a time with one request per DV file (a task's files share few DV files, often one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from replay.cdc import (
    CDC_COMMIT_TIMESTAMP,
    CDC_COMMIT_VERSION,
    CDC_TYPE_COLUMN,
    ChangeRead,
    change_read_batches,
    read_change,
)
from replay.data import TableReader
from replay.spark.schema import arrow_schema

TARGET_PARTITION_BYTES = 128 * 1024 * 1024
OPEN_COST_BYTES = 4 * 1024 * 1024
PARALLELISM_HINT = 8


class FilesPartition(InputPartition):
    """A group of file reads executed by one Spark task."""

    def __init__(self, reads: Sequence[ChangeRead]) -> None:
        super().__init__(tuple(reads))

    @property
    def reads(self) -> tuple[ChangeRead, ...]:
        return self.value


def split_reads(reads: Sequence[ChangeRead], parallelism: int = PARALLELISM_HINT) -> list[FilesPartition]:
    """Pack reads into partitions the way Spark packs files: each file costs its size plus
    :data:`OPEN_COST_BYTES`; a partition holds about ``total / parallelism`` bytes, between
    :data:`OPEN_COST_BYTES` and :data:`TARGET_PARTITION_BYTES`. Larger files are placed first."""
    if not reads:
        return []
    costs = [int(getattr(read.file, "size", 0) or 0) + OPEN_COST_BYTES for read in reads]
    target = min(TARGET_PARTITION_BYTES, max(OPEN_COST_BYTES, sum(costs) // max(parallelism, 1)))
    count = max(1, min(len(reads), math.ceil(sum(costs) / target)))
    buckets: list[list[ChangeRead]] = [[] for _ in range(count)]
    loads = [0] * count
    for index in sorted(range(len(reads)), key=lambda i: -costs[i]):
        lightest = loads.index(min(loads))
        buckets[lightest].append(reads[index])
        loads[lightest] += costs[index]
    return [
        FilesPartition(sorted(bucket, key=lambda read: (read.version, read.file.path))) for bucket in buckets
    ]


def record_batches(
    reader: TableReader, partition: FilesPartition, change_feed: bool, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a partition in the query's schema (fixed when the query was planned:
    columns added to the table later are not read)."""
    target = arrow_schema(schema)
    cdc_columns = {CDC_TYPE_COLUMN, CDC_COMMIT_VERSION, CDC_COMMIT_TIMESTAMP} if change_feed else set()
    columns = [name for name in schema.fieldNames() if name not in cdc_columns]
    for reads, known in change_read_batches(reader, partition.reads):
        for read in reads:
            if change_feed:
                table = read_change(reader, read, columns, known=known)
            else:
                row_filter = reader.deletion_filter(read.file, known)
                table = reader.read_file(read.file, columns, row_filter=row_filter)
            if table.num_rows:
                yield from table.cast(target).to_batches()
