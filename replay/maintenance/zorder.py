"""Z-ordering: rows clustered along a Z-curve over some columns, so that file statistics skip.

The curve is Delta's (``ZOrderClustering``): each Z-order column is mapped to a *range id*, its
value's bucket among ``spark.databricks.io.skipping.mdc.rangeId.max`` (1000) ranges of equal
row counts (an approximate rank, Delta's ``range_partition_id``; nulls sort first), and the range
ids' bits are interleaved, most significant first (``interleave_bits``). Ranks make every column
weigh the same whatever its scale or skew; delta-rs interleaves the values' own bytes instead,
which lets a wide-ranged column dominate. A random byte appended to each key spreads rows with
equal keys over several files, as Delta's ``mdc.addNoise`` does. Everything is vectorised with
numpy: range ids by ``searchsorted`` against the range bounds, bits by ``unpackbits``/``packbits``.

A partition is rewritten in two streaming passes over its files (a :class:`ZOrderRewriter` call):

1. the Z-order columns are read and a uniform sample of their rows is kept (bottom-k of random
   priorities, at most :data:`SAMPLE_ROWS`); its quantiles give each column's range bounds, and
   the quantiles of its keys cut the curve into ``max(1, partition bytes // target size)``
   stretches (Delta's number of output files);
2. every row is read again, keyed, and sent to the file of its stretch. Open files share a
   buffer budget (:data:`BUFFER_BYTES`): the fullest is encoded early when it is exceeded.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstores.conf import get_delta_conf
from replay.data.reader import TableReader
from replay.maintenance.hilbert import hilbert_transposed
from replay.maintenance.optimize_plan import Bin, InvalidOptimizeSettingError, describe_partition
from replay.maintenance.optimize_rewrite import (
    READ_AHEAD,
    RewrittenBin,
    read_in_order,
    rearranged,
    removes_of,
    table_reader,
    write_spec,
)
from replay.protocol.errors import DeltaError
from replay.protocol.schema import DataType, PrimitiveType, StructType
from replay.state.snapshot import Snapshot
from replay.txn.data_writer import DataFileWriter, WrittenFile
from replay.txn.schema_merge import scala_type_name
from replay.txn.write_spec import FileWriteSpec

logger = logging.getLogger(__name__)

NUM_RANGES_KEY = "spark.databricks.io.skipping.mdc.rangeId.max"
ADD_NOISE_KEY = "spark.databricks.io.skipping.mdc.addNoise"
CHECK_STATS_KEY = "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled"
DEFAULT_NUM_RANGES = 1000
SAMPLE_ROWS = 200_000
"""Rows sampled to place the range bounds and the file boundaries."""
BUFFER_BYTES = 256 * 1024 * 1024
"""Rows buffered across the open output files of a partition before the fullest is encoded."""
STRING_PREFIX = 32
"""Bytes of a string or binary value that rank it (as much as its statistics keep)."""


class ZOrderColumnError(DeltaError, ValueError):
    """A Z-order column that does not exist, is a partition column or has no statistics."""


# -- columns ----------------------------------------------------------------------------------------
def _leaf_count(data_type: DataType) -> int:
    if isinstance(data_type, StructType):
        return sum(_leaf_count(f.type) for f in data_type.fields)
    return 1


def resolve_zorder_columns(
    columns: Sequence[str],
    schema: StructType,
    partition_columns: Sequence[str],
    num_indexed_cols: int,
    conf: Mapping[str, str],
    *,
    stats_columns: Sequence[tuple[str, ...]] | None = None,
) -> list[str]:
    """``columns`` spelled as in the schema, checked as Delta's ``validateZorderByColumns`` does.

    Raises :class:`ZOrderColumnError` with Delta's ``DELTA_ZORDERING_COLUMN_DOES_NOT_EXIST``,
    ``DELTA_ZORDERING_ON_PARTITION_COLUMN`` or ``DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS``
    (statistics cover the first ``delta.dataSkippingNumIndexedCols`` leaf columns of the data, or
    the columns ``delta.dataSkippingStatsColumns`` names;
    the check is off when the session sets ``...zorder.checkStatsCollection.enabled=false``).
    """
    if not columns:
        raise ZOrderColumnError("Z-Ordering needs at least one column")
    partitions = {name.lower() for name in partition_columns}
    data_fields = [f for f in schema.fields if f.name.lower() not in partitions]
    first_leaf: dict[str, int] = {}
    leaves = 0
    for data_field in data_fields:
        first_leaf[data_field.name.lower()] = leaves
        leaves += _leaf_count(data_field.type)
    by_lower = {f.name.lower(): f for f in schema.fields}
    resolved: list[str] = []
    without_stats: list[str] = []
    for name in columns:
        lowered = name.lower()
        if lowered in partitions:
            raise ZOrderColumnError(
                f"[DELTA_ZORDERING_ON_PARTITION_COLUMN] {name} is a partition column. Z-Ordering can "
                "only be performed on data columns"
            )
        found = by_lower.get(lowered)
        if found is None:
            raise ZOrderColumnError(
                f"[DELTA_ZORDERING_COLUMN_DOES_NOT_EXIST] Z-Ordering column {name} does not exist in "
                "data schema."
            )
        if not isinstance(found.type, PrimitiveType) or found.type.name in ("void", "variant"):
            raise ZOrderColumnError(
                f"Cannot Z-order by column {name} of type {scala_type_name(found.type)}: Z-order "
                "columns must be of a primitive type"
            )
        if stats_columns is not None:
            if (lowered,) not in {tuple(part.lower() for part in path) for path in stats_columns}:
                without_stats.append(name)
        elif num_indexed_cols >= 0 and first_leaf[lowered] >= num_indexed_cols:
            without_stats.append(name)
        resolved.append(found.name)
    check = (get_delta_conf(conf, CHECK_STATS_KEY) or "true").strip().lower() != "false"
    if without_stats and check:
        raise ZOrderColumnError(
            f"[DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS] Z-Ordering on [{', '.join(without_stats)}] will be "
            "ineffective, because we currently do not collect stats for these columns. You can disable "
            f"this check by setting 'set {CHECK_STATS_KEY} = false'"
        )
    return list(dict.fromkeys(resolved))


def num_ranges(conf: Mapping[str, str]) -> int:
    raw = get_delta_conf(conf, NUM_RANGES_KEY)
    try:
        value = int(raw) if raw is not None else DEFAULT_NUM_RANGES
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidOptimizeSettingError(
            f"Invalid value {raw!r} for {NUM_RANGES_KEY}: must be a positive integer"
        )
    return value


# -- keys -------------------------------------------------------------------------------------------
def sortable(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, valid)``: a column as a numpy array that sorts as the column does (strings and
    binaries by their first :data:`STRING_PREFIX` bytes), and its non-null mask."""
    arrow_type = column.type
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    if pa.types.is_dictionary(arrow_type):
        column = column.cast(arrow_type.value_type)
        arrow_type = arrow_type.value_type
    if (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_string_view(arrow_type)
    ):
        column = column.cast(pa.large_binary())
        arrow_type = column.type
    if (
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    ):
        prefix = pc.binary_slice(column.cast(pa.large_binary()), 0, STRING_PREFIX).fill_null(b"")
        return prefix.to_numpy(zero_copy_only=False).astype(f"S{STRING_PREFIX}"), valid
    if pa.types.is_date32(arrow_type) or pa.types.is_time32(arrow_type):
        column = column.cast(pa.int32())
    elif pa.types.is_boolean(arrow_type):
        column = column.cast(pa.int8())
    elif pa.types.is_decimal(arrow_type):
        column = column.cast(pa.float64())
    if pa.types.is_temporal(arrow_type) or pa.types.is_integer(column.type):
        return pc.cast(column, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), valid
    if pa.types.is_floating(column.type):
        return pc.cast(column, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), valid
    raise ZOrderColumnError(f"Cannot Z-order by a column of type {arrow_type}")


