"""Writing Delta tables from Spark through the ``deltalog`` data source: batch and streaming.

``df.write.format("deltalog").mode("append" | "overwrite").option(...).save(uri)``: the driver
plans the write (:func:`replay.txn.write_plan.plan_write`: table creation, schema checks,
options) before any task runs; each task streams its Arrow batches into Parquet files
(:mod:`replay.txn.data_writer`) and returns their ``add`` actions; the driver commits them once
through the LogStore the configuration resolves, with Delta's conflict checks, then runs the
post-commit hooks. ``abort``, a failed commit and a failed task delete the files written.

``df.writeStream.format("deltalog")``: each micro-batch is one commit carrying
``SetTransaction(appId, batchId)``; ``appId`` is the ``txnAppId`` option or derived from the
query's checkpoint location, so it is stable across restarts, and a batch already committed for
it is skipped (exactly once). The ``complete`` output mode overwrites the table in each batch.

Options (names as in Delta, case-insensitive): ``partitionBy`` (comma-separated), ``mergeSchema``,
``overwriteSchema``, ``replaceWhere``, ``partitionOverwriteMode``, ``txnAppId`` + ``txnVersion``,
``userMetadata``, ``maxRecordsPerFile``, and ``delta.*`` table properties for a new table. Session
settings used: storage settings, ``spark.sql.sources.partitionOverwriteMode``,
``spark.sql.files.maxRecordsPerFile`` and ``spark.databricks.delta.commitInfo.userMetadata``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile
from replay.protocol.schema import StructType as DeltaSchema
from replay.protocol.schema import parse_schema
from replay.spark.options import bool_option, column_list, int_value, lower_keys
from replay.txn.data_writer import WrittenFile, delete_data_files, write_batches
from replay.txn.write_plan import (
    InvalidWriteOptionError,
    WriteOptions,
    WritePlan,
    commit_write,
    latest_snapshot,
    plan_write,
)

logger = logging.getLogger(__name__)

PARTITION_OVERWRITE_MODE_KEY = "spark.sql.sources.partitionOverwriteMode"
MAX_RECORDS_PER_FILE_KEY = "spark.sql.files.maxRecordsPerFile"
USER_METADATA_KEY = "spark.databricks.delta.commitInfo.userMetadata"
WRITE_SESSION_KEYS = (PARTITION_OVERWRITE_MODE_KEY, MAX_RECORDS_PER_FILE_KEY, USER_METADATA_KEY)
"""Session settings a write reads (captured by ``register``)."""
TABLE_PROPERTY_PREFIX = "delta."
NOT_TABLE_PROPERTIES = ("delta.logstore.",)


# -- options ------------------------------------------------------------------------------------
def write_options(
    options: Mapping[str, str], session_conf: Mapping[str, str], *, overwrite: bool
) -> WriteOptions:
    """The :class:`WriteOptions` of DataFrameWriter options (keys in any case) and session settings.

    Raises :class:`InvalidWriteOptionError` naming an option with an invalid value.
    """
    given = lower_keys(options)
    error = InvalidWriteOptionError
    txn_version = int_value(given.get("txnversion"), "txnVersion", error=error)
    overwrite_mode = given.get("partitionoverwritemode")
    if overwrite_mode is None and "replacewhere" not in given:  # an explicit replaceWhere wins
        overwrite_mode = session_conf.get(PARTITION_OVERWRITE_MODE_KEY)
    max_records = int_value(
        given.get("maxrecordsperfile", session_conf.get(MAX_RECORDS_PER_FILE_KEY)),
        "maxRecordsPerFile",
        error=error,
    )
    configuration = {
        key: value
        for key, value in options.items()
        if key.lower().startswith(TABLE_PROPERTY_PREFIX) and not key.lower().startswith(NOT_TABLE_PROPERTIES)
    }
    return WriteOptions(
        mode="overwrite" if overwrite else "append",
        partition_by=column_list(given.get("partitionby")),
        merge_schema=bool_option(given, "mergeschema", "mergeSchema", error=error),
        overwrite_schema=bool_option(given, "overwriteschema", "overwriteSchema", error=error),
        replace_where=given.get("replacewhere"),
        partition_overwrite_mode=(overwrite_mode or "static").strip().lower(),
        txn_app_id=given.get("txnappid"),
        txn_version=txn_version,
        user_metadata=given.get("usermetadata", session_conf.get(USER_METADATA_KEY)),
        max_records_per_file=max_records,
        configuration=configuration,
    )


def _delta_schema(schema: StructType) -> DeltaSchema:
    """The Delta schema of a Spark schema (Spark's JSON form is Delta's ``schemaString``)."""
    return parse_schema(schema.json())


def _plan(
    path: str, conf: Mapping[str, str], schema: StructType, options: WriteOptions, app_id: str | None = None
) -> WritePlan:
    """Plan against the latest snapshot; with ``app_id``, note the version that application committed."""
    io = TableIO.for_table(path, conf)
    snapshot = latest_snapshot(io)
    plan = plan_write(io, snapshot, _delta_schema(schema), options)
    if app_id is not None and snapshot is not None:
        plan = replace(plan, committed_txn_version=snapshot.set_transactions.get(app_id))
    return plan


# -- commit messages --------------------------------------------------------------------------
@dataclass
class WrittenFiles(WriterCommitMessage):
    """What one task wrote: its ``add`` actions as log lines, and the rows of each file."""

    adds: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, files: Sequence[WrittenFile]) -> WrittenFiles:
        return cls([f.add.json() for f in files], [f.num_rows for f in files])

    def files(self) -> list[WrittenFile]:
        return [
            WrittenFile(AddFile.from_dict(orjson.loads(line)["add"]), rows)
            for line, rows in zip(self.adds, self.rows, strict=True)
        ]


def _written(messages: Sequence[WriterCommitMessage | None]) -> list[WrittenFile]:
    return [f for m in messages if isinstance(m, WrittenFiles) for f in m.files()]


def _write_task(plan: WritePlan, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
    return WrittenFiles.of(write_batches(plan.spec, iterator))


def _discard(plan: WritePlan, written: Sequence[WrittenFile]) -> None:
    if written:
        delete_data_files(plan.table_path, [w.add.path for w in written], plan.spec.conf)


def _commit(plan: WritePlan, written: list[WrittenFile], **kwargs: Any) -> int | None:
    """Commit through the txn layer; the files are deleted if nothing is committed."""
    io = TableIO.for_table(plan.table_path, plan.spec.conf)
    try:
        version = commit_write(io, plan, written, **kwargs)
    except BaseException:
        _discard(plan, written)
        raise
    if version is None:
        _discard(plan, written)
    return version


# -- batch --------------------------------------------------------------------------------------
class DeltaLogBatchWriter(DataSourceArrowWriter):
    """A batch write planned on the driver (picklable: it carries only its :class:`WritePlan`)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        if self.plan.already_committed:
            return WrittenFiles()
        return _write_task(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        version = _commit(self.plan, _written(messages))
        logger.info("committed version %s of %s", version, self.plan.table_path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _discard(self.plan, _written(messages))


def batch_writer(
    path: str,
    conf: Mapping[str, str],
    schema: StructType,
    overwrite: bool,
    *,
    options: Mapping[str, str],
    session_conf: Mapping[str, str],
) -> DeltaLogBatchWriter:
    """Plan a ``df.write`` and return its writer (errors surface before any task runs)."""
    return DeltaLogBatchWriter(
        _plan(path, conf, schema, write_options(options, session_conf, overwrite=overwrite))
    )


# -- streaming ----------------------------------------------------------------------------------
def streaming_app_id(options: Mapping[str, str]) -> str:
    """The application id of a streaming query: ``txnAppId``, else derived from the checkpoint
    location (stable across restarts of the same query). Raises :class:`InvalidWriteOptionError`
    when there is neither."""
    lowered = {str(key).lower(): str(value) for key, value in options.items()}
    if lowered.get("txnappid"):
        return lowered["txnappid"]
    location = lowered.get("checkpointlocation")
    if not location:
        raise InvalidWriteOptionError(
            "A deltalog streaming sink needs the option 'checkpointLocation' (or 'txnAppId') to "
            "identify the query across restarts"
        )
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "deltalog-sink:" + location.rstrip("/")))


