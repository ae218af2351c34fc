"""Delta table schemas (Spark's JSON schema format) and their pyarrow equivalents.

``parse_schema`` reads a ``metaData.schemaString``; every type converts back to JSON
(``to_json``) and to pyarrow (``to_arrow``). Column mapping (``name``/``id`` modes) is handled by
``physical_name`` / ``field_id`` and ``to_arrow(physical=True)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"

_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")

_PRIMITIVE_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
    "variant": pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)]),
}


@dataclass(frozen=True)
class PrimitiveType:
    """A non-nested type: ``string``, ``long``, ``decimal(10,2)``, ``timestamp_ntz`` ..."""

    name: str

    @property
    def is_decimal(self) -> bool:
        return self.name.startswith("decimal")

    @property
    def precision_scale(self) -> tuple[int, int]:
        """``(precision, scale)`` of a decimal; :class:`ValueError` for other types."""
        match = _DECIMAL_RE.match(self.name)
        if match is None:
            if self.name == "decimal":
                return 10, 0
            raise ValueError(f"not a decimal type: {self.name}")
        return int(match.group(1)), int(match.group(2))

    def to_json_value(self) -> Any:
        return self.name

    def to_arrow(self, physical: bool = False) -> pa.DataType:
        if self.is_decimal:
            precision, scale = self.precision_scale
            return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        try:
            return _PRIMITIVE_ARROW[self.name]
        except KeyError:
            raise ValueError(f"unsupported Delta type: {self.name}") from None


@dataclass(frozen=True)
class ArrayType:
    element_type: DataType
    contains_null: bool = True

    def to_json_value(self) -> Any:
        return {
            "type": "array",
            "elementType": self.element_type.to_json_value(),
            "containsNull": self.contains_null,
        }

    def to_arrow(self, physical: bool = False) -> pa.DataType:
        return pa.list_(pa.field("element", arrow_type(self.element_type, physical), self.contains_null))


@dataclass(frozen=True)
class MapType:
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    def to_json_value(self) -> Any:
        return {
            "type": "map",
            "keyType": self.key_type.to_json_value(),
            "valueType": self.value_type.to_json_value(),
            "valueContainsNull": self.value_contains_null,
        }

    def to_arrow(self, physical: bool = False) -> pa.DataType:
        return pa.map_(
            pa.field("key", arrow_type(self.key_type, physical), False),
            pa.field("value", arrow_type(self.value_type, physical), self.value_contains_null),
        )


@dataclass(frozen=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def physical_name(self) -> str:
        """The column's name in data files (differs from :attr:`name` under column mapping)."""
        return physical_name(self)

    @property
    def field_id(self) -> int | None:
        """The column mapping id (``delta.columnMapping.id``), if any."""
        value = self.metadata.get(FIELD_ID_KEY)
        return int(value) if value is not None else None

    def to_json_value(self) -> Any:
        return {
            "name": self.name,
            "type": self.type.to_json_value(),
            "nullable": self.nullable,
            "metadata": self.metadata,
        }

    def to_arrow(self, physical: bool = False) -> pa.Field:
        """The pyarrow field; ``physical=True`` uses physical names and Parquet field ids."""
        name = self.physical_name if physical else self.name
        arrow_metadata = None
        if physical and self.field_id is not None:
            arrow_metadata = {b"PARQUET:field_id": str(self.field_id).encode()}
        return pa.field(name, arrow_type(self.type, physical), self.nullable, metadata=arrow_metadata)


@dataclass(frozen=True)
class StructType:
    fields: list[StructField] = field(default_factory=list)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> StructField:
        """The field called ``name``; :class:`KeyError` naming it if absent."""
        for candidate in self.fields:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no field {name!r} in schema (fields: {self.field_names})")

    def to_json_value(self) -> Any:
        return {"type": "struct", "fields": [f.to_json_value() for f in self.fields]}

    def to_json(self) -> str:
        """The schema as a ``schemaString``."""
        return orjson.dumps(self.to_json_value()).decode("utf-8")

    def to_arrow_type(self, physical: bool = False) -> pa.DataType:
        return pa.struct([f.to_arrow(physical) for f in self.fields])

    def to_arrow(self, physical: bool = False) -> pa.Schema:
        """The top-level schema as a pyarrow schema."""
        return pa.schema([f.to_arrow(physical) for f in self.fields])

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> StructType:
        """The Delta schema of a pyarrow schema (all fields nullable as in the Arrow schema)."""
        return cls([StructField(f.name, from_arrow_type(f.type), f.nullable) for f in schema])


