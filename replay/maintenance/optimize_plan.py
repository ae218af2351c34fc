"""Which files OPTIMIZE rewrites, and how they are grouped: Delta's bin-packing, pure.

The planner takes a table's active files (already narrowed to the partitions asked for) and
returns :class:`Bin` s: groups of files of one partition, each rewritten as a unit by
:mod:`replay.maintenance.optimize_rewrite` (one bin, one task: a Spark front end can ship bins
to executors as they are). The rules are those of Delta's ``OptimizeExecutor``:

* **compaction** (``OPTIMIZE``): a file is a candidate when it is smaller than
  :attr:`CompactionLimits.min_file_size`, or when its deletion vector deletes more than
  :attr:`CompactionLimits.max_deleted_rows_ratio` of its rows (or it has a deletion vector and no
  ``numRecords`` statistic). Per partition, candidates are packed in insertion order
  (modification time, then path) into bins of at most :attr:`CompactionLimits.max_file_size`
  bytes; each bin becomes one file. A bin of one file is left alone unless that file has a
  deletion vector (rewriting it alone gains nothing);
* **Z-order**: every file of a partition, in one bin per partition (even a single file), written
  as ``max(1, size // max_file_size)`` files ordered along the Z-curve;
* **purge** (``REORG TABLE ... APPLY (PURGE)``): the files with deleted rows, packed like
  compaction, every bin rewritten (single files too);
* **clustering** (OPTIMIZE of a clustered table): Delta's incremental liquid clustering, planned by
  :mod:`replay.maintenance.clustering`;
* **auto compaction**: compaction whose bins must hold at least
  :attr:`CompactionLimits.min_num_files` files (a file with a deletion vector counts twice),
  largest bins first, until :attr:`CompactionLimits.max_compact_bytes` are taken.

Sizes: the target (``max_file_size``) is the ``target_size`` argument, else the table's
``delta.targetFileSize``, else the session setting ``spark.databricks.delta.optimize.maxFileSize``,
else Delta's 1 GiB. Files at or above ``min_file_size`` (the session's
``spark.databricks.delta.optimize.minFileSize``, else the target, as Delta's defaults are equal)
are not compacted. Auto compaction uses ``spark.databricks.delta.autoCompact.maxFileSize`` (128 MiB)
and ``...minFileSize`` (half of it). Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from logstores.conf import get_delta_conf
from replay.protocol.actions import AddFile, DeletionVectorDescriptor
from replay.protocol.errors import DeltaError
from replay.protocol.table_config import TableConfiguration
from replay.protocol.table_properties import parse_byte_size

N = TypeVar("N", int, float)

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_MAX_FILE_SIZE = GIB
"""Delta's ``spark.databricks.delta.optimize.maxFileSize`` (and ``minFileSize``) default."""
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05
AUTO_COMPACT_MAX_FILE_SIZE = 128 * MIB
AUTO_COMPACT_MIN_NUM_FILES = 50
AUTO_COMPACT_MAX_COMPACT_BYTES = 20 * GIB

MAX_FILE_SIZE_KEY = "spark.databricks.delta.optimize.maxFileSize"
MIN_FILE_SIZE_KEY = "spark.databricks.delta.optimize.minFileSize"
MAX_DELETED_ROWS_RATIO_KEY = "spark.databricks.delta.optimize.maxDeletedRowsRatio"
AUTO_MAX_FILE_SIZE_KEY = "spark.databricks.delta.autoCompact.maxFileSize"
AUTO_MIN_FILE_SIZE_KEY = "spark.databricks.delta.autoCompact.minFileSize"
AUTO_MIN_NUM_FILES_KEY = "spark.databricks.delta.autoCompact.minNumFiles"
AUTO_MAX_COMPACT_BYTES_KEY = "spark.databricks.delta.autoCompact.maxCompactBytes"


class InvalidOptimizeSettingError(DeltaError, ValueError):
    """A size, ratio or count given to OPTIMIZE (argument or session setting) that Delta refuses."""


