"""Delta log actions as immutable dataclasses, and their JSON form.

Each action is a dataclass whose fields are Delta's JSON keys in snake_case: the JSON key of a
field is its name in camelCase unless the field's metadata names another (``json``), and a
field holding a nested action says so in its metadata (``nested``). Unknown fields are kept in
``extra`` and written back by :meth:`json`, so a read/write round trip never loses data
written by newer Delta versions. Unknown action kinds parse to ``None`` (they are skipped, as
Delta does). Paths keep Delta's URL-encoding (see :mod:`replay.protocol.paths`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Self

import orjson
import pyarrow as pa

from replay.protocol.column_mapping import mapped_schema, partition_value_keys
from replay.protocol.errors import InvalidTableSchemaError
from replay.protocol.naming import camel_case
from replay.protocol.paths import FileKey, dv_unique_id, normalize_path_key
from replay.protocol.schema import StructType, parse_schema
from replay.protocol.table_properties import COLUMN_MAPPING_MODE

JSON_KEY = "json"
"""Field metadata key: the JSON key of a field whose camelCase name is not its key."""
NESTED = "nested"
"""Field metadata key: the action class of a field holding a nested JSON object."""


@dataclass(frozen=True, slots=True)
class _JsonField:
    attribute: str
    key: str
    nested: type[_Action] | None


_JSON_FIELDS: dict[type, tuple[tuple[_JsonField, ...], frozenset[str]]] = {}


def _json_fields(cls: type) -> tuple[tuple[_JsonField, ...], frozenset[str]]:
    """The JSON mapping of an action class (every dataclass field but ``extra``) and its keys.

    Computed once per class (the table holds one entry per action class).
    """
    cached = _JSON_FIELDS.get(cls)
    if cached is None:
        mapped = tuple(
            _JsonField(f.name, f.metadata.get(JSON_KEY) or camel_case(f.name), f.metadata.get(NESTED))
            for f in dataclasses.fields(cls)
            if f.name != "extra"
        )
        cached = _JSON_FIELDS[cls] = (mapped, frozenset(item.key for item in mapped))
    return cached


class _Action:
    """The JSON mapping shared by every action (see the module docstring)."""

    KEY: ClassVar[str]
    extra: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build the action from its JSON object (the value under :attr:`KEY`).

        Raises :class:`ValueError` if ``data`` is not a JSON object.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"the {cls.KEY!r} action is not a JSON object: {data!r}")
        mapped, known = _json_fields(cls)
        kwargs: dict[str, Any] = {}
        for item in mapped:
            if item.key in data:
                value = data[item.key]
                if item.nested is not None and value is not None:
                    value = item.nested.from_dict(value)
                kwargs[item.attribute] = value
        extra = {key: value for key, value in data.items() if key not in known}
        build: Callable[..., Self] = cls
        return build(**kwargs, extra=extra)

    def inner_dict(self) -> dict[str, Any]:
        """The action's JSON object (camelCase keys, ``None`` fields omitted, unknown fields kept)."""
        out: dict[str, Any] = {}
        for item in _json_fields(type(self))[0]:
            value = getattr(self, item.attribute)
            if value is None:
                continue
            if isinstance(value, _Action):
                value = value.inner_dict()
            out[item.key] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole log line as a dict: ``{KEY: inner_dict()}``."""
        return {self.KEY: self.inner_dict()}

    def json(self) -> str:
        """One Delta log line (no trailing newline)."""
        return orjson.dumps(self.to_dict()).decode("utf-8")


TABLE_FEATURES_WRITER_VERSION = 7
"""The writer version from which a protocol lists its writer features."""
LEGACY_WRITER_FEATURES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, ("appendOnly", "invariants")),
    (3, ("checkConstraints",)),
    (4, ("changeDataFeed", "generatedColumns")),
    (5, ("columnMapping",)),
    (6, ("identityColumns",)),
)
"""The writer features each legacy writer version (below 7) brings, on top of the lower ones'."""


@dataclass(frozen=True)
class Protocol(_Action):
    """``protocol``: the reader/writer versions and table features the table needs."""

    KEY: ClassVar[str] = "protocol"
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def has_reader_feature(self, name: str) -> bool:
        return name in (self.reader_features or ())

    def has_writer_feature(self, name: str) -> bool:
        return name in (self.writer_features or ())

    def supports_writer_feature(self, name: str) -> bool:
        """Whether writer feature ``name`` is supported: listed (writer version 7) or implied by a
        legacy writer version (:data:`LEGACY_WRITER_FEATURES`)."""
        if self.min_writer_version >= TABLE_FEATURES_WRITER_VERSION:
            return self.has_writer_feature(name)
        return any(
            name in names for version, names in LEGACY_WRITER_FEATURES if self.min_writer_version >= version
        )


