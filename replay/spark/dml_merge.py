"""MERGE on Spark: planned as the Python DML plans it, joined and decided by Spark, files written
by the executors, one commit on the driver.

1. *Plan* (driver): the source is materialized once (``localCheckpoint``, with a row id), so
   every pass sees the same rows; the ON condition and the clauses are bound by
   :func:`replay.dml.merge.bind_merge` (errors, schema evolution, the table's checks), and the
   target files to read are pruned by :func:`replay.dml.merge.merge_pruning`: the condition's
   target-only part and the ranges of the source's join keys (collected from Spark when the
   source has at most :data:`KEY_RANGE_ROWS` rows).
2. *Pass 1, decisions*: the candidate files are read with only the columns the condition and the
   clauses read (and each row's file and row index) and joined with the source: inner, left outer
   with NOT MATCHED BY SOURCE clauses; the source is broadcast up to :data:`BROADCAST_ROWS` rows,
   so the join streams the target files in their order. For every target row a source row
   matches, or a clause changes, Spark computes the first clause whose condition holds, its
   action and values; these few rows are materialized. A target row several source rows match
   fails the MERGE with ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE`` unless its one
   MATCHED clause is an unconditional delete (the Python DML's rule), before anything is written.
3. *Pass 2, rewrite*: the changed rows go to tasks that own their files (the tasks that read them
   with a broadcast source; partitioned by file otherwise), and each task writes its files' new
   state, reading the rest of each file itself (:mod:`replay.spark.dml_tasks`): only touched
   files are read again. The source rows no target row matched (a left anti join with the
   matched row ids) go through the NOT MATCHED clauses to tasks that insert them. An insert-only
   MERGE reads the candidate files' key columns for the matched ids and only inserts.
4. *Commit* (driver): :func:`replay.dml.merge_commit.finish_merge`, as the Python DML commits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from replay.dml.assignments import quote
from replay.dml.commit import DmlResult, elapsed_ms, snapshot_transaction
from replay.dml.context import candidate_files
from replay.dml.errors import multiple_source_rows_error
from replay.dml.merge import MergePlan, bind_merge, check_aliases, merge_pruning
from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, ClauseSpec
from replay.dml.merge_commit import finish_merge, merge_parameters
from replay.protocol.arrow_actions import add_actions
from replay.protocol.predicates import Predicate
from replay.spark.dml_columns import decided, first_clause, functions, spark_types, stored
from replay.spark.dml_jobs import (
    Changes,
    discard_on_failure,
    discard_unless_committed,
    log_files,
    run_changes,
)
from replay.spark.dml_scan import SparkTarget, file_ids
from replay.spark.dml_tasks import (
    CLAUSE_COLUMN,
    DELETE,
    INSERT,
    UPDATE,
    ClauseEffect,
    TaskSpec,
)
from replay.spark.row_ids import FILE_COLUMN, ROW_COLUMN
from replay.spark.schema import arrow_schema
from replay.txn.identity_values import last_values, marked_actions
from replay.txn.write import delta_schema

KEY_RANGE_ROWS = 1_000_000
"""Sources with at most this many rows have their join key columns collected to prune the target
files by the keys' ranges; larger ones prune by the condition's target-only part alone."""
BROADCAST_ROWS = 1_000_000
"""Sources with at most this many rows are broadcast: the joins stream the target files, whose
changed rows stay in the tasks that read them; larger sources are joined with a shuffle, and the
changed rows are partitioned by file for the writing tasks."""
INSERT_ROWS_PER_TASK = 1_000_000
"""Rows to insert are spread over ``ceil(source rows / this)`` tasks (each writes its own files)."""
SOURCE_ROW = "_replay_dml_source_row"
SOURCE_PRESENT = "_replay_dml_source_present"
_EFFECTS = {
    (MATCHED, "update"): (UPDATE, "matchedUpdated"),
    (MATCHED, "delete"): (DELETE, "matchedDeleted"),
    (NOT_MATCHED_BY_SOURCE, "update"): (UPDATE, "notMatchedBySourceUpdated"),
    (NOT_MATCHED_BY_SOURCE, "delete"): (DELETE, "notMatchedBySourceDeleted"),
    (NOT_MATCHED, "insert"): (INSERT, "inserted"),
}


def spark_merge(
    target: SparkTarget,
    source: Any,
    condition: str,
    specs: Sequence[ClauseSpec],
    *,
    source_alias: str,
    merge_schema: bool = False,
) -> DmlResult:
    """MERGE the DataFrame ``source`` (aliased ``source_alias``) into the table on ``condition``
    with the clauses ``specs`` (SQL texts); ``target.alias`` is the target's alias."""
    started = time.perf_counter_ns()
    F = functions()  # noqa: N806 - PySpark's convention
    snapshot = target.latest()
    target_alias = target.alias or "target"
    check_aliases(source_alias, target_alias, snapshot.io.table_path)
    snapshot.config.check_writable()
    materialized = source.select(
        *[F.col(quote(name)) for name in source.columns],
        F.monotonically_increasing_id().alias(SOURCE_ROW),
        F.lit(True).alias(SOURCE_PRESENT),
    ).localCheckpoint(eager=True)
    materialize_ms = elapsed_ms(started)
    schema = delta_schema(arrow_schema(source.schema)).to_arrow()
    plan, metadata_actions = bind_merge(
        snapshot,
        schema.empty_table(),
        condition,
        specs,
        source_alias=source_alias,
        target_alias=target_alias,
        merge_schema=merge_schema,
    )
    pruning, source_rows = _pruning(plan, materialized, schema)
    candidates = candidate_files(snapshot, pruning)
    files = {file.path: file for file in add_actions(candidates)}
    txn = snapshot_transaction(snapshot, "MERGE")
    broadcast = source_rows <= BROADCAST_ROWS
    merge = _SparkMerge(
        replace(target, alias=target_alias), plan, materialized.alias(source_alias), condition, broadcast
    )
    changes = merge.run(snapshot.version, files, source_rows)
    log_files("MERGE", plan.table, len(files), snapshot.num_files, changes)
    scanned_ns = time.perf_counter_ns() - started
    with discard_unless_committed(txn, changes):
        return finish_merge(
            txn,
            changes.changes,
            changes.shared,
            changes.inserted,
            metadata_actions=marked_actions(metadata_actions, snapshot.metadata, merge.identity_marks()),
            source_rows=source_rows,
            pruning=pruning,
            candidates=candidates,
            parameters=merge_parameters(condition, specs),
            materialize_ms=materialize_ms,
            started_ns=started,
            scanned_ns=scanned_ns,
        )


