"""Replacing whole columns of a Parquet file without decoding the others.

An UPDATE that copies a file on write changes a few columns and keeps every other one exactly as
it was. The bytes of a column chunk do not depend on where the chunk lies in the file (a page
holds no file offsets), so the new file can be made from the original's column chunks, byte for
byte, with the new columns' chunks (encoded separately with the same row groups) put in their
place, and a footer whose offsets say where each chunk now lies. Decoding and encoding the
unchanged columns, most of an UPDATE's work, is skipped.

:func:`parquet_layout` reads a file's footer (:mod:`replay.data.thrift_compact`) and checks that
it can be edited safely: not encrypted, every chunk in the file itself, each chunk's range inside
the data and disjoint from the others, and its pages, walked header by header, ending exactly at
the chunk's end with as many values as the footer says. Anything else raises
:class:`NotSpliceableError` and the caller rewrites the file as usual. :func:`splice_columns`
builds the new file. What refers to positions in the old file and is not carried over: the page
index (column and offset indexes), bloom filters and the row groups' sorting columns, all
optional. The footer keeps the original's ``created_by`` (readers work around a writer's known
bugs by it) and key-value metadata, but ``ARROW:schema``, which would describe the old columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from replay.data.parquet_files import ARROW_SCHEMA_KEY
from replay.data.thrift_compact import (
    I32,
    I64,
    LIST,
    STRUCT,
    Struct,
    ThriftDecodeError,
    ThriftList,
    decode_struct,
    encode_struct,
)

MAGIC = b"PAR1"

# Field ids of parquet.thrift.
_FILE_SCHEMA, _FILE_NUM_ROWS, _FILE_ROW_GROUPS, _FILE_KEY_VALUES = 2, 3, 4, 5
_FILE_COLUMN_ORDERS, _FILE_ENCRYPTION = 7, 8
_ELEMENT_TYPE, _ELEMENT_NAME, _ELEMENT_CHILDREN = 1, 4, 5
_GROUP_COLUMNS, _GROUP_BYTES, _GROUP_ROWS, _GROUP_SORTING = 1, 2, 3, 4
_GROUP_OFFSET, _GROUP_COMPRESSED = 5, 6
_CHUNK_PATH, _CHUNK_OFFSET, _CHUNK_META = 1, 2, 3
_CHUNK_PAGE_INDEX = (4, 5, 6, 7)
_CHUNK_CRYPTO = (8, 9)
_META_VALUES, _META_UNCOMPRESSED, _META_COMPRESSED = 5, 6, 7
_META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE = 9, 10, 11
_META_BLOOM_FILTER = (14, 15)
_PAGE_TYPE, _PAGE_COMPRESSED_SIZE, _PAGE_V1, _PAGE_V2 = 1, 3, 5, 8
_DATA_PAGE, _DATA_PAGE_V2 = 0, 3
_PAGE_FIELDS = {_PAGE_TYPE: None, _PAGE_COMPRESSED_SIZE: None, _PAGE_V1: {1: None}, _PAGE_V2: {1: None}}
"""What a page walk decodes of a page header: its type, size and value count."""
_KEY_VALUE_KEY = 1


class NotSpliceableError(ValueError):
    """A Parquet file whose columns cannot be replaced in place (the reason is the message)."""


@dataclass(frozen=True)
class ParquetLayout:
    """A Parquet file (``data``, the whole file) with its decoded ``footer``.

    ``columns`` are the top-level columns: name, schema elements (``elements[start:end]``) and
    leaf columns (``leaves[start:end]``); ``chunks[g][c]`` is where leaf ``c`` of row group ``g``
    lies (start, end) and ``rows[g]`` the row group's row count.
    """

    data: memoryview
    footer: Struct
    columns: tuple[tuple[str, tuple[int, int], tuple[int, int]], ...]
    chunks: tuple[tuple[tuple[int, int], ...], ...]
    rows: tuple[int, ...]
    leaf_count: int

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.columns]


def _get(fields: Struct, field_id: int, where: str) -> object:
    entry = fields.get(field_id)
    if entry is None:
        raise NotSpliceableError(f"the Parquet footer has no field {field_id} in {where}")
    return entry[1]


def _struct(fields: Struct, field_id: int, where: str) -> Struct:
    value = _get(fields, field_id, where)
    if not isinstance(value, dict):
        raise NotSpliceableError(f"field {field_id} of {where} in the Parquet footer is not a struct")
    return value


def _int(fields: Struct, field_id: int, where: str) -> int:
    value = _get(fields, field_id, where)
    if not isinstance(value, int) or isinstance(value, bool):
        raise NotSpliceableError(f"field {field_id} of {where} in the Parquet footer is not an integer")
    return value


def _list(fields: Struct, field_id: int, where: str) -> list[Struct]:
    value = _get(fields, field_id, where)
    if not isinstance(value, ThriftList) or not all(isinstance(v, dict) for v in value.items):
        raise NotSpliceableError(
            f"field {field_id} of {where} in the Parquet footer is not a list of structs"
        )
    return [item for item in value.items if isinstance(item, dict)]


def parquet_layout(data: bytes | memoryview, *, walk_pages: bool = True) -> ParquetLayout:
    """The layout of the Parquet file ``data``; raises :class:`NotSpliceableError` when its
    columns cannot be replaced safely (see the module docstring). ``walk_pages=False`` trusts
    the chunks' sizes (a file this process just wrote)."""
    view = memoryview(data)
    view = view if view.format == "B" else view.cast("B")
    if len(view) < 12 or bytes(view[:4]) != MAGIC or bytes(view[-4:]) != MAGIC:
        raise NotSpliceableError("not a plain Parquet file (no PAR1 magic; encrypted files have PARE)")
    footer_length = int.from_bytes(view[-8:-4], "little")
    footer_start = len(view) - 8 - footer_length
    if footer_start < 4:
        raise NotSpliceableError(f"the Parquet footer length {footer_length} exceeds the file")
    try:
        footer, end = decode_struct(view[footer_start : len(view) - 8])
    except ThriftDecodeError as exc:
        raise NotSpliceableError(f"the Parquet footer does not decode: {exc}") from None
    if end != footer_length or _FILE_ENCRYPTION in footer:
        raise NotSpliceableError("the Parquet footer is encrypted or has trailing bytes")
    columns, leaf_count = _top_level_columns(_list(footer, _FILE_SCHEMA, "FileMetaData"))
    groups: list[tuple[tuple[int, int], ...]] = []
    rows: list[int] = []
    for group in _list(footer, _FILE_ROW_GROUPS, "FileMetaData"):
        chunks = _list(group, _GROUP_COLUMNS, "RowGroup")
        count = _int(group, _GROUP_ROWS, "RowGroup")
        if len(chunks) != leaf_count or count <= 0:
            raise NotSpliceableError("a row group is empty or does not have a chunk for every leaf column")
        groups.append(tuple(_chunk_range(view, chunk, footer_start, walk_pages) for chunk in chunks))
        rows.append(count)
    ranges = sorted(r for group_ranges in groups for r in group_ranges)
    for (_, end_before), (start, _) in pairwise(ranges):
        if start < end_before:
            raise NotSpliceableError("two column chunks of the Parquet file overlap")
    return ParquetLayout(view, footer, tuple(columns), tuple(groups), tuple(rows), leaf_count)


