"""Classic Parquet checkpoints (single- or multi-part) and ``_last_checkpoint``.

A checkpoint holds a snapshot's state as one row per action: protocol, metadata, domain
metadata, set transactions, active files and unexpired tombstones (reference §5.9). Columns
are Delta's top-level action structs, everything nullable as Spark writes them; ``add.stats``
is the JSON string (no ``stats_parsed``), ``remove`` has no ``stats``/``tags``.

Every file goes through ``store.write_bytes(path, data, overwrite=True)``, which publishes the
whole file atomically on stores where partial writes could be seen (temp file + rename) and is
a single PUT on object stores; a checkpoint written twice has the same content, so replacing
it is harmless. ``_last_checkpoint`` is written last, so readers never see it point at a
checkpoint that is not complete.
"""

from __future__ import annotations

import io
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from replay.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.checkpoints import LastCheckpointInfo
from replay.errors import DeltaError, UnsupportedTableFeatureError
from replay.filenames import checkpoint_file_single, checkpoint_files_multipart, last_checkpoint_file
from replay.progress import track

if TYPE_CHECKING:
    from replay.delta_log import DeltaLog
    from replay.snapshot import Snapshot

logger = logging.getLogger(__name__)

PART_SIZE_KEY = "spark.databricks.delta.checkpoint.partSize"
"""Conf key of the maximum number of file actions per checkpoint part (unset: one part)."""

ROW_GROUP_ROWS = 128 * 1024
"""Rows per Parquet row group of a checkpoint part (lets readers decode row groups in parallel)."""

_STRING_MAP = pa.map_(pa.string(), pa.string())
_STRING_LIST = pa.list_(pa.string())
_DELETION_VECTOR = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", _STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("tags", _STRING_MAP),
        ("deletionVector", _DELETION_VECTOR),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
        ("stats", pa.string()),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", _STRING_MAP),
        ("size", pa.int64()),
        ("deletionVector", _DELETION_VECTOR),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", _STRING_LIST),
                    ("configuration", _STRING_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", _STRING_LIST),
                    ("writerFeatures", _STRING_LIST),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
    ]
)
"""The classic checkpoint's Parquet schema (Delta's ``SingleAction`` minus the dropped columns)."""

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


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _column(batch: pa.RecordBatch, name: str, arrow_type: pa.DataType) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, arrow_type)
    array = batch.column(index)
    if pa.types.is_struct(arrow_type):
        return _renamed_struct(array, arrow_type)
    return array if array.type == arrow_type else array.cast(arrow_type)


def _renamed_struct(array: pa.Array, target: pa.StructType) -> pa.Array:
    """A struct array with the children of ``array`` (same order) under ``target``'s field names."""
    if len(array) == 0 or array.null_count == len(array):
        return pa.nulls(len(array), target)
    children = [array.field(i).cast(target.field(i).type) for i in range(target.num_fields)]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())


def add_struct(files: pa.RecordBatch) -> pa.StructArray:
    """The ``add`` column for active files given like :meth:`Snapshot.files_table` (snake_case).

    Zero-copy where the types already match; ``dataChange`` is false in every row, as in every
    checkpoint.
    """
    children = []
    for field in ADD_TYPE:
        if field.name == "dataChange":
            children.append(pa.repeat(pa.scalar(False), files.num_rows))
        else:
            children.append(_column(files, _snake(field.name), field.type))
    return pa.StructArray.from_arrays(children, fields=list(ADD_TYPE))


def _rows_batch(column: str, values: pa.Array) -> pa.RecordBatch:
    arrays = [values if f.name == column else pa.nulls(len(values), f.type) for f in CHECKPOINT_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=CHECKPOINT_SCHEMA)


def file_rows_table(files: pa.Table, tombstones: Sequence[RemoveFile]) -> pa.Table:
    """Checkpoint rows for the active files (as :meth:`Snapshot.files_table`) and the tombstones.

    Rows keep the snapshot's order (Delta gives checkpoint rows no particular order).
    """
    batches = [_rows_batch("add", add_struct(batch)) for batch in files.to_batches() if batch.num_rows]
    removes = pa.array(_column_rows(tombstones, "remove"), type=REMOVE_TYPE)
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


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as a snappy-compressed Parquet file."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    return buffer.getvalue()


# -- I/O --------------------------------------------------------------------------------------
def _part_size(delta_log: DeltaLog, parts_threshold: int | None) -> int | None:
    if parts_threshold is not None:
        return parts_threshold
    configured = delta_log.conf.get(PART_SIZE_KEY) or delta_log.conf.get(PART_SIZE_KEY.removeprefix("spark."))
    return int(configured) if configured else None


def write_checkpoint(
    delta_log: DeltaLog, snapshot: Snapshot, parts_threshold: int | None = None
) -> CheckpointResult:
    """Write a classic checkpoint of ``snapshot`` and then ``_last_checkpoint``.

    ``parts_threshold`` is the most file actions (adds + tombstones) per part; above it the
    checkpoint is multi-part (``V.checkpoint.i.n.parquet``). Default: the conf key
    ``spark.databricks.delta.checkpoint.partSize``, else a single file. Tombstones and
    transactions are those the snapshot keeps (``delta.deletedFileRetentionDuration``,
    ``delta.setTransactionRetentionDuration``).

    Raises :class:`DeltaError` for a table without commits (``DELTA_CHECKPOINT_NON_EXIST_TABLE``),
    when the rows disagree with the snapshot (``DELTA_CHECKPOINT_SNAPSHOT_MISMATCH``) and
    :class:`UnsupportedTableFeatureError` for tables that require V2 checkpoints.
    """
    table = str(delta_log.table_path)
    if snapshot.version < 0:
        raise DeltaError(
            f"[DELTA_CHECKPOINT_NON_EXIST_TABLE] Cannot checkpoint a non-existing table {table}. "
            "Did you manually delete files in the _delta_log directory?",
            table=table,
        )
    if snapshot.protocol.has_writer_feature("v2Checkpoint"):
        raise UnsupportedTableFeatureError(
            f"Cannot write a classic checkpoint for table {table}: it uses the v2Checkpoint feature",
            table=table,
            features=["v2Checkpoint"],
        )
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
    parts = split_parts(checkpoint_table(header), file_rows, _part_size(delta_log, parts_threshold))
    if len(parts) == 1:
        paths = [checkpoint_file_single(delta_log.log_path, snapshot.version)]
    else:
        paths = checkpoint_files_multipart(delta_log.log_path, snapshot.version, len(parts))
    size_in_bytes = 0
    for path, part in track("Writing checkpoint parts", zip(paths, parts, strict=True), len(parts)):
        data = parquet_bytes(part)
        delta_log.store.write_bytes(path, data, overwrite=True)
        size_in_bytes += len(data)
    result = CheckpointResult(
        version=snapshot.version,
        paths=paths,
        size=len(header) + file_rows.num_rows,
        num_of_add_files=num_adds,
        size_in_bytes=size_in_bytes,
    )
    last = last_checkpoint_file(delta_log.log_path)
    delta_log.store.write(last, [result.last_checkpoint().to_json()], overwrite=True)
    logger.info("wrote checkpoint %d of %s in %d part(s)", snapshot.version, table, len(paths))
    return result
