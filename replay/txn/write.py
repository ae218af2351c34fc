"""Writing Arrow data to a Delta table from Python: ``write_table`` and ``delete_files``.

Appends and overwrites (whole table, ``replace_where`` partitions or dynamic partition overwrite),
schema evolution, idempotent writes and removal of whole files, with the same rules as the Spark
writer (:mod:`replay.txn.write_plan`). Data files are written by :mod:`replay.txn.data_writer`,
the commit is a :class:`~replay.txn.transaction.Transaction` (Delta's conflict rules, then the
post-commit hooks: automatic checkpoints, log cleanup), so writes are safe with concurrent
writers on every store that gives mutual exclusion.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeAlias

import orjson
import pyarrow as pa

from logstores.conf import ConfLike
from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile
from replay.protocol.errors import ConcurrentModificationError, TableAlreadyExistsError, TableNotFoundError
from replay.protocol.paths import normalize_path_key, resolve_path
from replay.protocol.schema import StructType
from replay.txn.data_writer import write_batches
from replay.txn.identity_values import IdentityValues, identity_to_generate
from replay.txn.transaction import Transaction
from replay.txn.write_commit import commit_write, remove_action
from replay.txn.write_plan import (
    InvalidWriteOptionError,
    WriteOptions,
    latest_snapshot,
    new_table_protocol,
    plan_write,
)

__all__ = [
    "TABLE_WRITE_MODES",
    "ArrowData",
    "ArrowStreamExportable",
    "arrow_stream",
    "delete_files",
    "delta_schema_string",
    "new_table_protocol",
    "write_table",
]

TABLE_WRITE_MODES = ("error", "append", "overwrite", "ignore")
"""``write_table``'s modes, as deltalake's ``write_deltalake`` has them (its default is ``error``)."""


class ArrowStreamExportable(Protocol):
    """An object exporting an Arrow C stream: a pandas DataFrame (pandas 2.2 and later), polars,
    DuckDB and arro3 objects, pyarrow's own."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...


class ArrowSchemaExportable(Protocol):
    """An object exporting an Arrow C schema (deltalake's and arro3's schemas, pyarrow's own)."""

    def __arrow_c_schema__(self) -> object: ...


ArrowData: TypeAlias = pa.Table | pa.RecordBatch | pa.RecordBatchReader | ArrowStreamExportable
"""What ``write_table`` writes (older pandas DataFrames are accepted too)."""


# -- data: anything Arrow -> a schema and batches ----------------------------------------------
def arrow_stream(data: ArrowData) -> tuple[pa.Schema, Iterable[pa.Table | pa.RecordBatch]]:
    """The schema of ``data`` and its rows as Arrow tables or batches, read once and lazily.

    A ``RecordBatchReader`` (or any Arrow stream) is consumed as it is written, never held whole
    in memory. A pandas DataFrame converts as in pyarrow (and deltalake): a ``RangeIndex`` is
    dropped, any other index becomes columns. Raises :class:`TypeError` for anything else.
    """
    if isinstance(data, pa.Table):
        return data.schema, _slices(data)
    if isinstance(data, pa.RecordBatch):
        return data.schema, [data]
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, data
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, reader
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, pandas.DataFrame):  # pandas < 2.2: no Arrow stream
        table = pa.Table.from_pandas(data)
        return table.schema, _slices(table)
    raise TypeError(
        "write_table writes a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame or "
        f"an object with __arrow_c_stream__, not {type(data).__module__}.{type(data).__qualname__}"
    )


