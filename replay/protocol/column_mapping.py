"""Column mapping as writers see it: the names and ids that data files, statistics and
``partitionValues`` use.

Under ``delta.columnMapping.mode`` ``name`` or ``id``, a column is known in data files, in file
statistics and in ``partitionValues`` by its physical name
(``delta.columnMapping.physicalName``), at every nesting level; in ``id`` mode the Parquet
schema also gives each field its column mapping id (``delta.columnMapping.id``) as its field id.
Delta writes field ids only in ``id`` mode, and so does this writer. Without column mapping all
of these are the logical names. New columns of a mapped table get the next ids after
``delta.columnMapping.maxColumnId`` and fresh ``col-<uuid>`` physical names, as Delta gives them
(:func:`assign_column_mapping`). Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping

import pyarrow as pa

from replay.protocol.schema import (
    FIELD_ID_KEY,
    PHYSICAL_NAME_KEY,
    ArrayType,
    DataType,
    MapType,
    StructField,
    StructType,
)
from replay.protocol.table_properties import COLUMN_MAPPING_MODE, random_prefix_length

MAX_COLUMN_ID_KEY = "delta.columnMapping.maxColumnId"
PARQUET_FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""


def is_mapped(configuration: Mapping[str, str]) -> bool:
    """Whether a table with ``configuration`` uses column mapping (mode ``name`` or ``id``)."""
    return COLUMN_MAPPING_MODE.value_in(configuration) != "none"


def data_file_schema(schema: StructType, configuration: Mapping[str, str]) -> pa.Schema | None:
    """The Arrow schema data files of a table with ``schema`` and ``configuration`` are written
    with, field for field as ``schema.to_arrow()``: physical names at every level and, in ``id``
    mode, Parquet field ids. ``None`` without column mapping (the files use the logical names)."""
    mode = COLUMN_MAPPING_MODE.value_in(configuration)
    if mode == "none":
        return None
    return pa.schema([_file_field(f, with_ids=mode == "id") for f in schema.fields])


def _file_field(struct_field: StructField, *, with_ids: bool) -> pa.Field:
    field_id = struct_field.field_id
    metadata = {PARQUET_FIELD_ID: str(field_id).encode()} if with_ids and field_id is not None else None
    data_type = _file_type(struct_field.type, with_ids=with_ids)
    return pa.field(struct_field.physical_name, data_type, struct_field.nullable, metadata=metadata)


def _file_type(data_type: DataType, *, with_ids: bool) -> pa.DataType:
    if isinstance(data_type, StructType):
        return pa.struct([_file_field(f, with_ids=with_ids) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        element = _file_type(data_type.element_type, with_ids=with_ids)
        return pa.list_(pa.field("element", element, data_type.contains_null))
    if isinstance(data_type, MapType):
        key = _file_type(data_type.key_type, with_ids=with_ids)
        value = _file_type(data_type.value_type, with_ids=with_ids)
        return pa.map_(pa.field("key", key, False), pa.field("value", value, data_type.value_contains_null))
    return data_type.to_arrow()


def data_file_prefix_length(configuration: Mapping[str, str], partitioned: bool) -> int:
    """The random directory prefix length of the new data files of a table with ``configuration``
    (:func:`~replay.protocol.table_properties.random_prefix_length`)."""
    mapped = is_mapped(configuration) and partitioned
    return random_prefix_length(configuration, partitioned_mapped=mapped)


def stored_name(struct_field: StructField, mapped: bool) -> str:
    """The name data files, statistics and ``partitionValues`` know a field by: its physical name
    under column mapping (``mapped``), else its name."""
    return struct_field.physical_name if mapped else struct_field.name


def partition_value_keys(schema: StructType, partition_columns: list[str], mapped: bool) -> dict[str, str]:
    """Each partition column's key in an ``add``'s ``partitionValues`` (:func:`stored_name`)."""
    by_name = {f.name: f for f in schema.fields}
    return {column: stored_name(by_name[column], mapped) for column in partition_columns}


def partition_value(values: Mapping[str, str | None], struct_field: StructField, mapped: bool) -> str | None:
    """A partition column's serialised value in ``partitionValues``: under its physical name under
    column mapping (``mapped``; the logical name when the physical one is absent), else its name."""
    key = stored_name(struct_field, mapped)
    return values[key] if key in values else values.get(struct_field.name)


def max_column_id(schema: StructType, configuration: Mapping[str, str]) -> int:
    """The largest column mapping id in use: ``delta.columnMapping.maxColumnId``, or the largest
    id of the schema's fields if that is larger (or missing)."""
    declared = configuration.get(MAX_COLUMN_ID_KEY)
    largest = max(_ids(schema), default=0)
    return max(largest, int(declared) if declared is not None and declared.isdigit() else 0)


