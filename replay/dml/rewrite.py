"""One target file after a row-level change: its new state and the change rows it produced.

The operations decide, for the live rows of a target file, which are deleted and which are
updated (with their new values); :class:`FileRewriter` turns that into the file's new state:

* with deletion vectors, the deleted and updated rows' physical indexes are added to the file's
  deletion vector (the file is removed when no row is left) and the new values of the updated
  rows go to a new data file;
* copy-on-write, the file is replaced by a new file holding its remaining rows in their order,
  updated rows in place with their new values (a row whose partition column changed moves to a
  file of its new partition);
* with the change data feed, ``delete`` rows for the deleted rows and ``update_preimage`` /
  ``update_postimage`` pairs for the updated ones are written as change data.

The result is a :class:`FileChange`: what the driver commits for the file, and the counts the
operation's metrics are made of.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from replay.cdc.change_actions import (
    CDC_TYPE_DELETE,
    CDC_TYPE_UPDATE_POSTIMAGE,
    CDC_TYPE_UPDATE_PREIMAGE,
)
from replay.data.deletion_vector_writer import DeletionVectorUpdate
from replay.data.dictionaries import decode_dictionaries, is_dictionary_of
from replay.data.row_lineage import derived, stored_fields, updated_lineage, with_lineage
from replay.dml.context import CHANGE_TYPE_FIELD, DmlTable
from replay.dml.outputs import Sinks
from replay.dml.target_rows import TargetRows, rows_with_columns
from replay.protocol.actions import Action, AddFile, RemoveFile
from replay.txn.data_writer import WrittenFile

EMPTY = np.empty(0, dtype=np.int64)


def removal(file: AddFile, timestamp: int) -> RemoveFile:
    """The ``remove`` of a target file, statistics reduced to ``numRecords`` as Delta's DML scan
    keeps them."""
    records = file.num_records
    stats = orjson.dumps({"numRecords": records}).decode() if records is not None else None
    return replace(file, stats=stats).remove_with_timestamp(timestamp)


@dataclass
class FileChange:
    """What the work on one target file did.

    ``changed_rows`` rows left the file (deleted or updated), ``copied_rows`` were rewritten
    unchanged (copy-on-write); ``rewritten`` are the copy-on-write replacement files,
    ``deletion_vector`` the file's new deletion vector. ``counts`` holds the operation's own row
    counts (e.g. ``updated``, ``matchedDeleted``); ``matched_source`` the source rows a MERGE
    matched in this file. ``scan_ns`` / ``write_ns`` time the finding and the writing.
    """

    file: AddFile
    changed_rows: int = 0
    copied_rows: int = 0
    rewritten: list[WrittenFile] = field(default_factory=list)
    deletion_vector: DeletionVectorUpdate | None = None
    counts: Counter[str] = field(default_factory=Counter)
    matched_source: np.ndarray | None = None
    scan_ns: int = 0
    write_ns: int = 0

    @property
    def touched(self) -> bool:
        return self.changed_rows > 0

    @property
    def removed_whole(self) -> bool:
        """Whether the file leaves the table (copy-on-write, or a DV that deletes every row)."""
        if not self.touched:
            return False
        update = self.deletion_vector
        return update is None or update.all_deleted or update.descriptor is None

    def actions(self, timestamp: int) -> list[Action]:
        """The commit actions of this file: its DV update, or its ``remove`` and the adds of its
        copy-on-write replacements; none when untouched."""
        if not self.touched:
            return []
        if self.deletion_vector is not None:
            return list(self.deletion_vector.actions(timestamp))
        return [removal(self.file, timestamp), *(w.add for w in self.rewritten)]

    def deletion_vector_counts(self) -> Counter[str]:
        """Delta's DV metrics of this file: a DV ``added`` to a file without one, ``updated``, or
        ``removed`` (the file had one and is removed, or rewritten without one)."""
        counts: Counter[str] = Counter()
        if not self.touched:
            return counts
        had = self.file.deletion_vector is not None
        update = self.deletion_vector
        if update is None or update.all_deleted or update.descriptor is None:
            counts["removed"] += int(had)
        elif had:
            counts["updated"] += 1
        else:
            counts["added"] += 1
        return counts


def align(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with exactly the columns of ``schema`` (matched by name, case-insensitively; missing
    ones as nulls) in its order and types (dictionary columns of the type kept as they are)."""
    index = {name.lower(): i for i, name in enumerate(rows.column_names)}
    arrays: list[pa.ChunkedArray | pa.Array] = []
    for target in schema:
        position = index.get(target.name.lower())
        if position is None:
            arrays.append(pa.nulls(rows.num_rows, target.type))
            continue
        column = rows.column(position)
        kept = column.type == target.type or is_dictionary_of(column.type, target.type)
        arrays.append(column if kept else column.cast(target.type))
    return pa.Table.from_arrays(arrays, names=schema.names)


