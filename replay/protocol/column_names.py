"""Column names Delta refuses: those holding a character Parquet's schema syntax reserves.

Without column mapping a column's name is its name in the Parquet files, and Delta refuses a
metadata change whose schema holds a name with any of ``' ,;{}()\\n\\t='`` (Delta's
``SchemaUtils.checkSchemaFieldNames``, run for every metadata a transaction commits). The check
covers nested fields too: a name is the path to the field, its parts joined with ``.`` (a part
holding a ``.`` in backticks), through struct fields and the ``element`` of arrays and the
``key``/``value`` of maps, as Delta's ``SchemaMergingUtils.explodeNestedFieldNames`` spells it.
Data columns fail with ``DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES``; partition columns, which
Delta checks separately, with ``DELTA_INVALID_PARTITION_COLUMN_NAME``. With column mapping
(``delta.columnMapping.mode`` ``name`` or ``id``) the files use physical names and any name is
allowed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from replay.protocol.actions import Metadata
from replay.protocol.errors import DeltaError
from replay.protocol.schema import ArrayType, DataType, MapType, StructType
from replay.protocol.table_properties import COLUMN_MAPPING_MODE

INVALID_CHARACTERS = frozenset(" ,;{}()\n\t=")
"""Characters a column name may not hold in a table without column mapping."""
_SHOWN_CHARACTERS = " ,;{}()\\n\\t="
"""The same characters as Delta's messages print them."""


class InvalidColumnNameError(DeltaError, ValueError):
    """A column name Delta refuses without column mapping (the message names the columns)."""


def nested_field_names(schema: StructType) -> Iterator[str]:
    """Every field of ``schema``, nested ones included, as Delta names them (see the module docstring)."""
    for field in schema.fields:
        path = (field.name,)
        yield _joined(path)
        yield from _nested(field.type, path)


def _nested(data_type: DataType, path: tuple[str, ...]) -> Iterator[str]:
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            child = (*path, field.name)
            yield _joined(child)
            yield from _nested(field.type, child)
    elif isinstance(data_type, ArrayType):
        yield from _nested(data_type.element_type, (*path, "element"))
    elif isinstance(data_type, MapType):
        yield from _nested(data_type.key_type, (*path, "key"))
        yield from _nested(data_type.value_type, (*path, "value"))


def _joined(path: tuple[str, ...]) -> str:
    return ".".join(f"`{part}`" if "." in part else part for part in path)


def invalid_names(names: Sequence[str]) -> list[str]:
    """The names of ``names`` holding a character of :data:`INVALID_CHARACTERS`, in order."""
    return [name for name in names if not INVALID_CHARACTERS.isdisjoint(name)]


def check_column_names(metadata: Metadata, table: str) -> None:
    """Raise :class:`InvalidColumnNameError` if ``metadata`` (a table's metadata about to be
    committed) names a column Delta refuses; nothing is checked under column mapping.

    Data columns are checked first, their nested fields included, then the partition columns, as
    Delta does. The message names every offending column and ``table``.
    """
    if COLUMN_MAPPING_MODE.value_in(metadata.configuration) != "none":
        return
    partition_columns = set(metadata.partition_columns)
    data_schema = StructType([f for f in metadata.schema.fields if f.name not in partition_columns])
    invalid = invalid_names(list(nested_field_names(data_schema)))
    if invalid:
        raise InvalidColumnNameError(
            f"[DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES] Found invalid character(s) among "
            f"'{_SHOWN_CHARACTERS}' in the column names of your schema. Invalid column names: "
            f"{_listed(invalid)}. Please use other characters and try again. (table {table})",
            table=table,
        )
    invalid = invalid_names(list(metadata.partition_columns))
    if invalid:
        raise InvalidColumnNameError(
            f"[DELTA_INVALID_PARTITION_COLUMN_NAME] Found partition columns having invalid character(s) "
            f'among "{_SHOWN_CHARACTERS}". Please change the name to your partition columns. Invalid '
            f"partition columns: {_listed(invalid)}. (table {table})",
            table=table,
        )


def _listed(names: Sequence[str]) -> str:
    """The names, comma separated, with a newline or tab spelled as ``\\n``/``\\t`` (one line)."""
    return ", ".join(name.replace("\n", "\\n").replace("\t", "\\t") for name in names)