def _ids(data_type: DataType) -> list[int]:
    return [f.field_id for f in _all_fields(data_type) if f.field_id is not None]


def _all_fields(data_type: DataType) -> Iterator[StructField]:
    """Every struct field of ``data_type``, nested ones too (in arrays and maps)."""
    if isinstance(data_type, StructType):
        for struct_field in data_type.fields:
            yield struct_field
            yield from _all_fields(struct_field.type)
    elif isinstance(data_type, ArrayType):
        yield from _all_fields(data_type.element_type)
    elif isinstance(data_type, MapType):
        yield from _all_fields(data_type.key_type)
        yield from _all_fields(data_type.value_type)


def assign_column_mapping(
    schema: StructType,
    last_id: int,
    *,
    keep_names: bool = False,
    known: frozenset[str] | None = None,
) -> tuple[StructType, int]:
    """``schema`` with an id and a physical name for every field (nested ones too) that has
    none, numbered on from ``last_id`` in the order the fields appear; and the last id given.
    Fields that have them keep theirs, unless ``known`` (the physical names of the table's
    fields) does not hold theirs: a field brought from elsewhere gets fresh ones, so no id or
    name is used twice. New physical names are ``col-<uuid>``; with ``keep_names`` (column
    mapping turned on for a table whose files name columns as the schema does, as Delta does
    it) they are the fields' names."""
    counter = [last_id]
    assigned = _assign_struct(schema, counter, keep_names, known)
    return assigned, counter[0]


def physical_names(schema: StructType) -> frozenset[str]:
    """The physical names of every field of ``schema``, nested ones too."""
    return frozenset(f.physical_name for f in _all_fields(schema))


def _assign_struct(
    struct: StructType, counter: list[int], keep_names: bool, known: frozenset[str] | None
) -> StructType:
    fields = []
    for struct_field in struct.fields:
        metadata = dict(struct_field.metadata)
        if known is not None and metadata.get(PHYSICAL_NAME_KEY) not in known:
            metadata.pop(PHYSICAL_NAME_KEY, None)
            metadata.pop(FIELD_ID_KEY, None)
        if FIELD_ID_KEY not in metadata:
            counter[0] += 1
            metadata[FIELD_ID_KEY] = counter[0]
        if PHYSICAL_NAME_KEY not in metadata:
            metadata[PHYSICAL_NAME_KEY] = struct_field.name if keep_names else f"col-{uuid.uuid4()}"
        data_type = _assign_type(struct_field.type, counter, keep_names, known)
        fields.append(StructField(struct_field.name, data_type, struct_field.nullable, metadata))
    return StructType(fields)


def _assign_type(
    data_type: DataType, counter: list[int], keep_names: bool, known: frozenset[str] | None
) -> DataType:
    if isinstance(data_type, StructType):
        return _assign_struct(data_type, counter, keep_names, known)
    if isinstance(data_type, ArrayType):
        element = _assign_type(data_type.element_type, counter, keep_names, known)
        return ArrayType(element, data_type.contains_null)
    if isinstance(data_type, MapType):
        key = _assign_type(data_type.key_type, counter, keep_names, known)
        value = _assign_type(data_type.value_type, counter, keep_names, known)
        return MapType(key, value, data_type.value_contains_null)
    return data_type