def _top_level_columns(
    elements: list[Struct],
) -> tuple[list[tuple[str, tuple[int, int], tuple[int, int]]], int]:
    """The top-level columns of a flattened schema (depth first; a group counts its children,
    a leaf has a type) and the number of leaves."""
    if not elements:
        raise NotSpliceableError("the Parquet schema is empty")
    top = _int(elements[0], _ELEMENT_CHILDREN, "the schema root")
    columns = []
    index, leaves = 1, 0
    for _ in range(top):
        first_element, first_leaf = index, leaves
        pending = 1
        while pending:
            if index >= len(elements):
                raise NotSpliceableError("the Parquet schema has fewer elements than its groups count")
            element = elements[index]
            index += 1
            pending -= 1
            if _ELEMENT_CHILDREN in element:
                pending += _int(element, _ELEMENT_CHILDREN, "SchemaElement")
            elif _ELEMENT_TYPE in element:
                leaves += 1
        name = _get(elements[first_element], _ELEMENT_NAME, "SchemaElement")
        if not isinstance(name, bytes):
            raise NotSpliceableError("a Parquet schema element has no name")
        columns.append((name.decode("utf-8"), (first_element, index), (first_leaf, leaves)))
    if index != len(elements):
        raise NotSpliceableError("the Parquet schema has more elements than its groups count")
    return columns, leaves


