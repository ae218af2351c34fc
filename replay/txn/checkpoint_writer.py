"""Parquet checkpoints (classic single- or multi-part; V2) and ``_last_checkpoint``.

A checkpoint holds a snapshot's state as one row per action: protocol, metadata, domain
metadata, set transactions, active files and unexpired tombstones (reference §5.9). Columns
are Delta's top-level action structs, everything nullable as Spark writes them; ``add.stats``
is the JSON string (no ``stats_parsed``), ``remove`` has no ``stats``/``tags``.

Every file goes through ``store.write_bytes(path, data, overwrite=True)``, which publishes the
whole file atomically on stores where partial writes could be seen (temp file + rename) and is
a single PUT on object stores; a checkpoint written twice has the same content, so replacing
it is harmless. ``_last_checkpoint`` is written last, so readers never see it point at a
checkpoint that is not complete.

A table with the ``v2Checkpoint`` feature gets V2 checkpoints under the classic name, as the
protocol allows: one file whose rows also hold a ``checkpointMetadata`` action, every file action
inline (no sidecars).
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from replay.log.last_checkpoint import LastCheckpointInfo
from replay.log.table_io import TableIO
from replay.progress import track
from replay.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.arrow_actions import (
    CHECKPOINT_ADD_TYPE,
    CHECKPOINT_METADATA_TYPE,
    CHECKPOINT_REMOVE_TYPE,
    CHECKPOINT_SCHEMA,
    snake_column,
)
from replay.protocol.errors import DeltaError
from replay.protocol.filenames import checkpoint_file_single, checkpoint_files_multipart, last_checkpoint_file
from replay.state.snapshot import Snapshot

logger = logging.getLogger(__name__)

PART_SIZE_KEY = "spark.databricks.delta.checkpoint.partSize"
"""Conf key of the maximum number of file actions per checkpoint part (unset: one part)."""

ROW_GROUP_ROWS = 128 * 1024
"""Rows per Parquet row group of a checkpoint part (lets readers decode row groups in parallel)."""

_COLUMN_OF: dict[type, str] = {
    SetTransaction: "txn",
    AddFile: "add",
    RemoveFile: "remove",
    Metadata: "metaData",
    Protocol: "protocol",
    DomainMetadata: "domainMetadata",
}


@dataclass(frozen=True)
class CheckpointResult:
    """What :func:`write_checkpoint` wrote: the files and the ``_last_checkpoint`` fields."""

    version: int
    paths: list[str]
    size: int
    num_of_add_files: int
    size_in_bytes: int

    @property
    def parts(self) -> int | None:
        """Number of parts of a multi-part checkpoint; ``None`` for a single file."""
        return len(self.paths) if len(self.paths) > 1 else None

    def last_checkpoint(self) -> LastCheckpointInfo:
        """The ``_last_checkpoint`` record of this checkpoint (its JSON carries Delta's checksum)."""
        return LastCheckpointInfo(
            version=self.version,
            size=self.size,
            parts=self.parts,
            size_in_bytes=self.size_in_bytes,
            num_of_add_files=self.num_of_add_files,
        )


# -- pure part: actions -> Arrow tables --------------------------------------------------------
def checkpoint_header(
    protocol: Protocol,
    metadata: Metadata,
    *,
    domain_metadata: Iterable[DomainMetadata] = (),
    transactions: Iterable[SetTransaction] = (),
) -> list[Action]:
    """The checkpoint's non-file actions in Delta's order; removed domains are dropped."""
    header: list[Action] = [protocol, metadata]
    header += [domain for domain in domain_metadata if not domain.removed]
    header += list(transactions)
    return header


def _column_rows(actions: Sequence[Action], column: str) -> list[dict[str, Any] | None]:
    rows: list[dict[str, Any] | None] = []
    for action in actions:
        if _COLUMN_OF.get(type(action)) != column:
            rows.append(None)
            continue
        row = action.inner_dict()
        if column in ("add", "remove"):
            row["dataChange"] = False
        rows.append(row)
    return rows


def checkpoint_table(actions: Sequence[Action]) -> pa.Table:
    """Checkpoint rows for ``actions``, one per action, with :data:`CHECKPOINT_SCHEMA`.

    File actions get ``dataChange=false``. Raises :class:`TypeError` for actions that never go
    into a classic checkpoint (commitInfo, cdc, sidecar, checkpointMetadata).
    """
    for action in actions:
        if type(action) not in _COLUMN_OF:
            raise TypeError(f"{type(action).__name__} actions do not belong in a classic checkpoint")
    columns = [pa.array(_column_rows(actions, field.name), type=field.type) for field in CHECKPOINT_SCHEMA]
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


def add_struct(files: pa.RecordBatch) -> pa.StructArray:
    """The ``add`` column for active files given like :meth:`Snapshot.files_table` (snake_case).

    Zero-copy where the types already match; ``dataChange`` is false in every row, as in every
    checkpoint.
    """
    children = []
    for field in CHECKPOINT_ADD_TYPE:
        if field.name == "dataChange":
            children.append(pa.repeat(pa.scalar(False), files.num_rows))
        else:
            children.append(snake_column(files, field.name, field.type))
    return pa.StructArray.from_arrays(children, fields=list(CHECKPOINT_ADD_TYPE))


def _rows_batch(column: str, values: pa.Array) -> pa.RecordBatch:
    arrays = [values if f.name == column else pa.nulls(len(values), f.type) for f in CHECKPOINT_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=CHECKPOINT_SCHEMA)


def file_rows_table(files: pa.Table, tombstones: Sequence[RemoveFile]) -> pa.Table:
    """Checkpoint rows for the active files (as :meth:`Snapshot.files_table`) and the tombstones.

    Rows keep the snapshot's order (Delta gives checkpoint rows no particular order).
    """
    batches = [_rows_batch("add", add_struct(batch)) for batch in files.to_batches() if batch.num_rows]
    removes = pa.array(_column_rows(tombstones, "remove"), type=CHECKPOINT_REMOVE_TYPE)
    if len(removes):
        batches.append(_rows_batch("remove", removes))
    return pa.Table.from_batches(batches, schema=CHECKPOINT_SCHEMA)


def split_parts(header: pa.Table, file_rows: pa.Table, parts_threshold: int | None) -> list[pa.Table]:
    """Checkpoint parts: ``max(1, ceil(file rows / threshold))`` slices, the header rows in the first.

    ``parts_threshold=None`` means a single part; raises :class:`ValueError` if it is not positive.
    """
    if parts_threshold is not None and parts_threshold <= 0:
        raise ValueError(f"parts_threshold must be positive, got {parts_threshold}")
    count = file_rows.num_rows
    num_parts = 1 if not parts_threshold else max(1, math.ceil(count / parts_threshold))
    per_part = math.ceil(count / num_parts) if count else 0
    parts = [file_rows.slice(index * per_part, per_part) for index in range(num_parts)]
    parts[0] = pa.concat_tables([header, parts[0]])
    return parts


def with_checkpoint_metadata(part: pa.Table, version: int) -> pa.Table:
    """``part`` as a V2 checkpoint: a ``checkpointMetadata`` column, set on one row of its own."""
    rows = part.num_rows
    part = part.append_column("checkpointMetadata", pa.nulls(rows, CHECKPOINT_METADATA_TYPE))
    header = [pa.nulls(1, f.type) for f in CHECKPOINT_SCHEMA]
    metadata = pa.array([{"version": version, "tags": None}], CHECKPOINT_METADATA_TYPE)
    return pa.concat_tables([pa.Table.from_arrays([*header, metadata], schema=part.schema), part])


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as a snappy-compressed Parquet file."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    return buffer.getvalue()


# -- I/O --------------------------------------------------------------------------------------
def _part_size(io: TableIO, parts_threshold: int | None) -> int | None:
    if parts_threshold is not None:
        return parts_threshold
    configured = io.conf.get(PART_SIZE_KEY) or io.conf.get(PART_SIZE_KEY.removeprefix("spark."))
    return int(configured) if configured else None


def write_checkpoint(io: TableIO, snapshot: Snapshot, parts_threshold: int | None = None) -> CheckpointResult:
    """Write a checkpoint of ``snapshot`` and then ``_last_checkpoint``.

    ``parts_threshold`` is the most file actions (adds + tombstones) per part; above it the
    checkpoint is multi-part (``V.checkpoint.i.n.parquet``). Default: the conf key
    ``spark.databricks.delta.checkpoint.partSize``, else a single file. Tombstones and
    transactions are those the snapshot keeps (``delta.deletedFileRetentionDuration``,
    ``delta.setTransactionRetentionDuration``).

    A table with the ``v2Checkpoint`` feature gets a V2 checkpoint in one file (see the module
    docstring). Raises :class:`DeltaError` for a table without commits
    (``DELTA_CHECKPOINT_NON_EXIST_TABLE``) and when the rows disagree with the snapshot
    (``DELTA_CHECKPOINT_SNAPSHOT_MISMATCH``).
    """
    table = io.table_path
    if snapshot.version < 0:
        raise DeltaError(
            f"[DELTA_CHECKPOINT_NON_EXIST_TABLE] Cannot checkpoint a non-existing table {table}. "
            "Did you manually delete files in the _delta_log directory?",
            table=table,
        )
    v2 = snapshot.protocol.has_writer_feature("v2Checkpoint")
    header = checkpoint_header(
        snapshot.protocol,
        snapshot.metadata,
        domain_metadata=snapshot.domain_metadata.values(),
        transactions=snapshot.transactions(),
    )
    file_rows = file_rows_table(snapshot.files_table(), snapshot.tombstones())
    num_adds = file_rows.num_rows - file_rows.column("add").null_count
    if num_adds != snapshot.num_files:
        raise DeltaError(
            "[DELTA_CHECKPOINT_SNAPSHOT_MISMATCH] State of the checkpoint doesn't match that of the "
            f"snapshot: {num_adds} add rows for {snapshot.num_files} files at version {snapshot.version} "
            f"of {table}.",
            table=table,
        )
    parts = split_parts(checkpoint_table(header), file_rows, None if v2 else _part_size(io, parts_threshold))
    if v2:  # a V2 checkpoint under the classic name: one file with its checkpointMetadata row
        parts = [with_checkpoint_metadata(parts[0], snapshot.version)]
    if len(parts) == 1:
        paths = [checkpoint_file_single(io.log_path, snapshot.version)]
    else:
        paths = checkpoint_files_multipart(io.log_path, snapshot.version, len(parts))
    size_in_bytes = 0
    for path, part in track("Writing checkpoint parts", zip(paths, parts, strict=True), len(parts)):
        data = parquet_bytes(part)
        io.store.write_bytes(path, data, overwrite=True)
        size_in_bytes += len(data)
    result = CheckpointResult(
        version=snapshot.version,
        paths=paths,
        size=sum(part.num_rows for part in parts),
        num_of_add_files=num_adds,
        size_in_bytes=size_in_bytes,
    )
    last = last_checkpoint_file(io.log_path)
    io.store.write(last, [result.last_checkpoint().to_json()], overwrite=True)
    logger.info("wrote checkpoint %d of %s in %d part(s)", snapshot.version, table, len(paths))
    return result
