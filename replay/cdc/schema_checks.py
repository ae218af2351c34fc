"""Which schema a change read uses, and the checks that it can read every version it crosses (pure).

A batch change read (Delta's ``CDCReader.changesToDF``) reads every commit of its range with one
schema: the end version's for tables with column mapping (Delta's default
``changeDataFeed.defaultSchemaModeForColumnMappingTable`` = ``endVersion``), else the latest
version's (:func:`batch_read_version`). :class:`BatchSchemaCheck` refuses, before any data is
read, a range whose schema changes or start schema that schema cannot read, with Delta's
``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE`` / ``..._DATA_SCHEMA`` errors.

A streaming source reads with the schema of the table when it started; :class:`StreamSchemaCheck`
is Delta's ``DeltaSource.checkReadIncompatibleSchemaChanges`` without a schema tracking location:
a rename or drop under column mapping (or a repartitioning) stops the stream with
``DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE``, any other schema change the read schema cannot
read with ``DELTA_SCHEMA_CHANGED_WITH_VERSION`` (``..._WITH_STARTING_OPTIONS`` when the stream
was given a starting version or timestamp). The rules themselves are
:mod:`replay.protocol.schema_evolution`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from replay.protocol.actions import Metadata
from replay.protocol.errors import DeltaError, IncompatibleSchemaChangeError
from replay.protocol.schema import PrimitiveType, StructField, StructType
from replay.protocol.schema_evolution import (
    has_no_column_mapping_schema_changes,
    is_additive_change,
    is_read_compatible,
    tree_string,
)

SCHEMA_MODE_KEY = "spark.databricks.delta.changeDataFeed.defaultSchemaModeForColumnMappingTable"
"""Delta's SQL conf choosing the schema of batch change reads of column-mapping tables."""
END_VERSION, LATEST, LEGACY = "endVersion", "latest", "legacy"
_SCHEMA_MODES = {mode.lower(): mode for mode in (END_VERSION, LATEST, LEGACY)}
DOCS_BASE = "https://docs.delta.io/latest"
"""Delta's ``DocsPath.baseDocsPath``: the root of the links in its error texts."""


class InvalidSchemaModeError(DeltaError, ValueError):
    """:data:`SCHEMA_MODE_KEY` holds a value other than ``endVersion``, ``latest`` or ``legacy``."""


def cdc_read_schema(schema: StructType) -> StructType:
    """``schema`` with the three change columns appended (Delta's ``CDCReader.cdcReadSchema``)."""
    return StructType(
        [
            *schema.fields,
            StructField("_change_type", PrimitiveType("string")),
            StructField("_commit_version", PrimitiveType("long")),
            StructField("_commit_timestamp", PrimitiveType("timestamp")),
        ]
    )


def _with_table(message: str, table: str | None) -> str:
    text = message.rstrip("\n")
    return f"{text} (table {table})" if table else text


# -- batch change reads ---------------------------------------------------------------------------
def batch_schema_mode(conf: Mapping[str, str], column_mapping: bool) -> str:
    """``endVersion``, ``latest`` or ``legacy``: how a batch change read picks its schema.

    Tables with column mapping (at the start, the end or the latest version) follow
    :data:`SCHEMA_MODE_KEY` (default ``endVersion``); others use ``legacy`` (the latest schema,
    this library having no time-travelled read schema). Raises :class:`InvalidSchemaModeError`.
    """
    if not column_mapping:
        return LEGACY
    value = conf.get(SCHEMA_MODE_KEY, END_VERSION)
    mode = _SCHEMA_MODES.get(value.strip().lower())
    if mode is None:
        raise InvalidSchemaModeError(
            f"Invalid value '{value}' for {SCHEMA_MODE_KEY}: expected one of "
            f"{', '.join(_SCHEMA_MODES.values())}"
        )
    return mode


def batch_read_version(
    start: Metadata,
    *,
    end: Metadata,
    end_version: int,
    latest: Metadata,
    latest_version: int,
    conf: Mapping[str, str],
) -> int:
    """The version whose schema a batch change read of ``[.., end_version]`` reads every commit with.

    ``start``, ``end`` and ``latest`` are the metadata at the start, end and latest versions.
    The end version's for column-mapping tables in ``endVersion`` mode, else the latest version's.
    """
    if end_version >= latest_version:
        return latest_version
    column_mapping = any(m.column_mapping_mode != "none" for m in (start, end, latest))
    return end_version if batch_schema_mode(conf, column_mapping) == END_VERSION else latest_version


