"""``TableMerger``: delta-rs's MERGE builder over :func:`replay.dml.merge.merge_rows`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from replay.dml.errors import InvalidDmlArgumentError
from replay.dml.merge import merge_rows
from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, ClauseSpec
from replay.state.snapshot import Snapshot
from replay.txn.commit_properties import CommitProperties
from replay.txn.commit_properties import commit_properties as committing
from replay.txn.write import ArrowData


class TableMerger:
    """A MERGE being built: add WHEN clauses (each method returns the merger), then
    :meth:`execute`. Clauses apply in the order they are added, within each kind."""

    def __init__(
        self,
        snapshot: Snapshot,
        source: ArrowData,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
        on_commit: Callable[[int | None], None] | None = None,
        commit_properties: CommitProperties | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._source = source
        self._predicate = predicate
        self._source_alias = source_alias
        self._target_alias = target_alias
        self._merge_schema = merge_schema
        self._on_commit = on_commit
        self._commit_properties = commit_properties
        self._specs: list[ClauseSpec] = []
        self._executed = False

    def _add(self, spec: ClauseSpec) -> TableMerger:
        self._specs.append(spec)
        return self

    def when_matched_update(self, updates: Mapping[str, str], predicate: str | None = None) -> TableMerger:
        """Update matched target rows: ``updates`` maps target columns to SQL expressions over
        target and source."""
        return self._add(ClauseSpec(MATCHED, "update", predicate, dict(updates)))

    def when_matched_update_all(
        self, predicate: str | None = None, except_cols: Iterable[str] | None = None
    ) -> TableMerger:
        """Update every column of matched target rows from the source column of the same name."""
        return self._add(ClauseSpec(MATCHED, "update", predicate, None, tuple(except_cols or ())))

    def when_matched_delete(self, predicate: str | None = None) -> TableMerger:
        """Delete matched target rows."""
        return self._add(ClauseSpec(MATCHED, "delete", predicate))

    def when_not_matched_insert(
        self, updates: Mapping[str, str], predicate: str | None = None
    ) -> TableMerger:
        """Insert source rows no target row matched: ``updates`` maps target columns to SQL
        expressions over the source (other columns are null)."""
        return self._add(ClauseSpec(NOT_MATCHED, "insert", predicate, dict(updates)))

    def when_not_matched_insert_all(
        self, predicate: str | None = None, except_cols: Iterable[str] | None = None
    ) -> TableMerger:
        """Insert source rows no target row matched, every column from the source."""
        return self._add(ClauseSpec(NOT_MATCHED, "insert", predicate, None, tuple(except_cols or ())))

    def when_not_matched_by_source_update(
        self, updates: Mapping[str, str], predicate: str | None = None
    ) -> TableMerger:
        """Update target rows no source row matched (expressions over the target)."""
        return self._add(ClauseSpec(NOT_MATCHED_BY_SOURCE, "update", predicate, dict(updates)))

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> TableMerger:
        """Delete target rows no source row matched."""
        return self._add(ClauseSpec(NOT_MATCHED_BY_SOURCE, "delete", predicate))

    def execute(self) -> dict[str, int]:
        """Run the MERGE and commit it; returns Delta's metrics. Raises
        :class:`~replay.dml.errors.MultipleSourceRowMatchError` when several source rows match
        one target row (nothing is committed)."""
        if self._executed:
            raise InvalidDmlArgumentError(
                "This MERGE was already executed", table=self._snapshot.io.table_path
            )
        self._executed = True
        with committing(self._commit_properties):
            result = merge_rows(
                self._snapshot,
                self._source,
                self._predicate,
                self._specs,
                source_alias=self._source_alias,
                target_alias=self._target_alias,
                merge_schema=self._merge_schema,
            )
        if self._on_commit is not None:
            self._on_commit(result.version)
        return result.metrics
