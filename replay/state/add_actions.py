"""The active files as deltalake's ``get_add_actions`` shows them: one row per file with its path,
size, modification time and record count, then the ``null_count``, ``min`` and ``max``
statistics of each data column and the ``partition`` values, typed as the columns are (nested
columns nested; with ``flatten``, one column per value, named ``min.a.b``). Logical names, also
under column mapping. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from replay.protocol.schema import PrimitiveType, StructField, StructType
from replay.protocol.table_config import TableConfiguration
from replay.state.file_statistics import (
    convert,
    dig,
    nested_struct,
    partition_values,
    physical_name,
    read_stats_json,
    stats_type,
)

Leaf = tuple[tuple[str, ...], tuple[str, ...], PrimitiveType]
"""A data column with statistics: (logical path, physical path, type)."""


def add_actions_table(files: pa.Table, config: TableConfiguration, *, flatten: bool = False) -> pa.Table:
    """``files`` (:data:`~replay.state.snapshot.FILES_SCHEMA`) as deltalake's add actions."""
    mode = config.column_mapping_mode
    partitioning = config.metadata.partition_columns
    leaves = [leaf for leaf in _leaves(config.metadata.schema, mode, set(partitioning)) if _has_stats(leaf)]
    schema = pa.schema(
        [
            ("numRecords", pa.int64()),
            *(
                (key, nested_struct([p for _, p, _ in leaves], [kind(t) for _, _, t in leaves]))
                for key, kind in (
                    ("nullCount", lambda _: pa.int64()),
                    ("minValues", stats_type),
                    ("maxValues", stats_type),
                )
            ),
        ]
    )
    parsed = read_stats_json(files.column("stats").combine_chunks(), schema) if leaves else None
    columns: dict[str, pa.Array] = {
        "path": files.column("path").combine_chunks(),
        "size_bytes": files.column("size").combine_chunks(),
        "modification_time": files.column("modification_time").combine_chunks(),
        "num_records": (
            pc.struct_field(parsed, "numRecords")
            if parsed is not None
            else record_counts(files.column("stats").combine_chunks())
        ),
    }
    groups: dict[str, dict[tuple[str, ...], pa.Array]] = {}
    for name, key in (("null_count", "nullCount"), ("min", "minValues"), ("max", "maxValues")):
        groups[name] = {}
        for logical, physical, data_type in leaves:
            assert parsed is not None
            target = pa.int64() if name == "null_count" else data_type.to_arrow()
            groups[name][logical] = convert(dig(parsed, (key, *physical)), target)
    by_name = {field.name: field for field in config.metadata.schema.fields}
    groups["partition"] = {(c,): partition_values(files, by_name[c], mode) for c in partitioning}
    for name, values in groups.items():
        if not values:
            continue
        if flatten:
            columns.update({".".join((name, *path)): array for path, array in values.items()})
        else:
            columns[name] = _nest(values)
    required = ("path", "size_bytes", "modification_time")  # not null, as deltalake types them
    fields = [pa.field(name, array.type, nullable=name not in required) for name, array in columns.items()]
    return pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))


def _leaves(schema: StructType, mode: str, skipped: set[str]) -> Iterator[Leaf]:
    def walk(
        fields: list[StructField], logical: tuple[str, ...], physical: tuple[str, ...]
    ) -> Iterator[Leaf]:
        for field in fields:
            path, stored = (*logical, field.name), (*physical, physical_name(field, mode))
            if isinstance(field.type, StructType):
                yield from walk(field.type.fields, path, stored)
            elif isinstance(field.type, PrimitiveType):
                yield path, stored, field.type

    yield from walk([f for f in schema.fields if f.name not in skipped], (), ())


def _has_stats(leaf: Leaf) -> bool:
    try:
        stats_type(leaf[2])
    except ValueError:
        return False
    return True


def record_counts(stats: pa.Array) -> pa.Array:
    """Each file's ``numRecords`` (null where its statistics lack it)."""
    return pc.struct_field(read_stats_json(stats, pa.schema([("numRecords", pa.int64())])), "numRecords")


def _nest(values: dict[tuple[str, ...], pa.Array]) -> pa.StructArray:
    """One struct of the arrays by path (``("a", "b")`` is field ``b`` of field ``a``)."""
    children: dict[str, pa.Array | dict[tuple[str, ...], pa.Array]] = {}
    for path, array in values.items():
        if len(path) == 1:
            children[path[0]] = array
        else:
            nested = children.setdefault(path[0], {})
            assert isinstance(nested, dict)
            nested[path[1:]] = array
    arrays = [child if isinstance(child, pa.Array) else _nest(child) for child in children.values()]
    return pa.StructArray.from_arrays(arrays, names=list(children))
