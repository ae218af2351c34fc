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
    nested_types,
)
from replay.protocol.table_properties import (
    COLUMN_MAPPING_MODE,
    iceberg_compat_version,
    random_prefix_length,
)

MAX_COLUMN_ID_KEY = "delta.columnMapping.maxColumnId"
NESTED_IDS_KEY = "parquet.field.nested.ids"
"""The struct field metadata key of the ids of the implicit ``element`` / ``key`` / ``value``
fields of the arrays and maps below the field (IcebergCompatV2), by path: the field's physical
name, then ``element``, ``key`` or ``value`` for each level, joined with dots."""
PARQUET_FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""


def is_mapped(configuration: Mapping[str, str]) -> bool:
    """Whether a table with ``configuration`` uses column mapping (mode ``name`` or ``id``)."""
    return COLUMN_MAPPING_MODE.value_in(configuration) != "none"


def data_file_schema(schema: StructType, configuration: Mapping[str, str]) -> pa.Schema | None:
    """The Arrow schema data files of a table with ``schema`` and ``configuration`` are written
    with, field for field as ``schema.to_arrow()``: physical names at every level and, in ``id``
    mode or under IcebergCompat, Parquet field ids (those of :data:`NESTED_IDS_KEY` too). ``None``
    without column mapping (the files use the logical names)."""
    mode = COLUMN_MAPPING_MODE.value_in(configuration)
    if mode == "none":
        return None
    with_ids = mode == "id" or iceberg_compat_version(configuration) is not None
    return pa.schema([_file_field(f, with_ids=with_ids) for f in schema.fields])


def _file_field(struct_field: StructField, *, with_ids: bool) -> pa.Field:
    field_id = struct_field.field_id
    name = struct_field.physical_name
    nested = struct_field.metadata.get(NESTED_IDS_KEY) or {} if with_ids else {}
    data_type = _file_type(struct_field.type, with_ids=with_ids, nested=nested, path=name)
    return pa.field(name, data_type, struct_field.nullable, metadata=_id_metadata(field_id, with_ids))


def _id_metadata(field_id: object, with_ids: bool) -> dict[bytes, bytes] | None:
    return {PARQUET_FIELD_ID: str(field_id).encode()} if with_ids and field_id is not None else None


def _file_type(data_type: DataType, *, with_ids: bool, nested: Mapping[str, int], path: str) -> pa.DataType:
    if isinstance(data_type, StructType):
        return pa.struct([_file_field(f, with_ids=with_ids) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        element = f"{path}.element"
        inner = _file_type(data_type.element_type, with_ids=with_ids, nested=nested, path=element)
        metadata = _id_metadata(nested.get(element), with_ids)
        return pa.list_(pa.field("element", inner, data_type.contains_null, metadata=metadata))
    if isinstance(data_type, MapType):
        key, value = f"{path}.key", f"{path}.value"
        key_type = _file_type(data_type.key_type, with_ids=with_ids, nested=nested, path=key)
        value_type = _file_type(data_type.value_type, with_ids=with_ids, nested=nested, path=value)
        return pa.map_(
            pa.field("key", key_type, False, metadata=_id_metadata(nested.get(key), with_ids)),
            pa.field(
                "value",
                value_type,
                data_type.value_contains_null,
                metadata=_id_metadata(nested.get(value), with_ids),
            ),
        )
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
    for inner in nested_types(data_type):
        if isinstance(inner, StructType):
            yield from inner.fields


def assign_column_mapping(
    schema: StructType,
    last_id: int,
    *,
    keep_names: bool = False,
    known: frozenset[str] | None = None,
    nested_ids: bool = False,
) -> tuple[StructType, int]:
    """``schema`` with an id and a physical name for every field (nested ones too) that has
    none, numbered on from ``last_id`` in the order the fields appear; and the last id given.
    Fields that have them keep theirs, unless ``known`` (the physical names of the table's
    fields) does not hold theirs: a field brought from elsewhere gets fresh ones, so no id or
    name is used twice. New physical names are ``col-<uuid>``; with ``keep_names`` (column
    mapping turned on for a table whose files name columns as the schema does, as Delta does
    it) they are the fields' names. ``nested_ids`` (a table with IcebergCompatV2): the implicit
    fields of arrays and maps that have no id get one too, after the fields' (:data:`NESTED_IDS_KEY`;
    Delta's ``rewriteFieldIdsForIceberg``: in pre-order, each before the type below it)."""
    counter = [last_id]
    assigned = _assign_struct(schema, counter, keep_names, known)
    if nested_ids:
        assigned = _nested_struct(assigned, counter)
    return assigned, counter[0]


def mapped_schema(
    schema: StructType,
    current: StructType | None,
    current_mode: str,
    configuration: Mapping[str, str],
    *,
    keep_names: bool = False,
) -> tuple[StructType, dict[str, str]]:
    """``schema`` with the ids and physical names it lacks, as the new schema of a table whose
    schema is ``current`` (``None``: a new table; column mapping mode ``current_mode``) under
    ``configuration``; and the configuration with ``delta.columnMapping.maxColumnId`` following
    (:func:`assign_column_mapping`; IcebergCompatV2 numbers the nested fields too)."""
    last = max_column_id(current, configuration) if current else 0
    known = physical_names(current) if current and current_mode != "none" else None
    nested = iceberg_compat_version(configuration) == 2
    schema, last = assign_column_mapping(schema, last, keep_names=keep_names, known=known, nested_ids=nested)
    return schema, {**configuration, MAX_COLUMN_ID_KEY: str(last)}


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


def _nested_struct(struct: StructType, counter: list[int]) -> StructType:
    fields = []
    for struct_field in struct.fields:
        ids = dict(struct_field.metadata.get(NESTED_IDS_KEY) or {})
        data_type = _nested_type(struct_field.type, ids, struct_field.physical_name, counter)
        metadata = {**struct_field.metadata, NESTED_IDS_KEY: ids} if ids else struct_field.metadata
        fields.append(StructField(struct_field.name, data_type, struct_field.nullable, metadata))
    return StructType(fields)


def _nested_type(data_type: DataType, ids: dict[str, int], path: str, counter: list[int]) -> DataType:
    """``data_type`` with ids in ``ids`` for its arrays' and maps' implicit fields below ``path``
    (each given before its own type is walked), and in its structs' fields' metadata."""

    def give(key: str) -> str:
        if key not in ids:
            counter[0] += 1
            ids[key] = counter[0]
        return key

    if isinstance(data_type, StructType):
        return _nested_struct(data_type, counter)
    if isinstance(data_type, ArrayType):
        element = _nested_type(data_type.element_type, ids, give(f"{path}.element"), counter)
        return ArrayType(element, data_type.contains_null)
    if isinstance(data_type, MapType):
        key = _nested_type(data_type.key_type, ids, give(f"{path}.key"), counter)
        value = _nested_type(data_type.value_type, ids, give(f"{path}.value"), counter)
        return MapType(key, value, data_type.value_contains_null)
    return data_type
