"""Internal read options of the ``deltalog`` source for row-level changes: which files, which
columns, and where each row lives.

The Spark DELETE, UPDATE and MERGE (:mod:`replay.spark.dml_scan`) read their target through the
data source with options a user never sets:

* :data:`FILES_OPTION`: a JSON list of file paths as the log spells them; only those active files
  of the snapshot are read (the candidate files the driver pruned, or the touched ones);
* :data:`COLUMNS_OPTION`: a JSON list of the table columns to read (Python data sources have no
  column pruning of their own: the columns a condition needs are read, not every column);
* :data:`ROW_IDS_OPTION`: ``true`` adds :data:`FILE_COLUMN` (the file's position in the list of
  :data:`FILES_OPTION`, which it needs: a small number, where the path would cost every row its
  bytes) and :data:`ROW_COLUMN` (the row's physical index in the file, which a deletion vector
  records) to every row. Rows a file's deletion vector already deletes are left out, as in any read
  (:func:`replay.dml.target_rows.read_target_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import orjson
import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from replay.cdc import change_read_batches
from replay.data import TableReader
from replay.dml.target_rows import read_target_rows
from replay.protocol.actions import AddFile
from replay.spark.options import InvalidOptionError
from replay.spark.partitions import FilesPartition
from replay.spark.schema import arrow_schema

FILES_OPTION = "replay.dml.files"
COLUMNS_OPTION = "replay.dml.columns"
ROW_IDS_OPTION = "replay.dml.rowIds"
FILE_COLUMN = "_replay_dml_file"
ROW_COLUMN = "_replay_dml_row"
ROW_ID_FIELDS = (StructField(FILE_COLUMN, IntegerType(), True), StructField(ROW_COLUMN, LongType(), True))


def name_list(options: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    """The JSON list of strings of option ``key`` (lower-case, as Spark hands it over)."""
    value = options.get(key.lower())
    if value is None:
        return None
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
        raise InvalidOptionError(
            f"Invalid value for the internal option '{key}': expected a JSON list of strings"
        )
    return tuple(parsed)


def scan_schema(schema: StructType, columns: Sequence[str] | None, row_ids: bool) -> StructType:
    """The Spark schema of a read: ``columns`` of ``schema`` (all without a list; names matched
    case-insensitively, in the table's order), then the row id columns if asked."""
    fields = list(schema.fields)
    if columns is not None:
        wanted = {name.lower() for name in columns}
        unknown = wanted - {field.name.lower() for field in fields}
        if unknown:
            raise InvalidOptionError(
                f"The internal option '{COLUMNS_OPTION}' names columns the table does not have: "
                f"{sorted(unknown)}"
            )
        fields = [field for field in fields if field.name.lower() in wanted]
    return StructType([*fields, *ROW_ID_FIELDS] if row_ids else fields)


def row_id_batches(
    reader: TableReader, partition: FilesPartition, schema: StructType, files: Sequence[str] | None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a partition's files with each row's file (its position in ``files``, the
    list of :data:`FILES_OPTION`) and physical row index."""
    if files is None:
        raise InvalidOptionError(f"The internal option '{ROW_IDS_OPTION}' needs '{FILES_OPTION}'")
    ids = {path: position for position, path in enumerate(files)}
    target = arrow_schema(schema)
    columns = [name for name in schema.fieldNames() if name not in (FILE_COLUMN, ROW_COLUMN)]
    for reads, known in change_read_batches(reader, partition.reads):  # one request per DV file
        for read in reads:
            if not isinstance(read.file, AddFile):  # snapshot reads only: the options refuse change feeds
                raise TypeError(f"row ids are read from data files, not from {type(read.file).__name__}")
            rows = read_target_rows(reader, read.file, columns, known=known)
            if rows.num_rows == 0:
                continue
            table = rows.rows.select(columns)
            table = table.append_column(
                FILE_COLUMN, pa.repeat(pa.scalar(ids[read.file.path], pa.int32()), rows.num_rows)
            )
            physical = rows.physical(np.arange(rows.num_rows))
            table = table.append_column(ROW_COLUMN, pa.array(physical, pa.int64()))
            yield from table.cast(target).to_batches()
