"""File actions as Arrow: their types, defined once here, and the conversions between forms.

Three forms of the same ``add``/``remove`` structs exist, all derived from
:data:`ADD_ARROW_TYPE` and :data:`REMOVE_ARROW_TYPE` (Delta's camelCase field names, as
commits and checkpoints spell them):

* the *replay* form, those two types as they are;
* the *snapshot* form, snake_case names as :class:`~replay.protocol.actions.AddFile` has them
  (:data:`FILES_SCHEMA`, :data:`TOMBSTONES_SCHEMA`);
* the *checkpoint* form, the columns of a classic checkpoint (:data:`CHECKPOINT_SCHEMA`).

The conversions are vectorised: keys, maps and renames are computed in Arrow, never row by row
unless a value forces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.actions import AddFile, DeletionVectorDescriptor
from replay.protocol.naming import camel_case, snake_case
from replay.protocol.paths import dv_unique_id, file_key

STRING_MAP = pa.map_(pa.string(), pa.string())
STRING_LIST = pa.list_(pa.string())

DV_ARROW_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
        pa.field("maxRowIndex", pa.int64()),
    ]
)
"""A deletion vector descriptor as commits may carry it."""

ADD_ARROW_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DV_ARROW_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
    ]
)
"""The ``add`` fields replay keeps (Delta's camelCase names)."""

REMOVE_ARROW_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("extendedFileMetadata", pa.bool_()),
        *(
            ADD_ARROW_TYPE.field(name)
            for name in ("partitionValues", "size", "stats", "tags", "deletionVector")
        ),
        *(ADD_ARROW_TYPE.field(name) for name in ("baseRowId", "defaultRowCommitVersion")),
    ]
)
"""The ``remove`` fields replay keeps (Delta's camelCase names)."""


def _struct(fields: Iterable[pa.Field]) -> pa.StructType:
    return pa.struct(list(fields))


def _without(struct: pa.StructType, *names: str) -> pa.StructType:
    return _struct(f for f in struct if f.name not in names)


def _select(struct: pa.StructType, names: Sequence[str]) -> pa.StructType:
    return _struct(struct.field(name) for name in names)


def _snake_field(arrow_field: pa.Field) -> pa.Field:
    arrow_type = arrow_field.type
    if pa.types.is_struct(arrow_type):
        arrow_type = _struct(_snake_field(child) for child in arrow_type)
    return pa.field(snake_case(arrow_field.name), arrow_type, arrow_field.nullable)


def _snake_schema(struct: pa.StructType) -> pa.Schema:
    fields = [_snake_field(f) for f in struct]
    return pa.schema([f.with_nullable(False) if f.name == "path" else f for f in fields])


_STORED_DV = _without(DV_ARROW_TYPE, "maxRowIndex")
"""A deletion vector as snapshots and checkpoints keep it (``maxRowIndex`` is not kept)."""

FILES_SCHEMA = _snake_schema(
    _struct(f.with_type(_STORED_DV) if f.name == "deletionVector" else f for f in ADD_ARROW_TYPE)
)
"""Columns of the active files of a snapshot (snake_case names of :class:`AddFile` fields)."""
DV_TYPE = FILES_SCHEMA.field("deletion_vector").type
"""A deletion vector descriptor in the snapshot form."""
TOMBSTONES_SCHEMA = _snake_schema(
    _struct(
        f.with_type(_STORED_DV) if f.name == "deletionVector" else f
        for f in _select(
            REMOVE_ARROW_TYPE,
            (
                "path",
                "deletionTimestamp",
                "dataChange",
                "extendedFileMetadata",
                "partitionValues",
                "size",
                "deletionVector",
            ),
        )
    )
)
"""Columns of the tombstones of a snapshot."""

CHECKPOINT_ADD_TYPE = _struct(
    [
        *(
            f.with_type(_STORED_DV) if f.name == "deletionVector" else f
            for f in ADD_ARROW_TYPE
            if f.name != "stats"
        ),
        ADD_ARROW_TYPE.field("stats"),
    ]
)
CHECKPOINT_REMOVE_TYPE = _struct(
    f.with_type(_STORED_DV) if f.name == "deletionVector" else f
    for f in _without(REMOVE_ARROW_TYPE, "stats", "tags")
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        ("add", CHECKPOINT_ADD_TYPE),
        ("remove", CHECKPOINT_REMOVE_TYPE),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", STRING_LIST),
                    ("configuration", STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", STRING_LIST),
                    ("writerFeatures", STRING_LIST),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
    ]
)
"""A classic checkpoint's columns (Delta's ``SingleAction`` minus the columns it drops);
``add.stats`` is the JSON string and comes last, ``remove`` has no ``stats``/``tags``."""
CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])
"""The ``checkpointMetadata`` column a V2 checkpoint adds to :data:`CHECKPOINT_SCHEMA`."""