class OptimizeMode(enum.Enum):
    """What an OPTIMIZE run does (see the module docstring)."""

    COMPACT = "compact"
    ZORDER = "zorder"
    PURGE = "purge"
    AUTO = "auto"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class CompactionLimits:
    """The sizes and thresholds one run plans with (see the module docstring)."""

    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    min_file_size: int = DEFAULT_MAX_FILE_SIZE
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    min_num_files: int = AUTO_COMPACT_MIN_NUM_FILES
    max_compact_bytes: int = AUTO_COMPACT_MAX_COMPACT_BYTES

    @classmethod
    def for_run(
        cls,
        mode: OptimizeMode,
        config: TableConfiguration,
        conf: Mapping[str, str],
        target_size: int | None = None,
    ) -> CompactionLimits:
        """The limits of a ``mode`` run on a table with ``config``, under session settings ``conf``.

        Raises :class:`InvalidOptimizeSettingError` naming a setting that does not parse.
        """
        ratio = session_setting(conf, MAX_DELETED_ROWS_RATIO_KEY, float, DEFAULT_MAX_DELETED_ROWS_RATIO)
        if not 0 <= ratio <= 1:
            raise InvalidOptimizeSettingError(
                f"{MAX_DELETED_ROWS_RATIO_KEY} must be in range [0.0, 1.0], got {ratio}"
            )
        if mode is OptimizeMode.AUTO:
            largest = session_setting(
                conf, AUTO_MAX_FILE_SIZE_KEY, parse_byte_size, AUTO_COMPACT_MAX_FILE_SIZE
            )
            return cls(
                max_file_size=largest,
                min_file_size=session_setting(conf, AUTO_MIN_FILE_SIZE_KEY, parse_byte_size, largest // 2),
                max_deleted_rows_ratio=ratio,
                min_num_files=session_setting(conf, AUTO_MIN_NUM_FILES_KEY, int, AUTO_COMPACT_MIN_NUM_FILES),
                max_compact_bytes=session_setting(
                    conf, AUTO_MAX_COMPACT_BYTES_KEY, parse_byte_size, AUTO_COMPACT_MAX_COMPACT_BYTES
                ),
            )
        if target_size is not None and target_size <= 0:
            raise InvalidOptimizeSettingError(
                f"target_size must be a positive number of bytes, got {target_size}"
            )
        chosen = target_size or config.target_file_size
        largest = (
            chosen
            if chosen is not None
            else session_setting(conf, MAX_FILE_SIZE_KEY, parse_byte_size, DEFAULT_MAX_FILE_SIZE)
        )
        smallest = session_setting(conf, MIN_FILE_SIZE_KEY, parse_byte_size, largest)
        if mode is OptimizeMode.PURGE:  # Delta's REORG: every file with deleted rows, whatever its size
            return cls(max_file_size=largest, min_file_size=0, max_deleted_rows_ratio=0.0)
        return cls(max_file_size=largest, min_file_size=smallest, max_deleted_rows_ratio=ratio)


def session_setting(conf: Mapping[str, str], key: str, parse: Callable[[str], N], default: N) -> N:
    """The session setting ``key`` (either spelling), parsed, or ``default`` when unset."""
    raw = get_delta_conf(conf, key)
    if raw is None:
        return default
    try:
        value = parse(raw.strip())
    except ValueError as exc:
        raise InvalidOptimizeSettingError(f"Invalid value {raw!r} for {key}: {exc}") from None
    if value < 0:
        raise InvalidOptimizeSettingError(f"Invalid value {raw!r} for {key}: must not be negative")
    return value


# -- bins -------------------------------------------------------------------------------------------
PartitionKey = tuple[tuple[str, str | None], ...]


def partition_key(values: Mapping[str, str | None] | None) -> PartitionKey:
    """A hashable key of a file's partition values."""
    return tuple(sorted((values or {}).items()))


@dataclass(frozen=True)
class Bin:
    """Files of one partition rewritten together (picklable: a unit of work for any engine)."""

    partition_values: Mapping[str, str | None]
    files: tuple[AddFile, ...]

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def deletion_vectors(self) -> list[DeletionVectorDescriptor]:
        return [file.deletion_vector for file in self.files if file.deletion_vector is not None]


@dataclass(frozen=True)
class OptimizePlan:
    """The bins of one run, and what the planner looked at."""

    mode: OptimizeMode
    limits: CompactionLimits
    bins: tuple[Bin, ...]
    considered_files: int
    """Files matching the partition filter (Delta's ``totalConsideredFiles``)."""
    partitions: tuple[PartitionKey, ...] = field(default=())

    @property
    def files(self) -> list[AddFile]:
        return [file for each in self.bins for file in each.files]

    @property
    def max_bin_files(self) -> int:
        return max((len(each.files) for each in self.bins), default=0)


def deleted_rows_ratio(file: AddFile) -> float | None:
    """Deleted rows over physical rows (``None`` without a deletion vector or a row count)."""
    if file.deletion_vector is None:
        return None
    records = file.num_records
    if not records:
        return None
    return file.deletion_vector.cardinality / records


def candidate_rows(files: pa.Table, mode: OptimizeMode, limits: CompactionLimits) -> pa.Table:
    """The rows of a ``files_table`` the planner may pick (a vectorised first cut: small files and
    files with deletion vectors), so that only those become :class:`AddFile` objects."""
    if mode is OptimizeMode.ZORDER or files.num_rows == 0:
        return files
    has_dv = pc.is_valid(files.column("deletion_vector"))
    if mode is OptimizeMode.PURGE:
        return files.filter(has_dv)
    small = pc.less(files.column("size"), pa.scalar(limits.min_file_size, pa.int64()))
    return files.filter(pc.or_(small, has_dv))


def _is_candidate(file: AddFile, mode: OptimizeMode, limits: CompactionLimits) -> bool:
    dv = file.deletion_vector
    if mode is OptimizeMode.ZORDER:
        return True
    if mode is OptimizeMode.PURGE:  # Delta's DeltaPurgeOperation: files with deleted rows
        return dv is not None and (dv.cardinality > 0 or file.num_records is None)
    if file.size < limits.min_file_size:
        return True
    if dv is None:
        return False
    ratio = deleted_rows_ratio(file)
    return ratio is None or ratio > limits.max_deleted_rows_ratio


def plan_bins(
    files: Iterable[AddFile], mode: OptimizeMode, limits: CompactionLimits, *, considered: int | None = None
) -> OptimizePlan:
    """The bins of a ``mode`` run over ``files`` (the active files the partition filter kept).

    ``considered`` is how many files the filter kept, when ``files`` is already a first cut of
    them (:func:`candidate_rows`).
    """
    given = list(files)
    by_partition: dict[PartitionKey, list[AddFile]] = {}
    for file in given:
        if _is_candidate(file, mode, limits):
            by_partition.setdefault(partition_key(file.partition_values), []).append(file)
    bins: list[Bin] = []
    for key in sorted(by_partition, key=_sortable):
        members = sorted(by_partition[key], key=lambda f: (f.modification_time, f.path))
        bins.extend(Bin(dict(key), tuple(group)) for group in _pack(members, mode, limits))
    if mode is OptimizeMode.AUTO:
        bins = _auto_bins(bins, limits)
    partitions = tuple(dict.fromkeys(partition_key(each.partition_values) for each in bins))
    total = considered if considered is not None else len(given)
    return OptimizePlan(mode, limits, tuple(bins), total, partitions)


def _sortable(key: PartitionKey) -> tuple[tuple[str, bool, str], ...]:
    return tuple((name, value is not None, value or "") for name, value in key)


def _pack(files: Sequence[AddFile], mode: OptimizeMode, limits: CompactionLimits) -> list[list[AddFile]]:
    """First-fit in order: a bin closes when the next file would take it past the target."""
    if mode is OptimizeMode.ZORDER:
        return [list(files)] if files else []
    groups: list[list[AddFile]] = []
    current: list[AddFile] = []
    current_size = 0
    for file in files:
        if current and current_size + file.size > limits.max_file_size:
            groups.append(current)
            current, current_size = [], 0
        current.append(file)
        current_size += file.size
    if current:
        groups.append(current)
    if mode is OptimizeMode.PURGE or mode is OptimizeMode.AUTO:
        return groups
    return [group for group in groups if len(group) > 1 or group[0].deletion_vector is not None]


def _auto_bins(bins: list[Bin], limits: CompactionLimits) -> list[Bin]:
    """Delta's auto-compaction selection: enough files per bin, largest bins first, bounded bytes."""
    eligible = [each for each in bins if len(each.files) + len(each.deletion_vectors) >= limits.min_num_files]
    eligible.sort(key=lambda each: -len(each.files))
    chosen: list[Bin] = []
    taken = 0
    for each in eligible:
        taken += each.size
        if taken > limits.max_compact_bytes:
            break
        chosen.append(each)
    return chosen


def describe_partition(values: Mapping[str, str | None]) -> str:
    """``a=1,b=x`` for logs and messages."""
    return ",".join(f"{name}={value}" for name, value in sorted(values.items())) or "(unpartitioned)"
