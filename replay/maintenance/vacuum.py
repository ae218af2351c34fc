"""VACUUM: delete the files no version within the retention needs (Delta's ``VacuumCommand``).

Which files go, exactly as Delta's full VACUUM decides (a lite VACUUM, deltalake's default mode,
deletes only the old files the log says were removed: see :func:`plan_vacuum`):

* the cut-off is ``now - retention``: the retention is ``retention_hours`` (rounded to whole
  hours, as Delta does) or else the table's ``delta.deletedFileRetentionDuration`` (one week by
  default). A retention below the table's is refused unless the check is off
  (``enforce_retention_duration=False``, or Spark's
  ``spark.databricks.delta.retentionDurationCheck.enabled=false``);
* kept are the latest snapshot's files, the tombstones deleted at or after the cut-off (so every
  version inside the retention still reads), the deletion vector files of both and the
  directories holding them (:mod:`~replay.maintenance.vacuum_referenced`);
* candidates are the files under the table root, outside the hidden directories
  (:mod:`~replay.maintenance.vacuum_listing`), last modified before the cut-off and not kept:
  removed data files, orphaned deletion vectors, change data files, and files a writer wrote but
  never committed. A file younger than the cut-off is never deleted, which is what protects a
  write in progress: the retention must exceed the longest running transaction;
* on local disk, directories with nothing left to keep and no old file inside are removed when
  empty.

A run that deletes commits ``VACUUM START`` (``numFilesToDelete``, ``sizeOfDataToDelete``) before
and ``VACUUM END`` (``COMPLETED`` with ``numDeletedFiles`` and ``numVacuumedDirectories``, or
``FAILED``) after, as empty commits, where Delta logs vacuums: when
``spark.databricks.delta.vacuum.logging.enabled`` says so, by default on the file systems Delta
lists (local, HDFS, Azure, GCS) and not on S3. A dry run only lists.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logstores import open_filesystem
from logstores.filesystem import uri_scheme
from replay.log.concurrency import Work, executor
from replay.log.table_io import TableIO
from replay.maintenance.vacuum_delete import delete_empty_directories, delete_files
from replay.maintenance.vacuum_listing import LISTING_SCHEMA, LOCAL_SCHEMES, TableListing, stat_local
from replay.maintenance.vacuum_referenced import ancestor_directories, expired_tombstones, referenced_files
from replay.protocol.errors import DeltaError
from replay.protocol.iceberg_compat import publishes_iceberg
from replay.protocol.table_config import check_protocol_writable, check_readable
from replay.protocol.table_properties import parse_bool
from replay.state.snapshot import Snapshot
from replay.txn.transaction import Transaction

logger = logging.getLogger(__name__)

RETENTION_CHECK_KEY = "spark.databricks.delta.retentionDurationCheck.enabled"
VACUUM_LOGGING_KEY = "spark.databricks.delta.vacuum.logging.enabled"
LOGGED_SCHEMES = frozenset({"wasbs", "wasbss", "abfs", "abfss", "adl", "gs", "file", "hdfs"})
"""Where Delta commits ``VACUUM START``/``END`` unless the logging setting says otherwise."""
HOUR_MS = 3_600_000


class VacuumRetentionError(DeltaError, ValueError):
    """A vacuum retention shorter than the table's (with the check on), or negative."""


@dataclass(frozen=True)
class VacuumPlan:
    """What a vacuum deletes, decided before anything is deleted."""

    table_path: str
    files: pa.Table
    """Candidate files: ``path`` (relative to the table root) and ``size``."""
    directories: list[str]
    """Candidate directories (local disk): removed if empty."""
    delete_before_ms: int
    default_retention_ms: int
    specified_retention_ms: int | None
    retention_check_enabled: bool
    directory_count: int
    """Directories seen, the root included (Delta's ``numVacuumedDirectories``)."""

    @property
    def paths(self) -> list[str]:
        return [str(path) for path in self.files.column("path").to_pylist()]

    @property
    def size(self) -> int:
        return int(pc.sum(self.files.column("size")).as_py() or 0)


@dataclass(frozen=True)
class VacuumResult:
    """A vacuum's outcome: the files it deleted (or would delete, in a dry run)."""

    files: list[str]
    dry_run: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    start_version: int | None = None
    end_version: int | None = None


def retention_ms(retention_hours: float | None) -> int | None:
    """Delta's ``TimeUnit.HOURS.toMillis(math.round(hours))`` (``None``: the table's retention)."""
    if retention_hours is None:
        return None
    return math.floor(float(retention_hours) + 0.5) * HOUR_MS