# -- file keys ------------------------------------------------------------------------------------
KEY_SEPARATOR = "\x00"


def key_string(key: tuple[str, str | None]) -> str:
    """A file key as one string: the path, or ``path\\0dv-id`` when there is a deletion vector."""
    return key[0] if key[1] is None else f"{key[0]}{KEY_SEPARATOR}{key[1]}"


def dict_file_key(action: Mapping[str, Any]) -> str:
    """The file key string of a raw ``add``/``remove`` dict (see :func:`key_string`)."""
    dv = action.get("deletionVector")
    dv_id = None if dv is None else dv_unique_id(dv["storageType"], dv["pathOrInlineDv"], dv.get("offset"))
    return key_string(file_key(action["path"], dv_id))


def may_need_canonical_form(paths: pa.Array | pa.ChunkedArray, needles: Sequence[bytes]) -> bool:
    """Whether any string of ``paths`` may start with ``/`` or contain one of ``needles``.

    ``False`` proves none does; a ``True`` may be a false alarm (the whole data buffers are
    scanned, which is several times faster than matching string by string).
    """
    if not (pa.types.is_string(paths.type) or pa.types.is_large_string(paths.type)):
        return True  # other layouts (views, dictionaries) keep characters elsewhere
    chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    for chunk in chunks:
        data = chunk.buffers()[2] if len(chunk) else None
        if data is None:
            continue
        content = data.to_pybytes()
        if any(needle in content for needle in needles) or pc.any(pc.starts_with(chunk, "/")).as_py():
            return True
    return False


def _special_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    return pc.or_(
        pc.match_substring(paths, "%"),
        pc.or_(pc.starts_with(paths, "/"), pc.starts_with(paths, "file:")),
    )


