"""The statements :func:`replay.spark.sql` runs, as values (made by :mod:`replay.spark.sql_parse`),
and the errors of reading them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from replay.protocol.errors import DeltaError

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"


class StatementParseError(DeltaError, ValueError):
    """A statement that does not parse: Spark's ``PARSE_SYNTAX_ERROR`` with the 0-based character
    ``position`` in the statement and the statement with a marker under it."""

    def __init__(self, detail: str, statement: str, position: int) -> None:
        self.detail = detail
        self.statement = statement
        self.position = position
        line = statement.count("\n", 0, position) + 1
        column = position - (statement.rfind("\n", 0, position) + 1)
        header = detail if detail.startswith("[") else f"[PARSE_SYNTAX_ERROR] {detail}"
        lines = statement.split("\n")
        shown = "\n".join([*lines[:line], "-" * column + "^^^", *lines[line:]])
        super().__init__(f"{header} (line {line}, pos {column})\n\n== SQL ==\n{shown}")


class UnsupportedStatementError(DeltaError, NotImplementedError):
    """A Delta (or Spark) statement :func:`replay.spark.sql` does not run; the message names the
    API to use instead."""

    def __init__(self, statement: str, instead: str) -> None:
        self.statement = statement
        self.instead = instead
        super().__init__(f"{statement} is not supported by replay.spark.sql: use {instead} instead")


UNSUPPORTED: dict[str, tuple[str, str]] = {
    "convert": (
        "CONVERT TO DELTA",
        "df.write.format('deltalog').save(uri) of the rows Spark reads",
    ),
    "generate": ("GENERATE", "nothing: symlink manifests are not written by this library"),
    "create": (
        "CREATE TABLE",
        "df.write.format('deltalog').save(uri), then register_table(spark, name, uri)",
    ),
    "replace": ("REPLACE TABLE", "df.write.format('deltalog').mode('overwrite').save(uri)"),
    "insert": ("INSERT", "df.write.format('deltalog').mode('append').save(uri)"),
    "drop": ("DROP", "nothing: tables here are paths, not catalog entries"),
    "truncate": ("TRUNCATE TABLE", "sql(spark, 'DELETE FROM ...') or DeltaTable.delete()"),
    "show": ("SHOW", "sql(spark, 'DESCRIBE DETAIL ...') or DeltaTable.detail()"),
    "cache": ("CACHE TABLE", "spark.read.format('deltalog').load(uri).cache()"),
}
ALTER_HINT = (
    "DeltaTable.setProperties / unsetProperties / addFeatureSupport, or replay.DeltaTable(uri).alter "
    "(add_columns, add_constraint, drop_constraint, set_column_metadata, rename_column, drop_columns, "
    "cluster_by, change_column_type)"
)


@dataclass(frozen=True)
class TableRef:
    """A table as a statement names it: a ``path`` (``delta.`uri```, ``'uri'``) or a ``name``
    (parts as written, unquoted) registered with :func:`replay.spark.register_table`; ``text``
    is how it was written, at ``position``."""

    path: str | None
    name: tuple[str, ...] | None
    position: int
    text: str
    alias: str | None = None
    version: int | None = None
    timestamp: str | None = None

    @property
    def shown(self) -> str:
        return self.text


_AT_VERSION = re.compile(r"^(?P<base>.*)@[vV](?P<version>\d+)$", re.DOTALL)
_AT_TIMESTAMP = re.compile(r"^(?P<base>.*)@(?P<stamp>\d{17})$", re.DOTALL)


def table_ref(parts: tuple[str, ...], position: int, text: str) -> TableRef:
    """``delta.`uri``` as a path, any other name as a name."""
    if len(parts) == 2 and parts[0].lower() == "delta":
        return TableRef(parts[1], None, position, text)
    return TableRef(None, parts, position, text)


def with_at_suffix(ref: TableRef) -> TableRef:
    """``delta.`uri@v5``` / ``delta.`uri@20240131120000000``` as time travel (Delta's ``@``
    syntax: a version, or a ``yyyyMMddHHmmssSSS`` timestamp)."""
    if ref.path is None:
        return ref
    version = _AT_VERSION.match(ref.path)
    if version:
        return replace(ref, path=version.group("base"), version=int(version.group("version")))
    stamp = _AT_TIMESTAMP.match(ref.path)
    if stamp:
        digits = stamp.group("stamp")
        date, time = (
            f"{digits[:4]}-{digits[4:6]}-{digits[6:8]}",
            f"{digits[8:10]}:{digits[10:12]}:{digits[12:14]}",
        )
        text = f"{date} {time}.{digits[14:]}"
        return replace(ref, path=stamp.group("base"), timestamp=text)
    return ref


def with_version(ref: TableRef, version: int) -> TableRef:
    return replace(ref, version=version)


def with_timestamp(ref: TableRef, timestamp: str) -> TableRef:
    return replace(ref, timestamp=timestamp)


def aliased(ref: TableRef, alias: str | None) -> TableRef:
    return replace(ref, alias=alias)


@dataclass(frozen=True)
class DescribeHistory:
    table: TableRef
    limit: int | None


@dataclass(frozen=True)
class DescribeDetail:
    table: TableRef


@dataclass(frozen=True)
class Optimize:
    table: TableRef
    where: str | None
    zorder: tuple[str, ...]
    full: bool = False


@dataclass(frozen=True)
class Vacuum:
    table: TableRef
    retain_hours: float | None
    dry_run: bool
    lite: bool = False
    """``VACUUM ... LITE``: only the files of expired tombstones (``FULL``, the default: Delta's)."""


@dataclass(frozen=True)
class Restore:
    table: TableRef
    version: int | None
    timestamp: str | None


@dataclass(frozen=True)
class Reorg:
    table: TableRef
    where: str | None


@dataclass(frozen=True)
class SetProperties:
    table: TableRef
    properties: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class UnsetProperties:
    table: TableRef
    keys: tuple[str, ...]
    if_exists: bool


@dataclass(frozen=True)
class AddConstraint:
    table: TableRef
    name: str
    expression: str


@dataclass(frozen=True)
class DropConstraint:
    table: TableRef
    name: str
    if_exists: bool


@dataclass(frozen=True)
class RenameColumn:
    table: TableRef
    column: tuple[str, ...]
    new_name: str


@dataclass(frozen=True)
class DropColumns:
    table: TableRef
    columns: tuple[tuple[str, ...], ...]
    if_exists: bool


@dataclass(frozen=True)
class ChangeColumnType:
    table: TableRef
    column: tuple[str, ...]
    data_type: str


@dataclass(frozen=True)
class ClusterBy:
    table: TableRef
    columns: tuple[tuple[str, ...], ...]
    """Empty: ``CLUSTER BY NONE``."""


@dataclass(frozen=True)
class Delete:
    table: TableRef
    condition: str | None


@dataclass(frozen=True)
class Update:
    table: TableRef
    assignments: tuple[tuple[str, str], ...]
    condition: str | None


@dataclass(frozen=True)
class MergeSource:
    """A MERGE source: a table (Delta or Spark's) or the text of a query, with its alias."""

    table: TableRef | None
    query: str | None
    alias: str | None


@dataclass(frozen=True)
class MergeClause:
    """``kind``: :data:`MATCHED`, :data:`NOT_MATCHED` or :data:`NOT_MATCHED_BY_SOURCE`; ``action``:
    ``update``, ``delete`` or ``insert``; ``assignments`` ``None`` for ``*``."""

    kind: str
    action: str
    condition: str | None
    assignments: tuple[tuple[str, str], ...] | None


@dataclass(frozen=True)
class Merge:
    target: TableRef
    source: MergeSource
    condition: str
    clauses: tuple[MergeClause, ...]
    schema_evolution: bool = False


@dataclass(frozen=True)
class QueryReference:
    """A table a query reads and the span ``[start, end)`` of the statement naming it."""

    table: TableRef
    start: int
    end: int
    aliased: bool = False


@dataclass(frozen=True)
class Query:
    """A query for Spark (``SELECT``, ``WITH`` ...), run with its Delta tables as temp views."""

    text: str


Statement = (
    DescribeHistory
    | DescribeDetail
    | Optimize
    | Vacuum
    | Restore
    | Reorg
    | SetProperties
    | UnsetProperties
    | AddConstraint
    | DropConstraint
    | RenameColumn
    | DropColumns
    | ClusterBy
    | ChangeColumnType
    | Delete
    | Update
    | Merge
    | Query
)
