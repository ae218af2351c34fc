"""Schema rules of writes, as Delta applies them: merging data into a table schema, and the errors.

:func:`merge_schemas` is Delta's ``SchemaMergingUtils.mergeSchemas``: fields match by name
case-insensitively and keep the table's name, nullability and metadata; new fields are appended
at the end of their struct; arrays and maps merge element-wise; ``byte``, ``short`` and
``integer`` widen among themselves (Parquet stores them alike); decimals must agree exactly;
``void`` merges with anything; any other difference fails with ``DELTA_FAILED_TO_MERGE_FIELDS``.
A write without ``mergeSchema`` whose merged schema differs from the table's fails with Delta's
schema mismatch error (:func:`schema_mismatch_error`), which prints both schemas as Spark's
``treeString``. With ``allow_implicit_casts`` (Delta's ``allowImplicitConversions``, what SQL
inserts use) a primitive data type that differs, and cannot be widened, keeps the table's type:
values are cast on write.
"""

from __future__ import annotations

from collections.abc import Sequence

from replay.protocol.errors import DeltaError
from replay.protocol.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType
from replay.protocol.type_widening import is_automatic_widening

SCHEMA_MISMATCH_CODE = "_LEGACY_ERROR_TEMP_DELTA_0007"
"""The error class OSS Delta reports a DataFrame write's schema mismatch with."""

_INTEGRAL_WIDENING = {("byte", "short"): "short", ("byte", "integer"): "integer"}
_INTEGRAL_WIDENING |= {("short", "byte"): "short", ("short", "integer"): "integer"}
_INTEGRAL_WIDENING |= {("integer", "short"): "integer", ("integer", "byte"): "integer"}

_SCALA_NAMES = {
    "string": "StringType",
    "long": "LongType",
    "integer": "IntegerType",
    "short": "ShortType",
    "byte": "ByteType",
    "float": "FloatType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "binary": "BinaryType",
    "date": "DateType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
    "void": "NullType",
}


class SchemaMismatchError(DeltaError, ValueError):
    """Data does not fit the table's schema or partitioning (Delta's wording, columns named)."""


# -- merging ----------------------------------------------------------------------------------
def check_duplicate_columns(schema: StructType, where: str = "in the data to save") -> None:
    """Raise :class:`SchemaMismatchError` if two top-level columns differ only in case."""
    seen: dict[str, str] = {}
    duplicates: list[str] = []
    for name in schema.field_names:
        if name.lower() in seen:
            duplicates.append(name)
        seen.setdefault(name.lower(), name)
    if duplicates:
        listed = ", ".join(f"`{name}`" for name in dict.fromkeys(duplicates))
        raise SchemaMismatchError(f"[COLUMN_ALREADY_EXISTS] Found duplicate column(s) {where}: {listed}.")


def merge_schemas(
    table: StructType, data: StructType, *, allow_implicit_casts: bool = False, widen: bool = False
) -> StructType:
    """The table schema with ``data`` merged in (see the module docstring); raises
    :class:`SchemaMismatchError` (``DELTA_FAILED_TO_MERGE_FIELDS``) naming the fields that clash.
    ``widen`` (a table with type widening): a column whose incoming type is wider within its
    family takes it (:func:`~replay.protocol.type_widening.is_automatic_widening`)."""
    check_duplicate_columns(data)
    merged = _merge(table, data, allow_implicit_casts, widen)
    assert isinstance(merged, StructType)
    return merged


def _merge(current: DataType, update: DataType, implicit: bool, widen: bool = False) -> DataType:
    if isinstance(current, StructType) and isinstance(update, StructType):
        updates = {field.name.lower(): field for field in update.fields}
        fields: list[StructField] = []
        for field in current.fields:
            match = updates.get(field.name.lower())
            if match is None:
                fields.append(field)
                continue
            try:
                merged = _merge(field.type, match.type, implicit, widen)
            except SchemaMismatchError as exc:
                raise SchemaMismatchError(
                    f"[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields '{field.name}' and "
                    f"'{match.name}'. {exc}"
                ) from exc
            fields.append(StructField(field.name, merged, field.nullable, field.metadata))
        known = {field.name.lower() for field in current.fields}
        fields += [as_nullable_field(f) for f in update.fields if f.name.lower() not in known]
        return StructType(fields)
    if isinstance(current, ArrayType) and isinstance(update, ArrayType):
        return ArrayType(
            _merge(current.element_type, update.element_type, implicit, widen), current.contains_null
        )
    if isinstance(current, MapType) and isinstance(update, MapType):
        return MapType(
            _merge(current.key_type, update.key_type, implicit, widen),
            _merge(current.value_type, update.value_type, implicit, widen),
            current.value_contains_null,
        )
    if current == update:
        return current
    if isinstance(current, PrimitiveType) and isinstance(update, PrimitiveType):
        if current.name == "void" or (widen and is_automatic_widening(current, update)):
            return update
        widened = _INTEGRAL_WIDENING.get((current.name, update.name))
        if widened is not None:
            return PrimitiveType(widened)
        if update.name == "void" or implicit:
            return current
        if current.is_decimal and update.is_decimal:
            raise SchemaMismatchError(_decimal_mismatch(current, update))
    raise SchemaMismatchError(
        "[DELTA_MERGE_INCOMPATIBLE_DATATYPE] Failed to merge incompatible data types "
        f"{scala_type_name(current)} and {scala_type_name(update)}"
    )