def arrow_file_keys(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Canonical file keys (as :func:`key_string` strings) of a table of camelCase add/remove rows."""
    paths = table.column("path")
    if paths.type != pa.string():  # large strings, views, dictionaries: one layout for the kernels
        paths = paths.cast(pa.string())
    if may_need_canonical_form(paths, (b"%", b"file:")) and pc.any(special := _special_paths(paths)).as_py():
        fixed = [
            file_key(path, None)[0] if flag else path
            for path, flag in zip(paths.to_pylist(), special.to_pylist(), strict=True)
        ]
        paths = pa.array(fixed, pa.string())
    if "deletionVector" not in table.column_names:
        return paths
    dv = table.column("deletionVector")
    if dv.null_count == len(dv):
        return paths
    storage = pc.struct_field(dv, "storageType")
    inline = pc.struct_field(dv, "pathOrInlineDv")
    offset = pc.struct_field(dv, "offset") if dv.type.get_field_index("offset") >= 0 else None
    dv_id = pc.binary_join_element_wise(storage, inline, "")
    if offset is not None:
        with_offset = pc.binary_join_element_wise(dv_id, pc.cast(offset, pa.string()), "@")
        dv_id = pc.if_else(pc.is_null(offset), dv_id, with_offset)
    dv_id = pc.if_else(pc.is_null(dv), pa.scalar(None, pa.string()), dv_id)
    joined = pc.binary_join_element_wise(paths, dv_id, KEY_SEPARATOR)
    return pc.if_else(pc.is_null(dv_id), paths, joined)


# -- dicts -> Arrow -------------------------------------------------------------------------------
_get = cast(Callable[[Mapping[str, Any], str], Any], dict.get)
"""``dict.get`` typed for ``map``: ``map(_get, rows, repeat(key))`` is a C-level loop, several times
faster than a comprehension over millions of rows."""
_SCALAR_ADD_TYPE = _struct(
    f for f in ADD_ARROW_TYPE if not pa.types.is_nested(f.type) or f.name == "deletionVector"
)
_NO_DV_ADD_TYPE = _without(_SCALAR_ADD_TYPE, "deletionVector")
_EMPTY_STRINGS = pa.array([], pa.string())


def string_map_array(values: Sequence[Mapping[str, str | None] | None]) -> pa.Array:
    """A ``map<string, string>`` array from dicts (or ``None``), built from flat key/value lists.

    Several times faster than ``pa.array(values, map_type)`` for the small dicts of the log.
    """
    keys: list[str] = []
    items: list[str | None] = []
    offsets = [0]
    has_null = False
    for value in values:
        if value:
            keys.extend(value)
            items.extend(value.values())
        elif value is None:
            has_null = True
        offsets.append(len(keys))
    mask = pa.array([value is None for value in values], pa.bool_()) if has_null else None
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(items, pa.string()),
        type=STRING_MAP,
        mask=mask,
    )


def adds_to_arrow(adds: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Raw ``add`` dicts as an Arrow table with :data:`ADD_ARROW_TYPE` columns.

    Converting one commit at a time, right after parsing, is much cheaper than converting
    millions of cold dicts later; map columns are built from flat lists (the slow part of a
    generic conversion). Raises :class:`ValueError` if a field has the wrong JSON type.
    """
    try:
        has_dv = any(map(_get, adds, repeat("deletionVector")))
        scalars = pa.array(adds, type=_SCALAR_ADD_TYPE if has_dv else _NO_DV_ADD_TYPE)
        columns = {f.name: scalars.field(f.name) for f in scalars.type}
        columns["partitionValues"] = string_map_array(list(map(_get, adds, repeat("partitionValues"))))
        tags = list(map(_get, adds, repeat("tags")))
        columns["tags"] = (
            pa.nulls(len(adds), STRING_MAP) if tags.count(None) == len(tags) else string_map_array(tags)
        )
        if not has_dv:
            columns["deletionVector"] = pa.nulls(len(adds), DV_ARROW_TYPE)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed add action: {exc}") from None
    return pa.Table.from_arrays([columns[f.name] for f in ADD_ARROW_TYPE], schema=pa.schema(ADD_ARROW_TYPE))


def struct_to_map(struct: pa.StructArray) -> pa.MapArray | None:
    """A JSON object column that pyarrow inferred as a struct, as ``map<string, string>``.

    Exact only when every present object had every inferred key with a string value (a missing
    key and a ``null`` value are indistinguishable in the struct); otherwise ``None``.
    Entries follow the struct's field order.
    """
    count = len(struct)
    names = [f.name for f in struct.type]
    present = count - struct.null_count
    mask = struct.is_null() if struct.null_count else None
    if not names:
        offsets = pa.repeat(pa.scalar(0, pa.int32()), count + 1)
        return pa.MapArray.from_arrays(offsets, _EMPTY_STRINGS, _EMPTY_STRINGS, type=STRING_MAP, mask=mask)
    children = struct.flatten()
    if any(not pa.types.is_string(child.type) or child.null_count != struct.null_count for child in children):
        return None
    width = len(names)
    if mask is None:
        offsets = pa.array(range(0, (count + 1) * width, width), pa.int32())
        values = children
    else:
        sizes = pc.if_else(mask, 0, width).cast(pa.int32())
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(sizes)])
        values = [child.drop_null() for child in children]
    if width == 1:
        keys = pa.repeat(pa.scalar(names[0]), present)
        items = values[0]
    else:
        keys = pa.array(names * present, pa.string())
        order = [column * present + row for row in range(present) for column in range(width)]
        items = pa.concat_arrays(values).take(pa.array(order, pa.int64()))
    return pa.MapArray.from_arrays(offsets, keys, items, type=STRING_MAP, mask=mask)


# -- Arrow -> dicts, and between forms ------------------------------------------------------------
MAX_SLICES = 256


