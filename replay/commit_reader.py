"""Reading commit files: concurrent fetches, and parsing into dicts or Arrow rows.

Commit files are fetched through the table's LogStore on a thread pool (:func:`prefetch`).
Large commits are parsed by pyarrow's JSON reader in the pool (:func:`parse_commit_arrow`,
any table layout: adds and removes straight into Arrow, other lines with orjson); everything
else, and any commit the fast path doubts, is parsed line by line with orjson, which also
produces the exact :class:`~replay.errors.CorruptLogError` for a bad line.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from logstores.base import FileStatus
from replay.checkpoints import parse_json_lines
from replay.errors import CorruptLogError
from replay.log_replay import (
    ADD_ARROW_TYPE,
    KNOWN_KINDS,
    REMOVE_ARROW_TYPE,
    select_rows,
    struct_to_map,
)
from replay.progress import track

if TYPE_CHECKING:
    from replay.delta_log import DeltaLog


logger = logging.getLogger(__name__)

T = TypeVar("T")


def prefetch(
    executor: Executor | None,
    function: Callable[[FileStatus], T],
    items: Sequence[FileStatus],
    window: int,
    batch: int = 1,
    *,
    task: str | None = None,
) -> Iterator[T]:
    """``map(function, items)`` in order, with at most ``window`` tasks of ``batch`` items running ahead.

    Batching amortises the per-task cost of the pool when the files are many and small.
    Without an executor the items are processed inline, lazily. With ``task``, each item done
    is reported to the :mod:`replay.progress` listener.
    """
    results = _prefetch(executor, function, items, window, batch)
    return results if task is None else track(task, results, len(items))


def _prefetch(
    executor: Executor | None,
    function: Callable[[FileStatus], T],
    items: Sequence[FileStatus],
    window: int,
    batch: int,
) -> Iterator[T]:
    if executor is None:
        yield from map(function, items)
        return
    groups = [items[i : i + batch] for i in range(0, len(items), max(batch, 1))]
    pending: deque[Future[list[T]]] = deque()
    iterator = iter(groups)

    def run(group: Sequence[FileStatus]) -> list[T]:
        return [function(item) for item in group]

    for group in iterator:
        pending.append(executor.submit(run, group))
        if len(pending) >= window:
            break
    while pending:
        results = pending.popleft().result()
        nxt = next(iterator, None)
        if nxt is not None:
            pending.append(executor.submit(run, nxt))
        yield from results


def read_commit_bytes(delta_log: DeltaLog, status: FileStatus) -> bytes:
    """A commit file's bytes. Raises :class:`CorruptLogError` (caused by FileNotFoundError) if gone."""
    try:
        return delta_log.store.read_bytes(status.path)
    except FileNotFoundError as exc:
        raise CorruptLogError(
            f"commit file {status.path} of table {delta_log.table_path} is missing: {exc}",
            table=delta_log.table_path,
            path=status.path,
        ) from exc


def parse_commit(delta_log: DeltaLog, status: FileStatus, raw: bytes) -> list[dict[str, Any]]:
    """A commit file's lines as dicts. Raises :class:`CorruptLogError` naming the file and line."""
    try:
        return parse_json_lines(raw, status.path)
    except CorruptLogError as exc:
        exc.table = delta_log.table_path
        raise


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


def parse_commit_arrow(raw: bytes) -> ArrowCommit | None:
    """Parse a commit's adds and removes with pyarrow's JSON reader (no GIL) instead of line by line.

    Works for any table layout: partition values, tags, deletion vectors, row tracking; other
    actions' lines are parsed with orjson. Returns ``None`` when the commit is smaller than
    :data:`ARROW_COMMIT_MIN_BYTES`, has no add or remove, or on any doubt (a blank line, a field
    of an unexpected type, partition values with nulls or inferred as timestamps, invalid JSON
    or UTF-8): the caller then parses it line by line with orjson, which also produces the exact
    error for a bad line.
    """
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
    table = table.combine_chunks()
    is_add = table.column("add").chunk(0).is_valid()
    is_remove = pa.repeat(pa.scalar(False), num_lines)
    if "remove" in table.column_names:
        # as line by line, an add hides the rest of its line; a remove shares its line with
        # nothing else known here (the first known kind of such a line wins, left to orjson)
        is_remove = pc.and_(table.column("remove").chunk(0).is_valid(), pc.invert(is_add))
        for kind in _OTHER_KINDS:
            if kind in table.column_names and table.column(kind).null_count < num_lines:
                is_remove = pc.and_(is_remove, table.column(kind).chunk(0).is_null())
    is_file = pc.or_(is_add, is_remove)
    files = pc.sum(is_file).as_py() or 0
    if not files:
        return None
    adds = _file_rows(table.column("add"), ADD_ARROW_TYPE, is_add)
    removes = (
        _file_rows(table.column("remove"), REMOVE_ARROW_TYPE, is_remove)
        if "remove" in table.column_names
        else pa.schema(REMOVE_ARROW_TYPE).empty_table()
    )
    if adds is None or removes is None:
        return None
    others: list[tuple[int, dict[str, Any]]] = []
    if files < num_lines:
        other_lines = pc.indices_nonzero(pc.invert(is_file)).to_pylist()
        try:
            lines = _lines_at(raw, other_lines, end)
            others = [(number, orjson.loads(line)) for number, line in zip(other_lines, lines, strict=True)]
        except orjson.JSONDecodeError:
            return None
        if any(type(line) is not dict for _, line in others):
            return None
    return ArrowCommit(
        adds, pc.indices_nonzero(is_add), removes, pc.indices_nonzero(is_remove), others, num_lines
    )


def read_commit_file(delta_log: DeltaLog, status: FileStatus) -> list[dict[str, Any]]:
    """A commit (or compacted) file's lines as dicts (see :func:`parse_commit`)."""
    return parse_commit(delta_log, status, read_commit_bytes(delta_log, status))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic dicts.

    Replay allocates no reference cycles; without this, CPython's generational collector
    rescans the growing heap over and over and dominates the load time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
