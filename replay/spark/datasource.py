"""The ``deltalog`` PySpark data source: snapshots, change feed, streams and writes without Delta jars.

``spark.read.format("deltalog").load(uri)`` reads a snapshot (``versionAsOf``,
``timestampAsOf``); with ``readChangeFeed`` it reads the change feed (``startingVersion``,
``endingVersion``, ``startingTimestamp``, ``endingTimestamp``). ``spark.readStream`` streams the
change feed or, without ``readChangeFeed``, the table's appends like Delta's default source
(``startingVersion``/``latest``, ``startingTimestamp``, ``maxFilesPerTrigger`` (default 1000),
``maxBytesPerTrigger``, ``failOnDataLoss``, ``excludeRegex``, ``ignoreDeletes``,
``ignoreChanges``, ``skipChangeCommits``). Offsets are Delta's ``DeltaSourceOffset`` JSON.

This module holds the data source Spark instantiates and :func:`register`; the work is done by
its neighbours: :mod:`~replay.spark.settings` (options and session settings, parsed by
:mod:`~replay.spark.options`), :mod:`~replay.spark.batch_reader` (snapshots and change ranges,
with Spark's pushed filters (:class:`~replay.spark.batch_reader.DeltaLogPushdownReader`) when the
session turns pushdown on: off by default, see :data:`~replay.spark.settings.PUSHDOWN_KEY`),
:mod:`~replay.spark.stream_reader`, :mod:`~replay.spark.partitions` (Spark tasks of file reads)
and :mod:`~replay.spark.writer` (``df.write`` and ``df.writeStream``).

The log is read through :func:`logstores.create_log_store` and data files through fsspec +
pyarrow inside the Python workers, so any storage fsspec reaches works. Storage settings come
from the session's settings when a query is planned (:mod:`replay.spark.session_conf`) and from
options that look like storage settings. An error of ours (Delta's, storage, configuration) met in
a Spark worker reaches the user as one line (:func:`~replay.spark.worker_errors.errors_first`).

Timestamp options are read as Spark casts a string to a timestamp, as Delta reads them: a time
without a zone is in the session time zone (``spark.sql.session.timeZone``), an explicit offset,
``Z`` or region is kept, and errors show times in the zone the timestamp was read in.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from logstores import check_log_store_conf
from logstores.conf import to_conf_dict
from replay.delta_log import DeltaLog
from replay.spark.active_session import install as install_active_session
from replay.spark.batch_reader import (
    DeltaLogBatchReader,
    DeltaLogPushdownReader,
    change_read_snapshot_of,
    table_snapshot,
)
from replay.spark.options import TIME_ZONE_KEY, InvalidOptionError
from replay.spark.row_ids import scan_schema
from replay.spark.schema import spark_schema
from replay.spark.session_conf import SessionLink
from replay.spark.settings import PUSHDOWN_KEY, SESSION_KEYS, ReadSettings, session_settings, storage_conf
from replay.spark.stream_reader import DeltaLogStreamReader
from replay.spark.worker_errors import errors_first
from replay.spark.writer import WRITE_SESSION_KEYS, batch_writer, stream_writer

logger = logging.getLogger(__name__)

FORMAT_NAME = "deltalog"
DELTA_FORMAT_NAME = "delta"
DELTA_JVM_SOURCE = "org.apache.spark.sql.delta.sources.DeltaDataSource"


class DeltaLogDataSource(DataSource):
    """``format("deltalog")``: Delta tables read and written through this library (see module docstring).

    Spark constructs it, and calls ``schema()`` and ``reader()``, in planner processes on the
    driver host. The session's settings are read there, as the query is planned, through the
    :class:`~replay.spark.session_conf.SessionLink` that :func:`register` recorded (falling back
    to the settings captured by :func:`register`). Plan-time checks (options, the table, the
    version or timestamp) run there too, so their Delta errors never reach an executor.
    """

    format_name: str = FORMAT_NAME
    session_conf: dict[str, str] = {}
    """Storage, read and write settings captured from the session by :func:`register`."""
    session_link: SessionLink | None = None
    """How planner processes read the session's current settings (set by :func:`register`)."""

    @errors_first
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._link = type(self).session_link
        current = self._link.settings(TIME_ZONE_KEY) if self._link is not None else None
        self.session_conf = (
            session_settings(current) if current is not None else dict(type(self).session_conf)
        )
        self.settings = ReadSettings.from_options(options, self.session_conf)
        self.version: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as a plain ``DeltaLogDataSource`` with its resolved state: the class
        :func:`register` made (and its captured settings) stays with Spark's registry."""
        return (_rebuild, (type(self).format_name, dict(self.__dict__)))

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    @errors_first
    def schema(self) -> StructType:
        settings = self.settings
        delta_log = DeltaLog.for_table(settings.path, settings.conf)
        if settings.read_change_feed:
            snapshot = change_read_snapshot_of(delta_log, settings)
        else:
            snapshot = table_snapshot(delta_log, settings)
            self.version = snapshot.version
        schema_string = snapshot.metadata.schema_string or snapshot.schema.to_json()
        schema = spark_schema(schema_string, settings.read_change_feed)
        if settings.only_columns is None and not settings.row_ids:
            return schema
        if settings.read_change_feed:
            raise InvalidOptionError(
                "The internal row-level change options do not apply to change feed reads"
            )
        return scan_schema(schema, settings.only_columns, settings.row_ids)

    def _release_link(self) -> None:
        """Forget the session link: what comes next is pickled for executors."""
        self._link = None

    def pushdown_enabled(self) -> bool:
        """Whether Spark pushes filters to this query's reader (the session's setting now)."""
        current = self._link.get(PUSHDOWN_KEY, "false") if self._link is not None else None
        value = current if current is not None else self.session_conf.get(PUSHDOWN_KEY, "false")
        return value.strip().lower() == "true"

    @errors_first
    def reader(self, schema: StructType) -> DataSourceReader:
        pushdown = self.pushdown_enabled() and not self.settings.read_change_feed
        self._release_link()
        reader_class = DeltaLogPushdownReader if pushdown else DeltaLogBatchReader
        return reader_class(self.settings, schema, self.version)

    @errors_first
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        self._release_link()
        return DeltaLogStreamReader(self.settings, schema)

    @errors_first
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        self._release_link()
        settings = self.settings
        return batch_writer(
            settings.path,
            settings.conf,
            schema,
            overwrite,
            options=dict(self.options),
            session_conf=self.session_conf,
        )

    @errors_first
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - PySpark's name
        self._release_link()
        settings = self.settings
        return stream_writer(
            settings.path,
            settings.conf,
            schema,
            overwrite,
            options=dict(self.options),
            session_conf=self.session_conf,
        )