def select_rows(table: pa.Table, keep: pa.Array | pa.ChunkedArray) -> pa.Table:
    """``table.filter(keep)``, zero-copy when only a few rows are dropped.

    Filtering copies every column (maps and structs included), which costs about a second per
    million checkpoint rows; dropping the handful of non-file rows by slicing costs nothing.
    """
    dropped = pc.indices_nonzero(pc.invert(keep)).to_pylist() if pc.any(pc.invert(keep)).as_py() else []
    if not dropped:
        return table
    if len(dropped) >= MAX_SLICES:
        return table.filter(keep)
    slices = []
    start = 0
    for index in dropped:
        if index > start:
            slices.append(table.slice(start, index - start))
        start = index + 1
    if start < table.num_rows:
        slices.append(table.slice(start))
    return pa.concat_tables(slices) if slices else table.slice(0, 0)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows of a camelCase add/remove table as JSON-like dicts (``None`` fields omitted)."""
    rows = table.to_pylist(maps_as_pydicts="lossy")
    return [
        {k: (_without_nulls(v) if k == "deletionVector" else v) for k, v in row.items() if v is not None}
        for row in rows
    ]


def _dv_from_camel(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A camelCase deletion vector column as :data:`DV_TYPE`, chunk by chunk (no concatenation)."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([_dv_from_camel(chunk) for chunk in array.chunks], DV_TYPE)
    if array.null_count == len(array):
        return pa.nulls(len(array), DV_TYPE)
    children = []
    for target in DV_TYPE:
        index = array.type.get_field_index(camel_case(target.name))
        if index < 0:
            children.append(pa.nulls(len(array), target.type))
        else:
            children.append(pc.cast(array.field(index), target.type))
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=array.is_null())


def camel_table_to_snake(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A camelCase add/remove table (from a commit or a checkpoint) in the snapshot form ``schema``."""
    columns = []
    for target in schema:
        key = camel_case(target.name)
        if key not in table.column_names:
            columns.append(pa.nulls(table.num_rows, target.type))
        elif target.name == "deletion_vector":
            columns.append(_dv_from_camel(table.column(key)))
        else:
            columns.append(pc.cast(table.column(key), target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def camel_dicts_to_snake(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Raw add/remove dicts in the snapshot form ``schema`` (``data_change`` left null for the caller)."""
    columns = []
    for target in schema:
        if target.name == "data_change":
            columns.append(pa.nulls(len(rows), pa.bool_()))
            continue
        values = list(map(_get, rows, repeat(camel_case(target.name))))  # a C-level loop
        if target.name == "deletion_vector":
            columns.append(_dv_from_camel(pa.array(values, DV_ARROW_TYPE)))
        elif pa.types.is_nested(target.type):
            columns.append(pa.array(values, target.type))
        else:
            # type inference then a cast is several times faster than converting to a given type
            columns.append(pa.array(values).cast(target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def rename_struct(array: pa.Array, target: pa.StructType) -> pa.Array:
    """A struct array with the children of ``array`` (same order) under ``target``'s field names."""
    if len(array) == 0 or array.null_count == len(array):
        return pa.nulls(len(array), target)
    children = [array.field(i).cast(target.field(i).type) for i in range(target.num_fields)]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())


def snake_column(batch: pa.RecordBatch, name: str, arrow_type: pa.DataType) -> pa.Array:
    """Column ``snake_case(name)`` of a snapshot-form ``batch`` as ``arrow_type`` (camelCase fields)."""
    index = batch.schema.get_field_index(snake_case(name))
    if index < 0:
        return pa.nulls(batch.num_rows, arrow_type)
    array = batch.column(index)
    if pa.types.is_struct(arrow_type):
        return rename_struct(array, arrow_type)
    return array if array.type == arrow_type else array.cast(arrow_type)


def map_dicts(column: pa.ChunkedArray | pa.Array) -> list[dict[str, Any] | None]:
    """A map column as one dict (or ``None``) per row, built from its flattened keys and items
    (pyarrow's own conversion builds a list of pairs for every row, several times slower)."""
    if column.null_count == len(column):
        return [None] * len(column)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    rows: list[dict[str, Any] | None] = []
    for chunk in chunks:
        keys = chunk.keys.to_pylist()
        items = chunk.items.to_pylist()
        offsets = chunk.offsets.to_pylist()
        valid = chunk.is_valid().to_pylist() if chunk.null_count else None
        for row in range(len(chunk)):
            if valid is not None and not valid[row]:
                rows.append(None)
                continue
            start, end = offsets[row], offsets[row + 1]
            rows.append(dict(zip(keys[start:end], items[start:end], strict=True)))
    return rows


def add_actions(files: pa.Table, *, data_change: bool | None = None) -> list[AddFile]:
    """The rows of a snapshot-form files table (:data:`FILES_SCHEMA`) as :class:`AddFile` actions
    (converted column by column: a row-wise conversion builds a dict per row and per struct);
    ``data_change``, if given, is every action's ``dataChange``."""
    names = files.column_names
    columns = [
        map_dicts(column) if pa.types.is_map(column.type) else column.to_pylist() for column in files.columns
    ]
    actions = []
    for row in zip(*columns, strict=True):
        values = {name: value for name, value in zip(names, row, strict=True) if value is not None}
        dv = values.pop("deletion_vector", None)
        values["partition_values"] = values.get("partition_values") or {}
        if data_change is not None:
            values["data_change"] = data_change
        descriptor = (
            DeletionVectorDescriptor(**{k: v for k, v in dv.items() if v is not None}) if dv else None
        )
        actions.append(AddFile(**values, deletion_vector=descriptor))
    return actions