def _chunk_range(data: memoryview, chunk: Struct, limit: int, walk_pages: bool) -> tuple[int, int]:
    """Where a column chunk lies, checked by walking its pages to its end (``walk_pages``)."""
    if _CHUNK_PATH in chunk or any(key in chunk for key in _CHUNK_CRYPTO):
        raise NotSpliceableError("a column chunk lies in another file or is encrypted")
    meta = _get(chunk, _CHUNK_META, "ColumnChunk")
    if not isinstance(meta, dict):
        raise NotSpliceableError("a column chunk has no metadata")
    start = _int(meta, _META_DATA_PAGE, "ColumnMetaData")
    dictionary = meta.get(_META_DICTIONARY_PAGE)
    if dictionary is not None and isinstance(dictionary[1], int) and 0 < dictionary[1] < start:
        start = dictionary[1]
    end = start + _int(meta, _META_COMPRESSED, "ColumnMetaData")
    if not 4 <= start < end <= limit:
        raise NotSpliceableError(f"a column chunk's range {start}..{end} is outside the file's data")
    if not walk_pages:
        return start, end
    values, position = 0, start
    try:
        while position < end:
            header, position = decode_struct(data, position, _PAGE_FIELDS)
            position += _int(header, _PAGE_COMPRESSED_SIZE, "PageHeader")
            kind = header.get(_PAGE_TYPE, (I32, -1))[1]
            body = header.get(_PAGE_V1 if kind == _DATA_PAGE else _PAGE_V2)
            if kind in (_DATA_PAGE, _DATA_PAGE_V2):
                if body is None or not isinstance(body[1], dict):
                    raise NotSpliceableError("a data page has no data page header")
                values += _int(body[1], 1, "DataPageHeader")
    except ThriftDecodeError as exc:
        raise NotSpliceableError(f"a page header of a column chunk does not decode: {exc}") from None
    if position != end or values != _int(meta, _META_VALUES, "ColumnMetaData"):
        raise NotSpliceableError(f"the pages of the column chunk at {start} do not add up to its metadata")
    return start, end


def splice_columns(original: ParquetLayout, replacement: ParquetLayout) -> list[bytes | memoryview]:
    """The parts of a new Parquet file: ``original`` with each of its top-level columns that
    ``replacement`` has (by name) taken from ``replacement``, whose row groups must hold the same
    rows. Raises :class:`NotSpliceableError` when they do not fit together."""
    names = original.names
    by_name = {name: index for index, name in enumerate(replacement.names)}
    unknown = [name for name in by_name if name not in names]
    if unknown or replacement.rows != original.rows:
        raise NotSpliceableError(f"replacement columns {unknown or sorted(by_name)} do not fit the file")
    sources = [
        (replacement, replacement.columns[by_name[name]]) if name in by_name else (original, column)
        for name, column in zip(names, original.columns, strict=True)
    ]
    parts: list[bytes | memoryview] = [MAGIC]
    position = len(MAGIC)
    groups: list[Struct] = []
    chunks_of = {
        id(layout): [
            _list(g, _GROUP_COLUMNS, "RowGroup")
            for g in _list(layout.footer, _FILE_ROW_GROUPS, "FileMetaData")
        ]
        for layout in (original, replacement)
    }
    for group_index, group in enumerate(_list(original.footer, _FILE_ROW_GROUPS, "FileMetaData")):
        chunks: list[Struct] = []
        for source, (_, _, (first, last)) in sources:
            source_chunks = chunks_of[id(source)][group_index]
            for leaf in range(first, last):
                start, end = source.chunks[group_index][leaf]
                chunks.append(_moved_chunk(source_chunks[leaf], start, end, position))
                parts.append(source.data[start:end])
                position += end - start
        groups.append(_row_group(group, chunks))
    footer = dict(original.footer)
    footer[_FILE_SCHEMA] = (LIST, ThriftList(STRUCT, _schema(original, sources)))
    footer[_FILE_ROW_GROUPS] = (LIST, ThriftList(STRUCT, list(groups)))
    _drop_arrow_schema(footer)
    orders = _column_orders(sources)
    if orders is None:
        footer.pop(_FILE_COLUMN_ORDERS, None)
    else:
        footer[_FILE_COLUMN_ORDERS] = (LIST, ThriftList(STRUCT, orders))
    encoded = encode_struct(footer)
    parts += [encoded, len(encoded).to_bytes(4, "little"), MAGIC]
    return parts