def range_bounds(sample: np.ndarray, ranges: int) -> np.ndarray:
    """Delta's ``RangePartitioner`` bounds: values splitting the sorted ``sample`` into ``ranges``
    parts of equal counts, duplicates dropped."""
    if sample.size == 0 or ranges <= 1:
        return sample[:0]
    ordered = np.sort(sample)
    # the value at which the running count first reaches each multiple of size / ranges
    positions = -(-np.arange(1, ranges, dtype=np.int64) * ordered.size // ranges) - 1
    return np.unique(ordered[positions])


def range_ids(values: np.ndarray, valid: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Each value's range: how many bounds are below it (``bounds[i-1] < v <= bounds[i]``); 0 for nulls."""
    ids = np.searchsorted(bounds, values, side="left").astype(np.uint32)
    ids[~valid] = 0
    return ids


def interleave_bits(ids: Sequence[np.ndarray], bits: int) -> np.ndarray:
    """Keys of ``bits``-bit ids interleaved most significant bit first, column by column, as a
    ``(rows, bytes)`` uint8 array whose rows compare bytewise like Delta's ``interleave_bits``."""
    rows = len(ids[0])
    stacked = np.ascontiguousarray(np.stack(ids, axis=1), dtype=">u4")  # (rows, columns) big-endian
    unpacked = np.unpackbits(stacked.view(np.uint8).reshape(rows, len(ids), 4), axis=2)
    wanted = unpacked[:, :, 32 - bits :]  # (rows, columns, bits)
    return np.packbits(wanted.transpose(0, 2, 1).reshape(rows, bits * len(ids)), axis=1)


def as_keys(packed: np.ndarray) -> np.ndarray:
    """``(rows, bytes)`` uint8 rows as one fixed-width bytes value each (sorted bytewise)."""
    packed = np.ascontiguousarray(packed)
    return packed.view(f"S{packed.shape[1]}").ravel()


def leaf(table: pa.Table, path: Sequence[str]) -> pa.ChunkedArray:
    """The column at ``path`` (a top-level column, then struct fields; null where a parent is)."""
    column = table.column(path[0])
    for name in path[1:]:
        column = pc.struct_field(column, name)
    return column


@dataclass(frozen=True)
class ZOrderCurve:
    """The range bounds of each column (a path: a struct's fields too) and the bits their ids
    take; the keys follow the Z-curve, or with ``hilbert`` the Hilbert curve
    (:mod:`replay.maintenance.hilbert`, liquid clustering's)."""

    columns: tuple[tuple[str, ...], ...]
    bounds: tuple[np.ndarray, ...]
    bits: int
    hilbert: bool = False

    def keys(self, table: pa.Table, noise: np.random.Generator | None) -> np.ndarray:
        """The curve key of every row of ``table`` (a random last byte when ``noise`` is given)."""
        ids = []
        for path, bounds in zip(self.columns, self.bounds, strict=True):
            values, valid = sortable(leaf(table, path))
            ids.append(range_ids(values, valid, bounds))
        packed = interleave_bits(hilbert_transposed(ids, self.bits) if self.hilbert else ids, self.bits)
        if noise is not None:
            tail = noise.integers(0, 256, size=(table.num_rows, 1), dtype=np.uint8)
            packed = np.concatenate([packed, tail], axis=1)
        return as_keys(packed)


class _Sample:
    """A uniform sample of the rows seen (the ``size`` smallest random priorities)."""

    def __init__(self, columns: Sequence[tuple[str, ...]], size: int, rng: np.random.Generator) -> None:
        self.columns = list(columns)
        self.read = list(dict.fromkeys(path[0] for path in self.columns))
        self.size = size
        self.rng = rng
        self.table: pa.Table | None = None
        self.priorities = np.empty(0)

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        part = table.select(self.read)
        priorities = self.rng.random(table.num_rows)
        merged = part if self.table is None else pa.concat_tables([self.table, part])
        merged_priorities = np.concatenate([self.priorities, priorities])
        if merged.num_rows > self.size:
            keep = np.sort(np.argpartition(merged_priorities, self.size)[: self.size])
            merged = merged.take(pa.array(keep))
            merged_priorities = merged_priorities[keep]
        self.table, self.priorities = merged.combine_chunks(), merged_priorities

    def curve(self, ranges: int, *, hilbert: bool = False) -> ZOrderCurve:
        bounds = []
        for path in self.columns:
            if self.table is None:
                bounds.append(np.empty(0))
                continue
            values, valid = sortable(leaf(self.table, path))
            bounds.append(range_bounds(values[valid], ranges))
        bits = max(1, max((len(b) for b in bounds), default=0).bit_length())
        return ZOrderCurve(tuple(self.columns), tuple(bounds), bits, hilbert)


def file_boundaries(sample_keys: np.ndarray, files: int) -> np.ndarray:
    """Keys cutting the sorted sample into ``files`` stretches of equal counts."""
    if files <= 1 or sample_keys.size == 0:
        return sample_keys[:0]
    ordered = np.sort(sample_keys)
    return ordered[(np.arange(1, files, dtype=np.int64) * ordered.size) // files]


# -- the rewrite ----------------------------------------------------------------------------------
def _seed(work: Bin, table_path: str) -> int:
    text = f"{table_path}|{sorted(work.partition_values.items())}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


@dataclass(frozen=True)
class ZOrderRewriter:
    """Rewrites a partition's files along the Z-curve of ``columns`` (picklable; one bin per call).

    ``columns`` are paths (a top-level column, then struct fields); ``hilbert`` orders the rows
    along the Hilbert curve instead (liquid clustering, :mod:`replay.maintenance.clustering`)."""

    reader: TableReader
    spec: FileWriteSpec
    columns: tuple[tuple[str, ...], ...]
    max_file_size: int
    deletion_timestamp: int
    ranges: int = DEFAULT_NUM_RANGES
    add_noise: bool = True
    read_ahead: int = READ_AHEAD
    sample_rows: int = SAMPLE_ROWS
    buffer_bytes: int = BUFFER_BYTES
    hilbert: bool = False

    @classmethod
    def for_snapshot(
        cls,
        snapshot: Snapshot,
        columns: Sequence[str | tuple[str, ...]],
        max_file_size: int,
        deletion_timestamp: int | None = None,
        *,
        hilbert: bool = False,
    ) -> ZOrderRewriter:
        """``columns``: top-level names or paths."""
        conf = snapshot.io.conf
        noise = (get_delta_conf(conf, ADD_NOISE_KEY) or "true").strip().lower() != "false"
        return cls(
            table_reader(snapshot),
            write_spec(snapshot),
            tuple((column,) if isinstance(column, str) else tuple(column) for column in columns),
            max_file_size,
            int(time.time() * 1000) if deletion_timestamp is None else deletion_timestamp,
            ranges=num_ranges(conf),
            add_noise=noise,
            hilbert=hilbert,
        )

    def with_read_ahead(self, files: int) -> ZOrderRewriter:
        """This rewriter reading ``files`` files ahead (0: each file when it is needed)."""
        return replace(self, read_ahead=files)

    def rewrite(self, work: Bin) -> RewrittenBin:
        """Rewrite ``work`` (all files of one partition) as ``max(1, size // max_file_size)`` files."""
        rng = np.random.default_rng(_seed(work, self.spec.table_path))
        sample = _Sample(self.columns, self.sample_rows, rng)
        for table in read_in_order(self.reader, work.files, sample.read, read_ahead=self.read_ahead):
            sample.add(table)
        curve = sample.curve(self.ranges, hilbert=self.hilbert)
        noise = rng if self.add_noise else None
        outputs = max(1, work.size // self.max_file_size)
        boundaries = (
            file_boundaries(curve.keys(sample.table, noise), outputs) if sample.table is not None else None
        )
        writers: dict[int, DataFileWriter] = {}
        rows = 0
        try:
            reads = read_in_order(
                self.reader, work.files, read_ahead=self.read_ahead, lineage=self.spec.row_tracking
            )
            for table in reads:
                rows += table.num_rows
                self._route(table, curve, boundaries, noise, writers)
            written: list[WrittenFile] = []
            for index in sorted(writers):
                written.extend(writers[index].close())
        except BaseException:
            for writer in writers.values():
                writer.discard()
            raise
        logger.debug(
            "Z-ordered %d files (%d rows) of partition %s of %s by %s into %d",
            len(work.files),
            rows,
            describe_partition(work.partition_values),
            self.spec.table_path,
            ", ".join(".".join(path) for path in self.columns),
            len(written),
        )
        return RewrittenBin(work, rearranged(written), removes_of(work.files, self.deletion_timestamp), rows)

    def _route(
        self,
        table: pa.Table,
        curve: ZOrderCurve,
        boundaries: np.ndarray | None,
        noise: np.random.Generator | None,
        writers: dict[int, DataFileWriter],
    ) -> None:
        if table.num_rows == 0:
            return
        if boundaries is None or boundaries.size == 0:
            self._writer(writers, 0).write(table)
        else:
            keys = curve.keys(table, noise)
            target = np.searchsorted(boundaries, keys, side="right")
            order = np.argsort(target, kind="stable")
            counts = np.bincount(target, minlength=boundaries.size + 1)
            ordered = table.take(pa.array(order))
            start = 0
            for index, count in enumerate(counts.tolist()):
                if count:
                    self._writer(writers, index).write(ordered.slice(start, count))
                start += count
        buffered = {index: writer.buffered_bytes for index, writer in writers.items()}
        if sum(buffered.values()) > self.buffer_bytes:
            writers[max(buffered, key=buffered.__getitem__)].flush()

    def _writer(self, writers: dict[int, DataFileWriter], index: int) -> DataFileWriter:
        if index not in writers:
            writers[index] = DataFileWriter(self.spec)
        return writers[index]
