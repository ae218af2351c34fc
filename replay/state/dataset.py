"""A table version's files as a ``pyarrow.dataset``, deltalake's ``to_pyarrow_dataset``: for the
engines that read datasets (DuckDB, Polars, pyarrow's Acero), which then read the Parquet files
themselves through this library's filesystem.

Each file is a fragment whose partition values are its ``partition_expression`` (so they are
columns of the dataset, typed, and a filter on them skips files); the dataset's schema is the
table's. What a dataset cannot express is refused (:class:`UnsupportedTableFeatureError`, as
delta-rs refuses deletion vectors): deletion vectors, whose rows a dataset would return, and
column mapping, whose files hold physical column names. ``Scan.to_arrow`` reads those tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from logstores.filesystem import open_filesystem
from replay.log.table_io import TableIO
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.table_config import TableConfiguration
from replay.state.file_statistics import partition_values

if TYPE_CHECKING:  # pyarrow.dataset is imported when a dataset is made (it imports pandas)
    import pyarrow.dataset as pa_ds


def files_dataset(files: pa.Table, config: TableConfiguration, io: TableIO) -> pa_ds.Dataset:
    """``files`` (active add files of one version) as a dataset with the table's schema."""
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    if config.column_mapping_mode != "none":
        raise UnsupportedTableFeatureError(
            f"Cannot make a pyarrow dataset of table {io.shown_path}: it uses column mapping "
            f"({config.column_mapping_mode}), so its files name columns differently; read it with "
            "to_pyarrow_table() or snapshot.scan()",
            table=io.shown_path,
            features=["columnMapping"],
        )
    if files.num_rows and pc.any(pc.is_valid(files.column("deletion_vector"))).as_py():
        raise UnsupportedTableFeatureError(
            f"Cannot make a pyarrow dataset of table {io.shown_path}: files have deletion vectors, "
            "whose rows a dataset would return; read it with to_pyarrow_table() or snapshot.scan()",
            table=io.shown_path,
            features=["deletionVectors"],
        )
    fs, root = open_filesystem(io.table_path, io.conf)
    filesystem = PyFileSystem(FSSpecHandler(fs))
    fields = {field.name: field for field in config.metadata.schema.fields}
    typed = {
        name: partition_values(files, fields[name], "none") for name in config.metadata.partition_columns
    }
    parquet = ds.ParquetFileFormat()
    fragments = []
    for row, path in enumerate(files.column("path").to_pylist()):
        location = open_filesystem(path, io.conf)[1] if "://" in path else f"{root}/{unquote(path)}"
        condition = pc.scalar(True)
        for name, values in typed.items():
            value = values[row]
            term = ds.field(name).is_null() if not value.is_valid else ds.field(name) == pc.scalar(value)
            condition = condition & term
        fragments.append(parquet.make_fragment(location, filesystem, partition_expression=condition))
    return ds.FileSystemDataset(fragments, config.metadata.arrow_schema, parquet, filesystem)