DataType = PrimitiveType | ArrayType | MapType | StructType


def arrow_type(data_type: DataType, physical: bool = False) -> pa.DataType:
    """The Arrow type of any Delta type (a nested struct becomes ``pa.struct``, not a schema)."""
    if isinstance(data_type, StructType):
        return data_type.to_arrow_type(physical)
    return data_type.to_arrow(physical)


def nested_types(data_type: DataType) -> Iterator[DataType]:
    """``data_type`` and every type inside it (struct fields', array elements', map keys' and
    values'), outer ones first."""
    yield data_type
    if isinstance(data_type, StructType):
        for struct_field in data_type.fields:
            yield from nested_types(struct_field.type)
    elif isinstance(data_type, ArrayType):
        yield from nested_types(data_type.element_type)
    elif isinstance(data_type, MapType):
        yield from nested_types(data_type.key_type)
        yield from nested_types(data_type.value_type)


def physical_name(struct_field: StructField) -> str:
    """The name of ``struct_field`` in data files (``delta.columnMapping.physicalName`` or the name)."""
    return str(struct_field.metadata.get(PHYSICAL_NAME_KEY, struct_field.name))


def parse_data_type(value: Any) -> DataType:
    """One type from its JSON value (a type name string or a nested type object)."""
    if isinstance(value, str):
        return PrimitiveType(value)
    if not isinstance(value, dict):
        raise ValueError(f"invalid Delta type: {value!r}")
    kind = value.get("type")
    if kind == "struct":
        return StructType([_parse_field(f) for f in value.get("fields", [])])
    if kind == "array":
        return ArrayType(parse_data_type(value["elementType"]), bool(value.get("containsNull", True)))
    if kind == "map":
        return MapType(
            parse_data_type(value["keyType"]),
            parse_data_type(value["valueType"]),
            bool(value.get("valueContainsNull", True)),
        )
    raise ValueError(f"invalid Delta type: {value!r}")


def _parse_field(value: dict[str, Any]) -> StructField:
    return StructField(
        name=value["name"],
        type=parse_data_type(value["type"]),
        nullable=bool(value.get("nullable", True)),
        metadata=dict(value.get("metadata") or {}),
    )


def parse_schema(json_str: str) -> StructType:
    """Parse a ``schemaString``. Raises :class:`ValueError` if it is not a struct type."""
    try:
        parsed = parse_data_type(orjson.loads(json_str))
    except (orjson.JSONDecodeError, KeyError) as exc:
        raise ValueError(f"invalid schemaString: {exc}") from None
    if not isinstance(parsed, StructType):
        raise ValueError(f"a table schema must be a struct, got {json_str[:100]}")
    return parsed


def from_arrow_type(arrow_type: pa.DataType) -> DataType:
    """The Delta type of a pyarrow type (zoned timestamps -> ``timestamp``, naive -> ``timestamp_ntz``)."""
    if pa.types.is_struct(arrow_type):
        return StructType([StructField(f.name, from_arrow_type(f.type), f.nullable) for f in arrow_type])
    if pa.types.is_map(arrow_type):
        return MapType(from_arrow_type(arrow_type.key_type), from_arrow_type(arrow_type.item_type))
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return ArrayType(from_arrow_type(arrow_type.value_type), arrow_type.value_field.nullable)
    if pa.types.is_decimal(arrow_type):
        return PrimitiveType(f"decimal({arrow_type.precision},{arrow_type.scale})")
    if pa.types.is_timestamp(arrow_type):
        return PrimitiveType("timestamp" if arrow_type.tz else "timestamp_ntz")
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return PrimitiveType("string")
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return PrimitiveType("binary")
    names = {
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.null(): "void",
    }
    name = names.get(arrow_type)
    if name is None:
        raise ValueError(f"no Delta type for Arrow type {arrow_type}")
    return PrimitiveType(name)
