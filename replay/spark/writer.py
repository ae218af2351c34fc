"""Writing Delta tables from Spark through the ``deltalog`` data source: batch and streaming.

``df.write.format("deltalog").mode("append" | "overwrite").option(...).save(uri)``: the driver
plans the write (:func:`replay.txn.write_plan.plan_write`: table creation, schema checks,
options) before any task runs; each task streams its Arrow batches into Parquet files
(:mod:`replay.txn.data_writer`) and returns their ``add`` actions; the driver commits them once
in a :class:`~replay.txn.transaction.Transaction` made from the version the plan read (Delta's
conflict checks, then the post-commit hooks). Files are deleted only when nothing was committed:
a refused or conflicting commit, or an ``abort`` whose ``txnId`` is not in the log.

``df.writeStream.format("deltalog")``: each micro-batch is one commit carrying
``SetTransaction(appId, batchId)``, made from the version its plan read; ``appId`` is the
``txnAppId`` option or the query's id from its checkpoint (Delta's ``queryId``; the checkpoint is the
``checkpointLocation`` option or ``<spark.sql.streaming.checkpointLocation>/<queryName>``), so a
restarted query skips a batch it already committed (exactly once), and a new checkpoint starts a
new query.
The ``complete`` output mode overwrites the table in each batch.

Options (names as in Delta, case-insensitive): ``partitionBy`` and ``clusterBy``
(comma-separated), ``mergeSchema``, ``overwriteSchema``, ``replaceWhere``,
``partitionOverwriteMode``, ``txnAppId`` + ``txnVersion``, ``userMetadata``,
``maxRecordsPerFile``, and ``delta.*`` table properties for a new table. Session
settings used: storage settings, ``spark.sql.sources.partitionOverwriteMode``,
``spark.sql.files.maxRecordsPerFile`` and ``spark.databricks.delta.commitInfo.userMetadata``.
"""

from __future__ import annotations

import logging
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

from logstores import open_filesystem
from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile
from replay.protocol.schema import StructType as DeltaSchema
from replay.protocol.schema import parse_schema
from replay.spark.options import bool_option, column_list, int_value, lower_keys
from replay.spark.worker_errors import errors_first
from replay.txn.data_writer import WrittenFile, delete_data_files, write_batches
from replay.txn.identity_values import identity_to_generate, not_generated_error
from replay.txn.transaction import transaction_committed
from replay.txn.write_commit import commit_write
from replay.txn.write_plan import (
    InvalidWriteOptionError,
    WriteOptions,
    WritePlan,
    latest_snapshot,
    plan_write,
)

logger = logging.getLogger(__name__)

PARTITION_OVERWRITE_MODE_KEY = "spark.sql.sources.partitionOverwriteMode"
MAX_RECORDS_PER_FILE_KEY = "spark.sql.files.maxRecordsPerFile"
USER_METADATA_KEY = "spark.databricks.delta.commitInfo.userMetadata"
STREAMING_CHECKPOINT_KEY = "spark.sql.streaming.checkpointLocation"
"""The session's root of streaming checkpoints (a query's is ``<root>/<queryName or a random uuid>``)."""
WRITE_SESSION_KEYS = (
    PARTITION_OVERWRITE_MODE_KEY,
    MAX_RECORDS_PER_FILE_KEY,
    USER_METADATA_KEY,
    STREAMING_CHECKPOINT_KEY,
)
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
        partition_by=column_list(given.get("partitionby"), "partitionBy", error=error),
        cluster_by=column_list(given.get("clusterby"), "clusterBy", error=error),
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
    generated = identity_to_generate(plan.spec.constraints.identity, schema.fieldNames(), io.shown_path)
    if generated:
        raise not_generated_error(generated[0], io.shown_path, "Spark")
    if app_id is not None and snapshot is not None:
        plan = replace(plan, committed_txn_version=snapshot.set_transactions.get(app_id))
    return plan


