"""Opening a table's Parquet data files, and the errors that name a missing or damaged one.

Local files are opened by path (and scanned together as an Arrow dataset when no deletion vector
needs row positions); files on other storage are fetched whole through
:func:`logstores.open_filesystem`, with one ranged request when the log records the size, so that a
storage error stays a storage error and only a parsing error means a damaged file
(:func:`is_format_error`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from logstores import local_path, open_filesystem
from replay.protocol.errors import DeltaError

if TYPE_CHECKING:  # imported where a scan needs it: it costs memory that reading one file does not
    import pyarrow.dataset as ds


class DataFileNotFoundError(DeltaError, FileNotFoundError):
    """A data file named in the log does not exist (vacuumed, or the table was copied partially)."""


class CorruptDataFileError(DeltaError):
    """A data file named in the log is not a readable Parquet file (``path`` names it)."""

    def __init__(self, message: str, *, table: str | None = None, path: str | None = None) -> None:
        super().__init__(message, table=table)
        self.path = path


def corrupt_data_file_error(uri: str, table: str, cause: Exception) -> CorruptDataFileError:
    """The error for data file ``uri`` of ``table`` that pyarrow could not parse (``cause``)."""
    return CorruptDataFileError(
        f"Data file {uri} of table {table} cannot be read as Parquet: {cause}", table=table, path=uri
    )


LOCAL_ARROW_FS = pafs.LocalFileSystem()
ARROW_SCHEMA_KEY = "ARROW:schema"
"""The key of the Parquet footer's key-value metadata that holds the Arrow schema (as pyarrow
stores it: the serialized schema, base64)."""


@functools.cache
def dataset_format(dictionary_columns: tuple[str, ...]) -> ds.ParquetFileFormat:
    """The Parquet format of dataset scans, decoding ``dictionary_columns`` as dictionaries."""
    import pyarrow.dataset as ds

    options = ds.ParquetReadOptions(dictionary_columns=dictionary_columns, coerce_int96_timestamp_unit="us")
    # Local files are in the page cache: reading column chunks as needed beats copying them first.
    scan_options = ds.ParquetFragmentScanOptions(pre_buffer=False)
    return ds.ParquetFileFormat(read_options=options, default_fragment_scan_options=scan_options)


def scan_local(
    parquet_format: ds.ParquetFileFormat, schema: pa.Schema, fragments: list[Any], names: list[str]
) -> Iterator[tuple[str, pa.Table | None]]:
    """``(path, columns names of the file)`` for local Parquet ``fragments`` sharing ``schema``.

    Files come in ``fragments`` order, each as soon as it is read. With no ``names`` nothing is
    read and every file gives ``None``.
    """
    import pyarrow.dataset as ds

    if not names:
        yield from ((fragment.path, None) for fragment in fragments)
        return
    dataset = ds.FileSystemDataset(fragments, schema, parquet_format, LOCAL_ARROW_FS)
    projected = pa.schema([schema.field(name) for name in names])
    order = [fragment.path for fragment in fragments]
    done = 0  # files before order[done] are yielded
    batches: list[pa.RecordBatch] = []  # batches of order[done] so far
    for tagged in dataset.scanner(columns=names, use_threads=True).scan_batches():
        while tagged.fragment.path != order[done]:  # the scan (in order) moved on: a file is complete
            yield order[done], pa.Table.from_batches(batches, schema=projected)
            done, batches = done + 1, []
            if done == len(order):
                raise RuntimeError(f"dataset scan returned {tagged.fragment.path} out of order")
        batches.append(tagged.record_batch)
    yield order[done], pa.Table.from_batches(batches, schema=projected)
    for path in order[done + 1 :]:  # files with no rows give no batches
        yield path, projected.empty_table()


def open_parquet(
    source: str | pa.BufferReader,
    metadata: pq.FileMetaData | None = None,
    dictionary_columns: Sequence[str] | None = None,
) -> pq.ParquetFile:
    """``source`` opened for reading, ``dictionary_columns`` (which it must have) decoded as dictionaries.

    Column chunks are read as they are decoded (no pre-buffering): a local file is in the page
    cache and a fetched one in memory, so copying them up front only costs memory and time.
    """
    return pq.ParquetFile(
        source,
        metadata=metadata,
        read_dictionary=dictionary_columns,
        pre_buffer=False,
        coerce_int96_timestamp_unit="us",
    )


def parquet_source(uri: str, conf: Mapping[str, str], size: int | None = None) -> str | pa.BufferReader:
    """What pyarrow opens: the path of a local file, else the file's bytes (fetched here, so that a
    storage error stays a storage error and only parsing errors mean a damaged file).

    ``size`` is the file's size as the log records it (Delta reads data files with that length):
    when known, the bytes come with one ranged GET, where a plain fetch may ask for the size first
    (s3fs sends a HEAD to decide whether to download in parts).
    """
    local = local_path(uri)
    return local if local is not None else pa.BufferReader(_fetch(uri, conf, size))


def file_bytes(uri: str, conf: Mapping[str, str], size: int | None = None) -> bytes:
    """The whole file at ``uri`` (with one ranged GET on an object store when ``size``, the size
    the log records, is known: see :func:`parquet_source`)."""
    local = local_path(uri)
    if local is not None:
        with open(local, "rb") as handle:
            return handle.read()
    return _fetch(uri, conf, size)


def _fetch(uri: str, conf: Mapping[str, str], size: int | None) -> bytes:
    fs, path = open_filesystem(uri, conf)
    if size is not None and size > 0:
        return bytes(fs.cat_file(path, start=0, end=size))
    return bytes(fs.cat_file(path))


def is_format_error(exc: BaseException) -> bool:
    """Whether pyarrow failed on the file's content (not on the file system).

    Arrow errors are; so are the ``OSError`` s pyarrow raises for undecodable pages, which carry
    no ``errno`` (an operating-system error such as ``EACCES`` or ``EIO`` does).
    """
    if isinstance(exc, FileNotFoundError):
        return False
    if isinstance(exc, pa.ArrowException) and not isinstance(exc, OSError):
        return True
    return isinstance(exc, OSError) and exc.errno is None
