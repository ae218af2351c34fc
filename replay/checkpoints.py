"""Checkpoints on the read side: ``_last_checkpoint``, choosing a complete checkpoint, reading it.

Selection follows Delta's ``CheckpointInstance`` rules: instances are ordered by
``(version, format, parts, file name)`` with SINGLE < WITH_PARTS < V2; a multi-part checkpoint
is complete only with all its parts; zero-byte files never count. Reading uses pyarrow and only
the columns replay needs; V2 checkpoints (JSON or Parquet top-level file) pull in their sidecars.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Self
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logstores.base import FileStatus, LogStore
from replay import filenames
from replay.errors import CorruptLogError
from replay.log_replay import select_rows

logger = logging.getLogger(__name__)

ADD_COLUMNS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)
REMOVE_COLUMNS = (
    "path",
    "deletionTimestamp",
    "dataChange",
    "extendedFileMetadata",
    "partitionValues",
    "size",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)
NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


class CheckpointFormat(IntEnum):
    SINGLE = 0
    WITH_PARTS = 1
    V2 = 2


@dataclass(frozen=True, order=True)
class CheckpointInstance:
    """One checkpoint (possibly made of several files), ordered like Delta's ``CheckpointInstance``."""

    version: int
    format: CheckpointFormat = CheckpointFormat.SINGLE
    num_parts: int = 1
    file_name: str = ""

    @classmethod
    def from_name(cls, name: str) -> CheckpointInstance | None:
        """The instance a checkpoint file belongs to; ``None`` if ``name`` is not a checkpoint file."""
        if not filenames.is_checkpoint_file(name):
            return None
        version = filenames.checkpoint_version(name)
        parts = filenames.num_checkpoint_parts(name)
        if parts is not None:
            return cls(version, CheckpointFormat.WITH_PARTS, parts)
        if filenames.is_v2_checkpoint_file(name):
            return cls(version, CheckpointFormat.V2, 1, name.rsplit("/", 1)[-1])
        return cls(version, CheckpointFormat.SINGLE)


def complete_checkpoints(files: Iterable[FileStatus]) -> dict[CheckpointInstance, list[FileStatus]]:
    """The complete checkpoints among ``files`` (zero-byte files ignored), files sorted by name."""
    groups: dict[CheckpointInstance, dict[str, FileStatus]] = {}
    for status in files:
        if status.is_dir or status.size <= 0:
            continue
        instance = CheckpointInstance.from_name(status.name)
        if instance is not None:
            groups.setdefault(instance, {})[status.name] = status
    complete: dict[CheckpointInstance, list[FileStatus]] = {}
    for instance, by_name in groups.items():
        if instance.format == CheckpointFormat.WITH_PARTS:
            parts = {filenames.checkpoint_part(name) for name in by_name}
            if parts != set(range(1, instance.num_parts + 1)):
                continue
        elif len(by_name) != 1:
            continue
        complete[instance] = [by_name[name] for name in sorted(by_name)]
    return complete


def latest_complete_checkpoint(
    files: Iterable[FileStatus], not_later_than: int | None = None, before: CheckpointInstance | None = None
) -> tuple[CheckpointInstance, list[FileStatus]] | None:
    """The greatest complete checkpoint with version ``<= not_later_than`` and ``< before``."""
    candidates = [
        (instance, group)
        for instance, group in complete_checkpoints(files).items()
        if (not_later_than is None or instance.version <= not_later_than)
        and (before is None or instance < before)
    ]
    return max(candidates, key=lambda item: item[0]) if candidates else None


