"""Dictionary-encoded string columns: read, carried and written again without building each value.

A string column with few distinct values is stored in Parquet as a dictionary page and small
indices. Decoding it into an Arrow dictionary array costs a fraction of materialising every
string, and so do filtering it, computing its statistics (over the distinct values) and
dictionary-encoding it again when it is written. Copy-on-write rewrites use this: the columns a
file stores dictionary-encoded (:func:`dictionary_encoded_columns`) are read as dictionary
arrays of their logical type (:func:`is_dictionary_of`), which the data writer writes as such.
Everywhere a value is computed from them (expressions, constraints, change data), they are
decoded first (:func:`decode_dictionaries`). Scans of large files read such columns as dictionaries
too and decode them at once (:func:`decode_dictionary`): a gather of the dictionary's values is
about twice as fast as the Parquet reader's decoding of each value.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DICTIONARY_READ_BYTES = 1024 * 1024
"""Largest dictionary page (as stored) of a column chunk read as a dictionary."""
INDEX_BYTES = 3
"""A column chunk counts as dictionary-encoded throughout when its pages besides the dictionary take
less than this many bytes per non-null value (uncompressed): dictionary indices take two bytes at
most for a dictionary that fits a Parquet writer's limit, while a plain-encoded string takes four
for its length alone. A chunk whose writer fell back to plain encoding part way through is thus
not decoded as a dictionary (which would hash each of its plain values)."""


def dictionary_encoded_columns(
    metadata: pq.FileMetaData, schema: pa.Schema, names: Iterable[str]
) -> list[str]:
    """The top-level string and binary columns among ``names`` (columns of a Parquet file with
    Arrow ``schema`` and footer ``metadata``) that every row group stores dictionary-encoded
    throughout (:data:`INDEX_BYTES`), with a dictionary page of at most
    :data:`DICTIONARY_READ_BYTES`."""
    wanted = [
        name
        for name in names
        if (index := schema.get_field_index(name)) >= 0 and _is_string_like(schema.field(index).type)
    ]
    if not wanted or metadata.num_row_groups == 0:
        return []
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    leaves = {groups[0].column(j).path_in_schema: j for j in range(groups[0].num_columns)}
    found = []
    for name in wanted:
        leaf = leaves.get(name)
        if leaf is not None and all(_dictionary_encoded(group.column(leaf)) for group in groups):
            found.append(name)
    return found


def _is_string_like(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
    )


def _dictionary_encoded(chunk: pq.ColumnChunkMetaData) -> bool:
    if not chunk.has_dictionary_page or chunk.dictionary_page_offset is None:
        return False
    dictionary = chunk.data_page_offset - chunk.dictionary_page_offset
    if not 0 < dictionary <= DICTIONARY_READ_BYTES:
        return False
    statistics = chunk.statistics
    nulls = statistics.null_count if statistics is not None and statistics.has_null_count else 0
    values = max(chunk.num_values - nulls, 1)
    return chunk.total_uncompressed_size - dictionary < INDEX_BYTES * values


def is_dictionary_of(data_type: pa.DataType, value_type: pa.DataType) -> bool:
    """Whether ``data_type`` is a dictionary type whose values are of ``value_type``."""
    return pa.types.is_dictionary(data_type) and data_type.value_type == value_type


def has_dictionaries(schema: pa.Schema) -> bool:
    return any(pa.types.is_dictionary(f.type) for f in schema)


DECODE_ROWS = 16 * 1024
"""Rows from which a scan reads a file's dictionary-encoded string columns as dictionaries and
decodes them itself (a vectorised gather of the dictionary's values, about twice as fast as the
Parquet reader's value-by-value decoding); below it, reopening the file with the columns to
read as dictionaries costs more than it saves."""
MAX_STRING_BYTES = 2**31 - 1
"""Bytes a string or binary array (32-bit offsets) holds at most."""


def scan_dictionary_columns(
    metadata: pq.FileMetaData, schema: pa.Schema, names: Iterable[str], *, keep: bool = False
) -> list[str]:
    """The columns among ``names`` a read takes as dictionaries: those a file stores
    dictionary-encoded throughout (:func:`dictionary_encoded_columns`), when the reader keeps
    dictionaries (``keep``) or the file has at least :data:`DECODE_ROWS` rows to decode."""
    if not keep and metadata.num_rows < DECODE_ROWS:
        return []
    return dictionary_encoded_columns(metadata, schema, names)


def decode_dictionary(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column decoded to its value type, each chunk in slices small enough that the
    decoded values fit an array (the largest value times the rows of a slice)."""
    value_type = column.type.value_type
    pieces: list[pa.Array] = []
    for chunk in column.chunks:
        longest = 0
        if pa.types.is_string(value_type) or pa.types.is_binary(value_type):
            longest = pc.max(pc.binary_length(chunk.dictionary)).as_py() or 0
        step = len(chunk) if longest * len(chunk) <= MAX_STRING_BYTES else MAX_STRING_BYTES // longest
        pieces.extend(chunk.slice(start, step).cast(value_type) for start in range(0, len(chunk), step))
    return pa.chunked_array(pieces, type=value_type)


def decode_dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded to their value type (itself when it has none)."""
    if not has_dictionaries(table.schema):
        return table
    plain = pa.schema(
        [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema],
        metadata=table.schema.metadata,
    )
    return table.cast(plain)


SAMPLE_ROWS = 1024
"""Values of a column looked at to decide whether to dictionary-encode it when writing."""
SAMPLE_SPAN = 64 * SAMPLE_ROWS
"""The sample is taken evenly over the first rows of a file, up to this many (gathering it from a
column of many small chunks would cost more than the decision saves)."""
DISTINCT_SHARE = 0.95
"""A sample this distinct means a column with about ten thousand distinct values or more, whose
dictionary would outgrow a writer's dictionary page (8192 longs fit in 64 KiB) and fall back to
plain encoding after building it: such columns are written plain from the start."""


def dictionary_columns(table: pa.Table) -> list[str] | bool:
    """Which columns of ``table`` (the first rows of a data file) to dictionary-encode: all of them
    (``True``, Parquet's default, which falls back to plain encoding when a dictionary grows too
    large) unless some flat column's sample of :data:`SAMPLE_ROWS` values, evenly spaced over its
    first :data:`SAMPLE_SPAN` rows, is :data:`DISTINCT_SHARE` distinct; those are left out.
    Dictionary arrays are always encoded as dictionaries. Tables with nested columns keep the
    default."""
    if table.num_rows <= SAMPLE_ROWS or any(pa.types.is_nested(f.type) for f in table.schema):
        return True
    head = table.slice(0, min(table.num_rows, SAMPLE_SPAN))
    step = head.num_rows // SAMPLE_ROWS
    chosen = [
        field.name
        for field, column in zip(head.schema, head.columns, strict=True)
        if pa.types.is_dictionary(field.type) or not _mostly_distinct(column, step)
    ]
    return True if len(chosen) == table.num_columns else chosen


def _mostly_distinct(column: pa.ChunkedArray, step: int) -> bool:
    """Whether every ``step``-th value of ``column`` (:data:`SAMPLE_ROWS` of them) is nearly all
    distinct."""
    if pa.types.is_boolean(column.type) or column.null_count == len(column):
        return False
    values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if not values.null_count and _is_number(values.type):
        sample = np.sort(values.to_numpy()[: step * SAMPLE_ROWS : step])  # no hashing
        distinct = 1 + int(np.count_nonzero(sample[1:] != sample[:-1]))
    else:
        taken = values.take(pa.array(np.arange(0, step * SAMPLE_ROWS, step, dtype=np.int64)))
        distinct = pc.count_distinct(taken).as_py()
    return distinct >= DISTINCT_SHARE * SAMPLE_ROWS


def _is_number(data_type: pa.DataType) -> bool:
    return pa.types.is_integer(data_type) or pa.types.is_floating(data_type)