def change_rows(rows: pa.Table, change_type: str, schema: pa.Schema) -> pa.Table:
    """``rows`` as change data of ``change_type`` (``schema``: the table's columns after the change)."""
    aligned = align(rows, schema)
    return aligned.append_column(CHANGE_TYPE_FIELD, pa.repeat(pa.scalar(change_type), rows.num_rows))


def update_images(before: pa.Table, after: pa.Table, schema: pa.Schema) -> pa.Table:
    """``update_preimage`` / ``update_postimage`` pairs, each pre-image followed by its post-image."""
    count = before.num_rows
    pairs = pa.concat_tables(
        [
            change_rows(before, CDC_TYPE_UPDATE_PREIMAGE, schema),
            change_rows(after, CDC_TYPE_UPDATE_POSTIMAGE, schema),
        ]
    )
    order = np.empty(2 * count, dtype=np.int64)
    order[0::2] = np.arange(count)
    order[1::2] = np.arange(count) + count
    return pairs.take(pa.array(order))


class FileRewriter:
    """Applies the row changes of one target file (see the module docstring)."""

    def __init__(self, table: DmlTable, sinks: Sinks, target: TargetRows, started_ns: int) -> None:
        self.table = table
        self.sinks = sinks
        self.target = target
        self.started_ns = started_ns
        self._columns = [f.name for f in table.reader.schema.fields]
        self._loaded_positions: np.ndarray | None = EMPTY
        self._loaded: pa.Table | None = None
        self._taken: tuple[np.ndarray, pa.Table] | None = None
        self._lineage: tuple[pa.Array, pa.Array] | None = None

    @property
    def copy_on_write(self) -> bool:
        return not self.table.deletion_vectors

    def load(self, positions: np.ndarray) -> None:
        """Read every column of the rows at ``positions`` (of all rows when copying on write, string
        columns the file stores dictionary-encoded as dictionary arrays), for
        :meth:`full_rows`."""
        self._taken = None
        if self.copy_on_write:
            self._loaded_positions = None
            self._loaded = rows_with_columns(
                self.table.reader, self.target, None, self._columns, keep_dictionaries=True
            )
            return
        wanted = np.unique(positions)
        self._loaded_positions = wanted
        self._loaded = rows_with_columns(self.table.reader, self.target, wanted, self._columns)

    def full_rows(self, positions: np.ndarray | None = None) -> pa.Table:
        """Every column of the rows at ``positions``, which :meth:`load` must have covered, with
        plain columns (values are computed from them); ``None``: all rows as loaded, for the copy.
        The rows of the last ``positions`` asked for are kept: an operation asks for the rows it
        changes once to compute their new values, and again for their change data and the copy."""
        if self._loaded is None:
            self.load(positions if positions is not None else np.arange(self.target.num_rows))
        assert self._loaded is not None
        if positions is None and self._loaded_positions is None:
            return self._loaded
        if self._taken is not None and self._taken[0] is positions:
            return self._taken[1]
        wanted = positions if positions is not None else np.arange(self.target.num_rows)
        at = wanted if self._loaded_positions is None else np.searchsorted(self._loaded_positions, wanted)
        rows = decode_dictionaries(self._loaded.take(pa.array(at, pa.int64())))
        if positions is not None:
            self._taken = (positions, rows)
        return rows

    def unchanged(self) -> FileChange:
        return FileChange(self.target.file, scan_ns=time.perf_counter_ns() - self.started_ns)

    def finish(
        self,
        deleted: np.ndarray,
        updated: np.ndarray = EMPTY,
        new_rows: pa.Table | None = None,
        counts: Counter[str] | None = None,
    ) -> FileChange:
        """The file's new state after ``deleted`` rows are deleted and ``updated`` rows get
        ``new_rows`` (positions into ``target.rows``, disjoint; ``new_rows`` aligned with
        ``updated``)."""
        finishing = time.perf_counter_ns()
        file = self.target.file
        changed = np.concatenate([deleted, updated]) if updated.size else deleted
        result = FileChange(file, counts=counts if counts is not None else Counter())
        result.scan_ns = finishing - self.started_ns
        if changed.size == 0:
            return result
        if self._loaded is None and (self.copy_on_write or self.sinks.writes_changes or updated.size):
            self.load(changed)
        schema = self.table.write_schema
        if self.sinks.writes_changes:
            parts = []
            if deleted.size:
                parts.append(change_rows(self.full_rows(deleted), CDC_TYPE_DELETE, schema))
            if updated.size and new_rows is not None:
                parts.append(update_images(self.full_rows(updated), new_rows, schema))
            if parts:
                self.sinks.write_changes(pa.concat_tables(parts) if len(parts) > 1 else parts[0])
        result.changed_rows = int(changed.size)
        if self.copy_on_write:
            rows = self._copy(deleted, updated, new_rows)
            result.rewritten = self.sinks.rewrite(rows)
            result.copied_rows = self.target.num_rows - result.changed_rows
        else:
            writer = self.sinks.deletion_vectors
            assert writer is not None
            result.deletion_vector = writer.update(
                file,
                self.target.physical(changed),
                num_records=self.target.num_records,
                current_rows=self.target.deleted,
            )
            if new_rows is not None and new_rows.num_rows:
                written = align(new_rows, schema)
                lineage = self.lineage()
                if lineage is not None:  # the updated rows keep their ids (row tracking)
                    written = with_lineage(written, *updated_lineage(lineage[0].take(pa.array(updated))))
                self.sinks.new_rows.write(written)
        result.write_ns = time.perf_counter_ns() - finishing
        return result

    def _copy(self, deleted: np.ndarray, updated: np.ndarray, new_rows: pa.Table | None) -> pa.Table:
        """The file's rows in order: deleted ones left out, updated ones replaced by their new values.

        A column whose new values equal the old ones (an UPDATE leaves most columns as they are)
        is copied as it is, without the positional merge the changed columns need. Each column
        as read is let go once its copy is made: the copy holds about one column more than the
        file's rows, not them twice."""
        count = self.target.num_rows
        schema = self.table.write_schema
        changes = None
        if updated.size and new_rows is not None:
            changes = (align(self.full_rows(updated), schema), align(new_rows, schema))
        rows = align(self.full_rows(), schema)
        self._loaded = None  # from here ``columns`` holds the only reference to the rows as read
        copied_schema, columns = rows.schema, rows.columns
        del rows
        kept = None
        if deleted.size:
            keep = np.ones(count, dtype=bool)
            keep[deleted] = False
            kept = pa.array(keep)
        order: pa.Array | None = None
        for index in range(len(columns)):
            column = columns[index]
            if changes is None or same_values(changes[0].column(index), changes[1].column(index)):
                columns[index] = column.filter(kept) if kept is not None else column
                continue
            if order is None:
                positions = np.arange(count)
                positions[updated] = count + np.arange(updated.size)
                order = pa.array(np.delete(positions, deleted) if deleted.size else positions, pa.int64())
            replacement = changes[1].column(index)
            if replacement.type != column.type:  # new values join the dictionary (take unifies them)
                replacement = replacement.cast(column.type)
            merged = pa.chunked_array(column.chunks + replacement.chunks, type=column.type)
            columns[index] = merged.take(order)
        del column
        copied = pa.Table.from_arrays(columns, schema=copied_schema)
        lineage = self.lineage()
        if lineage is None:
            return copied
        ids, versions = lineage  # rows keep their ids, and updated rows get the new commit version
        if updated.size:
            fresh = np.zeros(count, dtype=bool)
            fresh[updated] = True
            versions = pc.if_else(pa.array(fresh), pa.scalar(None, pa.int64()), versions)
        if kept is not None:
            ids, versions = ids.filter(kept), versions.filter(kept)
        return with_lineage(copied, ids, versions)

    def lineage(self) -> tuple[pa.Array, pa.Array] | None:
        """The row ids and row commit versions of the target file's live rows (in the order of
        ``target.rows``) where the table keeps them (row tracking enabled), else ``None``; read
        from the file's materialized columns once (:mod:`replay.data.row_lineage`)."""
        names = self.table.spec.row_tracking
        if names is None:
            return None
        if self._lineage is None:
            target = self.target
            stored = self.table.reader.read_file(
                target.file, [], row_filter=False, extra_columns=stored_fields(names), data=target.data
            )
            ids, versions = derived(target.file, stored, target.num_records)
            if target.row_index is not None:
                live = pa.array(target.row_index, pa.int64())
                ids, versions = ids.take(live), versions.take(live)
            self._lineage = (ids, versions)
        return self._lineage


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def same_values(old: pa.ChunkedArray, new: pa.ChunkedArray) -> bool:
    """Whether ``new`` holds exactly the values of ``old``: same type, same nulls and the same
    values, floating-point ones bit for bit (their equality takes -0.0 for 0.0 and no NaN for
    itself). Nested columns, which may hold floats, are never taken as unchanged."""
    data_type = old.type
    if new.type != data_type or pa.types.is_nested(data_type):
        return False
    if pa.types.is_floating(data_type):
        bits = _FLOAT_BITS[data_type.bit_width]
        return _view(old, bits).equals(_view(new, bits))
    return old.equals(new)


def _view(column: pa.ChunkedArray, data_type: pa.DataType) -> pa.ChunkedArray:
    """``column``'s buffers read as ``data_type`` (of the same width)."""
    return pa.chunked_array([chunk.view(data_type) for chunk in column.chunks], type=data_type)