# -- _last_checkpoint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LastCheckpointInfo:
    """The content of ``_last_checkpoint`` (unknown fields kept in ``extra``)."""

    version: int
    size: int = -1
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    checkpoint_schema: dict[str, Any] | None = None
    v2_checkpoint: dict[str, Any] | None = None
    checksum: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = (
        ("version", "version"),
        ("size", "size"),
        ("parts", "parts"),
        ("size_in_bytes", "sizeInBytes"),
        ("num_of_add_files", "numOfAddFiles"),
        ("checkpoint_schema", "checkpointSchema"),
        ("v2_checkpoint", "v2Checkpoint"),
        ("checksum", "checksum"),
    )

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Parse the file content. Raises :class:`ValueError` if it is not valid."""
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("version"), int):
            raise ValueError("no integer 'version' field")
        known = {key for _, key in cls._KEYS}
        kwargs = {attr: data[key] for attr, key in cls._KEYS if data.get(key) is not None}
        return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self, with_checksum: bool = True) -> dict[str, Any]:
        """The JSON object (``version``, ``size``, ``parts`` first), with a fresh checksum if asked."""
        out: dict[str, Any] = {}
        for attr, key in self._KEYS:
            value = getattr(self, attr)
            if value is not None and key != "checksum":
                out[key] = value
        out.update({k: v for k, v in self.extra.items() if k not in out})
        if with_checksum:
            out["checksum"] = last_checkpoint_checksum(out)
        return out

    def to_json(self, with_checksum: bool = True) -> str:
        return orjson.dumps(self.to_dict(with_checksum)).decode("utf-8")

    @property
    def format(self) -> CheckpointFormat:
        if self.v2_checkpoint is not None:
            return CheckpointFormat.V2
        return CheckpointFormat.WITH_PARTS if self.parts else CheckpointFormat.SINGLE


def _canonical_text(value: str) -> str:
    return '"' + quote(value.encode("utf-8"), safe="-._~") + '"'


def _canonical_leaf(value: Any) -> str:
    if isinstance(value, str):
        return _canonical_text(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _canonical_entries(prefix: list[str], value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            _canonical_entries([*prefix, _canonical_text(key)], child, out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _canonical_entries([*prefix, str(index)], child, out)
    else:
        out.append("+".join(prefix) + "=" + _canonical_leaf(value))


def last_checkpoint_checksum(data: Mapping[str, Any]) -> str:
    """Delta's ``_last_checkpoint`` checksum: MD5 of the sorted canonical ``path=value`` entries."""
    entries: list[str] = []
    for key, value in data.items():
        if key != "checksum":
            _canonical_entries([_canonical_text(key)], value, entries)
    return hashlib.md5(",".join(sorted(entries)).encode("utf-8")).hexdigest()


def read_last_checkpoint(store: LogStore, log_path: str) -> LastCheckpointInfo | None:
    """``_last_checkpoint`` if present and readable; ``None`` (with a warning if corrupt) otherwise.

    A missing, empty or garbled file only costs a full listing: the caller then finds the
    newest complete checkpoint itself, as Delta does.
    """
    path = filenames.last_checkpoint_file(log_path)
    try:
        data = store.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("could not read %s (%s); searching the log for the newest checkpoint", path, exc)
        return None
    try:
        info = LastCheckpointInfo.from_json(data)
    except ValueError as exc:
        logger.warning("ignoring corrupt %s (%s); searching the log for the newest checkpoint", path, exc)
        return None
    if info.checksum is not None:
        raw = orjson.loads(data)
        if last_checkpoint_checksum(raw) != info.checksum:
            logger.warning("checksum mismatch in %s; searching the log for the newest checkpoint", path)
            return None
    return info


# -- reading checkpoint content --------------------------------------------------------------------


@dataclass
class CheckpointData:
    """What replay needs from a checkpoint: Arrow add/remove rows and the other actions as dicts."""

    adds: list[pa.Table] = field(default_factory=list)
    removes: list[pa.Table] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def _struct_fields(schema: pa.Schema, column: str) -> list[str]:
    index = schema.get_field_index(column)
    if index < 0 or not pa.types.is_struct(schema.field(index).type):
        return []
    return [child.name for child in schema.field(index).type]


def _read_file_rows(parquet: pq.ParquetFile, column: str, wanted: Sequence[str]) -> pa.Table | None:
    """The rows of ``column`` (``add`` or ``remove``) with a path, as a flat table of ``wanted`` fields.

    Read one row group at a time, dropping the other actions' rows as it goes: the peak memory
    is the kept rows plus one row group, never the whole column set of the file.
    """
    present = set(_struct_fields(parquet.schema_arrow, column))
    fields = [name for name in wanted if name in present]
    if "path" not in fields:
        return None
    paths = [f"{column}.{name}" for name in fields]
    tables: list[pa.Table] = []
    for group in range(parquet.num_row_groups):
        struct = parquet.read_row_group(group, columns=paths).column(column)
        for chunk in struct.chunks:
            table = _sparse_nulls(pa.Table.from_struct_array(chunk))
            keep = pc.is_valid(table.column("path"))
            if chunk.null_count:  # from_struct_array ignores the struct's own validity
                keep = pc.and_(keep, chunk.is_valid())
            tables.append(select_rows(table, keep))
    if not tables:
        struct_type = parquet.schema_arrow.field(column).type
        return pa.schema([struct_type.field(name) for name in fields]).empty_table()
    return pa.concat_tables(tables)


