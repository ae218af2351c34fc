"""Writing Arrow data to a Delta table from Python: ``write_table`` and ``delete_files``.

Appends, full overwrites and removal of whole files. Data files are written by
:mod:`replay.txn.data_writer`, the commit is made by :func:`replay.txn.committer.commit`, so
writes are safe with concurrent writers on every store that gives mutual exclusion.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping

import pyarrow as pa

from logstores.conf import ConfLike
from replay.log.table_io import TableIO
from replay.protocol.actions import Action, AddFile, Metadata, Protocol, RemoveFile
from replay.protocol.errors import TableNotFoundError
from replay.protocol.paths import normalize_path_key, resolve_path
from replay.protocol.schema import StructType
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import ENABLE_CHANGE_DATA_FEED, ENABLE_IN_COMMIT_TIMESTAMPS
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.committer import commit
from replay.txn.data_writer import write_data_files

WRITE_MODES = ("append", "overwrite")


# -- schema: Arrow -> Delta -------------------------------------------------------------------
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def delta_schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of a new table with ``schema``; :class:`ValueError` for unsupported types."""
    plain = pa.schema([field.with_type(_VIEW_TYPES.get(field.type, field.type)) for field in schema])
    return StructType.from_arrow(plain).to_json()


def _uses_timestamp_ntz(schema_string: str) -> bool:
    return '"timestamp_ntz"' in schema_string


# -- table creation ---------------------------------------------------------------------------
def new_table_protocol(configuration: Mapping[str, str], schema_string: str) -> Protocol:
    """The smallest protocol that supports the table properties and types of a new table.

    Legacy versions where they suffice (writer 2, or 4 for the change data feed); table features
    (reader 3 / writer 7) once ``timestamp_ntz`` or in-commit timestamps are needed.
    """
    ntz = _uses_timestamp_ntz(schema_string)
    ict = ENABLE_IN_COMMIT_TIMESTAMPS.value_in(configuration)
    cdf = ENABLE_CHANGE_DATA_FEED.value_in(configuration)
    if not ntz and not ict:
        return Protocol(min_reader_version=1, min_writer_version=4 if cdf else 2)
    writer = ["appendOnly", "invariants"]
    reader: list[str] = []
    if cdf:
        writer.append("changeDataFeed")
    if ict:
        writer.append("inCommitTimestamp")
    if ntz:
        writer.append("timestampNtz")
        reader.append("timestampNtz")
    if reader:
        return Protocol(
            min_reader_version=3, min_writer_version=7, reader_features=reader, writer_features=writer
        )
    return Protocol(min_reader_version=1, min_writer_version=7, writer_features=writer)


# -- public API -------------------------------------------------------------------------------
def _conform(data: pa.Table, table_schema: pa.Schema, table: str) -> pa.Table:
    """``data`` with the table's column order and types; raises :class:`ValueError` on mismatch."""
    expected = set(table_schema.names)
    given = set(data.column_names)
    if expected != given:
        missing = sorted(expected - given)
        extra = sorted(given - expected)
        raise ValueError(
            f"Schema of the data does not match table {table}: missing columns {missing}, "
            f"unknown columns {extra}"
        )
    try:
        return data.select(table_schema.names).cast(table_schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"Data cannot be written to table {table}: {exc}") from None