# -- commit messages --------------------------------------------------------------------------
@dataclass
class WrittenFiles(WriterCommitMessage):
    """What one task wrote: its ``add`` actions as log lines, the rows of each file, the plan the
    task wrote them under (so the driver commits from the version that plan read) and, in a
    streaming query, the query's id as Spark gives it to the task."""

    adds: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    plan: WritePlan | None = None
    query_id: str | None = None

    @classmethod
    def of(cls, files: Sequence[WrittenFile], plan: WritePlan | None = None) -> WrittenFiles:
        return cls([f.add.json() for f in files], [f.num_rows for f in files], plan)

    def files(self) -> list[WrittenFile]:
        return [
            WrittenFile(AddFile.from_dict(orjson.loads(line)["add"]), rows)
            for line, rows in zip(self.adds, self.rows, strict=True)
        ]


def _written(messages: Sequence[WriterCommitMessage | None]) -> list[WrittenFile]:
    return [f for m in messages if isinstance(m, WrittenFiles) for f in m.files()]


def _planned(messages: Sequence[WriterCommitMessage | None]) -> WritePlan | None:
    """The plan the tasks wrote under (every task of one write carries the same one)."""
    return next((m.plan for m in messages if isinstance(m, WrittenFiles) and m.plan is not None), None)