def check_retention(
    specified_ms: int | None, table_retention_ms: int, *, check_enabled: bool, table: str
) -> None:
    """Refuse a negative retention, and one below the table's while the check is enabled (Delta's
    ``checkRetentionPeriodSafety``)."""
    if specified_ms is not None and specified_ms < 0:
        raise VacuumRetentionError(
            "[DELTA_VACUUM_RETENTION_PERIOD_NEGATIVE] Retention for Vacuum can't be less than 0.", table=table
        )
    if not check_enabled or specified_ms is None or specified_ms >= table_retention_ms:
        return
    hours = math.ceil(table_retention_ms / HOUR_MS)
    raise VacuumRetentionError(
        f"[DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT] Are you sure you would like to vacuum files with such "
        f"a low retention period? (table {table}: {specified_ms / HOUR_MS:g} hours is shorter than its "
        "delta.deletedFileRetentionDuration) If you have\nwriters that are currently writing to this table, "
        "there is a risk that you may corrupt the\nstate of your Delta table.\n\nIf you are certain that "
        "there are no operations being performed on this table, such as\ninsert/upsert/delete/optimize, "
        f"then you may turn off this check by setting:\n{RETENTION_CHECK_KEY} = false\n\nIf you are not "
        f'sure, please use a value not less than "{hours} hours".',
        table=table,
    )


def retention_check_enabled(conf: Mapping[str, str], enforce_retention_duration: bool) -> bool:
    """Whether the retention check applies: the caller asks for it and the session does not turn it
    off."""
    value = conf.get(RETENTION_CHECK_KEY)
    return enforce_retention_duration and (value is None or parse_bool(value))


def plan_vacuum(
    io: TableIO,
    snapshot: Snapshot,
    *,
    retention_hours: float | None = None,
    enforce_retention_duration: bool = True,
    now_ms: int | None = None,
    lite: bool = False,
) -> VacuumPlan:
    """Decide what a vacuum of the table at ``snapshot`` (its latest version) deletes; ``lite``:
    only the files of tombstones older than the retention (and their deletion vectors), no
    directory, as deltalake's default mode does, where the full vacuum deletes every old file no
    version within the retention uses.

    Raises :class:`VacuumRetentionError` for a retention Delta refuses, and
    :class:`~replay.protocol.errors.UnsupportedTableFeatureError` for a table this library cannot
    read or write (Delta's ``protocolWrite`` check, the one ``vacuumProtocolCheck`` asks for).
    """
    table = io.shown_path
    check_readable(snapshot.protocol, table)
    check_protocol_writable(snapshot.protocol, table)
    config = snapshot.config
    specified = retention_ms(retention_hours)
    check_enabled = retention_check_enabled(io.conf, enforce_retention_duration)
    check_retention(specified, config.deleted_file_retention_ms, check_enabled=check_enabled, table=table)
    if now_ms is None and specified is None:
        delete_before = snapshot.min_file_retention_timestamp
    else:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        delete_before = now - (config.deleted_file_retention_ms if specified is None else specified)
    logger.info("vacuum of %s: untracked files older than %d are eligible", table, delete_before)
    iceberg = publishes_iceberg(config.configuration)
    listing = TableListing(
        io.table_path, dict(io.conf), snapshot.partition_columns, iceberg_metadata_hidden=iceberg
    )
    if lite and listing.is_local:  # the log names every candidate: stat them, walk no directory
        return _plan_lite_local(io, snapshot, listing.root, delete_before, specified, check_enabled)
    pool = executor(Work.SCAN, 2)  # list the directories while the referenced files are computed
    listed_batches = pool.submit(list, listing) if pool is not None else None
    kept = referenced_files(snapshot, delete_before)
    batches = listed_batches.result() if listed_batches is not None else list(listing)
    listed = (
        pa.Table.from_batches(batches, schema=LISTING_SCHEMA) if batches else LISTING_SCHEMA.empty_table()
    )
    del batches
    unreferenced = listed.filter(pc.invert(pc.is_in(listed.column("path"), value_set=kept.paths)))
    if lite:  # on an object store: the listed files the expired tombstones name
        expired = expired_tombstones(snapshot, delete_before)
        unreferenced = unreferenced.filter(pc.is_in(unreferenced.column("path"), value_set=expired))
    if listing.is_local:
        unreferenced = stat_local(listing.root, unreferenced.column("path").to_pylist())
    old = unreferenced.filter(pc.less(unreferenced.column("modification_time"), delete_before))
    candidates = old.select(["path", "size"])
    directories: list[str] = []
    if listing.is_local:
        # a directory holding an old file goes in a later run, one holding a kept file never
        holding_old = ancestor_directories(old.column("path"))
        directories = [d for d in listing.directories if d not in holding_old and d not in kept.directories]
    return VacuumPlan(
        table_path=io.table_path,
        files=candidates,
        directories=directories,
        delete_before_ms=delete_before,
        default_retention_ms=config.deleted_file_retention_ms,
        specified_retention_ms=specified,
        retention_check_enabled=check_enabled,
        directory_count=len(listing.directories) + 1,
    )