def write_table(  # noqa: PLR0917 (signature shared with the public API)
    table_uri: str,
    arrow_table: pa.Table,
    mode: str = "append",
    partition_by: list[str] | None = None,
    conf: ConfLike | None = None,
    configuration: Mapping[str, str] | None = None,
    *,
    max_rows_per_file: int | None = None,
) -> int:
    """Write ``arrow_table`` to the Delta table at ``table_uri`` and return the committed version.

    ``mode="append"`` adds files; ``mode="overwrite"`` also removes every current file in the
    same commit. The first write creates the table (protocol + metadata) with ``partition_by``
    and the table properties ``configuration`` (e.g. ``delta.enableChangeDataFeed``); later
    writes must match the table's columns and partitioning (``ValueError`` otherwise) and ignore
    ``configuration``. Raises :class:`UnsupportedTableFeatureError` for tables needing writer
    features this writer lacks, :class:`AppendOnlyTableError` for an overwrite of an append-only
    table (both before any data file is written) and
    :class:`replay.protocol.errors.ConcurrentModificationError` when a concurrent commit
    conflicts (an overwrite conflicts with any concurrent append).
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(WRITE_MODES)}, not {mode!r}")
    io = TableIO.for_table(table_uri, conf)
    snapshot = _latest_snapshot(io)
    actions: list[Action] = []
    if snapshot is None:
        partition_columns = list(partition_by or [])
        _check_partition_columns(partition_columns, arrow_table.schema, table_uri)
        schema_string = delta_schema_string(arrow_table.schema)
        table_configuration = {str(k): str(v) for k, v in (configuration or {}).items()}
        protocol = new_table_protocol(table_configuration, schema_string)
        metadata = Metadata(
            id=str(uuid.uuid4()),
            schema_string=schema_string,
            partition_columns=partition_columns,
            configuration=table_configuration,
            created_time=int(time.time() * 1000),
        )
        actions += [protocol, metadata]
    else:
        protocol, metadata = snapshot.protocol, snapshot.metadata
        partition_columns = list(metadata.partition_columns)
        if partition_by is not None and list(partition_by) != partition_columns:
            raise ValueError(
                f"Partition columns {list(partition_by)} do not match table {table_uri}, "
                f"which is partitioned by {partition_columns}"
            )
    data = _conform(arrow_table, metadata.arrow_schema, table_uri)
    config = TableConfiguration(protocol, metadata, io.table_path)
    # Refused before any data file is written: the data writer's own limits, then the checks the
    # commit will make (the same rule, TableConfiguration.check_commit).
    config.check_writable()
    config.check_commit(
        removes_data=mode == "overwrite" and snapshot is not None,
        previous=snapshot.config if snapshot is not None else None,
    )
    files = write_data_files(
        io.table_path,
        data,
        partition_columns,
        conf=io.conf,
        num_indexed_cols=config.num_indexed_cols,
        max_rows_per_file=max_rows_per_file,
    )
    removes: list[RemoveFile] = []
    if mode == "overwrite" and snapshot is not None:
        now = int(time.time() * 1000)
        removes = [remove_action(add, now) for add in snapshot.files()]
    actions += [written.add for written in files]
    actions += removes
    metrics = {
        "numFiles": len(files),
        "numOutputRows": sum(written.num_rows for written in files),
        "numOutputBytes": sum(written.add.size for written in files),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes)
    parameters = {"mode": "Overwrite" if mode == "overwrite" else "Append", "partitionBy": partition_columns}
    return commit(
        io,
        actions,
        "WRITE",
        parameters,
        read_snapshot=snapshot,
        reads_whole_table=mode == "overwrite",
        operation_metrics=metrics,
    )


def remove_action(add: AddFile, deletion_timestamp: int) -> RemoveFile:
    """The tombstone that removes ``add`` as a data change (extended file metadata kept)."""
    return RemoveFile(
        path=add.path,
        deletion_timestamp=deletion_timestamp,
        data_change=True,
        extended_file_metadata=True,
        partition_values=dict(add.partition_values),
        size=add.size,
        stats=add.stats,
        tags=add.tags,
        deletion_vector=add.deletion_vector,
        base_row_id=add.base_row_id,
        default_row_commit_version=add.default_row_commit_version,
    )


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
    snapshot = _latest_snapshot(io)
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
    removes = [remove_action(add, now) for add in chosen.values()]
    metrics = {"numRemovedFiles": len(removes)}
    parameters = {"predicate": [f"path = '{remove.path}'" for remove in removes]}
    return commit(io, removes, "DELETE", parameters, read_snapshot=snapshot, operation_metrics=metrics)


def _latest_snapshot(io: TableIO) -> Snapshot | None:
    try:
        return load_snapshot(io)
    except TableNotFoundError:
        return None


def _check_partition_columns(partition_columns: list[str], schema: pa.Schema, table: str) -> None:
    missing = [name for name in partition_columns if name not in schema.names]
    if missing:
        raise ValueError(f"Partition columns {missing} are not columns of the data written to {table}")
    if partition_columns and len(partition_columns) == len(schema.names):
        raise ValueError(f"Cannot partition table {table} by all of its columns {partition_columns}")
