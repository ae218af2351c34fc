"""Loading a snapshot: replaying a log segment into a :class:`~replay.state.snapshot.Snapshot`.

Commit files are fetched concurrently on the table's log pool (large ones parsed into Arrow
there, the rest with orjson) and replayed newest first with
:class:`~replay.log.log_replay.ReverseLogReplay` (file keys resolved in Arrow); then the
checkpoint is read through pyarrow one row group at a time (only the needed columns). If the
checkpoint cannot be read, the newest older complete checkpoint (or the commits from version
0) is used instead, with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from logstores.base import FileStatus
from replay.log.checkpoints import (
    TABLE_ACTION_COLUMNS,
    read_checkpoint,
    read_checkpoint_actions,
    read_checkpoint_description,
)
from replay.log.commit_files import (
    TASK_BYTES,
    ArrowCommit,
    parse_commit,
    parse_commit_arrow,
    read_action_lines,
    read_commit_bytes,
)
from replay.log.concurrency import gc_paused, prefetch
from replay.log.log_replay import MalformedActionError, ReverseLogReplay
from replay.log.log_segment import LogSegment, build_log_segment, load_log_segment
from replay.log.table_io import TableIO
from replay.progress import track
from replay.protocol.actions import Action, Metadata, Protocol
from replay.protocol.errors import CorruptLogError, DeltaError, MissingProtocolOrMetadataError
from replay.protocol.table_config import TableConfiguration
from replay.state.snapshot import Snapshot

logger = logging.getLogger(__name__)


def load_snapshot(
    io: TableIO, segment: LogSegment | None = None, version: int | None = None, *, files: bool = True
) -> Snapshot:
    """Replay ``segment`` (default: the segment of ``version``, or of the latest version).

    With ``files=False`` only the table's description is replayed now: protocol, metadata, app
    transactions and domain metadata (the lines of the commits that name them, and the matching
    checkpoint columns, whose all-null row groups are skipped). The file state is replayed the
    first time it is used. That is what a commit is made from: an append to a table of a million
    files reads a few small columns, not the million adds.

    Raises :class:`~replay.protocol.errors.CorruptLogError` for an unreadable commit (never a
    partial state) or an unreadable checkpoint without an older fallback,
    :class:`MissingProtocolOrMetadataError` and the segment errors of
    :func:`~replay.log.log_segment.build_log_segment`.
    """
    if segment is None:
        segment = load_log_segment(io, version)
    if not files:
        return _load_description(io, segment)
    state, newest, segment = _replay(io, segment, io.executor())
    return Snapshot(io, segment, _table_configuration(io, segment, state), state, newest)


def _replay(
    io: TableIO, segment: LogSegment, executor: Executor | None
) -> tuple[ReverseLogReplay, Mapping[str, Any] | None, LogSegment]:
    """The full replay of ``segment`` (or of an older one if its checkpoint is unreadable): the
    state, the newest commit's ``commitInfo`` and the segment actually replayed."""
    state = ReverseLogReplay()
    newest = _replay_commits(io, segment, executor, state)
    if segment.checkpoint is not None:
        try:
            _replay_checkpoint(io, segment, executor, state)
        except CorruptLogError as exc:
            exc.table = io.table_path
            return _replay(io, _older_segment(io, segment, exc), executor)
    return state, newest, segment


def _load_description(io: TableIO, segment: LogSegment) -> Snapshot:
    """A snapshot whose protocol, metadata, app transactions and domains are replayed now and whose
    files are replayed on first use."""
    state = ReverseLogReplay()
    newest = segment.version
    commits = [(start, end, status) for start, end, status in reversed(segment.replay_files)]

    def lines(item: tuple[int, int, FileStatus]) -> list[dict[str, Any]]:
        kinds = _TABLE_KINDS_AND_INFO if item[1] == newest else TABLE_ACTION_COLUMNS
        return read_action_lines(io, item[2], kinds)

    newest_info: Mapping[str, Any] | None = None
    for (start, end, _), found in zip(
        commits, prefetch(io.executor(), lines, commits, io.window), strict=True
    ):
        if end == newest:
            newest_info = next((line["commitInfo"] for line in found if line.get("commitInfo")), None)
        state.add_commit(
            [line for line in found if line.get("commitInfo") is None], later_lines_win=start == end
        )
    if segment.checkpoint is not None:
        try:
            state.add_checkpoint_actions(
                read_checkpoint_actions(io, segment.checkpoint_files, TABLE_ACTION_COLUMNS)
            )
        except CorruptLogError as exc:
            exc.table = io.table_path
            return _load_description(io, _older_segment(io, segment, exc))
    config = _table_configuration(io, segment, state)
    executor = io.executor()
    return Snapshot(
        io, segment, config, state, newest_info, replay_files=lambda: _replay(io, segment, executor)[0]
    )