@dataclass(frozen=True)
class Format(_Action):
    """The data file format of ``metaData`` (always ``parquet`` in practice)."""

    KEY: ClassVar[str] = "format"
    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Metadata(_Action):
    """``metaData``: table id, schema, partition columns and configuration."""

    KEY: ClassVar[str] = "metaData"
    id: str | None = None
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format, metadata={NESTED: Format})
    schema_string: str | None = None
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    created_time: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def schema(self) -> StructType:
        """The parsed ``schemaString``. Raises :class:`InvalidTableSchemaError` (a ``ValueError``)
        if there is none or it is not a Delta schema."""
        if self.schema_string is None:
            raise InvalidTableSchemaError(f"The metaData of table {self.id} has no schemaString")
        try:
            return parse_schema(self.schema_string)
        except ValueError as exc:
            raise InvalidTableSchemaError(f"The schemaString of table {self.id} is invalid: {exc}") from None

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema as a pyarrow schema (logical names)."""
        return self.schema.to_arrow()

    @property
    def column_mapping_mode(self) -> str:
        """``none``, ``name`` or ``id`` (``delta.columnMapping.mode``)."""
        return COLUMN_MAPPING_MODE.value_in(self.configuration)

    def with_schema(self, schema: StructType, *, keep_names: bool = False, **changes: Any) -> Metadata:
        """This metadata with ``schema`` (and the other fields in ``changes``, ``configuration``
        among them). Under column mapping, fields new to the table get ids after
        ``delta.columnMapping.maxColumnId`` and physical names (``keep_names``: their names;
        :func:`~replay.protocol.column_mapping.mapped_schema`), and the maximum follows."""
        configuration = changes.pop("configuration", self.configuration)
        if COLUMN_MAPPING_MODE.value_in(configuration) != "none":
            current = self.schema if self.schema_string else None
            mode = self.column_mapping_mode
            schema, configuration = mapped_schema(schema, current, mode, configuration, keep_names=keep_names)
        changes.update(schema_string=schema.to_json(), configuration=configuration)
        return dataclasses.replace(self, **changes)

    @cached_property
    def partition_value_keys(self) -> dict[str, str]:
        """Each partition column's key in ``partitionValues`` (its physical name under column
        mapping, :func:`~replay.protocol.column_mapping.partition_value_keys`)."""
        return partition_value_keys(self.schema, self.partition_columns, self.column_mapping_mode != "none")


@dataclass(frozen=True)
class SetTransaction(_Action):
    """``txn``: the last version an application committed (idempotent writes)."""

    KEY: ClassVar[str] = "txn"
    app_id: str = ""
    version: int = 0
    last_updated: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor(_Action):
    """Where a file's deletion vector lives (``u`` relative UUID, ``p`` absolute path, ``i`` inline)."""

    KEY: ClassVar[str] = "deletionVector"
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


class _FileAction(_Action):
    """Shared identity of add, remove and cdc actions."""

    path: str
    partition_values: dict[str, str | None] | None

    @property
    def unique_key(self) -> FileKey:
        """(path, deletion vector unique id): the identity of this file in log replay.

        The path is the raw log path with %-escapes normalised (Delta's ``pathAsUri``); use
        :func:`~replay.protocol.paths.file_key` for the canonical key that also unifies ``/x``
        and ``file:/x``.
        """
        dv = getattr(self, "deletion_vector", None)
        return normalize_path_key(self.path), dv.unique_id if dv is not None else None


@dataclass(frozen=True, slots=True)
class AddFile(_FileAction):
    """``add``: a data file (optionally with a deletion vector) becomes part of the table."""

    KEY: ClassVar[str] = "add"
    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = field(
        default=None, metadata={NESTED: DeletionVectorDescriptor}
    )
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

    def remove_with_timestamp(self, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        """The ``remove`` of this file (Delta's ``AddFile.removeWithTimestamp``): extended file
        metadata, statistics, tags, deletion vector and row ids kept."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=dict(self.partition_values),
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True, slots=True)
class RemoveFile(_FileAction):
    """``remove``: a file (with that deletion vector) stops being part of the table (a tombstone)."""

    KEY: ClassVar[str] = "remove"
    path: str = ""
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = field(
        default=None, metadata={NESTED: DeletionVectorDescriptor}
    )
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
        value = self.values.get("operation")
        return str(value) if value is not None else None

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
    domain: str = ""
    configuration: str = ""
    removed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointMetadata(_Action):
    """``checkpointMetadata``: the header of a V2 checkpoint."""

    KEY: ClassVar[str] = "checkpointMetadata"
    version: int = 0
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sidecar(_Action):
    """``sidecar``: a file of a V2 checkpoint holding add/remove rows (path relative to ``_sidecars``)."""

    KEY: ClassVar[str] = "sidecar"
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

ACTION_CLASSES: dict[str, type[Action]] = {
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
KNOWN_KINDS = frozenset(ACTION_CLASSES)
"""The action kinds of the Delta log that this library knows (others are skipped)."""


def action_from_dict(line: Mapping[str, Any]) -> Action | None:
    """The action of one parsed log line ``{kind: {...}}``; ``None`` for unknown kinds.

    The first known, non-null key wins (checkpoint rows carry nulls for the other kinds).
    """
    for key, value in line.items():
        cls = ACTION_CLASSES.get(key)
        if cls is not None and value is not None:
            return cls.from_dict(value)
    return None


def actions_from_dicts(lines: Iterable[Mapping[str, Any]]) -> list[Action]:
    """The known actions of parsed log lines, in order (unknown kinds skipped)."""
    return [action for action in map(action_from_dict, lines) if action is not None]


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
    return [action for action in map(parse_action, lines) if action is not None]
