"""Commit files: fetching them, parsing them, and walking a range of them (Delta's ``getChanges``).

Every commit file is read here and nowhere else: :func:`read_commit_bytes` fetches one through
the table's LogStore, :func:`parse_json_lines` parses it line by line with orjson (and produces
the exact :class:`~replay.protocol.errors.CorruptLogError` for a bad line), and
:func:`parse_commit_arrow` parses a large one's adds and removes with pyarrow's JSON reader,
straight into Arrow. :func:`read_commit` gives one version's actions; :func:`iter_commits`
walks a version range, fetching ahead on the table's log pool, and is the one place a gap in
the versions is detected (:func:`check_next_version`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from logstores.base import FileStatus
from logstores.errors import BinaryAccessUnsupportedError
from replay.log.concurrency import prefetch
from replay.log.listing import LogListing, classify_listing, list_log
from replay.log.table_io import TableIO
from replay.progress import track
from replay.protocol import filenames
from replay.protocol.actions import KNOWN_KINDS, Action, actions_from_dicts
from replay.protocol.arrow_actions import ADD_ARROW_TYPE, REMOVE_ARROW_TYPE, select_rows, struct_to_map
from replay.protocol.errors import CorruptLogError, DataLossError, TableNotFoundError, VersionNotFoundError

logger = logging.getLogger(__name__)


# -- fetching and parsing line by line ---------------------------------------------------------
def fetch_log_file(io: TableIO, path: str) -> bytes:
    """The bytes of the log file ``path``, which must be a UTF-8 text file.

    Raises :class:`FileNotFoundError` if it does not exist, and :class:`CorruptLogError` naming
    it when it is a directory or, through a store that decodes lines (a text-only ``LogStore``),
    not UTF-8 (naming the first undecodable line).
    """
    try:
        return io.store.read_bytes(path)
    except IsADirectoryError:
        raise CorruptLogError(
            f"log file {path} of table {io.table_path} is a directory, not a file",
            table=io.table_path,
            path=path,
        ) from None
    except (UnicodeDecodeError, BinaryAccessUnsupportedError) as exc:
        line, problem = _undecodable_line(io, path, exc)
        where = f"{path} line {line}" if line is not None else path
        raise CorruptLogError(
            f"malformed action at {where}: not valid UTF-8 ({problem}) (table {io.table_path})",
            table=io.table_path,
            path=path,
            line=line,
        ) from None


def _undecodable_line(io: TableIO, path: str, error: Exception) -> tuple[int | None, Exception]:
    """The 1-based number of the first line of ``path`` that is not UTF-8, with its decoding error
    (the store's lines are decoded one by one); ``None`` and ``error`` if no line fails."""
    read = 0
    try:
        with io.store.read_as_iterator(path) as lines:
            for _ in lines:
                read += 1
    except UnicodeDecodeError as exc:
        return read + 1, exc
    except OSError:
        pass
    return None, error


def read_commit_bytes(io: TableIO, status: FileStatus) -> bytes:
    """A commit file's bytes. Raises :class:`CorruptLogError` (caused by FileNotFoundError) if gone."""
    try:
        return fetch_log_file(io, status.path)
    except FileNotFoundError as exc:
        raise CorruptLogError(
            f"commit file {status.path} of table {io.table_path} is missing: {exc}",
            table=io.table_path,
            path=status.path,
        ) from exc


def parse_json_lines(raw: bytes, path: str) -> list[dict[str, Any]]:
    """Parse newline-delimited JSON actions with orjson; blank lines are skipped.

    Raises :class:`CorruptLogError` naming the file and the 1-based line on the first bad line
    (invalid UTF-8, invalid JSON, truncated line or a line that is not a JSON object).
    """
    body = raw.rstrip(b"\r\n")
    if body and b"\n\n" not in body:
        # fast path: the whole file as one JSON array; any doubt falls through to the line loop
        try:
            values = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except orjson.JSONDecodeError:
            values = None
        if values is not None and len(values) == body.count(b"\n") + 1 and set(map(type, values)) == {dict}:
            return values
    out: list[dict[str, Any]] = []
    loads = orjson.loads
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line or line.isspace():
            continue
        try:
            value = loads(line)
        except orjson.JSONDecodeError as exc:
            raise CorruptLogError(
                f"malformed action at {path} line {number}: {exc}", path=path, line=number
            ) from None
        if not isinstance(value, dict):
            raise CorruptLogError(
                f"malformed action at {path} line {number}: not a JSON object", path=path, line=number
            )
        out.append(value)
    return out


def parse_commit(io: TableIO, status: FileStatus, raw: bytes) -> list[dict[str, Any]]:
    """A commit file's lines as dicts. Raises :class:`CorruptLogError` naming the file and line."""
    try:
        return parse_json_lines(raw, status.path)
    except CorruptLogError as exc:
        exc.table = io.table_path
        raise


def read_commit_dicts(io: TableIO, status: FileStatus) -> list[dict[str, Any]]:
    """A commit (or compacted) file's lines as dicts (see :func:`parse_commit`)."""
    return parse_commit(io, status, read_commit_bytes(io, status))


def read_action_lines(io: TableIO, status: FileStatus, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """The lines of a commit (or compacted) file that hold an action of ``kinds``, in file order.

    Only lines naming one of the kinds are parsed, so a commit of a million adds costs a byte
    search, not a parse. A line that also holds a file action (``add``, ``remove``, ``cdc``) is
    skipped. Raises :class:`CorruptLogError` naming the file and line, as :func:`parse_commit`.
    """
    raw = read_commit_bytes(io, status)
    needles = [f'"{kind}"'.encode() for kind in kinds]
    if not any(needle in raw for needle in needles):
        return []
    out: list[dict[str, Any]] = []
    for line in raw.split(b"\n"):
        if not any(needle in line for needle in needles):
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            parse_commit(io, status, raw)  # raises naming the line
            raise
        if not isinstance(value, dict):
            parse_commit(io, status, raw)
        if any(value.get(kind) is not None for kind in kinds) and not _FILE_KINDS & value.keys():
            out.append(value)
    return out


_FILE_KINDS = frozenset({"add", "remove", "cdc"})


def read_commit(io: TableIO, version: int) -> list[Action]:
    """The actions of commit ``version`` in file order (unknown kinds skipped).

    Raises :class:`VersionNotFoundError` if the commit file does not exist and
    :class:`CorruptLogError` naming the file (and line) if it is a directory or cannot be parsed.
    """
    path = filenames.delta_file(io.log_path, version)
    try:
        raw = fetch_log_file(io, path)
    except FileNotFoundError:
        raise VersionNotFoundError(
            f"commit {version} of table {io.table_path} does not exist ({path})",
            table=io.table_path,
            version=version,
        ) from None
    return actions_from_dicts(parse_commit(io, FileStatus(path, len(raw), 0), raw))


# -- walking a range of commits ----------------------------------------------------------------
def check_next_version(expected: int, seen: int, table: str) -> None:
    """Raise Delta's ``DELTA_MISSING_FILES_UNEXPECTED_VERSION`` unless ``seen`` is ``expected``.

    The one check of the library for commits missing from a range being read.
    """
    if seen == expected:
        return
    raise DataLossError(
        f"[DELTA_MISSING_FILES_UNEXPECTED_VERSION] The stream from your Delta table was expecting process "
        f"data from version {expected},\nbut the earliest available version in the _delta_log directory is "
        f"{seen}. The files\nin the transaction log may have been deleted due to log cleanup. In order to "
        "avoid losing\ndata, we recommend that you restart your stream with a new checkpoint location and "
        "to\nincrease your delta.logRetentionDuration setting, if you have explicitly set it below 30\n"
        "days.\nIf you would like to ignore the missed data and continue your stream from where it left\n"
        'off, you can set the .option("failOnDataLoss", "false") as part\nof your readStream statement.'
        f" (table {table})",
        table=table,
    )


def commit_statuses(
    io: TableIO,
    start: int,
    end: int | None = None,
    *,
    fail_on_data_loss: bool = True,
    listing: LogListing | None = None,
) -> list[tuple[int, FileStatus]]:
    """The commit files of versions ``start..end`` (``end`` ``None``: the latest), listed once.

    ``listing``, if given, is used instead of listing (it must start at or before ``start``).
    With ``fail_on_data_loss``, a missing first commit or a gap raises :class:`DataLossError`
    (:func:`check_next_version`); otherwise the commits present are returned. Raises
    :class:`TableNotFoundError` when the log directory does not exist.
    """
    if listing is None:
        statuses = list_log(io, max(start, 0))
        if statuses is None:
            raise TableNotFoundError.no_commits(io.table_path, io.log_path)
        listing = classify_listing(statuses, end, listed_from=max(start, 0))
    deltas = [(v, s) for v, s in listing.deltas if v >= start and (end is None or v <= end)]
    if fail_on_data_loss:
        expected = start
        for version, _ in deltas:
            check_next_version(expected, version, io.table_path)
            expected = version + 1
    return deltas


def iter_commits(
    io: TableIO,
    start: int,
    end: int | None = None,
    *,
    fail_on_data_loss: bool = True,
    listing: LogListing | None = None,
) -> Iterator[tuple[int, list[Action]]]:
    """Commits ``start..end`` in order as ``(version, actions)`` (Delta's ``getChanges``).

    Files are fetched ahead on the table's log pool; see :func:`commit_statuses` for the checks
    and ``listing``.
    """
    deltas = commit_statuses(io, start, end, fail_on_data_loss=fail_on_data_loss, listing=listing)
    reader = prefetch(io.executor(), lambda s: read_commit_dicts(io, s), [s for _, s in deltas], io.window)
    for (version, _), lines in zip(deltas, track("Reading commits", reader, len(deltas)), strict=True):
        yield version, actions_from_dicts(lines)


# -- parsing large commits into Arrow ----------------------------------------------------------
_ADD_PARSE_TYPE = pa.struct(
    [ADD_ARROW_TYPE.field(name) for name in ("path", "size", "modificationTime", "dataChange", "stats")]
)
# The always-present add fields are given; the rest is inferred (an explicit schema with absent
# fields costs a third more parse time). Inferred optional fields are checked and cast by
# _conform; partitionValues and tags (structs: pyarrow cannot parse JSON into maps) are converted
# by struct_to_map when that is exact. Other lines are inferred, then re-parsed with orjson.
# Inference conflicts, type mismatches and unsupported shapes fall back to orjson.
_JSON_PARSE = pajson.ParseOptions(
    explicit_schema=pa.schema([pa.field("add", _ADD_PARSE_TYPE)]), unexpected_field_behavior="infer"
)
_JSON_READ = pajson.ReadOptions(use_threads=False, block_size=1 << 22)
TASK_BYTES = 2 << 20
"""About how many bytes of commits one read task of :func:`load_snapshot` takes."""
ARROW_COMMIT_MIN_BYTES = 64 * 1024
"""Smaller commits are parsed with orjson: pyarrow's JSON reader has a fixed cost per call."""


@dataclass(frozen=True)
class ArrowCommit:
    """A commit parsed by pyarrow: adds and removes in Arrow, the other lines as dicts.

    ``*_lines`` are the 0-based line numbers of the rows (see ``add_arrow_commit``).
    """

    adds: pa.Table
    add_lines: pa.Array
    removes: pa.Table
    remove_lines: pa.Array
    others: list[tuple[int, dict[str, Any]]]
    num_lines: int


def _conform(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    """An inferred JSON column as ``target``; ``None`` if its type does not fit (or ints overflow).

    JSON objects inferred as structs become ``map<string, string>`` through :func:`struct_to_map`.
    """
    if array.type == target:
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    if pa.types.is_integer(target) and pa.types.is_integer(array.type):
        try:
            return array.cast(target)
        except pa.ArrowInvalid:
            return None
    if not pa.types.is_struct(array.type):
        return None
    if pa.types.is_map(target):
        return struct_to_map(array)
    if not pa.types.is_struct(target):
        return None
    present = dict(zip(array.type.names, array.flatten(), strict=True))
    children = []
    for field in target:
        child = present.get(field.name)
        conformed = pa.nulls(len(array), field.type) if child is None else _conform(child, field.type)
        if conformed is None:
            return None
        children.append(conformed)
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def _file_rows(column: pa.ChunkedArray, target: pa.StructType, rows: pa.Array) -> pa.Table | None:
    """The ``rows`` of an inferred add/remove column as a flat table of ``target``'s fields."""
    struct = _conform(column.combine_chunks(), target)
    if struct is None or struct.field("path").null_count != struct.null_count:
        return None
    return select_rows(pa.Table.from_struct_array(struct), rows)


def _lines_at(raw: bytes, numbers: Sequence[int], end: int) -> list[bytes]:
    """Lines ``numbers`` (0-based, ascending) of ``raw[:end]``, without splitting the rest of it."""
    wanted = set(numbers)
    out: list[bytes] = []
    position = 0
    for number in range(numbers[-1] + 1):
        newline = raw.find(b"\n", position, end)
        stop = end if newline < 0 else newline
        if number in wanted:
            out.append(raw[position:stop])
        position = stop + 1
    return out


_OTHER_KINDS = sorted(KNOWN_KINDS - {"add", "remove"})


@dataclass(frozen=True)
class _ParsedLines:
    """A commit read by pyarrow's JSON reader: one row per line, ``end`` the length without the
    trailing newlines."""

    table: pa.Table
    num_lines: int
    end: int


def _read_json_table(raw: bytes) -> _ParsedLines | None:
    """The commit as one Arrow row per line; ``None`` when small, unparsable or with blank lines."""
    end = len(raw)
    while end and raw[end - 1] in b"\r\n":
        end -= 1
    if end < ARROW_COMMIT_MIN_BYTES:
        return None
    body = pa.py_buffer(raw)
    try:
        table = pajson.read_json(
            pa.BufferReader(body.slice(0, end) if end < len(raw) else body),
            read_options=_JSON_READ,
            parse_options=_JSON_PARSE,
        )
    except pa.ArrowException:
        return None
    num_lines = raw.count(b"\n", 0, end) + 1
    if table.num_rows != num_lines:  # pyarrow skips blank lines: line numbers would not match
        return None
    return _ParsedLines(table.combine_chunks(), num_lines, end)


def _file_lines(parsed: _ParsedLines) -> tuple[pa.Array, pa.Array]:
    """Which lines replay reads as an add and which as a remove.

    As line by line, an add hides the rest of its line; a remove counts only on a line with no
    other known action (the first known kind of such a line wins, which is left to orjson).
    """
    table, num_lines = parsed.table, parsed.num_lines
    is_add = table.column("add").chunk(0).is_valid()
    is_remove = pa.repeat(pa.scalar(False), num_lines)
    if "remove" in table.column_names:
        is_remove = pc.and_(table.column("remove").chunk(0).is_valid(), pc.invert(is_add))
        for kind in _OTHER_KINDS:
            if kind in table.column_names and table.column(kind).null_count < num_lines:
                is_remove = pc.and_(is_remove, table.column(kind).chunk(0).is_null())
    return is_add, is_remove


def _other_lines(raw: bytes, is_file: pa.Array, end: int) -> list[tuple[int, dict[str, Any]]] | None:
    """The lines that are neither add nor remove, parsed with orjson; ``None`` on any doubt."""
    if pc.all(is_file).as_py():
        return []
    numbers = pc.indices_nonzero(pc.invert(is_file)).to_pylist()
    try:
        others = [
            (n, orjson.loads(line)) for n, line in zip(numbers, _lines_at(raw, numbers, end), strict=True)
        ]
    except orjson.JSONDecodeError:
        return None
    if any(type(line) is not dict for _, line in others):
        return None
    return others


def parse_commit_arrow(raw: bytes) -> ArrowCommit | None:
    """Parse a commit's adds and removes with pyarrow's JSON reader (no GIL) instead of line by line.

    Works for any table layout: partition values, tags, deletion vectors, row tracking; other
    actions' lines are parsed with orjson. Returns ``None`` when the commit is smaller than
    :data:`ARROW_COMMIT_MIN_BYTES`, has no add or remove, or on any doubt (a blank line, a field
    of an unexpected type, partition values with nulls or inferred as timestamps, invalid JSON
    or UTF-8): the caller then parses it line by line with orjson, which also produces the exact
    error for a bad line.
    """
    parsed = _read_json_table(raw)
    if parsed is None:
        return None
    is_add, is_remove = _file_lines(parsed)
    is_file = pc.or_(is_add, is_remove)
    if not pc.any(is_file).as_py():
        return None
    table = parsed.table
    adds = _file_rows(table.column("add"), ADD_ARROW_TYPE, is_add)
    removes = (
        _file_rows(table.column("remove"), REMOVE_ARROW_TYPE, is_remove)
        if "remove" in table.column_names
        else pa.schema(REMOVE_ARROW_TYPE).empty_table()
    )
    others = _other_lines(raw, is_file, parsed.end)
    if adds is None or removes is None or others is None:
        return None
    return ArrowCommit(
        adds, pc.indices_nonzero(is_add), removes, pc.indices_nonzero(is_remove), others, parsed.num_lines
    )
