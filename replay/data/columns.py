"""Data file columns as the table schema wants them: column mapping, nested renames, casts.

Under ``delta.columnMapping.mode`` ``name`` a column is found by its physical name, under ``id``
by its Parquet field id (falling back to the physical name); nested fields are renamed to their
logical names and every column is cast to the Arrow type of the table schema.
"""

from __future__ import annotations

import pyarrow as pa

from replay.protocol.schema import ArrayType, DataType, MapType, StructField, StructType, arrow_type


def arrow_field(struct_field: StructField) -> pa.Field:
    """The Arrow field of a schema field (logical name, no field-id metadata)."""
    return pa.field(struct_field.name, arrow_type(struct_field.type), struct_field.nullable)


# -- column mapping ----------------------------------------------------------------------------
_FIELD_ID_METADATA = b"PARQUET:field_id"


def _field_id(arrow_field: pa.Field) -> int | None:
    metadata = arrow_field.metadata or {}
    value = metadata.get(_FIELD_ID_METADATA)
    return int(value) if value is not None else None


class FieldFinder:
    """Where the fields of a table schema are stored in one file's schema (or struct type).

    The container's names (and, under ``id`` mapping, its field ids) are indexed once, so finding
    every column of a wide file costs one pass over its fields, not one per column."""

    def __init__(self, container: pa.Schema | pa.StructType, mode: str) -> None:
        self._mode = mode
        names = container.names
        self._names: dict[str, int] = {}
        for index, name in enumerate(names):
            self._names.setdefault(name, index)
        self._ids: dict[int, int] = {}
        if mode == "id":
            for index in range(len(names)):
                field_id = _field_id(container.field(index))
                if field_id is not None:
                    self._ids.setdefault(field_id, index)

    def index(self, struct_field: StructField) -> int | None:
        """Index of the field storing ``struct_field``, or ``None`` if it is absent."""
        if self._mode == "id" and struct_field.field_id is not None:
            found = self._ids.get(struct_field.field_id)
            if found is not None:
                return found
        return self._names.get(struct_field.physical_name if self._mode != "none" else struct_field.name)


def conform_column(
    column: pa.ChunkedArray | pa.Array, data_type: DataType, mode: str = "none"
) -> pa.ChunkedArray | pa.Array:
    """``column`` as read from a file, renamed to logical names and cast to ``data_type``'s Arrow type."""
    target = arrow_type(data_type)
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        chunks = [_conform_array(chunk, data_type, mode) for chunk in column.chunks]
        return pa.chunked_array(chunks, type=target)
    return _conform_array(column, data_type, mode)


def _conform_array(array: pa.Array, data_type: DataType, mode: str) -> pa.Array:
    target = arrow_type(data_type)
    if array.type == target:
        return array
    mask = array.is_null() if array.null_count else None
    if isinstance(data_type, StructType) and pa.types.is_struct(array.type):
        children = []
        finder = FieldFinder(array.type, mode)
        for struct_field in data_type.fields:
            index = finder.index(struct_field)
            if index is None:
                children.append(pa.nulls(len(array), arrow_type(struct_field.type)))
            else:
                children.append(_conform_array(array.field(index), struct_field.type, mode))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if isinstance(data_type, ArrayType) and (
        pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    ):
        values = _conform_array(array.values, data_type.element_type, mode)
        offsets = array.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    if isinstance(data_type, MapType) and pa.types.is_map(array.type):
        keys = _conform_array(array.keys, data_type.key_type, mode)
        items = _conform_array(array.items, data_type.value_type, mode)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_timestamp(array.type) and pa.types.is_timestamp(target):
        return array.cast(target, safe=False)  # nanoseconds are truncated to microseconds, like Spark
    return array.cast(target)