# -- schema: Arrow -> Delta -------------------------------------------------------------------
_SIGNED = {
    pa.uint8(): pa.int8(),
    pa.uint16(): pa.int16(),
    pa.uint32(): pa.int32(),
    pa.uint64(): pa.int64(),
}
"""Unsigned integers are written as the signed type of the same width, as deltalake does (uint8 ->
byte, ..., uint64 -> long); a value out of that type's range fails the write naming the column."""
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def _storable(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with unsigned integers and view types replaced by what Delta stores."""
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_storable(f.type)) for f in arrow_type])
    if pa.types.is_map(arrow_type):
        return pa.map_(
            arrow_type.key_field.with_type(_storable(arrow_type.key_type)),
            arrow_type.item_field.with_type(_storable(arrow_type.item_type)),
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_storable(arrow_type.value_type)))
    return _SIGNED.get(arrow_type) or _VIEW_TYPES.get(arrow_type) or arrow_type


def delta_schema(schema: pa.Schema) -> StructType:
    """The Delta schema of Arrow data; :class:`ValueError` naming the column for a type Delta does
    not have."""
    fields = []
    for field in schema:
        try:
            fields.extend(StructType.from_arrow(pa.schema([field.with_type(_storable(field.type))])).fields)
        except ValueError as exc:
            raise ValueError(
                f"Column {field.name} ({field.type}) cannot be written to a Delta table: {exc}"
            ) from None
    return StructType(fields)


def delta_schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of a new table with ``schema``; :class:`ValueError` for unsupported types."""
    return delta_schema(schema).to_json()


# -- public API -------------------------------------------------------------------------------
ROWS_PER_SLICE = 1024 * 1024
"""Rows handed to the data writer at a time (it buffers them into row groups)."""


def write_table(  # noqa: PLR0917 (signature shared with the public API)
    table_uri: str,
    arrow_table: ArrowData,
    mode: str = "append",
    partition_by: list[str] | None = None,
    conf: ConfLike | None = None,
    configuration: Mapping[str, str] | None = None,
    *,
    max_rows_per_file: int | None = None,
    merge_schema: bool = False,
    overwrite_schema: bool = False,
    replace_where: str | None = None,
    partition_overwrite_mode: str = "static",
    txn_app_id: str | None = None,
    txn_version: int | None = None,
    user_metadata: str | None = None,
    cluster_by: list[str] | None = None,
    name: str | None = None,
    description: str | None = None,
    target_file_size: int | None = None,
) -> int | None:
    """Write ``arrow_table`` to the Delta table at ``table_uri``; returns the committed version.

    ``arrow_table`` is a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader`` (streamed, not
    held in memory), a pandas DataFrame or any object exporting an Arrow stream (see
    :func:`arrow_stream`). Unsigned integer columns are stored as the signed type of the same
    width, as deltalake does; a value out of its range fails the write naming the column.

    ``mode="append"`` adds files; ``mode="overwrite"`` also removes, in the same commit, every
    current file, or only the files of the partitions ``replace_where`` selects (a SQL predicate
    on partition columns that every written row must satisfy), or with
    ``partition_overwrite_mode="dynamic"`` the files of the partitions the data touches.
    ``mode="error"`` creates the table and raises :class:`TableAlreadyExistsError`
    (``DELTA_PATH_EXISTS``) if there is one; ``mode="ignore"`` creates it and writes nothing (returns
    ``None``) if there is one, also when a concurrent writer created it first.

    The first write creates the table (protocol + metadata) with ``partition_by`` or
    ``cluster_by`` (a clustered table, Delta's ``CLUSTER BY``: OPTIMIZE clusters it) and the table
    properties ``configuration`` (e.g. ``delta.enableChangeDataFeed``), and the metadata's ``name``
    and ``description``. Later writes must fit the
    table's schema: missing columns are written as nulls, values are cast to the table's types,
    new columns need ``merge_schema=True``, a different schema or partitioning needs
    ``mode="overwrite", overwrite_schema=True``. ``txn_app_id`` + ``txn_version`` make the write
    idempotent: when the table already holds that version for that application the write is
    skipped and ``None`` is returned. ``user_metadata`` is recorded in ``commitInfo``.

    Raises :class:`~replay.txn.schema_merge.SchemaMismatchError` (Delta's schema errors),
    :class:`~replay.txn.constraint_checks.InvariantViolationError` (a row violates a CHECK
    constraint, a NOT NULL column, an invariant, a generated column's expression or
    ``replace_where``; generated columns missing from the data are computed),
    :class:`UnsupportedTableFeatureError` for tables needing writer features this writer lacks
    (or whose constraints it cannot evaluate), :class:`AppendOnlyTableError` for an overwrite of
    an append-only table,
    :class:`ValueError` for invalid options, and
    :class:`replay.protocol.errors.ConcurrentModificationError` when a concurrent commit conflicts
    (an overwrite conflicts with a concurrent append to what it replaces). Nothing is committed
    and no data file is left behind when it fails.
    """
    if mode not in TABLE_WRITE_MODES:
        raise InvalidWriteOptionError(f"mode must be one of {', '.join(TABLE_WRITE_MODES)}, not {mode!r}")
    options = WriteOptions(
        mode="overwrite" if mode == "overwrite" else "append",
        partition_by=tuple(partition_by) if partition_by is not None else None,
        merge_schema=merge_schema,
        overwrite_schema=overwrite_schema,
        replace_where=replace_where,
        partition_overwrite_mode=partition_overwrite_mode,
        txn_app_id=txn_app_id,
        txn_version=txn_version,
        user_metadata=user_metadata,
        max_records_per_file=max_rows_per_file,
        target_file_size=target_file_size,
        configuration=dict(configuration or {}),
        allow_implicit_casts=True,
        cluster_by=tuple(cluster_by) if cluster_by is not None else None,
        name=name,
        description=description,
    )
    io = TableIO.for_table(table_uri, conf)
    snapshot = latest_snapshot(io)
    if snapshot is not None and mode == "error":
        raise TableAlreadyExistsError.at(io.table_path)
    if snapshot is not None and mode == "ignore":
        return None
    schema, batches = arrow_stream(arrow_table)
    plan = plan_write(io, snapshot, delta_schema(schema), options)
    if plan.already_committed:
        return commit_write(io, plan, [], snapshot=snapshot)
    generated = identity_to_generate(plan.spec.constraints.identity, schema.names, io.shown_path)
    identity = IdentityValues(generated)
    if identity.columns:
        batches = map(identity.fill, batches)
    written = write_batches(plan.spec, batches)
    try:  # deletes the files if nothing committed
        return commit_write(io, plan, written, snapshot=snapshot, identity_marks=identity.marks)
    except ConcurrentModificationError as exc:
        if mode == "ignore" and exc.winning_version == 0:
            return None  # a concurrent writer created the table: nothing to write
        raise


CREATE_MODES = ("error", "append", "overwrite", "ignore")
"""``create_table``'s modes, as deltalake's ``DeltaTable.create`` has them."""


def create_table(  # noqa: PLR0917 (deltalake's DeltaTable.create)
    table_uri: str,
    schema: pa.Schema,
    mode: str = "error",
    partition_by: list[str] | None = None,
    conf: ConfLike | None = None,
    configuration: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> int | None:
    """Create the table at ``table_uri`` with ``schema`` and no rows: one commit of protocol and
    metadata, Delta's ``CREATE TABLE`` (``CREATE OR REPLACE TABLE`` with ``mode="overwrite"``,
    which also removes every file of an existing table). If the table exists, ``mode="error"`` and
    ``mode="append"`` raise :class:`TableAlreadyExistsError` and ``mode="ignore"`` returns ``None``.
    Returns the committed version; raises what :func:`write_table` raises.
    """
    if mode not in CREATE_MODES:
        raise InvalidWriteOptionError(f"mode must be one of {', '.join(CREATE_MODES)}, not {mode!r}")
    options = WriteOptions(
        mode="overwrite" if mode == "overwrite" else "append",
        partition_by=tuple(partition_by or ()),  # a replaced table has exactly these
        overwrite_schema=mode == "overwrite",
        configuration=dict(configuration or {}),
        name=name,
        description=description,
    )
    io = TableIO.for_table(table_uri, conf)
    snapshot = latest_snapshot(io)
    if snapshot is not None and mode in ("error", "append"):
        raise TableAlreadyExistsError.at(io.table_path)
    if snapshot is not None and mode == "ignore":
        return None
    plan = plan_write(io, snapshot, delta_schema(schema), options)
    metadata = plan.metadata
    parameters = {
        "isManaged": "false",
        "description": metadata.description,
        "partitionBy": orjson.dumps(list(metadata.partition_columns)).decode(),
        "properties": orjson.dumps(dict(metadata.configuration)).decode(),
    }
    operation = "CREATE OR REPLACE TABLE" if snapshot is not None else "CREATE TABLE"
    return commit_write(io, plan, [], snapshot=snapshot, operation=operation, operation_parameters=parameters)


def _slices(table: pa.Table) -> Iterable[pa.Table]:
    for offset in range(0, table.num_rows, ROWS_PER_SLICE):
        yield table.slice(offset, ROWS_PER_SLICE)


def delete_files(table_uri: str, paths: Iterable[str], conf: ConfLike | None = None) -> int:
    """Remove whole data files from the table in one commit; returns the committed version.

    ``paths`` are paths as the log spells them (``AddFile.path``, compared with %-escapes
    normalised) or resolved URIs of the files. Raises :class:`ValueError` naming every path that
    is not an active file, :class:`TableNotFoundError` if there is no table, the commit checks'
    errors (:meth:`TableConfiguration.check_commit`: an append-only table, a protocol this
    library cannot commit to) and :class:`replay.protocol.errors.ConcurrentModificationError`
    if a concurrent commit removed one of them.
    """
    io = TableIO.for_table(table_uri, conf)
    snapshot = latest_snapshot(io)
    if snapshot is None:
        raise TableNotFoundError(f"Cannot delete files: no Delta table at {table_uri}", table=table_uri)
    by_key: dict[str, AddFile] = {}
    for add in snapshot.files():
        by_key[normalize_path_key(add.path)] = add
        by_key[resolve_path(io.table_path, add.path)] = add
    wanted = list(dict.fromkeys(paths))
    unknown = [path for path in wanted if path not in by_key and normalize_path_key(path) not in by_key]
    if unknown:
        raise ValueError(f"Not active files of table {table_uri} at version {snapshot.version}: {unknown}")
    now = int(time.time() * 1000)
    chosen = {id(add): add for add in (by_key.get(p) or by_key[normalize_path_key(p)] for p in wanted)}
    txn = Transaction(io, snapshot, operation="DELETE")
    txn.read_files(chosen.values())
    txn.add_actions(remove_action(add, now) for add in chosen.values())
    txn.operation_parameters = {"predicate": [f"path = '{add.path}'" for add in chosen.values()]}
    txn.operation_metrics = {"numRemovedFiles": len(chosen)}
    return txn.commit()
