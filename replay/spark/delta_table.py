"""``DeltaTable`` for PySpark without Delta's JARs: Delta's own Python API (``delta.tables``) on the
``deltalog`` data source and this library's :class:`~replay.txn.transaction.Transaction`.

Code written for ``from delta.tables import DeltaTable`` runs with that import changed to
``from replay.spark import DeltaTable``::

    target = DeltaTable.forPath(spark, "s3a://bucket/events")
    (target.alias("t").merge(updates.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

Row-level changes (``delete``, ``update``, ``merge``) run on the executors
(:mod:`replay.spark.dml_delete_update`, :mod:`replay.spark.dml_merge`) and commit once on the
driver, with the planning, errors, metrics and ``commitInfo`` of the Python DML
(:mod:`replay.dml`). Maintenance calls :mod:`replay.maintenance` on the driver. Every operation
works on the table's latest version, as Delta's do.

Storage settings are the session's (read when each operation starts, as the data source reads
them) plus ``forPath``'s ``hadoopConf``; ``forPath`` registers the data source
(:func:`replay.spark.register`) if the session has not.

Differences from ``delta.tables``: no catalog tables (``forName``, ``create``), no ``clone``,
``generate``, ``convertToDelta``; ``setProperties`` / ``unsetProperties`` set table properties
(Delta offers only SQL for that). ``delete`` and ``update`` return a one-row DataFrame with
``num_affected_rows`` (Delta's SQL result; ``delta.tables`` returns ``None``), ``merge(...).execute()``
Delta 4's metrics DataFrame.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from replay.maintenance import alter_properties
from replay.maintenance.restore import restore
from replay.maintenance.vacuum import vacuum
from replay.protocol.errors import TableNotFoundError
from replay.protocol.timestamps import parse_timestamp, parse_zone
from replay.spark.datasource import ensure_registered, session_time_zone
from replay.spark.dml_delete_update import spark_delete, spark_update
from replay.spark.dml_scan import SparkTarget
from replay.spark.merge_builder import DeltaMergeBuilder
from replay.spark.optimize_builder import DeltaOptimizeBuilder
from replay.spark.schema import spark_schema
from replay.spark.settings import storage_conf
from replay.spark.sql_text import checked_mapping, sql_of
from replay.spark.table_info import (
    AFFECTED_ROWS_SCHEMA,
    DETAIL_SCHEMA,
    HISTORY_SCHEMA,
    RESTORE_RESULT_SCHEMA,
    detail_row,
    history_rows,
    restore_result,
)

HADOOP_CONF_PREFIXES = ("fs.", "dfs.")


def storage_options(hadoop_conf: Mapping[str, object] | None) -> dict[str, str]:
    """The entries of a ``hadoopConf`` that configure storage: ``fs.*``, ``dfs.*`` and this
    library's storage settings."""
    options = {str(k): str(v) for k, v in (hadoop_conf or {}).items()}
    return {k: v for k, v in options.items() if k.startswith(HADOOP_CONF_PREFIXES) or storage_conf({k: v})}