_TABLE_KINDS_AND_INFO = (*TABLE_ACTION_COLUMNS, "commitInfo")


def _read_batch_size(io: TableIO, statuses: list[FileStatus]) -> int:
    """How many commits one read task takes.

    Small commits are batched to amortise the pool's per-task cost; large ones (parsed by
    pyarrow in the pool) go a few at a time so that the threads finish together.
    """
    average = sum(max(status.size, 0) for status in statuses) / max(len(statuses), 1)
    return max(1, min(32, len(statuses) // (4 * io.read_threads), int(TASK_BYTES / max(average, 1))))


def _replay_commits(
    io: TableIO, segment: LogSegment, executor: Executor | None, state: ReverseLogReplay
) -> Mapping[str, Any] | None:
    """Feed the segment's commits to ``state``, newest first; the newest commit's ``commitInfo``."""
    newest_first = list(reversed(segment.replay_files))
    statuses = [status for _, _, status in newest_first]

    def read(status: FileStatus) -> tuple[bytes, ArrowCommit | None]:
        # runs in the pool: pyarrow's JSON parsing releases the GIL, so commits parse in parallel
        raw = read_commit_bytes(io, status)
        return raw, parse_commit_arrow(raw)

    commits = prefetch(executor, read, statuses, io.window, _read_batch_size(io, statuses))
    newest: list[Mapping[str, Any]] = []
    with gc_paused():
        for index, ((start, end, status), (raw, parsed)) in enumerate(
            zip(newest_first, track("Reading commits", commits, len(statuses)), strict=True)
        ):
            later_lines_win = start == end  # compacted files list a tombstone before a stale add
            if parsed is not None:
                state.add_arrow_commit(
                    parsed.adds,
                    parsed.add_lines,
                    parsed.others,
                    parsed.num_lines,
                    later_lines_win=later_lines_win,
                    removes=parsed.removes,
                    remove_lines=parsed.remove_lines,
                )
                lines: list[Mapping[str, Any]] = [line for _, line in parsed.others]
            else:
                lines = list(parse_commit(io, status, raw))
                state.add_commit(lines, later_lines_win=later_lines_win, source=status.path)
            if index == 0 and end == segment.version:
                newest = lines
        try:
            state.flush()
        except MalformedActionError as exc:
            raise CorruptLogError(str(exc), table=io.table_path, path=exc.source) from exc
    return next((line["commitInfo"] for line in newest if line.get("commitInfo") is not None), None)


def _replay_checkpoint(
    io: TableIO, segment: LogSegment, executor: Executor | None, state: ReverseLogReplay
) -> None:
    """Feed the segment's checkpoint to ``state`` (after every commit)."""
    assert segment.checkpoint is not None
    data = read_checkpoint(io, segment.checkpoint, segment.checkpoint_files, executor)
    state.add_checkpoint_actions(data.actions)
    for adds in data.adds:
        state.add_checkpoint_files(adds, None)
    for removes in data.removes:
        state.add_checkpoint_files(None, removes)


# -- protocol and metadata alone -----------------------------------------------------------------
@dataclass(frozen=True)
class KnownDescription:
    """The protocol and metadata in force at ``version``, known to the caller (see
    :func:`load_table_configuration`)."""

    version: int
    protocol: Protocol
    metadata: Metadata


def load_table_configuration(
    io: TableIO,
    segment: LogSegment,
    *,
    newest_actions: Sequence[Action] | None = None,
    known: KnownDescription | None = None,
) -> TableConfiguration:
    """The protocol and metadata of ``segment.version``, reading only what they need (Delta's
    ``protocolAndMetadata`` reconstruction, without the file state).

    The segment's commits are read newest first, only until both actions are found; then the
    checkpoint's ``protocol`` and ``metaData`` columns. ``newest_actions`` are the actions of the
    segment's last commit, already read by the caller (not read again). ``known`` gives the
    description in force at an earlier version of the segment: commits up to it and the
    checkpoint are then not read. Raises :class:`MissingProtocolOrMetadataError`, the errors of an
    unreadable table (:meth:`TableConfiguration.check_readable`) and :class:`CorruptLogError`;
    an unreadable checkpoint falls back as :func:`load_snapshot` does.
    """
    found: dict[str, Mapping[str, Any]] = {}

    def take(lines: Iterable[Mapping[str, Any]]) -> bool:
        for line in reversed(list(lines)):
            for kind in _DESCRIPTION_KINDS:
                if kind not in found and line.get(kind) is not None:
                    found[kind] = line[kind]
        return len(found) == len(_DESCRIPTION_KINDS)

    floor = segment.checkpoint_version
    if known is not None and known.version >= floor:
        floor = known.version
    else:
        known = None
    commits = [(end, status) for _, end, status in reversed(segment.replay_files) if end > floor]
    if newest_actions is not None and commits and commits[0][0] == segment.version:
        commits = commits[1:]
        take(action.to_dict() for action in newest_actions)
    statuses = [status for _, status in commits]
    if len(found) < len(_DESCRIPTION_KINDS):
        for lines in prefetch(io.executor(), lambda s: _description_lines(io, s), statuses, io.window):
            if take(lines):
                break
    if len(found) < len(_DESCRIPTION_KINDS):
        if known is not None:
            found.setdefault("protocol", known.protocol.inner_dict())
            found.setdefault("metaData", known.metadata.inner_dict())
        elif segment.checkpoint is not None:
            try:
                take(read_checkpoint_description(io, segment.checkpoint_files))
            except CorruptLogError:
                return load_snapshot(io, segment).config
    return _configuration_of(io, segment, found.get("protocol"), found.get("metaData"))


_DESCRIPTION_KINDS = ("protocol", "metaData")


def _description_lines(io: TableIO, status: FileStatus) -> list[dict[str, Any]]:
    """The ``protocol`` and ``metaData`` lines of a commit file (none parsed when it names neither)."""
    raw = read_commit_bytes(io, status)
    if b'"protocol"' not in raw and b'"metaData"' not in raw:
        return []
    lines = parse_commit(io, status, raw)
    return [line for line in lines if any(line.get(kind) is not None for kind in _DESCRIPTION_KINDS)]


def _table_configuration(io: TableIO, segment: LogSegment, state: ReverseLogReplay) -> TableConfiguration:
    """The replayed protocol and metadata; raises if one is missing or the table is unreadable."""
    return _configuration_of(io, segment, state.protocol, state.metadata)


def _configuration_of(
    io: TableIO, segment: LogSegment, protocol: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None
) -> TableConfiguration:
    """The configuration of ``protocol`` and ``metadata``; raises if one is missing or the table is
    unreadable."""
    if protocol is None or metadata is None:
        missing = "protocol" if protocol is None else "metadata"
        raise MissingProtocolOrMetadataError(
            f"[DELTA_STATE_RECOVER_ERROR] The {missing} of your Delta table could not be recovered while"
            f" Reconstructing\nversion: {segment.version}. Did you manually delete files in the _delta_log"
            f" directory? (table {io.table_path})",
            table=io.table_path,
            version=segment.version,
            missing=missing,
        )
    config = TableConfiguration(
        Protocol.from_dict(_without_nulls(protocol)),
        Metadata.from_dict(_without_nulls(metadata)),
        io.table_path,
    )
    config.check_readable()
    return config


def _without_nulls(value: Mapping[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not None}


def _older_segment(io: TableIO, segment: LogSegment, error: CorruptLogError) -> LogSegment:
    """The segment to replay instead of ``segment``, whose checkpoint is unreadable: the newest
    older complete checkpoint, or the commits from version 0. Raises ``error`` if there is none."""
    assert segment.checkpoint is not None
    try:
        older = build_log_segment(io, version_to_load=segment.version, before_checkpoint=segment.checkpoint)
    except DeltaError:
        raise error from None
    logger.warning(
        "checkpoint %d of %s is unreadable (%s); replaying from %s instead",
        segment.checkpoint.version,
        io.table_path,
        error,
        f"checkpoint {older.checkpoint.version}" if older.checkpoint else "version 0",
    )
    return older
