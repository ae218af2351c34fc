"""The files' statistics and partition values as typed Arrow columns, one entry per file.

Statistics are the JSON ``stats`` of the add actions (``numRecords``, ``minValues``,
``maxValues``, ``nullCount``), keyed by the columns' physical names under column mapping; they are
read all at once by pyarrow's JSON reader, as the types Delta spells them in (integers as BIGINT,
dates as strings ...), then converted to the columns' types. A file without statistics, or with a
value that does not convert, gets nulls. Partition values are the strings of ``partitionValues``,
parsed to their columns' types. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from replay.data.partition_values import parse_partition_value
from replay.protocol.column_mapping import stored_name
from replay.protocol.schema import PrimitiveType, StructField, arrow_type


def partition_values(files: pa.Table, field: StructField, mode: str) -> pa.Array:
    """The typed value of partition column ``field`` in each file."""
    values = files.column("partition_values").combine_chunks()
    raw = pc.map_lookup(values, physical_name(field, mode), "first")
    if mode != "none":
        raw = pc.coalesce(raw, pc.map_lookup(values, field.name, "first"))
    distinct = pc.unique(raw)
    parsed = pa.array(
        [parse_partition_value(v, field.type) for v in distinct.to_pylist()], arrow_type(field.type)
    )
    return parsed.take(pc.index_in(raw, value_set=distinct))


def physical_name(field: StructField, mode: str) -> str:
    """The name a field has in the files and their statistics (its physical name under column
    mapping)."""
    return stored_name(field, mode != "none")


def stats_type(data_type: PrimitiveType) -> pa.DataType:
    """How a statistic of ``data_type`` is spelled in the JSON stats (before conversion)."""
    target = data_type.to_arrow()
    if pa.types.is_integer(target):
        return pa.int64()
    if pa.types.is_floating(target):
        return pa.float64()
    if pa.types.is_timestamp(target):
        return pa.timestamp("us", tz=target.tz)
    if pa.types.is_date(target) or pa.types.is_string(target):
        return pa.string()
    if pa.types.is_decimal(target) or pa.types.is_boolean(target):
        return target
    raise ValueError(f"no statistics are used for {data_type.name}")


def nested_struct(paths: Sequence[tuple[str, ...]], types: Sequence[pa.DataType]) -> pa.StructType:
    """A struct type holding every ``path`` with its type (shared prefixes merged)."""
    tree: dict[str, Any] = {}
    for path, leaf in zip(paths, types, strict=True):
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = leaf

    def build(node: dict[str, Any]) -> pa.StructType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def dig(struct: pa.StructArray, names: Sequence[str]) -> pa.Array:
    """A nested child of ``struct``; a null parent makes the child null."""
    array: pa.Array = struct
    for name in names:
        array = pc.struct_field(array, name)
    return array


def convert(values: pa.Array, target: pa.DataType) -> pa.Array:
    """Statistics as read from JSON, as ``target`` (values that do not convert become null)."""
    if values.type == target:
        return values
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        converted = []
        for value in values.to_pylist():
            try:
                converted.append(pa.scalar(value).cast(target).as_py() if value is not None else None)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                converted.append(None)
        return pa.array(converted, target)


def read_stats_json(stats: pa.Array, schema: pa.Schema) -> pa.StructArray:
    """The ``stats`` JSON strings read as ``schema`` (a file without statistics gives nulls).

    pyarrow's JSON reader reads them all at once; if any file's statistics do not fit the schema
    the strings are read one by one, and a file whose statistics are unreadable gets nulls.
    """
    count = len(stats)
    filled = pc.fill_null(stats, "{}")
    payload = _newline_delimited(pc.binary_join_element_wise(filled, pa.scalar("\n"), ""))
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pajson.read_json(pa.BufferReader(payload), parse_options=options)
        if table.num_rows == count:
            return pa.StructArray.from_arrays(
                [table.column(name).combine_chunks() for name in schema.names], fields=list(schema)
            )
    except pa.ArrowInvalid:
        pass
    rows: list[dict[str, Any] | None] = []
    for text in stats.to_pylist():
        try:
            value = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            value = None
        rows.append(_fit(value, pa.struct(list(schema))) if isinstance(value, dict) else None)
    return pa.array(rows, pa.struct(list(schema)))


def _newline_delimited(lines: pa.Array) -> pa.Buffer:
    """The character data of a string array (each value already ends with a newline), as one buffer."""
    lines = lines.cast(pa.large_string()) if not pa.types.is_large_string(lines.type) else lines
    if not len(lines):
        return pa.py_buffer(b"")
    offsets = pa.Array.from_buffers(
        pa.int64(), len(lines) + 1, [None, lines.buffers()[1]], offset=lines.offset
    )
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return lines.buffers()[2].slice(start, end - start)


def _fit(value: Any, arrow_type: pa.DataType) -> Any:
    """``value`` with every part that does not fit ``arrow_type`` replaced by null."""
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, dict):
            return None
        return {f.name: _fit(value.get(f.name), f.type) for f in arrow_type}
    try:
        return pa.scalar(value, arrow_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        try:
            return pa.scalar(value).cast(arrow_type).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
            return None