def _rebuild(format_name: str, state: dict[str, Any]) -> DeltaLogDataSource:
    """A data source unpickled from :meth:`DeltaLogDataSource.__reduce__`."""
    source = DeltaLogDataSource.__new__(DeltaLogDataSource)
    source.__dict__.update(state)
    source.format_name = format_name
    return source


def delta_source_on_classpath(spark: SparkSession) -> bool:
    """Whether Spark has Delta Lake's own data source (then ``format("delta")`` is left to it)."""
    try:
        jvm: Any = spark._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(DELTA_JVM_SOURCE, False, loader)
    except Exception:  # noqa: BLE001 - py4j reports a missing class as a generic error
        return False
    return True


def _configured(
    name: str, format_name: str, conf: dict[str, str], link: SessionLink | None
) -> type[DeltaLogDataSource]:
    attributes = {
        "format_name": format_name,
        "session_conf": conf,
        "session_link": link,
        "__module__": __name__,
        "__qualname__": name,
    }
    return type(name, (DeltaLogDataSource,), attributes)


def _captured_settings(spark: SparkSession) -> dict[str, str]:
    conf = to_conf_dict(spark)
    for key in (*SESSION_KEYS, *WRITE_SESSION_KEYS):
        if key not in conf:
            try:
                value = spark.conf.get(key, None)
            except Exception:  # noqa: BLE001 - Spark Connect or a missing key: keep the default
                value = None
            if value is not None:
                conf[key] = str(value)
    return session_settings(conf)


