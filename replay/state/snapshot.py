"""``Snapshot``: the state of a table at one version.

A snapshot is a log segment (the files it was replayed from), a table configuration (protocol,
metadata and the rules that follow from them) and the replayed state: app transactions and
domain metadata always, the files either at load time or, for a snapshot loaded to commit from,
the first time they are used. It holds the
:class:`~replay.log.table_io.TableIO` it was loaded with, to read its data and commit times,
and no reference to a table object. Active files stay as Arrow tables; :meth:`files_table`,
:meth:`file_uris` and :meth:`files` build the views on demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from replay.log.commit_timestamps import commit_records
from replay.log.concurrency import gc_paused
from replay.log.listing import full_listing
from replay.log.log_replay import ReverseLogReplay
from replay.log.log_segment import LogSegment
from replay.log.table_io import TableIO
from replay.protocol.actions import AddFile, DomainMetadata, Metadata, Protocol, RemoveFile, SetTransaction
from replay.protocol.arrow_actions import (
    FILES_SCHEMA,
    TOMBSTONES_SCHEMA,
    arrow_rows,
    camel_dicts_to_snake,
    camel_table_to_snake,
    may_need_canonical_form,
)
from replay.protocol.errors import VersionNotFoundError
from replay.protocol.paths import resolve_path
from replay.protocol.schema import StructType
from replay.protocol.table_config import TableConfiguration
from replay.state.scan import Filter, Scan

if TYPE_CHECKING:  # pandas is optional: to_pandas imports it
    import pandas as pd


def _clean(value: Mapping[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not None}


class Snapshot:
    """The immutable state of a table at :attr:`version` (see :func:`~replay.state.loader.load_snapshot`).

    Protocol, metadata, transactions and domains are resolved on load; active files are kept
    in their raw form and converted by :meth:`files_table` (Arrow) and :meth:`files` (objects).
    Retention cut-offs are computed once, at load time.
    """

    def __init__(
        self,
        io: TableIO,
        segment: LogSegment,
        config: TableConfiguration,
        state: ReverseLogReplay,
        newest_commit_info: Mapping[str, Any] | None = None,
        *,
        replay_files: Callable[[], ReverseLogReplay] | None = None,
    ) -> None:
        self.io = io
        self.log_segment = segment
        self.version = segment.version
        self.config = config
        self._state = state
        self._replay_files = replay_files
        self._newest_commit_info = newest_commit_info
        now = int(time.time() * 1000)
        self.min_file_retention_timestamp = config.min_file_retention_timestamp(now)
        self.min_set_transaction_retention_timestamp = config.min_set_transaction_retention_timestamp(now)

    # -- table-level properties ------------------------------------------------------------------
    @property
    def protocol(self) -> Protocol:
        return self.config.protocol

    @property
    def metadata(self) -> Metadata:
        return self.config.metadata

    @property
    def table_path(self) -> str:
        return self.io.table_path

    @property
    def schema(self) -> StructType:
        return self.metadata.schema

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @cached_property
    def set_transactions(self) -> dict[str, int]:
        """App id -> latest committed version (txns older than the txn retention are dropped)."""
        threshold = self.min_set_transaction_retention_timestamp
        out: dict[str, int] = {}
        for app_id, txn in self._state.transactions.items():
            updated = txn.get("lastUpdated")
            if threshold is None or (updated is not None and updated > threshold):
                out[app_id] = int(txn["version"])
        return out

    def transactions(self) -> list[SetTransaction]:
        """The ``txn`` actions kept in the state (same retention as :attr:`set_transactions`)."""
        keep = self.set_transactions
        return [
            SetTransaction.from_dict(_clean(t)) for app, t in self._state.transactions.items() if app in keep
        ]

    @cached_property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        """Domain -> its live ``domainMetadata`` (removed domains are absent)."""
        out: dict[str, DomainMetadata] = {}
        for domain, value in self._state.domains.items():
            action = DomainMetadata.from_dict(_clean(value))
            if not action.removed:
                out[domain] = action
        return out

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return self.config.in_commit_timestamps_enabled

    @cached_property
    def timestamp(self) -> int:
        """The commit time (ms) of :attr:`version`: its in-commit timestamp if enabled, else file mtime."""
        if not self.config.in_commit_timestamps_enabled:
            return self.log_segment.last_commit_timestamp
        info = self._newest_commit_info
        if info is not None and info.get("inCommitTimestamp") is not None:
            return int(info["inCommitTimestamp"])
        records = commit_records(self.io, full_listing(self.io), self.config.in_commit_timestamps_since)
        for record in records:
            if record.version == self.version:
                return record.timestamp
        raise VersionNotFoundError(
            f"commit {self.version} of table {self.table_path} is no longer in the log",
            table=self.table_path,
            version=self.version,
        )

    # -- files ---------------------------------------------------------------------------------------
    @cached_property
    def _files(self) -> ReverseLogReplay:
        """The replayed file state: the load's own replay, or one made now (``files=False`` loads)."""
        if self._replay_files is None:
            return self._state
        return self._replay_files()

    @property
    def files_replayed(self) -> bool:
        """Whether the file state is in memory (always after a full load, after first use otherwise)."""
        return self._replay_files is None or "_files" in self.__dict__

    @property
    def _add_tables(self) -> list[pa.Table]:
        return [*self._files.commit_add_tables, *self._files.checkpoint_adds]

    @cached_property
    def num_files(self) -> int:
        return sum(table.num_rows for table in self._add_tables)

    def files_table(self) -> pa.Table:
        """The active files as Arrow, columns :data:`FILES_SCHEMA` (``data_change`` is False).

        Built once and cached (the snapshot is immutable).
        """
        return self._files_table

    @cached_property
    def _files_table(self) -> pa.Table:
        by_schema: dict[pa.Schema, list[pa.Table]] = {}
        for add_table in self._add_tables:  # one conversion per schema, not per commit
            by_schema.setdefault(add_table.schema, []).append(add_table)
        parts = [camel_table_to_snake(pa.concat_tables(same), FILES_SCHEMA) for same in by_schema.values()]
        table = pa.concat_tables(parts) if parts else FILES_SCHEMA.empty_table()
        return table.set_column(
            table.schema.get_field_index("data_change"),
            FILES_SCHEMA.field("data_change"),
            pa.repeat(pa.scalar(False), table.num_rows),
        )

    def files(self) -> list[AddFile]:
        """The active files as :class:`AddFile` objects (``data_change`` False)."""
        with gc_paused():
            return [
                AddFile.from_dict({**row, "dataChange": False})
                for table in self._add_tables
                for row in arrow_rows(table)
            ]

    def file_uris(self, chunk_rows: int = 64 * 1024) -> list[str]:
        """The active files' URIs (:func:`~replay.protocol.paths.resolve_path` of each path), like
        delta-rs's ``DeltaTable.file_uris()``, in :meth:`files_table` order.

        Built ``chunk_rows`` paths at a time: plain relative paths are joined to the table root in
        Arrow, others (escapes, absolute paths, URIs) resolved one by one.
        """
        root = self.table_path.rstrip("/") + "/"
        uris: list[str] = []
        for chunk in self.files_table().column("path").chunks:
            special = may_need_canonical_form(chunk, (b"%", b":"))
            for start in range(0, len(chunk), chunk_rows):
                paths = chunk.slice(start, chunk_rows)
                if special and pc.any(pc.match_substring_regex(paths, "^/|[%:]")).as_py():
                    uris += [resolve_path(self.table_path, path) for path in paths.to_pylist()]
                else:
                    uris += pc.binary_join_element_wise(root, paths, "").to_pylist()
        return uris

    def file_paths(self) -> list[str]:
        """The raw (URL-encoded) paths of the active files."""
        paths: list[str] = []
        for table in self._add_tables:
            paths += table.column("path").to_pylist()
        return paths

    def tombstones(self) -> list[RemoveFile]:
        """Removes still within ``delta.deletedFileRetentionDuration`` (``data_change`` False)."""
        threshold = self.min_file_retention_timestamp
        out: list[RemoveFile] = []
        rows: list[dict[str, Any]] = list(self._files.commit_remove_dicts)
        for table in [*self._files.commit_remove_tables, *self._files.checkpoint_removes]:
            rows += arrow_rows(table)
        for row in rows:
            if (row.get("deletionTimestamp") or 0) > threshold:
                out.append(RemoveFile.from_dict({**row, "dataChange": False}))
        return out

    def tombstones_table(self, *, expired: bool = False) -> pa.Table:
        """:meth:`tombstones` as Arrow (:data:`TOMBSTONES_SCHEMA`); with ``expired``, also the
        ones older than the retention that the log still holds (a lite VACUUM's candidates)."""
        parts = [camel_dicts_to_snake(self._files.commit_remove_dicts, TOMBSTONES_SCHEMA)]
        tables = [*self._files.commit_remove_tables, *self._files.checkpoint_removes]
        parts += [camel_table_to_snake(table, TOMBSTONES_SCHEMA) for table in tables]
        table = pa.concat_tables(parts)
        table = table.set_column(
            table.schema.get_field_index("data_change"),
            TOMBSTONES_SCHEMA.field("data_change"),
            pa.repeat(pa.scalar(False), table.num_rows),
        )
        if expired:
            return table
        deleted = pc.fill_null(table.column("deletion_timestamp"), 0)
        return table.filter(pc.greater(deleted, self.min_file_retention_timestamp))

    # -- rows ----------------------------------------------------------------------------------------
    def scan(self, filter: Filter | None = None, columns: Sequence[str] | None = None) -> Scan:
        """A scan of the rows matching ``filter`` (a pyarrow expression, DNF tuples or a predicate tree).

        Files that cannot hold a matching row (by partition values or statistics) are never
        opened; rows are filtered exactly. Raises
        :class:`~replay.protocol.predicates.InvalidFilterError` for a malformed filter or an
        unknown column.
        """
        return Scan(self.files_table(), self.config, self.io, row_filter=filter, columns=columns)

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Filter | None = None) -> pa.Table:
        """The rows of this version (matching ``filter``) as one Arrow table."""
        return self.scan(filter, columns).to_arrow()

    def to_pandas(self, columns: Sequence[str] | None = None, filter: Filter | None = None) -> pd.DataFrame:
        """The rows of this version (matching ``filter``) as a pandas DataFrame."""
        return self.scan(filter, columns).to_pandas()

    def __repr__(self) -> str:
        return f"Snapshot({self.io.shown_path!r}, version={self.version})"
