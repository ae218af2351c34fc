"""Delta log actions as immutable dataclasses, and their JSON form.

Each action class maps snake_case attributes to Delta's camelCase JSON keys. Unknown fields
are kept in ``extra`` and written back by :meth:`json`, so a read/write round trip never loses
data written by newer Delta versions. Unknown action kinds parse to ``None`` (they are skipped,
like Delta does). Paths keep Delta's URL-encoding; :func:`resolve_path` turns them into URIs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import unquote

import orjson

if TYPE_CHECKING:
    import pyarrow as pa

    from replay.schema import StructType


class _Action:
    """Shared JSON mapping of every action: ``_FIELDS`` pairs (attribute, JSON key)."""

    KEY: ClassVar[str]
    _FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    _NESTED: ClassVar[dict[str, type[_Action]]] = {}
    extra: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build the action from its JSON object (the value under :attr:`KEY`)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"the {cls.KEY!r} action is not a JSON object: {data!r}")
        kwargs: dict[str, Any] = {}
        known: set[str] = set()
        for attr, key in cls._FIELDS:
            known.add(key)
            if key in data:
                value = data[key]
                nested = cls._NESTED.get(attr)
                if nested is not None and value is not None:
                    value = nested.from_dict(value)
                kwargs[attr] = value
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**kwargs, extra=extra)

    def inner_dict(self) -> dict[str, Any]:
        """The action's JSON object (camelCase keys, ``None`` fields omitted, unknown fields kept)."""
        out: dict[str, Any] = {}
        for attr, key in self._FIELDS:
            value = getattr(self, attr)
            if value is None:
                continue
            if isinstance(value, _Action):
                value = value.inner_dict()
            out[key] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole log line as a dict: ``{KEY: inner_dict()}``."""
        return {self.KEY: self.inner_dict()}

    def json(self) -> str:
        """One Delta log line (no trailing newline)."""
        return orjson.dumps(self.to_dict()).decode("utf-8")


@dataclass(frozen=True)
class Protocol(_Action):
    """``protocol``: the reader/writer versions and table features the table needs."""

    KEY: ClassVar[str] = "protocol"
    _FIELDS: ClassVar = (
        ("min_reader_version", "minReaderVersion"),
        ("min_writer_version", "minWriterVersion"),
        ("reader_features", "readerFeatures"),
        ("writer_features", "writerFeatures"),
    )
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def has_reader_feature(self, name: str) -> bool:
        return name in (self.reader_features or ())

    def has_writer_feature(self, name: str) -> bool:
        return name in (self.writer_features or ())


@dataclass(frozen=True)
class Format(_Action):
    """The data file format of ``metaData`` (always ``parquet`` in practice)."""

    KEY: ClassVar[str] = "format"
    _FIELDS: ClassVar = (("provider", "provider"), ("options", "options"))
    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Metadata(_Action):
    """``metaData``: table id, schema, partition columns and configuration."""

    KEY: ClassVar[str] = "metaData"
    _FIELDS: ClassVar = (
        ("id", "id"),
        ("name", "name"),
        ("description", "description"),
        ("format", "format"),
        ("schema_string", "schemaString"),
        ("partition_columns", "partitionColumns"),
        ("configuration", "configuration"),
        ("created_time", "createdTime"),
    )
    _NESTED: ClassVar = {"format": Format}
    id: str | None = None
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format)
    schema_string: str | None = None
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    created_time: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def schema(self) -> StructType:
        """The parsed ``schemaString``. Raises :class:`ValueError` if there is none or it is invalid."""
        from replay.schema import parse_schema

        if self.schema_string is None:
            raise ValueError(f"metadata of table {self.id} has no schemaString")
        return parse_schema(self.schema_string)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema as a pyarrow schema (logical names)."""
        return self.schema.to_arrow()

    @property
    def column_mapping_mode(self) -> str:
        """``none``, ``name`` or ``id`` (``delta.columnMapping.mode``)."""
        return (self.configuration or {}).get("delta.columnMapping.mode", "none").lower()


@dataclass(frozen=True)
class SetTransaction(_Action):
    """``txn``: the last version an application committed (idempotent writes)."""

    KEY: ClassVar[str] = "txn"
    _FIELDS: ClassVar = (("app_id", "appId"), ("version", "version"), ("last_updated", "lastUpdated"))
    app_id: str = ""
    version: int = 0
    last_updated: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor(_Action):
    """Where a file's deletion vector lives (``u`` relative UUID, ``p`` absolute path, ``i`` inline)."""

    KEY: ClassVar[str] = "deletionVector"
    _FIELDS: ClassVar = (
        ("storage_type", "storageType"),
        ("path_or_inline_dv", "pathOrInlineDv"),
        ("offset", "offset"),
        ("size_in_bytes", "sizeInBytes"),
        ("cardinality", "cardinality"),
    )
    storage_type: str = "u"
    path_or_inline_dv: str = ""
    offset: int | None = None
    size_in_bytes: int = 0
    cardinality: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def unique_id(self) -> str:
        """Delta's legacy unique id: storage type + path (+ ``@offset`` when there is an offset)."""
        return dv_unique_id(self.storage_type, self.path_or_inline_dv, self.offset)