DELTA_SQL_CONF_PREFIX = "spark.databricks.delta."


def session_storage_settings(spark: SparkSession) -> dict[str, str]:
    """The settings of ``spark`` that driver-side work on a table reads now: storage settings and
    Delta's SQL confs (``spark.databricks.delta.*``, e.g. VACUUM's retention check)."""
    conf = to_conf_dict(spark)
    settings = storage_conf(conf)
    settings.update({key: value for key, value in conf.items() if key.startswith(DELTA_SQL_CONF_PREFIX)})
    return settings


def session_time_zone(spark: SparkSession) -> str | None:
    """``spark.sql.session.timeZone`` as Spark applies it: the value set, else Spark's default (the
    JVM's zone). ``spark.conf.get(key, None)`` would give ``None`` for an unset key."""
    try:
        return str(spark.conf.get(TIME_ZONE_KEY))
    except Exception:  # noqa: BLE001 - Spark Connect or an old session: the library's UTC applies
        return None


_REGISTERED: set[str] = set()
"""The sessions :func:`register` ran on (by session id)."""


def session_key(spark: SparkSession) -> str | None:
    """The id of a classic or Spark Connect session (``None`` if it has none)."""
    try:
        jsession: Any = getattr(spark, "_jsparkSession", None)
        return str(jsession.sessionUUID()) if jsession is not None else str(spark.session_id)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an object without an id: register every time
        return None


def ensure_registered(spark: SparkSession) -> None:
    """Register the data sources on ``spark`` unless :func:`register` already did."""
    key = session_key(spark)
    if key is None or key not in _REGISTERED:
        register(spark)


def register(spark: SparkSession) -> type[DeltaLogDataSource]:
    """Register the ``deltalog`` format on ``spark``, and ``delta`` as well when Delta Lake's own
    data source is not on the classpath (so existing ``format("delta")`` code runs unchanged).

    Filter pushdown (``spark.sql.python.filterPushdown.enabled``) is left as the session has it,
    off unless the user turned it on: with it on, PySpark 4.3 reuses one query's pruned files
    for later queries of the same DataFrame (see :data:`PUSHDOWN_KEY`), and a warning says so.
    Settings changed in the session later (storage keys, Delta confs, the time zone, pushdown)
    apply to the next query: they are read when a query is planned. Writes work from any Python
    thread: PySpark's writers are wrapped so that each write runs with its session active in its
    JVM thread (:mod:`replay.spark.active_session`). Returns the ``deltalog`` class.
    """
    conf = _captured_settings(spark)
    check_log_store_conf(conf)  # every store setting, now rather than at the first load
    zone = session_time_zone(spark)
    if zone is not None:
        conf[TIME_ZONE_KEY] = zone
    if conf.get(PUSHDOWN_KEY, "").strip().lower() == "true":
        logger.warning(
            "%s is true: Spark keeps the files a filtered query pruned with the DataFrame it "
            "queried, and later queries of that DataFrame that push no filter read only those "
            "files; load a new DataFrame for each query, or turn pushdown off",
            PUSHDOWN_KEY,
        )
    install_active_session()
    link = SessionLink.of(spark)
    configured = _configured("ConfiguredDeltaLogDataSource", FORMAT_NAME, conf, link)
    spark.dataSource.register(configured)
    if not delta_source_on_classpath(spark):
        spark.dataSource.register(_configured("ConfiguredDeltaDataSource", DELTA_FORMAT_NAME, conf, link))
    key = session_key(spark)
    if key is not None:
        _REGISTERED.add(key)
    return configured