def _plan_lite_local(  # noqa: PLR0917 - the plan's parts
    io: TableIO,
    snapshot: Snapshot,
    root: str,
    delete_before: int,
    specified: int | None,
    check_enabled: bool,
) -> VacuumPlan:
    """A lite vacuum on local disk: the expired tombstones' files no version keeps, those that
    still exist and are old (``stat`` of each, no listing)."""
    kept = referenced_files(snapshot, delete_before)
    named = expired_tombstones(snapshot, delete_before)
    named = named.filter(pc.invert(pc.is_in(named, value_set=kept.paths)))
    found = stat_local(root, pc.unique(named).to_pylist())
    old = found.filter(pc.less(found.column("modification_time"), delete_before))
    return VacuumPlan(
        table_path=io.table_path,
        files=old.select(["path", "size"]),
        directories=[],
        delete_before_ms=delete_before,
        default_retention_ms=snapshot.config.deleted_file_retention_ms,
        specified_retention_ms=specified,
        retention_check_enabled=check_enabled,
        directory_count=0,
    )


def vacuum(
    io: TableIO,
    snapshot: Snapshot,
    *,
    retention_hours: float | None = None,
    dry_run: bool = True,
    enforce_retention_duration: bool = True,
    now_ms: int | None = None,
    lite: bool = False,
) -> VacuumResult:
    """Vacuum the table whose latest snapshot is ``snapshot`` (see the module docs).

    Returns the files deleted (in a dry run: that would be deleted), relative to the table root.
    Raises what :func:`plan_vacuum` raises, and storage errors while deleting (after committing
    ``VACUUM END`` with status ``FAILED`` where vacuums are logged).
    """
    plan = plan_vacuum(
        io,
        snapshot,
        retention_hours=retention_hours,
        enforce_retention_duration=enforce_retention_duration,
        now_ms=now_ms,
        lite=lite,
    )
    paths = plan.paths
    if dry_run:
        logger.info("vacuum dry run of %s: %d files (%d bytes)", io.shown_path, len(paths), plan.size)
        return VacuumResult(paths, True, {"numFilesToDelete": len(paths) + len(plan.directories)})
    logged = vacuum_logged(io)
    start = _commit_start(io, snapshot, plan) if logged else None
    fs, root = open_filesystem(io.table_path, io.conf)
    root = root.rstrip("/")
    try:
        deleted = delete_files(fs, root, paths, local=uri_scheme(io.table_path) in LOCAL_SCHEMES)
        if plan.directories:
            deleted += delete_empty_directories(root, plan.directories)
    except BaseException:
        if logged:
            _commit_end(io, snapshot, None, plan)
        raise
    metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": plan.directory_count}
    end = _commit_end(io, snapshot, deleted, plan) if logged else None
    logger.info("vacuum of %s deleted %d files and directories", io.shown_path, deleted)
    return VacuumResult(paths, False, metrics, start, end)


def vacuum_logged(io: TableIO) -> bool:
    """Whether vacuums of this table are recorded in its log (Delta's ``shouldLogVacuum``)."""
    value = io.conf.get(VACUUM_LOGGING_KEY)
    if value is not None:
        return parse_bool(value)
    return uri_scheme(io.table_path) in LOGGED_SCHEMES


def _commit_start(io: TableIO, snapshot: Snapshot, plan: VacuumPlan) -> int:
    """``VACUUM START``, read from the vacuumed version (as Delta's, unless a commit landed since)."""
    txn = Transaction(io, snapshot, operation="VACUUM START")
    parameters: dict[str, Any] = {
        "retentionCheckEnabled": plan.retention_check_enabled,
        "defaultRetentionMillis": plan.default_retention_ms,
    }
    if plan.specified_retention_ms is not None:
        parameters["specifiedRetentionMillis"] = plan.specified_retention_ms
    txn.operation_parameters = parameters
    txn.operation_metrics = {
        "numFilesToDelete": plan.files.num_rows + len(plan.directories),
        "sizeOfDataToDelete": plan.size,
    }
    return txn.commit()


def _commit_end(io: TableIO, snapshot: Snapshot, deleted: int | None, plan: VacuumPlan) -> int:
    """``VACUUM END``, also read from the vacuumed version: an empty commit rebases over
    ``VACUUM START`` (and anything else committed since) at the cost of reading those commits."""
    txn = Transaction(io, snapshot, operation="VACUUM END")
    txn.operation_parameters = {"status": "FAILED" if deleted is None else "COMPLETED"}
    if deleted is not None:
        txn.operation_metrics = {"numDeletedFiles": deleted, "numVacuumedDirectories": plan.directory_count}
    return txn.commit()