def dv_unique_id(storage_type: str, path_or_inline_dv: str, offset: int | None) -> str:
    """The deletion vector id used in file keys (``getLegacyDeletionVectorUniqueId``)."""
    base = f"{storage_type}{path_or_inline_dv}"
    return base if offset is None else f"{base}@{offset}"


_ESCAPE_RE = re.compile(r"%[0-9a-fA-F]{2}")


def normalize_path_key(path: str) -> str:
    """``path`` with %-escapes upper-cased: Java's URI equality treats ``%2f`` and ``%2F`` alike."""
    if "%" not in path:
        return path
    return _ESCAPE_RE.sub(lambda match: match.group(0).upper(), path)


def canonicalize_path(path: str) -> str:
    """Delta's canonical path: absolute local paths qualified as ``file:/...``; others unchanged.

    ``/a/b``, ``file:/a/b`` and ``file:///a/b`` all become ``file:/a/b`` (duplicate slashes
    removed), so an add and a remove written in different spellings cancel out.
    """
    if path.startswith("/"):
        rest = path
    elif path.startswith("file:"):
        rest = path[5:]
        if rest.startswith("//"):
            authority_and_path = rest[2:]
            slash = authority_and_path.find("/")
            authority = authority_and_path if slash < 0 else authority_and_path[:slash]
            if authority:
                return path
            rest = authority_and_path[slash:] if slash >= 0 else "/"
    else:
        return path
    rest = re.sub(r"/{2,}", "/", rest)
    if len(rest) > 1:
        rest = rest.rstrip("/")
    return "file:" + rest


def file_key(path: str, dv_id: str | None) -> tuple[str, str | None]:
    """The replay key of a file action: canonical, escape-normalised path and DV unique id."""
    if path.startswith(("/", "file:")):
        path = canonicalize_path(path)
    return normalize_path_key(path), dv_id


class _FileAction(_Action):
    """Shared identity of add, remove and cdc actions."""

    path: str
    deletion_vector: DeletionVectorDescriptor | None

    @property
    def unique_key(self) -> tuple[str, str | None]:
        """(path, deletion vector unique id): the identity of this file in log replay.

        The path is the raw log path with %-escapes normalised (Delta's ``pathAsUri``); use
        :func:`file_key` for the canonical key that also unifies ``/x`` and ``file:/x``.
        """
        dv = getattr(self, "deletion_vector", None)
        return normalize_path_key(self.path), dv.unique_id if dv is not None else None


