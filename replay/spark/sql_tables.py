"""Names of Delta tables for :func:`replay.spark.sql`: :func:`register_table` gives a table's
path a name in one Spark session, and :func:`resolve` turns a statement's table reference
(``delta.`uri```, ``'uri'`` or a name) into the table's path and storage options.

Names are per session (classic or Spark Connect, by the session's id), matched case-insensitively
as Spark matches table names; a name may have several parts (``sales.events``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from replay.protocol.errors import TableNotFoundError
from replay.spark.datasource import session_key
from replay.spark.delta_table import DeltaTable, storage_options
from replay.spark.sql_ast import TableRef

logger = logging.getLogger(__name__)


class UnknownTableError(TableNotFoundError):
    """A statement names a table that is neither ``delta.`uri``` nor registered on the session."""


@dataclass(frozen=True)
class RegisteredTable:
    """A table's path and the storage options of its reads (``hadoopConf``'s usable entries)."""

    path: str
    options: Mapping[str, str] = field(default_factory=dict)


_TABLES: dict[str, dict[str, RegisteredTable]] = {}
"""Registered names by session id, then by lower-cased dotted name."""


def _key(name: str | tuple[str, ...]) -> str:
    parts = name if isinstance(name, tuple) else tuple(name.split("."))
    return ".".join(part.lower() for part in parts)


def register_table(
    spark: Any,
    name: str,
    path: str,
    hadoopConf: Mapping[str, str] | None = None,  # noqa: N803 - forPath's name
) -> None:
    """Let statements of :func:`replay.spark.sql` on ``spark`` call the Delta table at ``path``
    ``name`` (instead of ``delta.`path```); ``hadoopConf`` as in ``DeltaTable.forPath``. A name
    registered again points to the new path. Raises
    :class:`~replay.protocol.errors.TableNotFoundError` if there is no Delta table at ``path``."""
    if not name or not isinstance(name, str):
        raise ValueError(f"A table name must be a non-empty string, not {name!r}")
    DeltaTable.forPath(spark, path, hadoopConf)  # the table exists, the data source is registered
    tables = _TABLES.setdefault(session_key(spark) or "", {})
    tables[_key(name)] = RegisteredTable(path, storage_options(hadoopConf))
    logger.info("registered table %s at %s", name, path)


def unregister_table(spark: Any, name: str) -> bool:
    """Forget the name ``name`` on ``spark``; returns whether it was registered."""
    return _TABLES.get(session_key(spark) or "", {}).pop(_key(name), None) is not None


def registered(spark: Any, name: tuple[str, ...]) -> RegisteredTable | None:
    """The table registered as ``name`` on ``spark``, if any."""
    return _TABLES.get(session_key(spark) or "", {}).get(_key(name))


def resolve(spark: Any, ref: TableRef) -> RegisteredTable:
    """The path and storage options of the table ``ref`` names; :class:`UnknownTableError` naming
    the reference when it is neither a path nor a registered name."""
    if ref.path is not None:
        return RegisteredTable(ref.path)
    table = registered(spark, ref.name or ())
    if table is None:
        raise UnknownTableError(
            f"[TABLE_OR_VIEW_NOT_FOUND] The table or view {ref.text} cannot be found: name a Delta table "
            f"as delta.`<uri>`, or register it with replay.spark.register_table(spark, "
            f"{'.'.join(ref.name or ())!r}, uri)",
            table=ref.text,
        )
    return table
