"""Whether data written with one schema can be read with another: Delta's read-compatibility rules.

The one home of the rules the change data feed and the streaming source apply when a read
crosses schema changes (pure, on :class:`~replay.protocol.schema.StructType` and
:class:`~replay.protocol.actions.Metadata` values):

* :func:`is_read_compatible` is Delta's ``SchemaUtils.isReadCompatible``: no column of the
  existing schema missing from the read schema, no type change, no partitioning change, and no
  nullability change in the forbidden direction;
* :func:`has_no_column_mapping_schema_changes` is Delta's
  ``DeltaColumnMapping.hasNoColumnMappingSchemaChanges``: under column mapping a column keeps its
  physical name, so a rename or a drop followed by an add of the same name is visible only there;
* :func:`tree_string` prints a schema as Spark's ``StructType.treeString`` (Delta's error texts
  show schemas that way).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from replay.protocol.actions import Metadata
from replay.protocol.naming import split_column_path
from replay.protocol.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from replay.protocol.type_widening import is_widening

FieldPath = tuple[str, ...]

_ARRAY_ELEMENT = "element"
_MAP_KEY = "key"
_MAP_VALUE = "value"


# -- read compatibility ---------------------------------------------------------------------------
def is_read_compatible(
    existing: StructType,
    read: StructType,
    *,
    forbid_tighten_nullability: bool = False,
    allow_missing_columns: bool = False,
    new_partition_columns: Sequence[str] = (),
    old_partition_columns: Sequence[str] = (),
    allow_type_widening: bool = False,
) -> bool:
    """Whether data of the ``existing`` schema can be read with the ``read`` schema.

    Incompatible (Delta's ``SchemaUtils.isReadCompatible``): a column of ``existing`` missing from
    ``read`` (unless ``allow_missing_columns``), a column whose name differs only in case, any
    change of a data type, different partition columns (unless ``allow_missing_columns``, as in
    Delta), and a nullability change: with
    ``forbid_tighten_nullability`` a nullable column read as non-nullable (the data may hold nulls
    the read schema promises away), otherwise a non-nullable one read as nullable. Columns only in
    ``read`` are fine (they read as nulls). Names match case-insensitively, as in Delta. With
    ``allow_type_widening`` a column read as a wider type (type widening,
    :func:`~replay.protocol.type_widening.is_widening`) is compatible too.
    """
    if not allow_missing_columns and list(new_partition_columns) != list(old_partition_columns):
        return False
    rules = _Rules(forbid_tighten_nullability, allow_type_widening)
    return _struct_compatible(existing, read, rules, allow_missing_columns)


@dataclass(frozen=True)
class _Rules:
    forbid_tighten: bool
    widening: bool


def _nullability_compatible(existing_nullable: bool, read_nullable: bool, forbid_tighten: bool) -> bool:
    if forbid_tighten:
        return read_nullable or not existing_nullable
    return existing_nullable or not read_nullable


def _struct_compatible(existing: StructType, read: StructType, rules: _Rules, allow_missing: bool) -> bool:
    existing_by_name = {f.name.lower(): f for f in existing.fields}
    read_names = {f.name.lower() for f in read.fields}
    if not allow_missing and not set(existing_by_name) <= read_names:
        return False
    for read_field in read.fields:
        existing_field = existing_by_name.get(read_field.name.lower())
        if existing_field is None:
            continue
        if (
            existing_field.name != read_field.name
            or not _nullability_compatible(existing_field.nullable, read_field.nullable, rules.forbid_tighten)
            or not _type_compatible(existing_field.type, read_field.type, rules)
        ):
            return False
    return True


def _type_compatible(existing: DataType, read: DataType, rules: _Rules) -> bool:
    if isinstance(existing, StructType) and isinstance(read, StructType):
        return _struct_compatible(existing, read, rules, allow_missing=False)
    if isinstance(existing, ArrayType) and isinstance(read, ArrayType):
        return _nullability_compatible(
            existing.contains_null, read.contains_null, rules.forbid_tighten
        ) and _type_compatible(existing.element_type, read.element_type, rules)
    if isinstance(existing, MapType) and isinstance(read, MapType):
        return (
            _nullability_compatible(
                existing.value_contains_null, read.value_contains_null, rules.forbid_tighten
            )
            and _type_compatible(existing.key_type, read.key_type, rules)
            and _type_compatible(existing.value_type, read.value_type, rules)
        )
    if isinstance(existing, PrimitiveType) and isinstance(read, PrimitiveType):
        same = _primitive_key(existing) == _primitive_key(read)
        return same or (rules.widening and is_widening(existing, read))
    return False


def _primitive_key(data_type: PrimitiveType) -> str | tuple[int, int]:
    """What makes two primitive types equal: the name, or precision and scale of a decimal."""
    return data_type.precision_scale if data_type.is_decimal else data_type.name


def is_additive_change(old: StructType, new: StructType) -> bool:
    """Whether ``new`` only adds columns to ``old``: every column of ``old`` (nested ones too) is in
    ``new`` under the same name (case-insensitive), with the same type and not made non-nullable.

    A stream reading with ``old`` keeps reading data written with such a ``new`` schema.
    """
    later = {tuple(part.lower() for part in path): field for path, field in explode(new)}
    for path, field in explode(old):
        other = later.get(tuple(part.lower() for part in path))
        if other is None or (field.nullable and not other.nullable):
            return False
        if isinstance(field.type, PrimitiveType) != isinstance(other.type, PrimitiveType):
            return False
        if isinstance(field.type, PrimitiveType) and isinstance(other.type, PrimitiveType):
            if _primitive_key(field.type) != _primitive_key(other.type):
                return False
        elif type(field.type) is not type(other.type):
            return False
    return True


# -- column mapping -------------------------------------------------------------------------------
def explode(schema: StructType, physical: bool = False) -> Iterator[tuple[FieldPath, StructField]]:
    """Every field of ``schema`` with its path, nested ones too (Delta's ``SchemaMergingUtils.explode``).

    Struct fields inside arrays and maps are reached through ``element``, ``key`` and ``value``
    path parts. With ``physical`` the path holds physical names (column mapping).
    """
    for struct_field in schema.fields:
        name = struct_field.physical_name if physical else struct_field.name
        yield (name,), struct_field
        for path, nested in _explode_type(struct_field.type, physical):
            yield (name, *path), nested


def _explode_type(data_type: DataType, physical: bool) -> Iterator[tuple[FieldPath, StructField]]:
    if isinstance(data_type, StructType):
        yield from explode(data_type, physical)
    elif isinstance(data_type, ArrayType):
        for path, nested in _explode_type(data_type.element_type, physical):
            yield (_ARRAY_ELEMENT, *path), nested
    elif isinstance(data_type, MapType):
        for path, nested in _explode_type(data_type.key_type, physical):
            yield (_MAP_KEY, *path), nested
        for path, nested in _explode_type(data_type.value_type, physical):
            yield (_MAP_VALUE, *path), nested


def changed_types(old: StructType, new: StructType) -> list[tuple[FieldPath, str, str]]:
    """The fields (physical paths) present in both schemas whose type changed, with the types'
    names before and after. Structs count as one shape (their own fields are compared on their
    own paths), so adding a field is no type change; an array or map whose element, key or value
    type changed is."""
    before = {path: _shape(f.type) for path, f in explode(old, physical=True)}
    changes = []
    for path, struct_field in explode(new, physical=True):
        shape = _shape(struct_field.type)
        if path in before and before[path] != shape:
            changes.append((path, before[path], shape))
    return changes


def _shape(data_type: DataType) -> str:
    if isinstance(data_type, StructType):
        return "struct"
    if isinstance(data_type, ArrayType):
        return f"array<{_shape(data_type.element_type)}>"
    if isinstance(data_type, MapType):
        return f"map<{_shape(data_type.key_type)},{_shape(data_type.value_type)}>"
    return data_type.name


def physical_field_map(schema: StructType) -> dict[FieldPath, StructField]:
    """Physical path -> field of every field (Delta's ``getPhysicalNameFieldMap``).

    A field without a physical name is its own physical name (what enabling column mapping on an
    existing table assigns).
    """
    return dict(explode(schema, physical=True))


def is_drop_column(new_schema: StructType, current_schema: StructType) -> bool:
    """Whether a physical column of ``current_schema`` is missing from ``new_schema``."""
    new = physical_field_map(new_schema)
    return any(path not in new for path in physical_field_map(current_schema))


def is_rename_column(new_schema: StructType, current_schema: StructType) -> bool:
    """Whether a physical column of ``current_schema`` has another logical name in ``new_schema``."""
    new = physical_field_map(new_schema)
    return any(
        path in new and new[path].name != field.name
        for path, field in physical_field_map(current_schema).items()
    )


def has_no_column_mapping_schema_changes(new: Metadata, old: Metadata) -> bool:
    """Whether no column was renamed or dropped, and partitioning kept, between ``old`` and ``new``.

    ``new`` must be the later version (a drop looks like an add the other way round). Tables
    without column mapping on both sides have no such changes; enabling column mapping in between
    compares against the logical names (the physical names the upgrade assigns); disabling it is
    a change. (Delta's ``DeltaColumnMapping.hasNoColumnMappingSchemaChanges``.)
    """
    old_mode, new_mode = old.column_mapping_mode, new.column_mapping_mode
    if new_mode == "none":
        return old_mode == "none"
    if old_mode not in ("none", new_mode):
        return False
    return not (
        is_rename_column(new.schema, old.schema)
        or is_drop_column(new.schema, old.schema)
        or list(new.partition_columns) != list(old.partition_columns)
    )


# -- printing ---------------------------------------------------------------------------------------
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f", "\b": "\\b", "\u000b": "\\v", "\u0007": "\\a"}


def type_name(data_type: DataType) -> str:
    """Spark's ``DataType.typeName``: ``long``, ``decimal(10,2)``, ``struct``, ``array``, ``map`` ..."""
    if isinstance(data_type, StructType):
        return "struct"
    if isinstance(data_type, ArrayType):
        return "array"
    if isinstance(data_type, MapType):
        return "map"
    if data_type.is_decimal:
        precision, scale = data_type.precision_scale
        return f"decimal({precision},{scale})"
    return data_type.name


def resolve_path(schema: StructType, column: str) -> list[str] | None:
    """``column`` (``a``, ``s.f``, parts backquoted where needed) as a path in the schema's
    spelling, matched case-insensitively as Delta matches names; ``None`` when absent."""
    fields = schema.fields
    path: list[str] = []
    for part in split_column_path(column) or (column,):
        found = next((f for f in fields if f.name.lower() == part.lower()), None)
        if found is None:
            return None
        path.append(found.name)
        fields = found.type.fields if isinstance(found.type, StructType) else []
    return path


def fields_along(schema: StructType, path: Sequence[str]) -> list[StructField]:
    """The fields a resolved ``path`` (exact names) goes through, outermost first."""
    fields = schema.fields
    along = []
    for name in path:
        found = next(f for f in fields if f.name == name)
        along.append(found)
        fields = found.type.fields if isinstance(found.type, StructType) else []
    return along


def tree_string(schema: StructType) -> str:
    """The schema as Spark's ``StructType.treeString`` (``root`` then one ``|--`` line per field)."""
    lines = ["root"]
    _tree_fields(schema, " |", lines)
    return "\n".join(lines) + "\n"


def _tree_fields(schema: StructType, prefix: str, lines: list[str]) -> None:
    for struct_field in schema.fields:
        name = "".join(_ESCAPES.get(char, char) for char in struct_field.name)
        nullable = str(struct_field.nullable).lower()
        lines.append(f"{prefix}-- {name}: {type_name(struct_field.type)} (nullable = {nullable})")
        _tree_type(struct_field.type, f"{prefix}    |", lines)


def _tree_type(data_type: DataType, prefix: str, lines: list[str]) -> None:
    if isinstance(data_type, StructType):
        _tree_fields(data_type, prefix, lines)
    elif isinstance(data_type, ArrayType):
        contains_null = str(data_type.contains_null).lower()
        lines.append(
            f"{prefix}-- element: {type_name(data_type.element_type)} (containsNull = {contains_null})"
        )
        _tree_type(data_type.element_type, f"{prefix}    |", lines)
    elif isinstance(data_type, MapType):
        lines.append(f"{prefix}-- key: {type_name(data_type.key_type)}")
        _tree_type(data_type.key_type, f"{prefix}    |", lines)
        value_contains_null = str(data_type.value_contains_null).lower()
        lines.append(
            f"{prefix}-- value: {type_name(data_type.value_type)} (valueContainsNull = {value_contains_null})"
        )
        _tree_type(data_type.value_type, f"{prefix}    |", lines)
