"""What a data write needs to know, and conforming incoming data to the table.

A :class:`FileWriteSpec` (picklable, so Spark tasks get it) says which table, schema, partition
columns, statistics settings and constraints a write has; :func:`conform` gives incoming Arrow data
the table's column names, order and types and checks the table's constraints
(:mod:`replay.txn.constraint_checks`); :func:`check_replace_where` checks a ``replaceWhere``
predicate. Pure: no I/O.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import pyarrow as pa

from logstores.redaction import redact_url
from replay.data.dictionaries import decode_dictionaries, is_dictionary_of
from replay.data.row_lineage import LINEAGE_COLUMNS, stored_fields
from replay.protocol.column_mapping import data_file_prefix_length, data_file_schema
from replay.protocol.constraints import TableConstraints
from replay.protocol.iceberg_compat import file_tags
from replay.protocol.identity_columns import IdentityColumnError
from replay.protocol.sql_predicate import parse_predicate
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import iceberg_compat_version
from replay.txn.constraint_checks import InvariantViolationError, RowConstraints, compile_constraints
from replay.txn.statistics import DEFAULT_NUM_INDEXED_COLS, DEFAULT_STRING_PREFIX_LENGTH


@dataclass(frozen=True)
class FileWriteSpec:
    """What writing data files for one commit needs; picklable, so Spark tasks get it.

    ``schema`` is the table's schema as Arrow (logical names, partition columns included) after
    the write; incoming columns are matched to it case-insensitively, missing ones written as
    nulls (generated columns computed). ``constraints`` are the table's rules for every row
    (CHECK constraints, NOT NULL fields, invariants, generated columns), as texts: each writer
    binds them itself (:func:`~replay.txn.constraint_checks.compile_constraints`), with
    ``write_time`` as the expressions' ``current_timestamp()``. ``replace_where`` is checked on
    every row after them.
    """

    table_path: str
    schema: pa.Schema
    partition_columns: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)
    num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS
    string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH
    max_records_per_file: int | None = None
    target_file_size: int | None = None
    """A file is closed once this many bytes are written to it (files of about that size)."""
    replace_where: str | None = None
    constraints: TableConstraints = field(default_factory=TableConstraints)
    write_time: _dt.datetime | None = None
    file_schema: pa.Schema | None = None
    """Under column mapping, the data files' names and field ids for :attr:`schema`, field for
    field (:func:`~replay.protocol.column_mapping.data_file_schema`); ``None`` without."""
    prefix_length: int = 0
    """The length of the random directory prefix files go under instead of partition directories
    (:func:`~replay.protocol.table_properties.random_prefix_length`; 0: none)."""
    stats_columns: tuple[tuple[str, ...], ...] | None = None
    """The columns statistics cover when the table names them (``delta.dataSkippingStatsColumns``,
    logical paths); ``None``: the first :attr:`num_indexed_cols` leaves."""
    row_tracking: tuple[str, str] | None = None
    """The names the files store rows' row ids and row commit versions under when the write keeps
    them (a rewrite on a table with row tracking enabled,
    :attr:`~replay.protocol.table_config.TableConfiguration.materialized_row_tracking_columns`):
    the rows written then may carry them in the :mod:`replay.data.row_lineage` columns (nulls
    where they do not: fresh ids). ``None``: the files have no such columns."""
    iceberg_compat: int | None = None
    """The IcebergCompat version the table enables (:mod:`replay.protocol.iceberg_compat`):
    then data files hold the partition columns too (:attr:`partitions_in_files`) and their
    ``add`` s carry :attr:`file_tags`."""

    @classmethod
    def of_table(cls, table_path: str, config: TableConfiguration, conf: Mapping[str, str]) -> FileWriteSpec:
        """How files of a table in ``config`` are laid out: its columns, partitioning, statistics,
        column mapping and file prefixes (no constraints, no write options)."""
        metadata = config.metadata
        partitioned = bool(metadata.partition_columns)
        return cls(
            table_path=table_path,
            schema=metadata.schema.to_arrow(),
            partition_columns=tuple(metadata.partition_columns),
            conf=dict(conf),
            num_indexed_cols=config.num_indexed_cols,
            string_prefix_length=config.string_prefix_length,
            stats_columns=config.stats_columns,
            file_schema=data_file_schema(metadata.schema, config.configuration),
            prefix_length=data_file_prefix_length(config.configuration, partitioned),
            iceberg_compat=iceberg_compat_version(config.configuration),
        )

    def compile_constraints(self) -> RowConstraints | None:
        """The constraints bound to :attr:`schema` (``None`` when the table has none)."""
        return compile_constraints(self.constraints, self.schema, self.table_path, self.write_time)

    @cached_property
    def data_schema(self) -> pa.Schema:
        """The schema of the data files: the table's columns but the partition columns, nested
        fields nullable (a NOT NULL struct field inside a null struct holds a null; the table's
        constraints, not the file schema, keep the others non-null)."""
        partitions = set(self.partition_columns)
        return pa.schema([f for f in relaxed_schema(self.schema) if f.name not in partitions])

    @property
    def partitions_in_files(self) -> bool:
        """Whether data files also hold the partition columns, after the data columns (under
        IcebergCompat); otherwise only their paths and ``partitionValues`` do."""
        return bool(self.partition_columns) and self.iceberg_compat is not None

    @cached_property
    def file_tags(self) -> dict[str, str]:
        """The tags of the ``add`` of each data file written (none on most tables)."""
        return file_tags(self.iceberg_compat)

    @cached_property
    def stats_schema(self) -> pa.Schema:
        """:attr:`data_schema` as data files store it: under column mapping, with the files'
        names and field ids. The columns statistics are taken of."""
        if self.file_schema is None:
            return self.data_schema
        partitions = set(self.partition_columns)
        pairs = zip(self.schema, self.file_schema, strict=True)
        return relaxed_schema(pa.schema([stored for f, stored in pairs if f.name not in partitions]))

    @cached_property
    def stored_schema(self) -> pa.Schema:
        """The columns of the data files: :attr:`stats_schema`, then the partition columns when
        files hold them (:attr:`partitions_in_files`), then the materialized row tracking columns
        when the write keeps them (:attr:`row_tracking`); :func:`to_stored_columns` renames rows
        with these columns, in this order, to it."""
        if not self.partitions_in_files and self.row_tracking is None:
            return self.stats_schema
        fields = [*self.stats_schema]
        if self.partitions_in_files:
            stored = self.file_schema if self.file_schema is not None else self.schema
            names = self.schema.names
            fields += relaxed_schema(
                pa.schema([stored.field(names.index(c)) for c in self.partition_columns])
            )
        if self.row_tracking is not None:
            fields += stored_fields(self.row_tracking)
        return pa.schema(fields)

    @property
    def renames_columns(self) -> bool:
        """Whether rows are stored under other names than theirs (:func:`to_stored_columns`)."""
        return self.file_schema is not None or self.row_tracking is not None or self.partitions_in_files

    @cached_property
    def partition_keys(self) -> tuple[str, ...]:
        """The partition columns' keys in an ``add``'s ``partitionValues`` (under column mapping
        their physical names)."""
        if self.file_schema is None:
            return self.partition_columns
        names = self.schema.names
        return tuple(self.file_schema.field(names.index(column)).name for column in self.partition_columns)

    @cached_property
    def stored_stats_columns(self) -> tuple[tuple[str, ...], ...] | None:
        """:attr:`stats_columns` as paths of :attr:`stored_schema` (matched case-insensitively;
        a path naming no data column is left out)."""
        if self.stats_columns is None:
            return None
        stored = self.file_schema if self.file_schema is not None else self.schema
        partitions = {name.lower() for name in self.partition_columns}
        paths = []
        for path in self.stats_columns:
            if path[0].lower() not in partitions:
                found = _stored_path(self.schema, stored, path)
                if found is not None:
                    paths.append(found)
        return tuple(paths)

    def with_column(self, column: pa.Field) -> FileWriteSpec:
        """This spec with one more column, stored under its own name (``_change_type``)."""
        stored = self.file_schema.append(column) if self.file_schema is not None else None
        return replace(
            self,
            schema=self.schema.append(column),
            file_schema=stored,
            max_records_per_file=None,
            target_file_size=None,
            row_tracking=None,
        )


def _stored_path(logical: pa.Schema, stored: pa.Schema, path: tuple[str, ...]) -> tuple[str, ...] | None:
    """``path`` (logical names) through the structs of ``logical`` as names of ``stored``."""
    fields: list[tuple[pa.Field, pa.Field]] = list(zip(logical, stored, strict=True))
    names: list[str] = []
    for part in path:
        match = next(((a, b) for a, b in fields if a.name.lower() == part.lower()), None)
        if match is None:
            return None
        names.append(match[1].name)
        inner, stored_inner = match[0].type, match[1].type
        structs = pa.types.is_struct(inner) and pa.types.is_struct(stored_inner)
        fields = list(zip(inner, stored_inner, strict=True)) if structs else []
    return tuple(names)


def to_stored_columns(rows: pa.Table, stored: pa.Schema) -> pa.Table:
    """``rows`` (the columns of a spec's :attr:`~FileWriteSpec.data_schema`, in order) under the
    names and field ids of ``stored`` (its :attr:`~FileWriteSpec.stored_schema`). Nested fields
    are renamed by a zero-copy view of the same buffers; a dictionary column keeps its type."""
    arrays: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    for column, target in zip(rows.columns, stored, strict=True):
        data_type = column.type
        if pa.types.is_dictionary(data_type) or data_type.equals(target.type, check_metadata=True):
            arrays.append(column)
        else:
            arrays.append(pa.chunked_array([c.view(target.type) for c in column.chunks], type=target.type))
        fields.append(target.with_type(arrays[-1].type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def conform(
    data: pa.Table | pa.RecordBatch,
    spec: FileWriteSpec,
    constraints: RowConstraints | None = None,
    *,
    keep_dictionaries: bool = False,
) -> pa.Table:
    """``data`` with the table's column names, order and types (nested fields nullable:
    :func:`relaxed_schema`); missing columns as nulls, missing generated columns computed, and the
    table's constraints checked (``constraints``: the spec's,
    compiled once by the caller; ``None`` when the table has none). With ``keep_dictionaries`` and
    no constraints, a dictionary column of the type's values stays one (with 32-bit indices).

    Raises :class:`InvariantViolationError` for a missing NOT NULL column or a row that violates a
    constraint, and :class:`ValueError` naming the column for an unknown column or a value that
    does not cast.
    """
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    lineage: list[pa.ChunkedArray | pa.Array] = []
    if spec.row_tracking is not None:  # carried as they are, after the table's columns
        names = table.column_names
        lineage = [
            table.column(name) if name in names else pa.nulls(table.num_rows, pa.int64())
            for name in LINEAGE_COLUMNS
        ]
        table = table.drop_columns([name for name in LINEAGE_COLUMNS if name in names])
    if keep_dictionaries and constraints is not None:  # constraints read plain columns
        table = decode_dictionaries(table)
    by_lower = {name.lower(): index for index, name in enumerate(table.column_names)}
    known = {name.lower() for name in spec.schema.names}
    unknown = [name for name in table.column_names if name.lower() not in known]
    if unknown:
        raise ValueError(f"Columns {unknown} are not in the schema of table {spec.table_path}")
    not_null = set(spec.constraints.not_null_columns)
    generated = {g.column for g in spec.constraints.generated}
    identity = {i.name for i in spec.constraints.identity}
    schema = relaxed_schema(spec.schema)
    missing: list[str] = []
    columns: list[pa.ChunkedArray | pa.Array] = []
    for target in schema:
        index = by_lower.get(target.name.lower())
        if index is None and target.name in identity:  # generated by the write, before (IdentityValues)
            raise IdentityColumnError(
                f"Cannot write to table {redact_url(spec.table_path)}: the data lacks the IDENTITY "
                f"column {target.name}, whose values this writer does not generate.",
                column=target.name,
            )
        if index is None:
            if target.name in not_null and target.name not in generated:
                raise InvariantViolationError(
                    f"[DELTA_MISSING_NOT_NULL_COLUMN_VALUE] Column {target.name}, which has a NOT NULL "
                    "constraint, is missing from the data being written into the table "
                    f"{redact_url(spec.table_path)}.",
                    error_class="DELTA_MISSING_NOT_NULL_COLUMN_VALUE",
                    constraint="NOT NULL",
                    expression=target.name,
                )
            missing.append(target.name)
            columns.append(pa.nulls(table.num_rows, target.type))
            continue
        column = table.column(index)
        if keep_dictionaries and is_dictionary_of(column.type, target.type):  # replay.data.dictionaries
            kept = pa.dictionary(pa.int32(), target.type)  # any later rows cast to it without overflow
            column = column if column.type == kept else column.cast(kept)
            schema = schema.set(len(columns), target.with_type(kept))
        elif column.type != target.type:
            try:
                column = column.cast(target.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(
                    f"Column {target.name} cannot be written to table {spec.table_path} "
                    f"as {target.type}: {exc}"
                ) from None
        columns.append(column)
    conformed = pa.Table.from_arrays(columns, schema=schema)
    if constraints is not None:
        conformed = constraints.enforce(conformed, missing)
    for name, column in zip(LINEAGE_COLUMNS, lineage, strict=False):
        conformed = conformed.append_column(pa.field(name, pa.int64()), column.cast(pa.int64()))
    return conformed


@functools.lru_cache(maxsize=64)
def relaxed_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every nested field nullable (top-level fields as they are): what data is
    conformed to and files are written with. A null in a NOT NULL struct field then fails the NOT
    NULL check with Delta's error rather than a cast error, and a NOT NULL field of a null struct
    (which holds a null) can be stored. ``schema`` itself when nothing nested is NOT NULL."""
    relaxed = pa.schema(
        [pa.field(f.name, _nullable_type(f.type), f.nullable, f.metadata) for f in schema],
        metadata=schema.metadata,
    )
    return schema if relaxed.equals(schema) else relaxed