def _sparse_nulls(table: pa.Table) -> pa.Table:
    """``table`` with its all-null columns (deletion vectors, row ids ... when unused) not backed by memory.

    ``pa.nulls`` shares one zeroed buffer, where the decoded column holds a full buffer per child.
    """
    columns = [
        pa.nulls(len(column), column.type) if len(column) and column.null_count == len(column) else column
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _non_null_rows(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in table.column_names:
        column = table.column(name)
        if column.null_count == len(column):
            continue
        for value in column.drop_null().to_pylist(maps_as_pydicts="lossy"):
            rows.append({name: {k: v for k, v in value.items() if v is not None}})
    return rows


def _may_hold_values(metadata: pq.FileMetaData, group: int, column: str) -> bool:
    """False only when the statistics prove every leaf of ``column`` is null in row group ``group``."""
    row_group = metadata.row_group(group)
    for index in range(row_group.num_columns):
        chunk = row_group.column(index)
        if chunk.path_in_schema.split(".", 1)[0] != column:
            continue
        stats = chunk.statistics
        if stats is None or not stats.has_null_count or stats.null_count != chunk.num_values:
            return True
    return False


def _read_other_actions(parquet: pq.ParquetFile) -> list[dict[str, Any]]:
    """The non-file actions (protocol, metadata, txn ...) of a Parquet checkpoint as dicts.

    They are a handful of rows among millions: row groups are read one at a time and skipped
    when their statistics show the columns hold only nulls.
    """
    names = parquet.schema_arrow.names
    columns = [name for name in NON_FILE_COLUMNS if name in names]
    rows: list[dict[str, Any]] = []
    for group in range(parquet.num_row_groups):
        wanted = [name for name in columns if _may_hold_values(parquet.metadata, group, name)]
        if wanted:
            rows += _non_null_rows(parquet.read_row_group(group, columns=wanted))
    return rows


def read_parquet_checkpoint(store: LogStore, path: str, *, file_rows_only: bool = False) -> CheckpointData:
    """Read one Parquet checkpoint file (classic part, V2 top-level or sidecar).

    Raises :class:`CorruptLogError` naming ``path`` if it cannot be read.
    """
    try:
        with store.open_input(path) as stream:
            parquet = pq.ParquetFile(stream)
            data = CheckpointData(files=[path])
            adds = _read_file_rows(parquet, "add", ADD_COLUMNS)
            removes = _read_file_rows(parquet, "remove", REMOVE_COLUMNS)
            if adds is not None:
                data.adds.append(adds)
            if removes is not None:
                data.removes.append(removes)
            if not file_rows_only:
                data.actions = _read_other_actions(parquet)
            return data
    except FileNotFoundError as exc:
        raise CorruptLogError(f"checkpoint file {path} is missing: {exc}", path=path) from exc
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}", path=path) from exc


def read_json_checkpoint(store: LogStore, path: str) -> CheckpointData:
    """Read a V2 JSON top-level checkpoint file (all its rows become dict actions)."""
    try:
        raw = store.read_bytes(path)
    except OSError as exc:
        raise CorruptLogError(f"cannot read checkpoint file {path}: {exc}", path=path) from exc
    return CheckpointData(actions=parse_json_lines(raw, path), files=[path])


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


def read_checkpoint(
    store: LogStore,
    log_path: str,
    instance: CheckpointInstance,
    files: Sequence[FileStatus],
    executor: Executor | None = None,
) -> CheckpointData:
    """Read every file of a complete checkpoint, V2 sidecars included (concurrently if ``executor``).

    Raises :class:`CorruptLogError` naming the file that cannot be read or a sidecar list
    without its ``checkpointMetadata``.
    """
    paths = [status.path for status in files]
    if instance.format == CheckpointFormat.V2 and paths[0].endswith(".json"):
        parts = [read_json_checkpoint(store, paths[0])]
    else:
        parts = _map(executor, lambda p: read_parquet_checkpoint(store, p), paths)
    data = CheckpointData()
    for part in parts:
        data.adds += part.adds
        data.removes += part.removes
        data.actions += part.actions
        data.files += part.files
    sidecars = [action["sidecar"] for action in data.actions if "sidecar" in action]
    if sidecars:
        if not any("checkpointMetadata" in action for action in data.actions):
            raise CorruptLogError(
                f"checkpoint {paths[0]} lists sidecar files but has no checkpointMetadata action",
                path=paths[0],
            )
        sidecar_paths = [filenames.sidecar_file(log_path, sidecar["path"]) for sidecar in sidecars]
        for part in _map(
            executor, lambda p: read_parquet_checkpoint(store, p, file_rows_only=True), sidecar_paths
        ):
            data.adds += part.adds
            data.removes += part.removes
            data.files += part.files
    return data


def _map(executor: Executor | None, function: Any, items: Sequence[str]) -> list[CheckpointData]:
    if executor is None or len(items) <= 1:
        return [function(item) for item in items]
    return list(executor.map(function, items))