def _moved_chunk(chunk: Struct, start: int, end: int, position: int) -> Struct:
    """``chunk``'s metadata once its bytes ``start..end`` lie at ``position``."""
    shift = position - start
    moved = {key: value for key, value in chunk.items() if key not in _CHUNK_PAGE_INDEX}
    meta = dict(_struct(chunk, _CHUNK_META, "ColumnChunk"))
    for key in _META_BLOOM_FILTER:
        meta.pop(key, None)
    for key in (_META_DATA_PAGE, _META_DICTIONARY_PAGE, _META_INDEX_PAGE):
        entry = meta.get(key)
        if entry is None:
            continue
        offset = entry[1]
        if isinstance(offset, int) and start <= offset < end:
            meta[key] = (I64, offset + shift)
        else:  # a writer's placeholder (some write 0 for "no dictionary page")
            del meta[key]
    moved[_CHUNK_META] = (STRUCT, meta)
    old = chunk.get(_CHUNK_OFFSET)
    old_offset = old[1] if old is not None else None
    kept = isinstance(old_offset, int) and start <= old_offset <= end
    moved[_CHUNK_OFFSET] = (I64, old_offset + shift if kept else position)  # type: ignore[operator]
    return moved


def _row_group(group: Struct, chunks: list[Struct]) -> Struct:
    """``group`` with ``chunks``: its sizes and offset recomputed, its sorting columns dropped."""
    metas = [_struct(chunk, _CHUNK_META, "ColumnChunk") for chunk in chunks]
    updated = {key: value for key, value in group.items() if key != _GROUP_SORTING}
    updated[_GROUP_COLUMNS] = (LIST, ThriftList(STRUCT, chunks))
    updated[_GROUP_BYTES] = (I64, sum(_int(m, _META_UNCOMPRESSED, "ColumnMetaData") for m in metas))
    updated[_GROUP_COMPRESSED] = (I64, sum(_int(m, _META_COMPRESSED, "ColumnMetaData") for m in metas))
    if metas:
        starts = [
            _int(metas[0], key, "ColumnMetaData")
            for key in (_META_DICTIONARY_PAGE, _META_DATA_PAGE)
            if key in metas[0]
        ]
        updated[_GROUP_OFFSET] = (I64, min(starts))
    return updated


Source = tuple[ParquetLayout, tuple[str, tuple[int, int], tuple[int, int]]]


def _schema(original: ParquetLayout, sources: Sequence[Source]) -> list[Struct]:
    elements = _list(original.footer, _FILE_SCHEMA, "FileMetaData")
    schema = [elements[0]]
    for source, (_, (first, last), _) in sources:
        schema += _list(source.footer, _FILE_SCHEMA, "FileMetaData")[first:last]
    return schema


def _column_orders(sources: Sequence[Source]) -> list[Struct] | None:
    """The column orders of the leaves, each from its file; ``None`` when a file has none."""
    orders: list[Struct] = []
    for source, (_, _, (first, last)) in sources:
        if _FILE_COLUMN_ORDERS not in source.footer:
            return None
        known = _list(source.footer, _FILE_COLUMN_ORDERS, "FileMetaData")
        if len(known) != source.leaf_count:
            return None
        orders += known[first:last]
    return orders


def _drop_arrow_schema(footer: Struct) -> None:
    entry = footer.get(_FILE_KEY_VALUES)
    if entry is None or not isinstance(entry[1], ThriftList):
        return
    kept = [
        kv
        for kv in entry[1].items
        if isinstance(kv, dict) and kv.get(_KEY_VALUE_KEY, (0, b""))[1] != ARROW_SCHEMA_KEY.encode()
    ]
    if kept:
        footer[_FILE_KEY_VALUES] = (LIST, ThriftList(STRUCT, kept))
    else:
        del footer[_FILE_KEY_VALUES]
