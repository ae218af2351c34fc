"""A copy-on-write UPDATE that re-encodes only the columns it sets.

An UPDATE keeps every row of a file, in order, and every column it does not set. So instead of
decoding and encoding the whole file, the columns it sets are read, their new values merged in
and encoded with the file's row groups, and the new file is made of the original's other column
chunks, byte for byte, and the new ones (:mod:`replay.data.parquet_splice`). The file's
statistics are its old ones with the set columns' figures replaced.

This applies where nothing else about the rows is written: copy-on-write (no deletion vectors),
no change data, no partition column set, and no CHECK constraint, invariant or generated column
(they read other columns of the rows); NOT NULL columns among those set are checked. Per file,
the file must have no deletion vector, statistics for every column they should cover, the
table's columns exactly (a file written before a column was added has fewer) and a layout
:func:`~replay.data.parquet_splice.parquet_layout` accepts. Otherwise :func:`update_columns`
returns ``None`` and the file is rewritten whole.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay.data.parquet_files import file_bytes
from replay.data.parquet_splice import MAGIC, NotSpliceableError, parquet_layout, splice_columns
from replay.dml.assignments import apply_assignments
from replay.dml.context import DmlTable
from replay.dml.expressions import Assignment
from replay.dml.outputs import Sinks
from replay.dml.rewrite import FileChange, same_values
from replay.dml.target_rows import TargetRows, rows_with_columns
from replay.protocol.actions import AddFile
from replay.protocol.constraints import TableConstraints
from replay.txn.data_writer import EncodedFile, open_parquet_writer
from replay.txn.statistics import StatisticsCollector, replace_column_statistics
from replay.txn.write_spec import FileWriteSpec, conform

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColumnUpdate:
    """How an UPDATE rewrites files by the columns it sets (planned once; picklable): ``spec``
    writes those ``columns`` (their part of the table's schema and NOT NULL constraints);
    ``reads`` are the columns the new values are computed from."""

    spec: FileWriteSpec
    columns: tuple[str, ...]
    reads: tuple[str, ...]


def plan_column_update(table: DmlTable, assignments: Mapping[str, Assignment]) -> ColumnUpdate | None:
    """The :class:`ColumnUpdate` of an UPDATE setting ``assignments``, or ``None`` where the
    table needs its files rewritten whole (see the module docstring)."""
    spec = table.spec
    rules = spec.constraints
    if table.deletion_vectors or table.change_spec is not None or spec.replace_where is not None:
        return None
    # column mapping, row ids to keep: the spliced chunks would need other names, more columns
    if spec.renames_columns:
        return None
    if rules.checks or rules.invariants or rules.generated:
        return None
    columns = tuple(assignments)
    partitions = {name.lower() for name in spec.partition_columns}
    if any(name.lower() in partitions for name in columns):
        return None
    kept = TableConstraints(
        not_null=tuple(path for path in rules.not_null if path[0] in columns),
        not_null_in_collections=tuple(name for name in rules.not_null_in_collections if name in columns),
    )
    schema = pa.schema([spec.schema.field(name) for name in columns])
    written = replace(spec, schema=schema, partition_columns=(), constraints=kept, max_records_per_file=None)
    reads = tuple(dict.fromkeys(name for value in assignments.values() for name in value.bound.columns()))
    return ColumnUpdate(written, columns, reads)


def update_columns(
    update: ColumnUpdate,
    table: DmlTable,
    sinks: Sinks,
    target: TargetRows,
    *,
    updated: np.ndarray,
    assignments: Mapping[str, Assignment],
    started_ns: int,
) -> FileChange | None:
    """Rewrite ``target``'s file with the ``updated`` rows (positions, non-empty) set by
    ``assignments``, or ``None`` when the file must be rewritten whole (always under
    IcebergCompat, whose files the writer lays out itself)."""
    file = target.file
    if target.row_index is not None or file.stats is None or table.spec.iceberg_compat is not None:
        return None
    scanned = time.perf_counter_ns()
    if target.data is None:
        target = replace(target, data=fetch_file(table, file))
    data = target.data
    assert data is not None
    try:
        layout = parquet_layout(data)
        if layout.names != table.spec.data_schema.names:
            raise NotSpliceableError(f"its columns {layout.names} are not the table's")
        new_columns = _new_columns(update, table, target, updated, assignments)
        if new_columns is None:  # no value changed: the file's copy is the file
            parts: list[bytes | memoryview] = [data]
            stats = file.stats
        else:
            encoded, figures = _encode(update, table, new_columns, layout.rows)
            parts = splice_columns(layout, parquet_layout(encoded, walk_pages=False))
            _check_footer(parts)
            merged = replace_column_statistics(
                file.stats,
                figures,
                set(update.columns),
                table.spec.data_schema,
                table.spec.num_indexed_cols,
                stats_columns=table.spec.stored_stats_columns,
            )
            if merged is None:
                raise NotSpliceableError("its statistics do not cover every column they should")
            stats = merged
    except NotSpliceableError as exc:
        logger.debug("rewriting all columns of %s: %s", file.path, exc)
        return None
    written = sinks.rewrite_encoded(EncodedFile(parts, file.partition_values, stats, target.num_rows))
    changed = int(updated.size)
    return FileChange(
        file,
        changed_rows=changed,
        copied_rows=target.num_rows - changed,
        rewritten=[written],
        counts=Counter(updated=changed),
        scan_ns=scanned - started_ns,
        write_ns=time.perf_counter_ns() - scanned,
    )


def fetch_file(table: DmlTable, file: AddFile) -> bytes:
    """The bytes of a target file (read once: the reads of its columns decode them)."""
    return file_bytes(table.reader.file_uri(file), table.conf, file.size)


def _new_columns(
    update: ColumnUpdate,
    table: DmlTable,
    target: TargetRows,
    updated: np.ndarray,
    assignments: Mapping[str, Assignment],
) -> pa.Table | None:
    """The set columns of every row of the file after the update; ``None`` when every value
    stays as it was."""
    needed = list(dict.fromkeys([*target.rows.column_names, *update.reads, *update.columns]))
    rows = rows_with_columns(table.reader, target, None, needed)
    at = pa.array(updated, pa.int64())
    before = rows.take(at)
    after = apply_assignments(before, assignments, update.columns)
    count = target.num_rows
    positions = np.arange(count)
    positions[updated] = count + np.arange(updated.size)
    order = pa.array(positions, pa.int64())
    unchanged = True
    columns = []
    for name in update.columns:
        old, new = rows.column(name), after.column(name)
        unchanged = unchanged and same_values(before.column(name), new)
        if new.type != old.type:
            new = new.cast(old.type)
        columns.append(pa.chunked_array(old.chunks + new.chunks, type=old.type).take(order))
    return None if unchanged else pa.Table.from_arrays(columns, names=list(update.columns))


def _encode(
    update: ColumnUpdate, table: DmlTable, columns: pa.Table, row_groups: tuple[int, ...]
) -> tuple[pa.Buffer, str]:
    """``columns`` (checked against the table's constraints on them) as a Parquet file with
    row groups of ``row_groups`` rows, and their statistics."""
    spec = update.spec
    values = conform(columns, spec, spec.compile_constraints())
    sink = pa.BufferOutputStream()
    writer = open_parquet_writer(sink, spec.data_schema, values)
    collector = StatisticsCollector(spec.data_schema, -1, table.spec.string_prefix_length, from_footer=True)
    offset = 0
    for rows in row_groups:
        part = values.slice(offset, rows)
        writer.write_table(part, row_group_size=rows)
        collector.add(part)
        offset += rows
    writer.close()
    return sink.getvalue(), collector.to_json(writer.writer.metadata)


def _check_footer(parts: list[bytes | memoryview]) -> None:
    """Have Arrow parse the new footer (the last three parts) before the file is written."""
    try:
        pq.read_metadata(pa.BufferReader(b"".join([MAGIC, *parts[-3:]])))
    except (OSError, pa.ArrowException) as exc:
        logger.warning("a spliced Parquet footer did not parse (%s); rewriting the whole file", exc)
        raise NotSpliceableError("its new footer does not parse") from None
