"""ALTER TABLE ADD COLUMNS and column metadata changes, as metadata-only commits.

New columns go at the end of the table (or of the struct they are added to: a field whose name is
an existing struct column adds its own fields to that struct, as deltalake's ``add_columns``
merges). Names are compared case-insensitively, as Delta does; a name that exists is Spark's
``FIELD_ALREADY_EXISTS``. New columns must be nullable (existing rows hold nulls for them): Delta
refuses ``NOT NULL`` in ALTER TABLE ADD COLUMNS. A ``timestamp_ntz`` column upgrades the protocol.
Under column mapping, new columns get ids and physical names (:meth:`Metadata.with_schema`).

Column metadata (comments and the user's own keys) changes with operation CHANGE COLUMN; keys
starting with ``delta.`` belong to Delta (column mapping, invariants, generated and identity
columns) and are refused.

A column's type changes (ALTER TABLE ... ALTER COLUMN ... TYPE, also a CHANGE COLUMN commit) only
to a wider one on a table with type widening, recorded in its ``delta.typeChanges``
(:mod:`replay.protocol.type_widening`); no file is rewritten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from replay.log.table_io import TableIO
from replay.maintenance.alter_commit import commit_alter
from replay.protocol.errors import DeltaError
from replay.protocol.schema import (
    DataType,
    StructField,
    StructType,
    parse_data_type,
)
from replay.protocol.schema_evolution import resolve_path, type_name
from replay.protocol.sql.datatypes import type_from_name
from replay.protocol.type_widening import is_widening, with_type_changes
from replay.state.snapshot import Snapshot


class ColumnChangeError(DeltaError, ValueError):
    """A column change Delta refuses (the message names the column)."""


def to_struct_field(value: Any) -> StructField:
    """A column given as a :class:`StructField`, a ``pyarrow.Field``, a deltalake ``Field`` (or
    anything with Delta's JSON from ``to_json()``) or that JSON as a dict."""
    if isinstance(value, StructField):
        return value
    if isinstance(value, pa.Field):
        return StructType.from_arrow(pa.schema([value])).fields[0]
    if isinstance(value, Mapping):
        data = dict(value)
    elif callable(getattr(value, "to_json", None)):
        data = orjson.loads(value.to_json())
    else:
        raise TypeError(f"not a column: {value!r} (give a StructField, a pyarrow Field or a deltalake Field)")
    parsed = parse_data_type({"type": "struct", "fields": [data]})
    assert isinstance(parsed, StructType)
    return parsed.fields[0]


def column_parameter(path: Sequence[str], column: StructField) -> dict[str, Any]:
    """Delta's ``structFieldToMap``: the column's full name, type name, nullability and metadata."""
    return {
        "name": ".".join(path),
        "type": type_name(column.type),
        "nullable": column.nullable,
        "metadata": column.metadata,
    }


def add_columns(io: TableIO, snapshot: Snapshot, columns: Iterable[Any]) -> int:
    """Add ``columns`` to the table (see the module docs); returns the committed version. Raises
    :class:`ColumnChangeError` naming the column (exists, NOT NULL) and Delta's conflict
    exceptions."""
    table = io.shown_path
    new = [to_struct_field(column) for column in columns]
    for column in new:
        required = _not_nullable(column, ())
        if required:
            raise ColumnChangeError(
                "[DELTA_OPERATION_NOT_ALLOWED] Operation not allowed: `NOT NULL in ALTER TABLE ADD COLUMNS` "
                f"is not supported for Delta tables (column {required} of table {table})",
                table=table,
            )
    added: list[tuple[tuple[str, ...], StructField]] = []
    fields = _merge(list(snapshot.schema.fields), new, (), added, table)
    metadata = snapshot.metadata.with_schema(StructType(fields))
    parameters = {"columns": [{"column": column_parameter((*path, f.name), f)} for path, f in added]}
    return commit_alter(io, snapshot, "ADD COLUMNS", parameters, metadata)


def _not_nullable(column: StructField, path: tuple[str, ...]) -> str | None:
    """The name of the first non-nullable field in ``column`` (itself or nested), if any."""
    name = ".".join((*path, column.name))
    if not column.nullable:
        return name
    if isinstance(column.type, StructType):
        for child in column.type.fields:
            found = _not_nullable(child, (*path, column.name))
            if found:
                return found
    return None


def _merge(
    fields: list[StructField],
    new: list[StructField],
    path: tuple[str, ...],
    added: list[tuple[tuple[str, ...], StructField]],
    table: str,
) -> list[StructField]:
    for column in new:
        index = next((i for i, f in enumerate(fields) if f.name.lower() == column.name.lower()), None)
        if index is None:
            fields.append(column)
            added.append((path, column))
            continue
        existing = fields[index]
        if isinstance(existing.type, StructType) and isinstance(column.type, StructType):
            children = _merge(
                list(existing.type.fields), list(column.type.fields), (*path, existing.name), added, table
            )
            fields[index] = dataclasses.replace(existing, type=StructType(children))
            continue
        name = ".".join((*path, column.name))
        raise ColumnChangeError(
            f"[FIELD_ALREADY_EXISTS] Cannot add column, because `{name}` already exists in the schema of "
            f"table {table}.",
            table=table,
        )
    return fields


def set_column_metadata(io: TableIO, snapshot: Snapshot, column: str, metadata: Mapping[str, Any]) -> int:
    """Merge ``metadata`` into the metadata of ``column`` (a top-level name, or ``a.b`` for a
    struct field); returns the committed version. Raises :class:`ColumnChangeError` for an
    unknown column (Delta's ``DELTA_COLUMN_NOT_FOUND``) or a ``delta.*`` key."""
    table = io.shown_path
    reserved = [key for key in metadata if str(key).lower().startswith("delta.")]
    if reserved:
        raise ColumnChangeError(
            f"Cannot set column metadata {reserved[0]} of {column} in table {table}: keys starting with "
            "'delta.' belong to Delta (column mapping, invariants, generated and identity columns)",
            table=table,
        )
    path = resolve_column(snapshot.schema, column, table)
    current = struct_at(snapshot.schema, path[:-1]).field(path[-1])
    changed = dataclasses.replace(current, metadata={**current.metadata, **metadata})
    schema = replace_field(snapshot.schema, path, lambda _: [changed])
    new_metadata = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json())
    parameters = {"column": column_parameter([*path[:-1], changed.name], changed)}
    return commit_alter(io, snapshot, "CHANGE COLUMN", parameters, new_metadata)