def _decimal_mismatch(current: PrimitiveType, update: PrimitiveType) -> str:
    (p1, s1), (p2, s2) = current.precision_scale, update.precision_scale
    if p1 != p2 and s1 != s2:
        ranges = f"precision {p1} and {p2} & scale {s1} and {s2}"
    elif p1 != p2:
        ranges = f"precision {p1} and {p2}"
    else:
        ranges = f"scale {s1} and {s2}"
    return f"[DELTA_MERGE_INCOMPATIBLE_DECIMAL_TYPE] Failed to merge decimal types with incompatible {ranges}"


def as_nullable_field(field: StructField) -> StructField:
    """``field`` with every level nullable (Delta creates and evolves tables this way)."""
    return StructField(field.name, as_nullable_type(field.type), True, field.metadata)


def as_nullable_type(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([as_nullable_field(f) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable_type(data_type.element_type), True)
    if isinstance(data_type, MapType):
        return MapType(as_nullable_type(data_type.key_type), as_nullable_type(data_type.value_type), True)
    return data_type


def as_nullable(schema: StructType) -> StructType:
    """The schema with every field nullable, as Delta stores a DataFrame's schema on create."""
    return StructType([as_nullable_field(f) for f in schema.fields])


# -- printing ---------------------------------------------------------------------------------
def scala_type_name(data_type: DataType) -> str:
    """Spark's ``DataType.toString`` (``LongType``, ``DecimalType(10,2)``, ``ArrayType(...)``)."""
    if isinstance(data_type, PrimitiveType):
        if data_type.is_decimal:
            precision, scale = data_type.precision_scale
            return f"DecimalType({precision},{scale})"
        return _SCALA_NAMES.get(data_type.name, data_type.name)
    if isinstance(data_type, ArrayType):
        return f"ArrayType({scala_type_name(data_type.element_type)},{str(data_type.contains_null).lower()})"
    if isinstance(data_type, MapType):
        key, value = scala_type_name(data_type.key_type), scala_type_name(data_type.value_type)
        return f"MapType({key},{value},{str(data_type.value_contains_null).lower()})"
    fields = ",".join(
        f"StructField({f.name},{scala_type_name(f.type)},{str(f.nullable).lower()})" for f in data_type.fields
    )
    return f"StructType({fields})"


def _simple_name(data_type: DataType) -> str:
    if isinstance(data_type, PrimitiveType):
        return data_type.name
    if isinstance(data_type, ArrayType):
        return "array"
    if isinstance(data_type, MapType):
        return "map"
    return "struct"


def _tree_lines(data_type: DataType, prefix: str, out: list[str]) -> None:
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            kind, nullable = _simple_name(field.type), _bool(field.nullable)
            out.append(f"{prefix}-- {field.name}: {kind} (nullable = {nullable})")
            _tree_lines(field.type, prefix + "    |", out)
    elif isinstance(data_type, ArrayType):
        element = data_type.element_type
        out.append(
            f"{prefix}-- element: {_simple_name(element)} (containsNull = {_bool(data_type.contains_null)})"
        )
        _tree_lines(element, prefix + "    |", out)
    elif isinstance(data_type, MapType):
        out.append(f"{prefix}-- key: {_simple_name(data_type.key_type)}")
        _tree_lines(data_type.key_type, prefix + "    |", out)
        value = data_type.value_type
        contains = _bool(data_type.value_contains_null)
        out.append(f"{prefix}-- value: {_simple_name(value)} (valueContainsNull = {contains})")
        _tree_lines(value, prefix + "    |", out)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def tree_string(schema: StructType) -> str:
    """Spark's ``StructType.treeString``: ``root`` and one `` |-- name: type (nullable = ...)`` per field."""
    lines = ["root"]
    _tree_lines(schema, " |", lines)
    return "\n".join(lines) + "\n"


# -- errors -----------------------------------------------------------------------------------
def schema_mismatch_error(
    table_id: str | None,
    table_schema: StructType,
    data_schema: StructType,
    *,
    partitioning: tuple[Sequence[str], Sequence[str]] | None = None,
    overwrite_hint: bool = False,
) -> SchemaMismatchError:
    """Delta's error for a DataFrame write that does not match the table's metadata.

    ``partitioning`` is ``(given, table)`` when the partition columns differ; ``overwrite_hint``
    adds Delta's advice to overwrite the schema (given when overwriting is what would help).
    """
    parts = [
        f"[{SCHEMA_MISMATCH_CODE}] A schema mismatch detected when writing to the Delta table "
        f"(Table ID: {table_id}).",
        "To enable schema migration using DataFrameWriter or DataStreamWriter, please set:",
        '\'.option("mergeSchema", "true")\'.',
        "For other operations, set the session configuration",
        'spark.databricks.delta.schema.autoMerge.enabled to "true". See the documentation',
        "specific to the operation for details.",
        "",
        "Table schema:",
        tree_string(table_schema),
        "Data schema:",
        tree_string(data_schema),
    ]
    if partitioning is not None:
        given, existing = partitioning
        parts += [
            "Partition columns do not match the partition columns of the table.",
            f"Given: [{', '.join(given)}]",
            f"Table: [{', '.join(existing)}]",
        ]
    if overwrite_hint or partitioning is not None:
        parts += [
            "To overwrite your schema or change partitioning, please set:",
            '\'.option("overwriteSchema", "true")\'.',
            "",
            "Note that the schema can't be overwritten when using",
            "'replaceWhere'.",
        ]
    return SchemaMismatchError("\n".join(parts))