def _write_task(plan: WritePlan, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
    if plan.already_committed:
        return WrittenFiles(plan=plan)  # nothing to write: the commit will skip it
    return WrittenFiles.of(write_batches(plan.spec, iterator), plan)


def _commit(plan: WritePlan, written: list[WrittenFile], **kwargs: Any) -> int | None:
    """Commit through the txn layer (which deletes the files when nothing was committed)."""
    return commit_write(TableIO.for_table(plan.table_path, plan.spec.conf), plan, written, **kwargs)


def _abort(plan: WritePlan, written: Sequence[WrittenFile]) -> None:
    """Delete the files of a write Spark aborts, unless its commit is in the log.

    Spark also aborts a write whose ``commit`` raised, which may be after the version was
    written (a post-commit hook interrupted): the log is asked whether a commit carries the
    plan's ``txnId`` before anything is deleted.
    """
    if not written:
        return
    io = TableIO.for_table(plan.table_path, plan.spec.conf)
    if transaction_committed(io, plan.read_version, plan.txn_id):
        logger.warning(
            "Spark aborted a write to %s that is committed (txnId %s); its files are kept",
            plan.table_path,
            plan.txn_id,
        )
        return
    delete_data_files(plan.table_path, [w.add.path for w in written], plan.spec.conf)


# -- batch --------------------------------------------------------------------------------------
class DeltaLogBatchWriter(DataSourceArrowWriter):
    """A batch write planned on the driver (picklable: it carries only its :class:`WritePlan`)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    @errors_first
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        return _write_task(self.plan, iterator)

    @errors_first
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        version = _commit(self.plan, _written(messages))
        logger.info("committed version %s of %s", version, self.plan.table_path)

    @errors_first
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.plan, _written(messages))


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
QUERY_METADATA_FILE = "metadata"
"""The file in a streaming query's checkpoint where Spark keeps the query's id (``{"id": ...}``)."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property in which Spark hands a streaming query's id to the tasks of its batches."""


def query_checkpoint(options: Mapping[str, str], session_conf: Mapping[str, str]) -> str | None:
    """The checkpoint location Spark uses for a streaming query, where the sink can know it.

    The ``checkpointLocation`` option (Spark passes it to the sink with the query's options), else
    ``<spark.sql.streaming.checkpointLocation>/<queryName>``, as Spark resolves a named query's
    checkpoint from the session setting. ``None`` for an unnamed query with only the session
    setting: Spark then makes ``<setting>/<random uuid>``, a new checkpoint (and query) at every
    start, and tells the sink neither.
    """
    lowered = lower_keys(options)
    if lowered.get("checkpointlocation"):
        return lowered["checkpointlocation"]
    root, name = session_conf.get(STREAMING_CHECKPOINT_KEY), lowered.get("queryname")
    if root and name:
        return root.rstrip("/") + "/" + name
    return None


def streaming_app_id(
    options: Mapping[str, str],
    conf: Mapping[str, str] | None = None,
    session_conf: Mapping[str, str] | None = None,
) -> str | None:
    """The application id of a streaming query: ``txnAppId``, else the query's id, which Spark
    keeps in ``<checkpoint>/metadata`` (Delta's sink uses the same ``queryId``), the checkpoint
    being the one :func:`query_checkpoint` resolves.

    The id belongs to the query, not to how its checkpoint is spelled (``/x``, ``file:/x``), and a
    new checkpoint is a new query whose batch ids start again at 0. ``None`` when the sink cannot
    know the checkpoint (an unnamed query under ``spark.sql.streaming.checkpointLocation``): that
    query is new at every start, and its tasks carry its id (:func:`task_query_id`). Raises
    :class:`InvalidWriteOptionError` naming the location when there is no checkpoint at all, or
    when the checkpoint holds no query id.
    """
    lowered = lower_keys(options)
    if lowered.get("txnappid"):
        return lowered["txnappid"]
    session = session_conf or {}
    location = query_checkpoint(options, session)
    if location is None:
        if session.get(STREAMING_CHECKPOINT_KEY):
            return None
        raise InvalidWriteOptionError(
            "A deltalog streaming sink needs the option 'checkpointLocation' (or the session setting "
            f"{STREAMING_CHECKPOINT_KEY}, or 'txnAppId') to identify the query across restarts"
        )
    path = location.rstrip("/") + "/" + QUERY_METADATA_FILE
    try:
        fs, fs_path = open_filesystem(path, conf)
        with fs.open(fs_path, "rb") as handle:
            query_id = orjson.loads(handle.read().splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidWriteOptionError(
            f"Cannot read the streaming query's id from {path} ({type(exc).__name__}: {exc}); the sink "
            "needs it to write each micro-batch exactly once (or set 'txnAppId')"
        ) from None
    return str(query_id)


def task_query_id() -> str | None:
    """The id of the streaming query whose task this is (``None`` outside such a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None


def _query_id(messages: Sequence[WriterCommitMessage | None]) -> str | None:
    return next((m.query_id for m in messages if isinstance(m, WrittenFiles) and m.query_id), None)


class DeltaLogStreamWriter(DataSourceStreamArrowWriter):
    """One micro-batch of a streaming write.

    Spark plans each micro-batch (the plan the tasks write under, carried back in their
    messages) and makes a new writer to commit it: the commit is made from the version the
    batch's plan read, so a change committed by others while the tasks wrote (a schema change, a
    new partitioning) is checked by Delta's conflict rules, not silently written over. ``plan``
    here is only used for a batch whose tasks sent no message.

    ``app_id`` is ``None`` for a query whose checkpoint the sink cannot know (see
    :func:`streaming_app_id`): a query new at this start, which has committed nothing before;
    its id comes from its tasks.
    """

    def __init__(self, plan: WritePlan, app_id: str | None, output_mode: str) -> None:
        self.plan = plan
        self.app_id = app_id
        self.output_mode = output_mode

    @errors_first
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        return replace(_write_task(self.plan, iterator), query_id=task_query_id())

    @errors_first
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        app_id = self.app_id or _query_id(messages)
        if app_id is None:
            raise InvalidWriteOptionError(
                f"Cannot identify the streaming query writing batch {batchId} to {self.plan.table_path}: "
                "set the option 'checkpointLocation' (or 'txnAppId')"
            )
        planned = _planned(messages) or self.plan
        plan = planned.for_transaction(app_id, batchId, planned.committed_txn_version)
        parameters = {"outputMode": self.output_mode, "queryId": app_id, "epochId": str(batchId)}
        version = _commit(
            plan, _written(messages), operation="STREAMING UPDATE", operation_parameters=parameters
        )
        if version is None:
            logger.info("batch %d of query %s was already committed to %s", batchId, app_id, plan.table_path)

    @errors_first
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - PySpark's name
        _abort(_planned(messages) or self.plan, _written(messages))


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
    app_id = streaming_app_id(options, conf, session_conf)
    batch_options = {k: v for k, v in options.items() if k.lower() not in ("txnappid", "txnversion")}
    plan = _plan(path, conf, schema, write_options(batch_options, session_conf, overwrite=overwrite), app_id)
    return DeltaLogStreamWriter(plan, app_id, "Complete" if overwrite else "Append")
