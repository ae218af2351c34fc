"""The commit of a data write: what an append or an overwrite adds, removes and reads.

:func:`commit_write` turns a :class:`~replay.txn.write_plan.WritePlan` and the files its tasks
wrote into one :class:`~replay.txn.transaction.Transaction`: the protocol and metadata the plan
changes, the app transaction of an idempotent write, the adds, and for an overwrite the removes
of what it replaces (the whole table, or the partitions ``replaceWhere`` or the written data
selects), read as such so that Delta's conflict rules apply. The written files are deleted only
when nothing was committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from replay.data.partition_values import parse_partition_value
from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile, Metadata, RemoveFile
from replay.protocol.predicates import And, Compare, IsNull, Or, Predicate, to_expression
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import WrittenFile, delete_data_files
from replay.txn.identity_values import high_water_mark_metadata
from replay.txn.transaction import CommitOutcome, Transaction
from replay.txn.write_plan import WritePlan, replace_where_predicate

logger = logging.getLogger(__name__)


# -- committing ---------------------------------------------------------------------------------
def remove_action(add: AddFile, deletion_timestamp: int) -> RemoveFile:
    """The tombstone that removes ``add`` as a data change (extended file metadata kept)."""
    return add.remove_with_timestamp(deletion_timestamp)


def partition_values_predicate(
    partitions: Iterable[Mapping[str, str | None]], metadata: Metadata
) -> Predicate:
    """The rows of the given partitions (serialised partition values) as a predicate over the
    partition columns: what a dynamic partition overwrite read."""
    columns = list(metadata.partition_columns)
    types = {name: metadata.schema.field(name).type for name in columns}
    keys = metadata.partition_value_keys
    disjuncts: dict[tuple[Any, ...], Predicate] = {}
    for values in partitions:
        lowered = {str(k).lower(): v for k, v in values.items()}
        typed = tuple(parse_partition_value(lowered.get(keys[c].lower()), types[c]) for c in columns)
        disjuncts[typed] = And(
            tuple(
                IsNull((column,)) if value is None else Compare((column,), "=", value)
                for column, value in zip(columns, typed, strict=True)
            )
        )
    return Or(tuple(disjuncts.values()))


def _overwrite_reads(plan: WritePlan, written: Sequence[WrittenFile]) -> Predicate | None:
    """What a partial overwrite read and replaces (``None``: the whole table)."""
    if plan.dynamic_overwrite:
        return partition_values_predicate((w.add.partition_values for w in written), plan.metadata)
    predicate = replace_where_predicate(plan.options, plan.metadata, plan.table_path)
    return predicate.tree if predicate is not None else None


def stage_write(
    txn: Transaction,
    plan: WritePlan,
    written: Sequence[WrittenFile],
    identity_marks: Mapping[str, int] | None = None,
) -> None:
    """Put the write's actions and reads into ``txn``: protocol, metadata (with the identity
    high water marks the values it generated up to, ``identity_marks``, move on), app
    transaction, the adds, and for an overwrite the removes of what it replaces (the whole
    table, or the files of the partitions ``replaceWhere`` or the written data selects), read as
    such."""
    if plan.commit_protocol:
        txn.add_actions([plan.protocol])
    marked = high_water_mark_metadata(plan.metadata, identity_marks or {})
    if plan.commit_metadata or marked is not None:
        txn.add_actions([marked or plan.metadata])
    txn.add_actions(plan.domains)
    options = plan.options
    if options.txn_app_id is not None and options.txn_version is not None:
        txn.app_transaction_version(options.txn_app_id)
        txn.set_app_transaction(options.txn_app_id, options.txn_version)
    txn.add_actions(w.add for w in written)
    snapshot = txn.read_snapshot
    if not options.overwrite or snapshot is None:
        return
    now = int(time.time() * 1000)
    predicate = None if plan.full_overwrite else _overwrite_reads(plan, written)
    if predicate is None:
        txn.read_whole_table()
        replaced = snapshot.files()
    else:
        txn.read_predicate(predicate)
        selected = partitions_matching(predicate, snapshot.metadata)
        replaced = [add for add in snapshot.files() if selected(add.partition_values)]
    txn.read_files(replaced)
    txn.add_actions(remove_action(add, now) for add in replaced)


PartitionKey = tuple[Any, ...]


def partitions_matching(
    predicate: Predicate, metadata: Metadata
) -> Callable[[Mapping[str, str | None]], bool]:
    """Whether a file's partition values satisfy ``predicate`` (a predicate on partition columns),
    decided exactly on the typed values, once per partition."""
    columns = list(metadata.partition_columns)
    types = {name: metadata.schema.field(name).type for name in columns}
    arrow_types = {name: metadata.schema.field(name).to_arrow().type for name in columns}
    schema = pa.schema([(name, arrow_types[name]) for name in columns])
    expression = to_expression(predicate, schema)
    verdicts: dict[PartitionKey, bool] = {}
    keys = metadata.partition_value_keys

    def matches(values: Mapping[str, str | None]) -> bool:
        lowered = {str(k).lower(): v for k, v in values.items()}
        key = tuple(parse_partition_value(lowered.get(keys[c].lower()), types[c]) for c in columns)
        if key not in verdicts:
            row = pa.table({c: pa.array([v], arrow_types[c]) for c, v in zip(columns, key, strict=True)})
            verdicts[key] = row.filter(expression).num_rows == 1
        return verdicts[key]

    return matches


def _parameters(plan: WritePlan) -> dict[str, Any]:
    options = plan.options
    parameters: dict[str, Any] = {
        "mode": "Overwrite" if options.overwrite else "Append",
        "partitionBy": plan.partition_columns,
    }
    if options.overwrite and options.replace_where is not None:
        parameters["predicate"] = options.replace_where
    if plan.dynamic_overwrite:
        parameters["partitionOverwriteMode"] = "DYNAMIC"
    return parameters


def commit_write(
    io: TableIO,
    plan: WritePlan,
    written: Sequence[WrittenFile],
    *,
    snapshot: Snapshot | None = None,
    operation: str = "WRITE",
    operation_parameters: Mapping[str, Any] | None = None,
    identity_marks: Mapping[str, int] | None = None,
) -> int | None:
    """Commit the files of ``plan``'s write as one version (then the post-commit hooks run);
    ``identity_marks``: the furthest identity value the write generated per column.

    The commit is made from the version the plan read (``snapshot`` if the caller has it), so a
    concurrent change the plan did not see is checked by Delta's conflict rules. Returns the
    committed version, or ``None`` for an idempotent write that was already committed. The
    written files are deleted when, and only when, it is certain that nothing was committed
    (:attr:`~replay.txn.transaction.Transaction.outcome`): an already committed idempotent write,
    a refused or conflicting commit. Raises Delta's conflict exceptions
    (:class:`~replay.protocol.errors.ConcurrentModificationError`).
    """
    if plan.already_committed:
        logger.info(
            "Transaction write of version %s for application id %s has already been committed in Delta "
            "table %s. Skipping this write.",
            plan.options.txn_version,
            plan.options.txn_app_id,
            plan.table_path,
        )
        delete_data_files(plan.table_path, [w.add.path for w in written], plan.spec.conf)
        return None
    txn = Transaction(io, None, operation=operation, txn_id=plan.txn_id)
    try:
        if plan.read_version >= 0:
            txn.read_snapshot = (
                snapshot
                if snapshot is not None and snapshot.version == plan.read_version
                else load_snapshot(io, version=plan.read_version, files=False)
            )
        stage_write(txn, plan, written, identity_marks)
        txn.operation_parameters = dict(
            operation_parameters if operation_parameters is not None else _parameters(plan)
        )
        removes = [a for a in txn.actions if isinstance(a, RemoveFile)]
        txn.operation_metrics = {
            "numFiles": len(written),
            "numOutputRows": sum(w.num_rows for w in written),
            "numOutputBytes": sum(w.add.size for w in written),
        }
        if removes:
            txn.operation_metrics["numRemovedFiles"] = len(removes)
            txn.operation_metrics["numRemovedBytes"] = sum(r.size or 0 for r in removes)
        if plan.options.user_metadata is not None:  # else the commit_properties block's, if any
            txn.user_metadata = plan.options.user_metadata
        return txn.commit()
    except BaseException:
        if txn.outcome is CommitOutcome.NOT_COMMITTED:
            delete_data_files(plan.table_path, [w.add.path for w in written], plan.spec.conf)
        raise