@dataclass(frozen=True)
class BatchSchemaCheck:
    """Delta's ``checkBatchCdfReadSchemaIncompatibility`` for the range ``[start, end]``.

    ``read`` is the metadata whose schema the read uses, at ``read_version``; ``type_widening``
    (its table supports type widening): data of an older version whose columns were widened since
    reads with the wider types.
    """

    start: int
    end: int
    read: Metadata
    read_version: int
    table: str | None = None
    type_widening: bool = False

    def is_compatible(self, metadata: Metadata, version: int) -> bool:
        """Whether data written with ``metadata`` (in force at ``version``) reads with the read schema."""
        if version <= self.read_version:
            return has_no_column_mapping_schema_changes(self.read, metadata) and is_read_compatible(
                metadata.schema,
                self.read.schema,
                forbid_tighten_nullability=True,
                allow_type_widening=self.type_widening,
            )
        return has_no_column_mapping_schema_changes(metadata, self.read) and is_read_compatible(
            self.read.schema, metadata.schema, forbid_tighten_nullability=False
        )

    def check_schema_change(self, metadata: Metadata, version: int) -> None:
        """Raise ``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE`` for an unreadable change."""
        if not self.is_compatible(metadata, version):
            raise self._error(version, schema_change=True)

    def check_start(self, metadata: Metadata) -> None:
        """Raise ``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA`` if the start schema is unreadable.

        Every commit after the start reads with the start schema once no schema change in
        between is incompatible, so this last check covers the data of the whole range.
        """
        if not self.is_compatible(metadata, self.start):
            raise self._error(self.start, schema_change=False)

    def _error(self, version: int, *, schema_change: bool) -> IncompatibleSchemaChangeError:
        start, end = self.start, self.end
        read = f"Your read schema is {self.read.schema.to_json()} at version {self.read_version}, but "
        if schema_change:
            message = (
                f"[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE] Retrieving table changes between "
                f"version {start} and {end} failed because of an incompatible schema change.\n"
                f"{read}we found an incompatible schema change at version {version}.\n"
                f"If possible, please query table changes separately from version {start} to {version} - 1, "
                f"and from version {version} to {end}."
            )
        else:
            message = (
                f"[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA] Retrieving table changes between "
                f"version {start} and {end} failed because of an incompatible data schema.\n"
                f"{read}we found an incompatible data schema at version {version}.\n"
                "If possible, please retrieve the table changes using the end version's schema by setting "
                f"{SCHEMA_MODE_KEY} to `endVersion`, or contact support."
            )
        return IncompatibleSchemaChangeError(
            _with_table(message, self.table),
            table=self.table,
            version=version,
            read_version=self.read_version,
        )


# -- streaming ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamSchemaCheck:
    """Delta's streaming source check of a schema met while streaming (no schema tracking location).

    ``read`` is the table's metadata when the source started (at ``read_version``); the source
    reads every file with its schema (plus the change columns for the change feed).
    ``starting_options``: the stream was given ``startingVersion`` or ``startingTimestamp``.
    While streaming, added columns flow and every other change stops the stream with
    ``DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE``; data older than the read version is checked
    with Delta's read-compatibility rule.
    """

    read: Metadata
    read_version: int
    change_feed: bool
    starting_options: bool = False
    table: str | None = None

    @property
    def read_schema(self) -> StructType:
        schema = self.read.schema
        return cdc_read_schema(schema) if self.change_feed else schema

    def check(self, metadata: Metadata, version: int) -> None:
        """Raise :class:`IncompatibleSchemaChangeError` unless data of ``metadata`` reads with our schema.

        ``version`` is where ``metadata`` is in force: before the read version it is a backfill
        (older data read with a newer schema), after it a change made while streaming.
        """
        new, old = (self.read, metadata) if version < self.read_version else (metadata, self.read)
        if not has_no_column_mapping_schema_changes(new, old):
            raise self._non_additive_error(old.schema, new.schema, version)
        if version >= self.read_version:
            # while streaming: added columns flow (read with the stream's schema); a rename, drop,
            # type change or a column made non-nullable stops the stream
            if not is_additive_change(old.schema, new.schema):
                raise self._non_additive_error(old.schema, new.schema, version)
            return
        data_schema = cdc_read_schema(metadata.schema) if self.change_feed else metadata.schema
        if not is_read_compatible(
            data_schema,
            self.read_schema,
            forbid_tighten_nullability=True,
            new_partition_columns=new.partition_columns,
            old_partition_columns=old.partition_columns,
        ):
            raise self._schema_changed_error(data_schema, version)

    def _non_additive_error(
        self, read_schema: StructType, incompatible: StructType, version: int
    ) -> IncompatibleSchemaChangeError:
        message = (
            "[DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE] Streaming read is not supported on tables with "
            "read-incompatible schema changes (e.g. rename or drop or datatype changes).\n"
            "For further information and possible next steps to resolve this issue, please review the "
            f"documentation at {DOCS_BASE}/versioning.html#column-mapping\n"
            f"Read schema: {read_schema.to_json()}. Incompatible data schema: {incompatible.to_json()}."
        )
        return IncompatibleSchemaChangeError(
            _with_table(message, self.table),
            table=self.table,
            version=version,
            read_version=self.read_version,
        )

    def _schema_changed_error(self, data_schema: StructType, version: int) -> IncompatibleSchemaChangeError:
        if self.starting_options:
            kind = "DELTA_SCHEMA_CHANGED_WITH_STARTING_OPTIONS"
            ending = [
                "query from scratch using a new checkpoint directory. If the issue persists after",
                "changing to a new checkpoint directory, you may need to change the existing",
                "'startingVersion' or 'startingTimestamp' option to start from a version newer than",
                f"{version} with a new checkpoint directory.",
            ]
        else:
            kind = "DELTA_SCHEMA_CHANGED_WITH_VERSION"
            ending = ["query from scratch using a new checkpoint directory."]
        lines = [
            f"[{kind}] Detected schema change in version {version}:",
            f"streaming source schema: {tree_string(self.read_schema)}",
            f"data file schema: {tree_string(data_schema)}",
            "Please try restarting the query. If this issue repeats across query restarts without",
            "making progress, you have made an incompatible schema change and need to start your",
            *ending,
        ]
        return IncompatibleSchemaChangeError(
            _with_table("\n".join(lines), self.table),
            table=self.table,
            version=version,
            read_version=self.read_version,
        )
