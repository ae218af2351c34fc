"""Row-level changes: DELETE, UPDATE and MERGE with deletion vectors and the change data feed.

Delta's ``DeleteCommand``, ``UpdateCommand`` and ``MergeIntoCommand`` for Python, on the SQL
grammar of :mod:`replay.protocol.sql`; :class:`replay.DeltaTable` exposes them with delta-rs's
API (``delete``, ``update``, ``merge`` -> :class:`TableMerger`). Each returns Delta's metrics and
commits once through a :class:`~replay.txn.transaction.Transaction` (nothing when nothing
changes).

Modules:

* ``context``: the checks made before anything is written and the :class:`DmlTable` the per-file
  work receives (reader, write specs, deletion-vector and change-data modes); file pruning;
* ``expressions``: SQL texts and literal values as picklable values, bound once per process;
* ``assignments``: the columns an UPDATE or a clause sets, Spark's store assignment;
* ``target_rows``: one target file's live rows with their physical row indexes;
* ``rewrite``: one target file's new state (deletion vector or copy-on-write) and its change rows;
* ``outputs``: the writers of one process (data, change data, deletion vectors) and their cleanup;
* ``runner``: the per-file work over many files, all or nothing;
* ``commit``: the transaction, metrics, what was read, cleanup when nothing was committed;
* ``delete``, ``update``, ``merge`` (with ``merge_clauses`` and ``merge_join``): the operations;
* ``errors``: Delta's errors of these operations.

**Driver and per-file work.** Every operation is split the same way, so that a distributed
engine (Spark) can run the per-file part on executors:

1. *Driver, planning* -- :func:`plan_delete` / :func:`plan_update` / :func:`plan_merge`: bind
   the SQL (errors name the column or function and its position), check the table (protocol,
   ``delta.appendOnly``), decide the modes, evolve the schema (MERGE), compute the pruning
   predicate (the target-only part of the condition, and MERGE's source key ranges,
   :func:`~replay.dml.merge_join.source_key_ranges`) and the candidate files
   (:func:`~replay.dml.context.candidate_files`). The result is a picklable plan:
   :class:`~replay.dml.delete.DeletePlan`, :class:`~replay.dml.update.UpdatePlan` or
   :class:`~replay.dml.merge.MergePlan` (which carries the materialized source).
2. *Per file, anywhere* -- ``plan.process_file(file, sinks)`` reads one target file (the deciding
   columns first, the others only if rows change), finds the rows that change, and writes their
   outcome through ``sinks`` (an :class:`~replay.dml.outputs.Sinks` opened from ``plan.table`` in
   each process): a deletion vector (DV writer) or a copy-on-write replacement file, new rows and
   change rows. It returns a small :class:`~replay.dml.rewrite.FileChange` (the file's commit
   actions, its row counts, and for MERGE the source rows it matched). ``sinks.close()`` ends a
   task and returns the files its shared writers wrote; ``sinks.discard()`` deletes them all.
3. *Driver, committing* -- MERGE's inserts: :meth:`MergePlan.insert_unmatched` with the matched
   source rows of every file; then the actions of every ``FileChange`` and of every task's
   files (:func:`~replay.dml.commit.file_actions`), Delta's metrics, and
   :func:`~replay.dml.commit.commit_dml` with the pruning predicate and the candidate files as
   what was read. Written files are deleted only when nothing was committed.

The local driver runs step 2 on the shared data pool (:mod:`~replay.dml.runner`), one file per
worker, holding only the MERGE source and one file's rows per worker. The Spark front end
(:mod:`replay.spark.delta_table`) shares steps 1 and 3 (:func:`~replay.dml.merge.bind_merge`,
:func:`~replay.dml.delete.finish_delete`, :func:`~replay.dml.update.finish_update`,
:func:`~replay.dml.merge_commit.finish_merge`): Spark joins and decides the rows, and its executors
write each file's new state with :class:`~replay.dml.rewrite.FileRewriter`.
"""

from replay.dml.commit import DmlResult
from replay.dml.delete import DeletePlan, delete_rows, plan_delete
from replay.dml.errors import (
    InvalidDmlArgumentError,
    MergeResolutionError,
    MultipleSourceRowMatchError,
)
from replay.dml.merge import MergePlan, PlannedMerge, merge_rows, plan_merge
from replay.dml.merge_builder import TableMerger
from replay.dml.update import UpdatePlan, plan_update, update_rows

__all__ = [
    "DeletePlan",
    "DmlResult",
    "InvalidDmlArgumentError",
    "MergePlan",
    "MergeResolutionError",
    "MultipleSourceRowMatchError",
    "PlannedMerge",
    "TableMerger",
    "UpdatePlan",
    "delete_rows",
    "merge_rows",
    "plan_delete",
    "plan_merge",
    "plan_update",
    "update_rows",
]