class DeltaLogStreamWriter(DataSourceStreamArrowWriter):
    """One micro-batch of a streaming write, planned on the driver when the batch starts."""

    def __init__(self, plan: WritePlan, app_id: str, output_mode: str) -> None:
        self.plan = plan
        self.app_id = app_id
        self.output_mode = output_mode

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        return _write_task(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        plan = self.plan.for_transaction(self.app_id, batchId, self.plan.committed_txn_version)
        parameters = {"outputMode": self.output_mode, "queryId": self.app_id, "epochId": str(batchId)}
        version = _commit(
            plan, _written(messages), operation="STREAMING UPDATE", operation_parameters=parameters
        )
        if version is None:
            logger.info(
                "batch %d of query %s was already committed to %s", batchId, self.app_id, plan.table_path
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        _discard(self.plan, _written(messages))


def stream_writer(
    path: str,
    conf: Mapping[str, str],
    schema: StructType,
    overwrite: bool,
    *,
    options: Mapping[str, str],
    session_conf: Mapping[str, str],
) -> DeltaLogStreamWriter:
    """Plan one micro-batch of a ``df.writeStream`` and return its writer."""
    app_id = streaming_app_id(options)
    batch_options = {k: v for k, v in options.items() if k.lower() not in ("txnappid", "txnversion")}
    plan = _plan(path, conf, schema, write_options(batch_options, session_conf, overwrite=overwrite), app_id)
    return DeltaLogStreamWriter(plan, app_id, "Complete" if overwrite else "Append")