def _nullable_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), True, f.metadata) for f in data_type])
    if pa.types.is_map(data_type):
        key = pa.field(data_type.key_field.name, _nullable_type(data_type.key_type), False)
        item = pa.field(data_type.item_field.name, _nullable_type(data_type.item_type), True)
        return pa.map_(key, item, data_type.keys_sorted)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        value = pa.field(data_type.value_field.name, _nullable_type(data_type.value_type), True)
        return pa.list_(value) if pa.types.is_list(data_type) else pa.large_list(value)
    return data_type


def check_replace_where(table: pa.Table, replace_where: str) -> None:
    """Raise Delta's ``DELTA_REPLACE_WHERE_MISMATCH`` naming the first row of ``table`` that
    ``replace_where`` does not hold for."""
    predicate = parse_predicate(replace_where).resolve(table.column_names)
    violating = predicate.violating(table.select(predicate.columns))
    if violating.num_rows:
        row = violating.slice(0, 1).to_pylist()[0]
        values = "\n".join(f" - {name} : {value}" for name, value in row.items())
        raise InvariantViolationError(
            "[DELTA_REPLACE_WHERE_MISMATCH] Written data does not conform to partial table overwrite "
            f"condition or constraint '{replace_where}'.\n[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES] CHECK "
            f"constraint EXPRESSION({replace_where}) violated by row with values:\n{values}"
        )
