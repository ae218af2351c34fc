"""RESTORE: the table back to an earlier version, in one commit (Delta's ``RestoreTableCommand``).

The commit makes the latest version's files equal the target version's: a file of the target
that the latest version lacks is added back (its ``add`` with ``dataChange=true``), a file of the
latest version that the target lacks is removed (``dataChange=true``). Files are told apart by
path and deletion vector, so a file whose deletion vector changed since is removed and re-added
with the target's. The metadata becomes the target's (schema, partitioning, properties,
constraints); the protocol is the union of both, never downgraded unless
``protocol_downgrade_allowed``. Domain metadata is kept as it is (Delta copies none of the domains
this library knows).

The restored files must still exist: a file vacuumed since is an error naming the first hundred
missing files, unless ``ignore_missing_files`` (Spark's ``spark.sql.files.ignoreMissingFiles``).
The target is a version older than the latest, or the version active at a timestamp. Like
Delta's ``commitLarge``, the restore fails rather than rebases if another commit lands first.

The change data feed reads a restore like any commit without change files: the re-added files'
rows as inserts, the removed files' rows as deletes.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from logstores import open_filesystem
from logstores.filesystem import uri_scheme
from replay.log.commit_timestamps import active_commit_at, commit_records
from replay.log.concurrency import REMOTE_THREADS, Work, default_threads, map_concurrently
from replay.log.listing import earliest_recreatable_version, full_listing
from replay.log.table_io import LOCAL_SCHEMES, TableIO
from replay.maintenance.vacuum_referenced import relative_paths
from replay.protocol.actions import AddFile, RemoveFile
from replay.protocol.arrow_actions import DV_ARROW_TYPE, add_actions, arrow_file_keys, rename_struct
from replay.protocol.errors import DeltaError, TimestampOutOfRangeError
from replay.protocol.paths import resolve_path
from replay.protocol.table_features import merge_protocols
from replay.protocol.table_properties import parse_bool
from replay.protocol.timestamps import Timestamp, format_timestamp, to_datetime, to_timestamp_ms
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.transaction import Transaction

IGNORE_MISSING_FILES_KEY = "spark.sql.files.ignoreMissingFiles"
MISSING_FILES_SHOWN = 100


class RestoreError(DeltaError, ValueError):
    """A restore Delta refuses: a version or time outside the table's history, or missing files."""


@dataclass(frozen=True)
class RestoreResult:
    """A committed restore: its version, the version restored and Delta's metrics."""

    version: int
    restored_version: int
    metrics: dict[str, int]


def resolve_target(io: TableIO, latest: Snapshot, target: int | Timestamp) -> tuple[int, str | None]:
    """The version to restore and, for a time, the time as the operation records it. Raises
    :class:`RestoreError` with Delta's ``DELTA_CANNOT_RESTORE_TABLE_VERSION``,
    ``..._TIMESTAMP_EARLIER`` or ``..._TIMESTAMP_GREATER``."""
    table = io.shown_path
    listing = full_listing(io)
    if isinstance(target, int) and not isinstance(target, bool):
        earliest = earliest_recreatable_version(listing, table)
        if not earliest <= target <= latest.version:
            raise RestoreError(
                f"[DELTA_CANNOT_RESTORE_TABLE_VERSION] Cannot restore table {table} to version {target}. "
                f"Available versions: [{earliest}, {latest.version}].",
                table=table,
            )
        return target, None
    moment = to_datetime(target)
    records = commit_records(io, listing, latest.config.in_commit_timestamps_since)
    zone = moment.tzinfo or _dt.UTC
    try:
        version = active_commit_at(records, to_timestamp_ms(moment), table=table, zone=zone)
    except TimestampOutOfRangeError as exc:
        given = format_timestamp(to_timestamp_ms(moment), zone)
        if exc.earliest is not None and to_timestamp_ms(moment) < exc.earliest:
            raise RestoreError(
                f"[DELTA_CANNOT_RESTORE_TIMESTAMP_EARLIER] Cannot restore table {table} to timestamp "
                f"({given}) as it is before the earliest version available. Please use a timestamp after "
                f"({format_timestamp(exc.earliest, zone)}).",
                table=table,
            ) from None
        latest_time = format_timestamp(exc.latest if exc.latest is not None else 0, zone)
        raise RestoreError(
            f"[DELTA_CANNOT_RESTORE_TIMESTAMP_GREATER] Cannot restore table {table} to timestamp ({given}) "
            f"as it is after the latest version available. Please use a timestamp before ({latest_time})",
            table=table,
        ) from None
    return version, moment.isoformat(sep=" ")


