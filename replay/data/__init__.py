"""Reading a table's data files: Parquet through fsspec and pyarrow, partition values, column
mapping and deletion vectors; writing deletion vectors. Works on metadata and file actions;
knows nothing of snapshots."""

from replay.data.columns import conform_column
from replay.data.deletion_vector_errors import (
    CorruptDeletionVectorError,
    DeletionVectorError,
    DeletionVectorNotFoundError,
)
from replay.data.deletion_vector_reads import RowFilter
from replay.data.deletion_vector_writer import (
    DeletionVectorUpdate,
    DeletionVectorWriter,
    inline_descriptor,
    remove_rows,
)
from replay.data.deletion_vectors import read_deletion_vector
from replay.data.parquet_files import CorruptDataFileError, DataFileNotFoundError
from replay.data.partition_values import constant_array, parse_partition_value, partition_value_array
from replay.data.reader import TableReader, read_files

__all__ = [
    "CorruptDataFileError",
    "CorruptDeletionVectorError",
    "DataFileNotFoundError",
    "DeletionVectorError",
    "DeletionVectorNotFoundError",
    "DeletionVectorUpdate",
    "DeletionVectorWriter",
    "RowFilter",
    "TableReader",
    "conform_column",
    "constant_array",
    "inline_descriptor",
    "parse_partition_value",
    "partition_value_array",
    "read_deletion_vector",
    "read_files",
    "remove_rows",
]