class DeltaTable:
    """A Delta table at a path, for row-level changes and maintenance from PySpark (see the module
    docstring). Made by :meth:`forPath`."""

    def __init__(self, spark: Any, target: SparkTarget) -> None:
        self._spark = spark
        self._target = target

    def __repr__(self) -> str:
        return f"DeltaTable({self._target.path!r})"

    # -- making one ---------------------------------------------------------------------------
    @classmethod
    def forPath(cls, sparkSession: Any, path: str, hadoopConf: Mapping[str, str] | None = None) -> DeltaTable:  # noqa: N802, N803 - Delta's names
        """The Delta table at ``path``. ``hadoopConf`` entries starting with ``fs.`` or ``dfs.`` (and
        this library's storage settings) configure its storage besides the session's settings.
        Raises :class:`~replay.protocol.errors.TableNotFoundError`
        (``[DELTA_MISSING_DELTA_TABLE] ... is not a Delta table.``) when there is none."""
        assert sparkSession is not None
        usable = storage_options(hadoopConf)
        ensure_registered(sparkSession)
        target = SparkTarget(sparkSession, path, usable)
        if not target.log().table_exists():
            raise TableNotFoundError(
                f"[DELTA_MISSING_DELTA_TABLE] delta.`{path}` is not a Delta table.", table=path
            )
        return cls(sparkSession, target)

    @classmethod
    def isDeltaTable(cls, sparkSession: Any, identifier: str) -> bool:  # noqa: N802, N803 - Delta's names
        """Whether ``identifier`` (a path) is the root of a Delta table."""
        assert sparkSession is not None
        return SparkTarget(sparkSession, identifier).log().table_exists()

    def alias(self, aliasName: str) -> DeltaTable:  # noqa: N803 - Delta's name
        """This table under an alias: its columns may be qualified with it in conditions."""
        return DeltaTable(self._spark, replace(self._target, alias=aliasName))

    # -- reading --------------------------------------------------------------------------------
    def toDF(self) -> Any:  # noqa: N802 - Delta's name
        """The table's rows (latest version) as a DataFrame (under the alias, if any)."""
        frame = self._target.read()
        return frame.alias(self._target.alias) if self._target.alias else frame

    def history(self, limit: int | None = None) -> Any:
        """The latest ``limit`` commits (all without one), newest first, as Delta's DESCRIBE
        HISTORY DataFrame."""
        return self._spark.createDataFrame(history_rows(self._target.log().history(limit)), HISTORY_SCHEMA)

    def detail(self) -> Any:
        """Delta's DESCRIBE DETAIL of the table: one row."""
        log = self._target.log()
        return self._spark.createDataFrame([detail_row(log.update(), log.table_path)], DETAIL_SCHEMA)

    # -- row-level changes --------------------------------------------------------------------------
    def _context(self) -> Any:
        """An empty DataFrame of the table's columns (under its alias): what a ``Column`` is
        resolved against."""
        snapshot = self._target.latest()
        schema_string = snapshot.metadata.schema_string or snapshot.schema.to_json()
        frame = self._spark.createDataFrame([], spark_schema(schema_string, False))
        return frame.alias(self._target.alias) if self._target.alias else frame

    def _sql(self, value: Any, argument: str = "'condition'") -> str:
        return sql_of(value, self._context() if not isinstance(value, str) else None, argument)

    def delete(self, condition: Any = None) -> Any:
        """Delete the rows matching ``condition`` (a SQL string or a ``Column``; every row without
        one). Returns a DataFrame of Delta's ``num_affected_rows``."""
        text = self._sql(condition) if condition is not None else None
        result = spark_delete(self._target, text)
        deleted = result.metrics.get("numDeletedRows")
        return self._spark.createDataFrame([(deleted,)], AFFECTED_ROWS_SCHEMA)

    def update(self, condition: Any = None, set: Mapping[str, Any] | None = None) -> Any:
        """Set columns of the rows matching ``condition`` (every row without one): ``set`` maps
        column names to SQL strings or ``Column``\\ s. Returns a DataFrame of Delta's
        ``num_affected_rows``."""
        given = checked_mapping(set, "'set'")
        assignments = {_unqualified(k, self._target.alias): self._sql(v, "'set'") for k, v in given.items()}
        text = self._sql(condition) if condition is not None else None
        result = spark_update(self._target, text, assignments)
        return self._spark.createDataFrame([(result.metrics.get("numUpdatedRows"),)], AFFECTED_ROWS_SCHEMA)

    def merge(self, source: Any, condition: Any) -> DeltaMergeBuilder:
        """A MERGE of the DataFrame ``source`` into this table on ``condition``: add WHEN clauses to
        the returned :class:`DeltaMergeBuilder`, then ``execute()`` it."""
        if source is None:
            raise ValueError("'source' in merge cannot be None")
        if not hasattr(source, "schema") or not hasattr(source, "localCheckpoint"):
            raise TypeError("Type of 'source' in merge must be DataFrame.")
        if condition is None:
            raise ValueError("'condition' in merge cannot be None")
        return DeltaMergeBuilder(self._spark, self._target, source, condition)

    # -- maintenance ------------------------------------------------------------------------------
    def vacuum(self, retentionHours: float | None = None) -> Any:  # noqa: N803 - Delta's name
        """Delete the files no version within the retention needs (default: the table's
        ``delta.deletedFileRetentionDuration``, 7 days); a shorter retention needs the session
        setting ``spark.databricks.delta.retentionDurationCheck.enabled=false``, as in Delta.
        Returns an empty DataFrame."""
        log = self._target.log()
        hours = float(retentionHours) if retentionHours is not None else None
        vacuum(log.io, log.update(), retention_hours=hours, dry_run=False)
        return self._spark.createDataFrame([], "path STRING").select()

    def restoreToVersion(self, version: int) -> Any:  # noqa: N802 - Delta's name
        """Restore the table to ``version``; returns Delta's RESTORE metrics as a one-row DataFrame."""
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"version needs to be an int but got '{type(version)}'.")
        return self._restore(version)

    def restoreToTimestamp(self, timestamp: str) -> Any:  # noqa: N802 - Delta's name
        """Restore the table to the version active at ``timestamp`` (``yyyy-MM-dd`` or
        ``yyyy-MM-dd HH:mm:ss``, in the session time zone); returns Delta's RESTORE metrics."""
        if not isinstance(timestamp, str):
            raise ValueError(f"timestamp needs to be a string but got '{type(timestamp)}'.")
        zone = session_time_zone(self._spark)
        return self._restore(parse_timestamp(timestamp, parse_zone(zone) if zone else parse_zone("UTC")))

    def _restore(self, target: Any) -> Any:
        log = self._target.log()
        result = restore(log.io, log.update(), target)
        return self._spark.createDataFrame([restore_result(result.metrics)], RESTORE_RESULT_SCHEMA)

    def upgradeTableProtocol(self, readerVersion: int, writerVersion: int) -> None:  # noqa: N802, N803 - Delta's names
        """Raise the table's protocol versions (never lowers them)."""
        if not isinstance(readerVersion, int):
            raise ValueError(f"The readerVersion needs to be an integer but got '{type(readerVersion)}'.")
        if not isinstance(writerVersion, int):
            raise ValueError(f"The writerVersion needs to be an integer but got '{type(writerVersion)}'.")
        log = self._target.log()
        alter_properties.upgrade_protocol(log.io, log.update(), readerVersion, writerVersion)

    def addFeatureSupport(self, featureName: str) -> None:  # noqa: N802, N803 - Delta's names
        """Add a table feature to the protocol (moving it to table features if needed)."""
        if not isinstance(featureName, str):
            raise ValueError(f"featureName needs to be a string but got '{type(featureName)}'.")
        log = self._target.log()
        alter_properties.add_features(
            log.io, log.update(), [featureName], allow_protocol_versions_increase=True
        )

    def setProperties(self, properties: Mapping[str, str]) -> None:  # noqa: N802 - in Delta's style
        """Set table properties (Delta's ``ALTER TABLE SET TBLPROPERTIES``, which ``delta.tables``
        offers only as SQL): ``delta.*`` properties are checked and may upgrade the protocol."""
        log = self._target.log()
        values = {str(k): str(v) for k, v in properties.items()}
        alter_properties.set_table_properties(log.io, log.update(), values)

    def unsetProperties(self, keys: Iterable[str], ifExists: bool = False) -> None:  # noqa: N802, N803 - in Delta's style
        """Remove table properties (Delta's ``ALTER TABLE UNSET TBLPROPERTIES [IF EXISTS]``)."""
        log = self._target.log()
        alter_properties.unset_table_properties(
            log.io, log.update(), list(keys), raise_if_not_exists=not ifExists
        )

    def optimize(self) -> DeltaOptimizeBuilder:
        """An OPTIMIZE of the table: ``.where(partition filter)``, then ``.executeCompaction()`` or
        ``.executeZOrderBy(columns)``."""
        return DeltaOptimizeBuilder(self._spark, self._target)


def _unqualified(column: str, alias: str | None) -> str:
    """A ``set`` key without the table's alias (``t.v`` -> ``v``)."""
    if alias and column.lower().startswith(alias.lower() + "."):
        return column[len(alias) + 1 :]
    return column