@dataclass(frozen=True, slots=True)
class AddFile(_FileAction):
    """``add``: a data file (optionally with a deletion vector) becomes part of the table."""

    KEY: ClassVar[str] = "add"
    _FIELDS: ClassVar = (
        ("path", "path"),
        ("partition_values", "partitionValues"),
        ("size", "size"),
        ("modification_time", "modificationTime"),
        ("data_change", "dataChange"),
        ("stats", "stats"),
        ("tags", "tags"),
        ("deletion_vector", "deletionVector"),
        ("base_row_id", "baseRowId"),
        ("default_row_commit_version", "defaultRowCommitVersion"),
        ("clustering_provider", "clusteringProvider"),
    )
    _NESTED: ClassVar = {"deletion_vector": DeletionVectorDescriptor}
    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def num_records(self) -> int | None:
        """``numRecords`` from the JSON stats, if present."""
        if not self.stats:
            return None
        value = orjson.loads(self.stats).get("numRecords")
        return int(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class RemoveFile(_FileAction):
    """``remove``: a file (with that deletion vector) stops being part of the table (a tombstone)."""

    KEY: ClassVar[str] = "remove"
    _FIELDS: ClassVar = (
        ("path", "path"),
        ("deletion_timestamp", "deletionTimestamp"),
        ("data_change", "dataChange"),
        ("extended_file_metadata", "extendedFileMetadata"),
        ("partition_values", "partitionValues"),
        ("size", "size"),
        ("stats", "stats"),
        ("tags", "tags"),
        ("deletion_vector", "deletionVector"),
        ("base_row_id", "baseRowId"),
        ("default_row_commit_version", "defaultRowCommitVersion"),
    )
    _NESTED: ClassVar = {"deletion_vector": DeletionVectorDescriptor}
    path: str = ""
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def del_timestamp(self) -> int:
        """``deletionTimestamp`` or 0 when absent (Delta's ``delTimestamp``)."""
        return self.deletion_timestamp or 0


@dataclass(frozen=True, slots=True)
class AddCDCFile(_FileAction):
    """``cdc``: a change data file written by a commit (never part of the table state)."""

    KEY: ClassVar[str] = "cdc"
    _FIELDS: ClassVar = (
        ("path", "path"),
        ("partition_values", "partitionValues"),
        ("size", "size"),
        ("data_change", "dataChange"),
        ("tags", "tags"),
    )
    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitInfo(_Action):
    """``commitInfo``: free-form provenance of a commit; ``values`` is the JSON object as written."""

    KEY: ClassVar[str] = "commitInfo"
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        if not isinstance(data, Mapping):
            raise ValueError(f"the 'commitInfo' action is not a JSON object: {data!r}")
        return cls(dict(data))

    def inner_dict(self) -> dict[str, Any]:
        return dict(self.values)

    @property
    def extra(self) -> dict[str, Any]:  # type: ignore[override]
        return {}

    @property
    def timestamp(self) -> int | None:
        value = self.values.get("timestamp")
        return int(value) if value is not None else None

    @property
    def in_commit_timestamp(self) -> int | None:
        value = self.values.get("inCommitTimestamp")
        return int(value) if value is not None else None

    @property
    def operation(self) -> str | None:
        return self.values.get("operation")

    @property
    def operation_parameters(self) -> dict[str, Any]:
        return dict(self.values.get("operationParameters") or {})

    @property
    def operation_metrics(self) -> dict[str, Any]:
        return dict(self.values.get("operationMetrics") or {})


@dataclass(frozen=True)
class DomainMetadata(_Action):
    """``domainMetadata``: configuration of a named domain (``removed`` deletes it)."""

    KEY: ClassVar[str] = "domainMetadata"
    _FIELDS: ClassVar = (("domain", "domain"), ("configuration", "configuration"), ("removed", "removed"))
    domain: str = ""
    configuration: str = ""
    removed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointMetadata(_Action):
    """``checkpointMetadata``: the header of a V2 checkpoint."""

    KEY: ClassVar[str] = "checkpointMetadata"
    _FIELDS: ClassVar = (("version", "version"), ("tags", "tags"))
    version: int = 0
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sidecar(_Action):
    """``sidecar``: a file of a V2 checkpoint holding add/remove rows (path relative to ``_sidecars``)."""

    KEY: ClassVar[str] = "sidecar"
    _FIELDS: ClassVar = (
        ("path", "path"),
        ("size_in_bytes", "sizeInBytes"),
        ("modification_time", "modificationTime"),
        ("tags", "tags"),
    )
    path: str = ""
    size_in_bytes: int = 0
    modification_time: int = 0
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Action = (
    Protocol
    | Metadata
    | SetTransaction
    | AddFile
    | RemoveFile
    | AddCDCFile
    | CommitInfo
    | DomainMetadata
    | CheckpointMetadata
    | Sidecar
)
FileAction = AddFile | RemoveFile | AddCDCFile

ACTION_CLASSES: dict[str, type[_Action]] = {
    cls.KEY: cls
    for cls in (
        Protocol,
        Metadata,
        SetTransaction,
        AddFile,
        RemoveFile,
        AddCDCFile,
        CommitInfo,
        DomainMetadata,
        CheckpointMetadata,
        Sidecar,
    )
}


def action_from_dict(line: Mapping[str, Any]) -> Action | None:
    """The action of one parsed log line ``{kind: {...}}``; ``None`` for unknown kinds.

    The first known, non-null key wins (checkpoint rows carry nulls for the other kinds).
    """
    for key, value in line.items():
        cls = ACTION_CLASSES.get(key)
        if cls is not None and value is not None:
            return cls.from_dict(value)  # type: ignore[return-value]
    return None


def parse_action(line: str | bytes) -> Action | None:
    """Parse one log line. Blank lines and unknown action kinds give ``None``.

    Raises :class:`ValueError` if the line is not a JSON object or a known action is malformed.
    """
    if not line.strip():
        return None
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a log line must be a JSON object, got {type(data).__name__}")
    return action_from_dict(data)


def parse_actions(lines: Iterable[str | bytes]) -> list[Action]:
    """Parse many log lines, skipping blanks and unknown kinds (see :func:`parse_action`)."""
    actions: list[Action] = []
    for line in lines:
        action = parse_action(line)
        if action is not None:
            actions.append(action)
    return actions


_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def resolve_path(table_root: str, path: str) -> str:
    """The URI of a file named in the log, usable with fsspec or a LogStore.

    Log paths are URL-encoded; relative ones are resolved against ``table_root``. Absolute URIs
    (``s3://b/x%20y``) and absolute paths (``/x``) are decoded and kept; ``file:/x`` becomes
    ``file:///x``. A Windows-free world is assumed: a one-letter scheme is not treated specially.
    """
    if _SCHEME_RE.match(path):
        scheme, rest = path.split(":", 1)
        if scheme.lower() == "file":
            local = rest[2:] if rest.startswith("//") else rest
            slash = local.find("/")
            return "file://" + unquote(local if slash <= 0 else local[slash:])
        if rest.startswith("//"):
            authority_and_path = rest[2:]
            slash = authority_and_path.find("/")
            if slash < 0:
                return path
            return f"{scheme}://{authority_and_path[:slash]}{unquote(authority_and_path[slash:])}"
        return path
    decoded = unquote(path)
    if path.startswith("/"):
        root_scheme = _SCHEME_RE.match(table_root)
        if root_scheme and not table_root.lower().startswith("file:"):
            scheme_and_authority = table_root.split("/", 3)
            return "/".join(scheme_and_authority[:3]) + decoded
        return "file://" + decoded if table_root.lower().startswith("file:") else decoded
    return f"{table_root.rstrip('/')}/{decoded}"