def _buckets(source_rows: int) -> int:
    """How many tasks write the rows to insert."""
    return max(1, -(-source_rows // INSERT_ROWS_PER_TASK))


def _pruning(plan: MergePlan, materialized: Any, schema: pa.Schema) -> tuple[Predicate, int]:
    """:func:`merge_pruning` with the ranges of the source's join keys, whose columns are collected
    when the source has at most :data:`KEY_RANGE_ROWS` rows; and the number of source rows (one
    Spark job for a small source)."""
    alias = plan.join.source_alias
    columns = list(dict.fromkeys(c for key in plan.join.keys for c in key.source.columns(alias)))
    if not columns:
        return merge_pruning(plan, key_ranges=False), materialized.count()
    collected = materialized.select(*[quote(name) for name in columns]).limit(KEY_RANGE_ROWS + 1).toArrow()
    if collected.num_rows > KEY_RANGE_ROWS:
        return merge_pruning(plan, key_ranges=False), materialized.count()
    keys = pa.table(
        [collected.column(i).cast(schema.field(name).type) for i, name in enumerate(columns)], names=columns
    )
    return merge_pruning(replace(plan, join=replace(plan.join, source=keys))), keys.num_rows


class _SparkMerge:
    """The Spark plans of one MERGE (see the module docstring)."""

    def __init__(
        self, target: SparkTarget, plan: MergePlan, source: Any, condition: str, broadcast: bool
    ) -> None:
        self.target = target
        self.plan = plan
        self.source = source
        self.broadcast = broadcast
        self.on = functions().expr(condition)
        generated = [plan.generated_identity(c) if c.spec.kind == NOT_MATCHED else [] for c in plan.clauses]
        self.effects = tuple(
            ClauseEffect(*_EFFECTS[(c.spec.kind, c.action)], tuple(c.assignments), tuple(i.name for i in ids))
            for c, ids in zip(plan.clauses, generated, strict=True)
        )
        self.identity = {column.name: column for ids in generated for column in ids}
        """The identity columns whose values inserted rows need generated."""
        self.identity_rows: dict[str, Counter[int]] = {}
        """Per identity column, per partition of the rows to insert, how many need its values."""

    def _clauses(self, kind: str) -> list[tuple[int, str | None]]:
        return [(i, c.spec.predicate) for i, c in enumerate(self.plan.clauses) if c.spec.kind == kind]

    def _joined(self, rows: Any, how: str) -> Any:
        source = functions().broadcast(self.source) if self.broadcast else self.source
        return rows.join(source, self.on, how)

    def _spec(self, files: dict[str, Any]) -> TaskSpec:
        """The tasks' spec, over ``files`` numbered as a scan of them numbers them."""
        return TaskSpec(self.plan.table, [files[path] for path in file_ids(files)], self.effects)

    def run(self, version: int, files: dict[str, Any], source_rows: int) -> Changes:
        """The passes (see the module docstring): what the tasks wrote."""
        spark = self.target.spark
        spec = self._spec(files)
        if self.plan.insert_only:
            rows = self._joined(self.target.scan(version, files, self.plan.scan_columns()), "inner")
            matched = rows.select(SOURCE_ROW).distinct()
            return self._inserts(matched, source_rows, spec)
        decisions = self._decisions(version, files)
        self._check_matches(decisions)
        F = functions()  # noqa: N806 - PySpark's convention
        changed = decisions.filter(F.col(CLAUSE_COLUMN).isNotNull()).drop(SOURCE_ROW)
        changes = run_changes(spark, changed, spec, shuffle=not self.broadcast)
        if self._clauses(NOT_MATCHED):
            matched = decisions.filter(F.col(SOURCE_ROW).isNotNull()).select(SOURCE_ROW).distinct()
            with discard_on_failure(changes):
                changes.extend(self._inserts(matched, source_rows, spec))
        return changes

    def _inserts(self, matched: Any, source_rows: int, spec: TaskSpec) -> Changes:
        """Insert the rows no target row matched (:meth:`_unmatched`). When they need identity
        values, the rows are materialized in the partitions the tasks then insert them from, and
        counted per partition first (:attr:`TaskSpec.identity_before`)."""
        rows = self._unmatched(matched, source_rows)
        if self.identity:
            rows = rows.localCheckpoint(eager=True)
            self.identity_rows = self._count_identity_rows(rows)
            before = {name: _running_sums(counts) for name, counts in self.identity_rows.items()}
            spec = replace(spec, identity_before=before)
        return run_changes(self.target.spark, rows, spec, shuffle=False)

    def _count_identity_rows(self, rows: Any) -> dict[str, Counter[int]]:
        """Per identity column, per partition of ``rows``, how many of its rows need its values."""
        F = functions()  # noqa: N806 - PySpark's convention
        partition = F.spark_partition_id().alias("partition")
        counted = rows.groupBy(partition, F.col(CLAUSE_COLUMN)).count().collect()
        per_column: dict[str, Counter[int]] = {}
        for name in self.identity:
            generating = {i for i, effect in enumerate(self.effects) if name in effect.identity}
            per_column[name] = Counter()
            for row in counted:
                if row[CLAUSE_COLUMN] in generating:
                    per_column[name][row["partition"]] += row["count"]
        return per_column

    def identity_marks(self) -> dict[str, int]:
        """The identity high water marks the inserts move on (:func:`last_values`)."""
        totals = {name: sum(counts.values()) for name, counts in self.identity_rows.items()}
        return last_values(list(self.identity.values()), totals)

    def _decisions(self, version: int, files: dict[str, Any]) -> Any:
        """Pass 1: the candidate files' deciding columns joined with the source (inner; left
        outer with NOT MATCHED BY SOURCE clauses); for every matched or changed target row its
        clause (null: none applies), action, values and the source row it matched, materialized.
        With a broadcast source the rows keep the order of their files."""
        F = functions()  # noqa: N806 - PySpark's convention
        how = "left" if self._clauses(NOT_MATCHED_BY_SOURCE) else "inner"
        joined = self._joined(self.target.scan(version, files, self._read_columns()), how)
        matched = F.col(SOURCE_PRESENT).isNotNull()
        clause = F.when(matched, first_clause(self._clauses(MATCHED))).otherwise(
            first_clause(self._clauses(NOT_MATCHED_BY_SOURCE))
        )
        rows = joined.withColumn(CLAUSE_COLUMN, clause).filter(matched | F.col(CLAUSE_COLUMN).isNotNull())
        source_row = F.when(matched, F.col(SOURCE_ROW)).alias(SOURCE_ROW)
        return rows.select(
            *decided(self._action(), F.col(CLAUSE_COLUMN), self._new_values()), source_row
        ).localCheckpoint(eager=True)

    def _check_matches(self, decisions: Any) -> None:
        """Delta's error for a target row several source rows match (unless the one MATCHED clause
        is an unconditional delete)."""
        if self.plan.only_unconditional_delete:
            return
        F = functions()  # noqa: N806 - PySpark's convention
        matched = decisions.filter(F.col(SOURCE_ROW).isNotNull())
        if matched.groupBy(FILE_COLUMN, ROW_COLUMN).count().filter(F.col("count") > 1).limit(1).collect():
            raise multiple_source_rows_error(self.plan.table.table_path)

    def _action(self) -> Any:
        F = functions()  # noqa: N806 - PySpark's convention
        action: Any = F.lit(None).cast("int")
        for index, effect in enumerate(self.effects):
            action = F.when(F.col(CLAUSE_COLUMN) == index, F.lit(effect.action)).otherwise(action)
        return action

    def _unmatched(self, matched: Any, source_rows: int) -> Any:
        """The rows to insert: the source rows whose ids are not in ``matched``, decided by the NOT
        MATCHED clauses, in as many tasks as :data:`INSERT_ROWS_PER_TASK` asks."""
        F = functions()  # noqa: N806 - PySpark's convention
        unmatched = self.source.join(matched, SOURCE_ROW, "left_anti")
        rows = (
            unmatched.withColumn(CLAUSE_COLUMN, first_clause(self._clauses(NOT_MATCHED)))
            .filter(F.col(CLAUSE_COLUMN).isNotNull())
            .withColumn(FILE_COLUMN, F.lit(None).cast("int"))
            .withColumn(ROW_COLUMN, F.lit(None).cast("long"))
        )
        selected = rows.select(*decided(F.lit(INSERT), F.col(CLAUSE_COLUMN), self._new_values(NOT_MATCHED)))
        return selected.coalesce(_buckets(source_rows))

    def _read_columns(self) -> list[str]:
        """The target columns pass 1 reads: the ON condition's, and those the MATCHED and NOT
        MATCHED BY SOURCE clauses' conditions and values read."""
        columns = self.plan.scan_columns()
        for clause in self.plan.clauses:
            if clause.spec.kind != NOT_MATCHED:
                for value in clause.assignments.values():
                    columns += value.bound.columns(self.target.alias)
        return list(dict.fromkeys(columns))

    def _new_values(self, kind: str | None = None) -> list[Any]:
        """Each column of the table after the MERGE: the value the deciding update or insert
        clause (of ``kind`` only, when given) assigns it, stored into its type; null where the
        clause does not assign it (the task keeps the target's value for updates)."""
        F = functions()  # noqa: N806 - PySpark's convention
        schema = self.plan.table.write_schema
        values = []
        for name, data_type in zip(schema.names, spark_types(schema), strict=True):
            value: Any = None
            for index, clause in enumerate(self.plan.clauses):
                assignment = clause.assignments.get(name)
                if assignment is None or (kind is not None and clause.spec.kind != kind):
                    continue
                test = F.col(CLAUSE_COLUMN) == index
                chosen = stored(assignment.text, data_type)
                value = F.when(test, chosen) if value is None else value.when(test, chosen)
            values.append(value if value is not None else F.lit(None).cast(data_type))
        return values


def _running_sums(counts: Counter[int]) -> dict[int, int]:
    """Per partition, the sum of ``counts`` of the partitions before it."""
    sums, total = {}, 0
    for index in sorted(counts):
        sums[index], total = total, total + counts[index]
    return sums