def change_column_type(io: TableIO, snapshot: Snapshot, column: str, data_type: Any) -> int:
    """Change the type of ``column`` (``a``, ``s.f``) to ``data_type`` (a type name such as
    ``bigint`` or ``decimal(12,2)``, a pyarrow type or a schema type); returns the committed
    version. Raises :class:`ColumnChangeError` with Delta's
    ``DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP`` unless type widening is on and the type is wider
    (see the module docs), and ``DELTA_COLUMN_NOT_FOUND`` for an unknown column."""
    table = io.shown_path
    path = resolve_column(snapshot.schema, column, table)
    current = struct_at(snapshot.schema, path[:-1]).field(path[-1])
    new_type = _data_type(data_type, table)
    if new_type == current.type:
        raise ColumnChangeError(
            f"Column {'.'.join(path)} of table {table} is already of type {type_name(new_type)}", table=table
        )
    if not snapshot.config.type_widening_enabled or not is_widening(current.type, new_type):
        hint = (
            ""
            if snapshot.config.type_widening_enabled
            else " (enable type widening: delta.enableTypeWidening)"
        )
        raise ColumnChangeError(
            "[DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP] ALTER TABLE ALTER COLUMN is not supported for "
            f"changing column {'.'.join(path)} from {type_name(current.type)} to {type_name(new_type)} "
            f"(table {table}){hint}",
            table=table,
        )
    changed = dataclasses.replace(current, type=new_type)
    schema = with_type_changes(snapshot.schema, replace_field(snapshot.schema, path, lambda _: [changed]))
    recorded = struct_at(schema, path[:-1]).field(path[-1])
    new_metadata = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json())
    parameters = {"column": column_parameter([*path[:-1], recorded.name], recorded)}
    return commit_alter(io, snapshot, "CHANGE COLUMN", parameters, new_metadata)


def _data_type(value: Any, table: str) -> DataType:
    if isinstance(value, DataType):
        return value
    if isinstance(value, pa.DataType):
        return to_struct_field(pa.field("c", value)).type
    text = str(value).strip()
    name, _, rest = text.partition("(")
    arguments = [int(part) for part in rest.rstrip(")").split(",") if part.strip().isdigit()] if rest else []
    arrow = type_from_name(name.strip(), arguments)
    if arrow is None:
        raise ColumnChangeError(f"Unknown type {text!r} for a column of table {table}", table=table)
    return to_struct_field(pa.field("c", arrow)).type


def resolve_column(schema: StructType, column: str, table: str) -> list[str]:
    """``column`` (``a``, ``s.f``, parts backquoted where needed) as a path in the schema's
    spelling, matched case-insensitively; Delta's ``DELTA_COLUMN_NOT_FOUND`` if absent."""
    path = resolve_path(schema, column)
    if path is None:
        raise ColumnChangeError(
            f"[DELTA_COLUMN_NOT_FOUND] Unable to find the column `{column}` given "
            f"[{', '.join(schema.field_names)}] (table {table})",
            table=table,
        )
    return path


def struct_at(schema: StructType, path: Sequence[str]) -> StructType:
    """The struct at ``path`` (a resolved path; empty: the schema)."""
    struct = schema
    for name in path:
        found = next(f for f in struct.fields if f.name == name)
        assert isinstance(found.type, StructType)
        struct = found.type
    return struct


def replace_field(
    struct: StructType, path: Sequence[str], replace: Callable[[StructField], list[StructField]]
) -> StructType:
    """``struct`` with the field at ``path`` replaced by what ``replace(field)`` returns."""
    fields: list[StructField] = []
    for struct_field in struct.fields:
        if struct_field.name != path[0]:
            fields.append(struct_field)
        elif len(path) == 1:
            fields += replace(struct_field)
        else:
            assert isinstance(struct_field.type, StructType)
            inner = replace_field(struct_field.type, path[1:], replace)
            fields.append(StructField(struct_field.name, inner, struct_field.nullable, struct_field.metadata))
    return StructType(fields)
