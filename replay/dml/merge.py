"""MERGE: upsert a source into the table (Delta's ``MergeIntoCommand``).

The source is read whole (Delta materializes it too) and is the only thing held besides one
target file's rows per worker. The driver binds the ON condition and the clauses
(:mod:`~replay.dml.merge_clauses`), evolves the schema if asked, and selects the target files to
read: those the ON condition's target-only part and the source's key ranges
(:func:`~replay.dml.merge_join.source_key_ranges`) cannot exclude, plus, with ``NOT MATCHED BY
SOURCE`` clauses, those their conditions cannot exclude. Each such file is then worked on by
:meth:`MergePlan.process_file`: its rows are matched with the source, several source rows
matching one target row fail the MERGE (unless its only ``MATCHED`` clause is an unconditional
delete), the first applicable clause of each matched and not-matched-by-source row decides its
fate, and the file's new state is written (deletion vectors or copy-on-write,
:mod:`~replay.dml.rewrite`). A MERGE with insert clauses only reads the target files' key columns
and writes nothing for them (an anti-join). Finally the source rows no target row matched go
through the ``NOT MATCHED`` clauses and are inserted (:meth:`MergePlan.insert_unmatched`).
With the change data feed, every inserted, updated and deleted row is written as change data,
deletion vectors or not (as in Delta).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from replay.cdc.change_actions import CDC_TYPE_INSERT
from replay.dml.assignments import regenerate
from replay.dml.commit import DmlResult, elapsed_ms, snapshot_transaction
from replay.dml.context import DmlTable, candidate_files, dml_table
from replay.dml.errors import InvalidDmlArgumentError, multiple_source_rows_error
from replay.dml.expressions import SqlText, true_positions
from replay.dml.merge_clauses import (
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    Aliases,
    ClauseSpec,
    MergeClause,
    resolve_clauses,
)
from replay.dml.merge_commit import finish_merge, merge_parameters
from replay.dml.merge_join import MergeJoin, joined, pairs_mapping, source_key_ranges
from replay.dml.outputs import Sinks
from replay.dml.rewrite import EMPTY, FileChange, FileRewriter, align, change_rows
from replay.dml.runner import run_plan
from replay.dml.target_rows import read_target_rows
from replay.protocol.actions import Action, AddFile
from replay.protocol.column_names import check_column_names
from replay.protocol.identity_columns import IdentityColumn
from replay.protocol.predicates import TRUE, And, Or, Predicate
from replay.protocol.schema import StructType
from replay.protocol.table_config import TableConfiguration
from replay.protocol.type_widening import with_type_changes
from replay.state.snapshot import Snapshot
from replay.txn.identity_values import IdentityValues, marked_actions
from replay.txn.write import ArrowData, arrow_stream, delta_schema
from replay.txn.write_plan import protocol_for_schema

OPERATION = "MERGE"


# -- the per-file work -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MergePlan:
    """A MERGE as planned on the driver (picklable): the source, the join and the clauses."""

    table: DmlTable
    join: MergeJoin
    clauses: tuple[MergeClause, ...]

    @property
    def aliases(self) -> tuple[str, str]:
        return self.join.target_alias, self.join.source_alias

    def of_kind(self, kind: str) -> list[MergeClause]:
        return [clause for clause in self.clauses if clause.spec.kind == kind]

    def generated_identity(self, clause: MergeClause) -> list[IdentityColumn]:
        """The identity columns whose values the rows ``clause`` inserts need generated: those it
        does not assign."""
        return [c for c in self.table.spec.constraints.identity if c.name not in clause.assignments]

    @property
    def insert_only(self) -> bool:
        return not self.of_kind(MATCHED) and not self.of_kind(NOT_MATCHED_BY_SOURCE)

    @property
    def only_unconditional_delete(self) -> bool:
        """Delta's exception to the multiple-match error: the one MATCHED clause is an
        unconditional delete (every matched pair deletes its target row). Insert-only merges
        never check (Delta's ``InsertOnlyMergeExecutor``); any other MERGE does, even without
        MATCHED clauses (``ClassicMergeExecutor.findTouchedFiles``)."""
        matched = self.of_kind(MATCHED)
        return len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None

    def scan_columns(self) -> list[str]:
        """The target columns read first: the ON condition's and the clause conditions'."""
        target = self.join.target_alias
        columns = self.join.target_columns()
        for clause in self.clauses:
            if clause.condition is not None and clause.spec.kind != NOT_MATCHED:
                columns += clause.condition.bound.columns(target)
        return list(dict.fromkeys(columns))

    def process_file(self, file: AddFile, sinks: Sinks) -> FileChange:
        """Merge the source into one target file (the per-file work); the result names the
        source rows this file matched."""
        started = time.perf_counter_ns()
        target = read_target_rows(self.table.reader, file, self.table.first_read(self.scan_columns()))
        rewriter = FileRewriter(self.table, sinks, target, started)
        t_pos, s_idx = self.join.match(target.rows)
        matched_source = np.unique(s_idx) if self.of_kind(NOT_MATCHED) else None
        if self.insert_only:  # an anti-join: several matches of one target row are fine
            change = rewriter.unchanged()
            change.matched_source = matched_source
            return change
        if t_pos.size > 1 and (np.diff(t_pos) == 0).any():
            if not self.only_unconditional_delete:
                raise multiple_source_rows_error(self.table.table_path)
            first = np.concatenate([[True], np.diff(t_pos) != 0])
            t_pos, s_idx = t_pos[first], s_idx[first]
        counts: Counter[str] = Counter()
        deleted: list[np.ndarray] = []
        updates: list[tuple[MergeClause, np.ndarray, np.ndarray | None]] = []
        matched = self.of_kind(MATCHED)
        if matched and t_pos.size:
            data, mapping = self._pairs(target.rows, t_pos, s_idx)
            for clause, chosen in zip(matched, _first_applicable(matched, data, mapping), strict=True):
                if not chosen.size:
                    continue
                if clause.action == "delete":
                    deleted.append(t_pos[chosen])
                    counts["matchedDeleted"] += int(chosen.size)
                else:
                    updates.append((clause, t_pos[chosen], s_idx[chosen]))
                    counts["matchedUpdated"] += int(chosen.size)
        by_source = self.of_kind(NOT_MATCHED_BY_SOURCE)
        if by_source:
            unmatched = np.setdiff1d(np.arange(target.num_rows, dtype=np.int64), t_pos)
            if unmatched.size:
                rows = target.rows.take(pa.array(unmatched))
                mapping = {(self.join.target_alias, c): c for c in rows.column_names}
                for clause, chosen in zip(
                    by_source, _first_applicable(by_source, rows, mapping), strict=True
                ):
                    if not chosen.size:
                        continue
                    if clause.action == "delete":
                        deleted.append(unmatched[chosen])
                        counts["notMatchedBySourceDeleted"] += int(chosen.size)
                    else:
                        updates.append((clause, unmatched[chosen], None))
                        counts["notMatchedBySourceUpdated"] += int(chosen.size)
        if not deleted and not updates:
            change = rewriter.unchanged()
            change.matched_source = matched_source
            return change
        removed = np.concatenate(deleted) if deleted else EMPTY
        updated = np.concatenate([positions for _, positions, _ in updates]) if updates else EMPTY
        rewriter.load(np.concatenate([removed, updated]))
        new_rows = [
            self._updated_rows(rewriter.full_rows(positions), clause, sources)
            for clause, positions, sources in updates
        ]
        change = rewriter.finish(removed, updated, pa.concat_tables(new_rows) if new_rows else None, counts)
        change.matched_source = matched_source
        return change

    def _pairs(
        self, target: pa.Table, t_pos: np.ndarray, s_idx: np.ndarray
    ) -> tuple[pa.Table, Mapping[tuple[str, str], str]]:
        """The matched pairs with the target columns read and the source columns the matched
        clauses' conditions read."""
        source_columns = self._source_columns(c.condition for c in self.of_kind(MATCHED))
        data = joined(target, t_pos, self.join.source.select(source_columns), s_idx)
        return data, pairs_mapping(self.join, target.column_names, source_columns)

    def _source_columns(self, expressions: Iterable[SqlText | None]) -> list[str]:
        columns: list[str] = []
        for expression in expressions:
            if expression is not None:
                columns += expression.bound.columns(self.join.source_alias)
        return list(dict.fromkeys(columns))

    def _updated_rows(self, old: pa.Table, clause: MergeClause, sources: np.ndarray | None) -> pa.Table:
        """The new values of target rows ``old`` that ``clause`` updates (with the source rows
        ``sources`` they matched; ``None`` for NOT MATCHED BY SOURCE)."""
        if sources is None:
            data = old
            mapping: Mapping[tuple[str, str], str] = {
                (self.join.target_alias, c): c for c in old.column_names
            }
        else:
            source_columns = self._source_columns(clause.assignments.values())
            data = joined(old, np.arange(old.num_rows), self.join.source.select(source_columns), sources)
            mapping = pairs_mapping(self.join, old.column_names, source_columns)
        updated = _assigned(data, mapping, clause.assignments, self.table.write_schema, old)
        return regenerate(updated, self.table.spec.constraints.generated, clause.assignments, insert=False)

    def insert_unmatched(
        self, matched: Sequence[np.ndarray], sinks: Sinks, identity: IdentityValues | None = None
    ) -> Counter[str]:
        """Insert the source rows that no target row matched, through the NOT MATCHED clauses;
        ``identity`` generates the values of the identity columns a clause does not assign."""
        counts: Counter[str] = Counter()
        clauses = self.of_kind(NOT_MATCHED)
        source = self.join.source
        if not clauses or source.num_rows == 0:
            return counts
        found = np.zeros(source.num_rows, dtype=bool)
        for indexes in matched:
            found[indexes] = True
        unmatched = np.flatnonzero(~found).astype(np.int64)
        if not unmatched.size:
            return counts
        rows = source.take(pa.array(unmatched))
        mapping = {(self.join.source_alias, c): c for c in rows.column_names}
        for clause, chosen in zip(clauses, _first_applicable(clauses, rows, mapping), strict=True):
            if not chosen.size:
                continue
            picked = rows.take(pa.array(chosen))
            inserted = regenerate(
                _assigned(picked, mapping, clause.assignments, self.table.write_schema, None),
                self.table.spec.constraints.generated,
                clause.assignments,
                insert=True,
            )
            if identity is not None:
                inserted = identity.fill(inserted, self.generated_identity(clause))
            sinks.new_rows.write(inserted)
            sinks.write_changes(change_rows(inserted, CDC_TYPE_INSERT, self.table.write_schema))
            counts["inserted"] += int(chosen.size)
        return counts


def _first_applicable(
    clauses: Sequence[MergeClause], data: pa.Table, mapping: Mapping[tuple[str, str], str]
) -> list[np.ndarray]:
    """For each clause, the rows of ``data`` it applies to: the first clause whose condition holds
    wins. A condition is evaluated only over the rows no earlier clause took (as SQL's CASE)."""
    remaining = np.arange(data.num_rows, dtype=np.int64)
    chosen: list[np.ndarray] = []
    for clause in clauses:
        if clause.condition is None or not remaining.size:
            chosen.append(remaining)
            remaining = EMPTY
            continue
        subset = data.take(pa.array(remaining)) if remaining.size != data.num_rows else data
        holds = true_positions(clause.condition.bound.matches(subset, mapping))
        chosen.append(remaining[holds])
        remaining = np.delete(remaining, holds)
    return chosen


def _assigned(
    data: pa.Table,
    mapping: Mapping[tuple[str, str], str],
    assignments: Mapping[str, SqlText],
    schema: pa.Schema,
    old: pa.Table | None,
) -> pa.Table:
    """Rows with ``schema``'s columns: assigned ones evaluated over ``data``, the others copied
    from ``old`` (the target rows an update keeps) or null (inserts, new columns)."""
    arrays: list[pa.Array | pa.ChunkedArray] = []
    old_names = set(old.column_names) if old is not None else set()
    for field in schema:
        assignment = assignments.get(field.name)
        if assignment is not None:
            arrays.append(assignment.bound.evaluate(data, mapping))
        elif old is not None and field.name in old_names:
            arrays.append(old.column(field.name))
        else:
            arrays.append(pa.nulls(data.num_rows, field.type))
    return align(pa.Table.from_arrays(arrays, names=schema.names), schema)


# -- the driver --------------------------------------------------------------------------------------
def materialize_source(source: ArrowData) -> pa.Table:
    """The source rows, read whole, with the column types a Delta table stores (unsigned integers
    as signed ones, view types as plain ones)."""
    schema, batches = arrow_stream(source)
    tables = [b if isinstance(b, pa.Table) else pa.Table.from_batches([b]) for b in batches]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    storable = delta_schema(table.schema).to_arrow()
    return table if table.schema == storable else table.cast(storable)


def check_aliases(source_alias: str, target_alias: str, table_path: str) -> None:
    """The source and target aliases of a MERGE must differ (they qualify its columns)."""
    if source_alias.lower() == target_alias.lower():
        raise InvalidDmlArgumentError(
            f"The source and target aliases of a MERGE must differ, both are {source_alias!r} "
            f"(MERGE into table {table_path})",
            table=table_path,
        )


def merge_pruning(plan: MergePlan, *, key_ranges: bool = True) -> Predicate:
    """The files a MERGE reads: those that may hold a row matching a source row, and with NOT
    MATCHED BY SOURCE clauses those their conditions cannot exclude. The source's key ranges
    (``key_ranges=False``: none) come from ``plan.join.source``, which may hold only the columns
    the join keys read."""
    target = plan.join.target_alias
    parts = [plan.join.condition.bound.to_predicate(scope=target)]
    ranges = source_key_ranges(plan.join) if key_ranges else None
    if ranges is not None:
        parts.append(ranges)
    matching: Predicate = And(tuple(parts))
    by_source = plan.of_kind(NOT_MATCHED_BY_SOURCE)
    if not by_source:
        return matching
    conditions = [c.condition.bound.to_predicate(scope=target) if c.condition else TRUE for c in by_source]
    return Or((matching, *conditions))


@dataclass(frozen=True)
class PlannedMerge:
    """A MERGE planned on the driver: the plan of the per-file work, the predicate that selects
    the target files to read (also what the commit read), the schema evolution's actions, and the
    time the source took to read."""

    plan: MergePlan
    pruning: Predicate
    metadata_actions: tuple[Action, ...]
    materialize_ms: int


def bind_merge(
    snapshot: Snapshot,
    source: pa.Table,
    predicate: str,
    specs: Sequence[ClauseSpec],
    *,
    source_alias: str = "source",
    target_alias: str = "target",
    merge_schema: bool = False,
) -> tuple[MergePlan, tuple[Action, ...]]:
    """Bind the ON condition and the clauses over the target and ``source`` (errors name unknown
    columns and functions with their position), evolve the schema if asked and check that the
    table can be changed; returns the plan and the schema evolution's actions.

    ``source`` is the whole source for the per-file work of :func:`merge_rows`; an engine that
    joins the source itself may pass only the columns the join keys read (for
    :func:`merge_pruning`), or an empty table of the source's schema."""
    table_path = snapshot.io.table_path
    check_aliases(source_alias, target_alias, table_path)
    snapshot.config.check_writable()
    aliases = Aliases(target_alias, source_alias)
    now = _dt.datetime.now(_dt.UTC)
    clauses, final_schema = resolve_clauses(
        specs,
        snapshot.schema,
        source.schema,
        aliases,
        evolve=merge_schema,
        table=table_path,
        now=now,
        widen=snapshot.config.type_widening_enabled,
        identity=snapshot.config.constraints.identity,
    )
    metadata_actions, after = _evolution(snapshot, final_schema)
    removes_rows = any(spec.kind != NOT_MATCHED for spec in specs)
    table = dml_table(snapshot, removes_rows=removes_rows, after=after)
    condition = SqlText(
        predicate,
        {target_alias: table.read_schema, source_alias: source.schema},
        kind="predicate",
        now=now,
    )
    plan = MergePlan(table, MergeJoin(condition, target_alias, source_alias, source), tuple(clauses))
    return plan, tuple(metadata_actions)


def plan_merge(
    snapshot: Snapshot,
    source: ArrowData,
    predicate: str,
    specs: Sequence[ClauseSpec],
    *,
    source_alias: str = "source",
    target_alias: str = "target",
    merge_schema: bool = False,
) -> PlannedMerge:
    """Read the source, bind the ON condition and the clauses (:func:`bind_merge`) and compute
    the pruning predicate."""
    started = time.perf_counter_ns()
    check_aliases(source_alias, target_alias, snapshot.io.table_path)
    snapshot.config.check_writable()
    source_table = materialize_source(source)
    materialized_ms = elapsed_ms(started)
    plan, metadata_actions = bind_merge(
        snapshot,
        source_table,
        predicate,
        specs,
        source_alias=source_alias,
        target_alias=target_alias,
        merge_schema=merge_schema,
    )
    return PlannedMerge(plan, merge_pruning(plan), metadata_actions, materialized_ms)


def merge_rows(
    snapshot: Snapshot,
    source: ArrowData,
    predicate: str,
    specs: Sequence[ClauseSpec],
    *,
    source_alias: str = "source",
    target_alias: str = "target",
    merge_schema: bool = False,
) -> DmlResult:
    """MERGE ``source`` into the table at ``snapshot`` on ``predicate`` with the clauses ``specs``."""
    started = time.perf_counter_ns()
    planned = plan_merge(
        snapshot,
        source,
        predicate,
        specs,
        source_alias=source_alias,
        target_alias=target_alias,
        merge_schema=merge_schema,
    )
    plan = planned.plan
    candidates = candidate_files(snapshot, planned.pruning)
    txn = snapshot_transaction(snapshot, OPERATION)

    def finish(changes: list[FileChange], sinks: Sinks, scanned_ns: int) -> DmlResult:
        identity = IdentityValues(plan.table.spec.constraints.identity)
        inserted = plan.insert_unmatched(
            [c.matched_source for c in changes if c.matched_source is not None], sinks, identity
        )
        return finish_merge(
            txn,
            changes,
            sinks.close(),
            inserted,
            metadata_actions=marked_actions(planned.metadata_actions, snapshot.metadata, identity.marks),
            source_rows=plan.join.source.num_rows,
            pruning=planned.pruning,
            candidates=candidates,
            parameters=merge_parameters(predicate, specs),
            materialize_ms=planned.materialize_ms,
            started_ns=started,
            scanned_ns=scanned_ns,
        )

    return run_plan(txn, plan, candidates, started, finish)


def _evolution(snapshot: Snapshot, schema: StructType) -> tuple[list[Action], TableConfiguration | None]:
    """The metadata (and protocol) actions of an evolved schema, and the configuration after them."""
    if schema == snapshot.schema:
        return [], None
    if snapshot.config.type_widening_enabled:  # every type change recorded (delta.typeChanges)
        schema = with_type_changes(snapshot.schema, schema)
    metadata = snapshot.metadata.with_schema(schema)
    check_column_names(metadata, snapshot.io.shown_path)
    protocol = protocol_for_schema(snapshot.protocol, metadata.schema_string or "")
    upgraded = protocol if protocol != snapshot.protocol else None
    actions: list[Action] = [upgraded, metadata] if upgraded is not None else [metadata]
    return actions, snapshot.config.updated(upgraded, metadata)