def restore(
    io: TableIO,
    latest: Snapshot,
    target: int | Timestamp,
    *,
    ignore_missing_files: bool = False,
    protocol_downgrade_allowed: bool = False,
) -> RestoreResult:
    """Restore the table whose latest snapshot is ``latest`` to ``target`` (a version, or a time:
    a datetime, an ISO string or milliseconds given as a string); see the module docs.

    Raises :class:`RestoreError` (a target outside the history, not older than the latest version,
    or files missing), the errors of loading the target version, and Delta's conflict exceptions
    when another commit lands while the restore commits.
    """
    table = io.shown_path
    version, timestamp = resolve_target(io, latest, target)
    if version >= latest.version:
        raise RestoreError(
            f"Cannot restore table {table} to version {version}: the version to restore should be less "
            f"than the last available version ({latest.version}).",
            table=table,
        )
    restored = load_snapshot(io, version=version)
    current_files, target_files = latest.files_table(), restored.files_table()
    current_keys, target_keys = _keys(current_files), _keys(target_files)
    to_add = target_files.filter(pc.invert(pc.is_in(target_keys, value_set=current_keys)))
    to_remove = current_files.filter(pc.invert(pc.is_in(current_keys, value_set=target_keys)))
    if not (ignore_missing_files or _ignore_missing_files(io)):
        _check_files_exist(io, to_add, version)
    now = int(time.time() * 1000)
    txn = Transaction(io, latest, operation="RESTORE", max_attempts=1)
    txn.read_whole_table()
    protocol = (
        restored.protocol
        if protocol_downgrade_allowed
        else merge_protocols(restored.protocol, latest.protocol)
    )
    txn.add_actions([protocol, restored.metadata])
    txn.add_actions(file_actions(to_add, removed_at=None))
    txn.add_actions(file_actions(to_remove, removed_at=now))
    txn.operation_parameters = {"version": version if timestamp is None else None, "timestamp": timestamp}
    metrics = {
        "tableSizeAfterRestore": _size(target_files),
        "numOfFilesAfterRestore": target_files.num_rows,
        "numRemovedFiles": to_remove.num_rows,
        "numRestoredFiles": to_add.num_rows,
        "removedFilesSize": _size(to_remove),
        "restoredFilesSize": _size(to_add),
    }
    txn.operation_metrics = dict(metrics)
    committed = txn.commit()
    return RestoreResult(committed, version, metrics)


def file_actions(files: pa.Table, *, removed_at: int | None) -> list[AddFile] | list[RemoveFile]:
    """The rows of a snapshot files table as data-changing adds (``removed_at=None``) or as their
    removes at ``removed_at`` (Delta's ``AddFile.removeWithTimestamp``)."""
    adds = add_actions(files, data_change=True)
    if removed_at is None:
        return adds
    return [add.remove_with_timestamp(removed_at) for add in adds]


def _keys(files: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The file keys (path and deletion vector id) of a snapshot files table."""
    dv = files.column("deletion_vector")
    camel = pa.chunked_array(
        [rename_struct(chunk, _STORED_DV_CAMEL) for chunk in dv.chunks], type=_STORED_DV_CAMEL
    )
    return arrow_file_keys(pa.table({"path": files.column("path"), "deletionVector": camel}))


_STORED_DV_CAMEL = pa.struct([DV_ARROW_TYPE.field(i) for i in range(DV_ARROW_TYPE.num_fields - 1)])


def _size(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def _ignore_missing_files(io: TableIO) -> bool:
    value = io.conf.get(IGNORE_MISSING_FILES_KEY)
    return value is not None and parse_bool(value)


def _check_files_exist(io: TableIO, files: pa.Table, version: int) -> None:
    """Refuse to restore files that are gone (Delta's ``restoreMissedDataFilesError``)."""
    if not files.num_rows:
        return
    fs, root = open_filesystem(io.table_path, io.conf)
    root = root.rstrip("/")
    logged = [str(p) for p in files.column("path").to_pylist()]
    relative = [relative_paths(chunk, io.table_path) for chunk in files.column("path").chunks]
    relative_names = [path for chunk in relative for path in chunk.to_pylist()]
    located = [
        f"{root}/{name}"
        if name is not None
        else open_filesystem(resolve_path(io.table_path, path), io.conf)[1]
        for path, name in zip(logged, relative_names, strict=True)
    ]
    absent = _absent(fs, located, local=uri_scheme(io.table_path) in LOCAL_SCHEMES)
    gone = [path for path, missing in zip(logged, absent, strict=True) if missing]
    if gone:
        shown = ",".join(gone[:MISSING_FILES_SHOWN])
        raise RestoreError(
            f"Cannot restore table {io.shown_path}: not all files from version {version} are available "
            f"in file system.\n Missed files (top {MISSING_FILES_SHOWN} files): {shown}.\n Please use more "
            "recent version or timestamp for restoring.\n To disable check update option "
            f"{IGNORE_MISSING_FILES_KEY} "
            "(ignore_missing_files=True)",
            table=io.shown_path,
        )


CHECK_BATCH = 256
LIST_DIRECTORY_FROM = 64
"""On an object store, a directory holding at least this many files to check is listed once
instead of asking for each file."""


def _absent(fs: AbstractFileSystem, located: list[str], *, local: bool) -> list[bool]:
    """Whether each file of ``located`` (filesystem paths) is missing, checked concurrently: local
    files with ``os.path.exists``, object store files one request each, or by listing their
    directory when many of them share it."""
    by_directory: dict[str, list[int]] = {}
    for index, path in enumerate(located):
        by_directory.setdefault(path.rpartition("/")[0], []).append(index)
    tasks: list[tuple[str, list[int], bool]] = []
    for directory, indexes in by_directory.items():
        if not local and len(indexes) >= LIST_DIRECTORY_FROM:
            tasks.append((directory, indexes, True))
        else:
            tasks += [
                (directory, indexes[i : i + CHECK_BATCH], False) for i in range(0, len(indexes), CHECK_BATCH)
            ]

    def check(task: tuple[str, list[int], bool]) -> list[tuple[int, bool]]:
        directory, indexes, listed = task
        if listed:
            fs.invalidate_cache(directory)
            try:
                names = {
                    str(info["name"]).rstrip("/").rsplit("/", 1)[-1] for info in fs.ls(directory, detail=True)
                }
            except FileNotFoundError:
                names = set()
            return [(i, located[i].rsplit("/", 1)[-1] not in names) for i in indexes]
        exists = os.path.exists if local else fs.exists
        return [(i, not exists(located[i])) for i in indexes]

    threads = default_threads(Work.DATA, True) if local else REMOTE_THREADS
    absent = [False] * len(located)
    for results in map_concurrently(check, tasks, Work.DATA, threads):
        for index, missing in results:
            absent[index] = missing
    return absent
