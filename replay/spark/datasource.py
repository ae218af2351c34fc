"""The ``deltalog`` PySpark data source: snapshots, change feed, streams and writes without Delta jars.

``spark.read.format("deltalog").load(uri)`` reads a snapshot (``versionAsOf``,
``timestampAsOf``); with ``readChangeFeed`` it reads the change feed (``startingVersion``,
``endingVersion``, ``startingTimestamp``, ``endingTimestamp``). ``spark.readStream`` streams the
change feed or, without ``readChangeFeed``, the table's appends like Delta's default source
(``startingVersion``/``latest``, ``startingTimestamp``, ``maxFilesPerTrigger`` (default 1000),
``maxBytesPerTrigger``, ``failOnDataLoss``, ``excludeRegex``, ``ignoreDeletes``,
``ignoreChanges``, ``skipChangeCommits``). Offsets are Delta's ``DeltaSourceOffset`` JSON.

``df.write`` and ``df.writeStream`` write through :mod:`replay.spark.writer`.

Snapshot reads take Spark's pushed filters (:class:`DeltaLogPushdownReader`): partition values
and file statistics prune the files before partitions are planned, and every filter that
partition values do not decide exactly goes back to Spark.

The log is read through :func:`logstores.create_log_store` and data files through fsspec +
pyarrow inside the Python workers, so any storage fsspec reaches works. Storage settings come
from the session's settings when a query is planned (:mod:`replay.spark.session_conf`) and from
options that look like storage settings (``fs.*``, ``spark.hadoop.*``,
``[spark.]delta.logStore.*``, ``[spark.]io.delta.storage.*``); Spark hands options over in lower
case, so Delta's camel-case key names are restored (:func:`canonical_key`). A Delta error met in
a Spark worker reaches the user as one line (:func:`delta_errors_first`).

Timestamp options are read as Spark casts a string to a timestamp, as Delta reads them: a time
without a zone is in the session time zone (``spark.sql.session.timeZone``), an explicit offset,
``Z`` or region is kept, and errors show times in the zone the timestamp was read in.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from logstores import check_log_store_conf
from logstores.conf import to_conf_dict
from replay.cdc import (
    BASE_INDEX,
    CDC_COMMIT_TIMESTAMP,
    CDC_COMMIT_VERSION,
    CDC_TYPE_COLUMN,
    SCHEMA_MODE_KEY,
    AdmissionLimits,
    ChangeRead,
    DeltaSource,
    DeltaSourceOffset,
    StreamOptions,
    change_read_snapshot,
    plan_changes,
    read_change,
    resolve_change_range,
)
from replay.data import TableReader
from replay.delta_log import DeltaLog
from replay.protocol.arrow_actions import add_actions
from replay.protocol.errors import DeltaError
from replay.protocol.predicates import TRUE, And, Predicate
from replay.protocol.timestamps import UTC, parse_zone, to_datetime
from replay.spark.filters import to_predicate
from replay.spark.session_conf import SessionLink
from replay.spark.writer import WRITE_SESSION_KEYS, batch_writer, stream_writer
from replay.state.pruning import decided_by_partition_values, prune
from replay.state.snapshot import Snapshot

logger = logging.getLogger(__name__)

FORMAT_NAME = "deltalog"
DELTA_FORMAT_NAME = "delta"
DELTA_JVM_SOURCE = "org.apache.spark.sql.delta.sources.DeltaDataSource"
STORAGE_KEY_PREFIXES = (
    "fs.",
    "spark.hadoop.",
    "spark.delta.logStore.",
    "delta.logStore.",
    "spark.io.delta.storage.",
    "io.delta.storage.",
)
_CAMEL_CASE_WORDS = ("logStore", "S3DynamoDBLogStore", "tableName", "provisionedThroughput")
OUT_OF_RANGE_KEY = "spark.databricks.delta.changeDataFeed.timestampOutOfRange.enabled"
SESSION_KEYS = (OUT_OF_RANGE_KEY, SCHEMA_MODE_KEY)
"""Delta SQL confs read from the session (or from the read options) besides storage settings."""
TIME_ZONE_KEY = "spark.sql.session.timeZone"
"""The zone timestamp options without one are read in (from the session, or from the read options)."""
PUSHDOWN_KEY = "spark.sql.python.filterPushdown.enabled"
"""Spark calls a Python reader's ``pushFilters`` only when this is true (and fails the query if the
reader has one while it is false): :func:`register` turns it on unless the user turned it off."""
TARGET_PARTITION_BYTES = 128 * 1024 * 1024
OPEN_COST_BYTES = 4 * 1024 * 1024
PARALLELISM_HINT = 8
_SIZE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


class InvalidOptionError(DeltaError, ValueError):
    """A read option has an invalid value (Delta's ``DELTA_ILLEGAL_OPTION`` wording)."""


def canonical_key(key: str) -> str:
    """``key`` with Delta's camel-case words restored (``spark.delta.logstore.s3a.impl`` ->
    ``spark.delta.logStore.s3a.impl``): Spark lower-cases data source option names."""
    parts = key.split(".")
    words = {word.lower(): word for word in _CAMEL_CASE_WORDS}
    return ".".join(words.get(part.lower(), part) for part in parts)


def storage_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The entries of a Spark conf (or of options) that configure storage or the LogStore."""
    canonical = {canonical_key(str(key)): str(value) for key, value in conf.items()}
    return {key: value for key, value in canonical.items() if key.startswith(STORAGE_KEY_PREFIXES)}


def session_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of a session the data source uses: storage, Delta's read and write confs, the
    session time zone and whether Spark pushes filters."""
    settings = storage_conf(conf)
    for key in (*SESSION_KEYS, *WRITE_SESSION_KEYS, TIME_ZONE_KEY, PUSHDOWN_KEY):
        if conf.get(key) is not None:
            settings[key] = str(conf[key])
    return settings


@contextlib.contextmanager
def delta_errors_first() -> Iterator[None]:
    """Let a Delta error raised in a Spark Python worker reach the user as its own first line.

    Spark reports an exception of a Python data source as the worker's formatted traceback, so the
    Delta error class and message would come last, after every frame. A :class:`DeltaError` says
    what failed and names the thing; its frames only bury it. For such an error the worker is told
    to report the exception without its traceback (``SPARK_HIDE_TRACEBACK``, read by PySpark when
    it reports the exception; the worker process ends right after). Other exceptions, bugs
    included, keep their traceback; outside a Spark worker nothing changes.
    """
    try:
        yield
    except DeltaError:
        if os.environ.get("SPARK_PYTHON_RUNTIME") == "PYTHON_WORKER":
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise


# -- options --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReadSettings:
    """Validated read options (names as in Delta, matched case-insensitively)."""

    path: str
    conf: dict[str, str]
    read_change_feed: bool = False
    version_as_of: int | None = None
    timestamp_as_of: _dt.datetime | None = None
    starting_version: int | str | None = None
    ending_version: int | None = None
    starting_timestamp: _dt.datetime | None = None
    ending_timestamp: _dt.datetime | None = None
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    exclude_regex: str | None = None
    stream_options: StreamOptions = field(default_factory=StreamOptions)
    allow_out_of_range: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, str], session_conf: Mapping[str, str]) -> ReadSettings:
        """Parse data source options; raises :class:`InvalidOptionError` naming the option."""
        raw = {str(key): str(value) for key, value in options.items()}
        lowered = {key.lower(): value for key, value in raw.items()}
        path = lowered.get("path")
        if not path:
            raise InvalidOptionError(
                "'path' is not specified: use .load(<table uri>) or .save(<table uri>) (Spark passes "
                "neither LOCATION nor OPTIONS of a SQL table to a Python data source)"
            )
        conf = {**storage_conf(session_conf), **storage_conf(raw)}
        for key in (SCHEMA_MODE_KEY,):
            value = lowered.get(key.lower(), session_conf.get(key))
            if value is not None:
                conf[key] = value
        out_of_range = lowered.get(OUT_OF_RANGE_KEY.lower(), session_conf.get(OUT_OF_RANGE_KEY, "false"))
        zone = _time_zone(lowered.get(TIME_ZONE_KEY.lower(), session_conf.get(TIME_ZONE_KEY)))
        starting_version: int | str | None = None
        if "startingversion" in lowered:
            value = lowered["startingversion"].strip()
            starting_version = "latest" if value.lower() == "latest" else _version(value, "startingVersion")
        return cls(
            path=path,
            conf=conf,
            read_change_feed=_bool(lowered, "readchangefeed") or _bool(lowered, "readchangedata"),
            version_as_of=_optional_version(lowered, "versionasof", "versionAsOf"),
            timestamp_as_of=_timestamp(lowered, "timestampasof", zone),
            starting_version=starting_version,
            ending_version=_optional_version(lowered, "endingversion", "endingVersion"),
            starting_timestamp=_timestamp(lowered, "startingtimestamp", zone),
            ending_timestamp=_timestamp(lowered, "endingtimestamp", zone),
            max_files_per_trigger=_positive(lowered, "maxfilespertrigger", "maxFilesPerTrigger"),
            max_bytes_per_trigger=_size(lowered, "maxbytespertrigger", "maxBytesPerTrigger"),
            fail_on_data_loss=_bool(lowered, "failondataloss", default=True),
            exclude_regex=lowered.get("excluderegex"),
            stream_options=StreamOptions(
                ignore_deletes=_bool(lowered, "ignoredeletes"),
                ignore_changes=_bool(lowered, "ignorechanges"),
                skip_change_commits=_bool(lowered, "skipchangecommits"),
            ),
            allow_out_of_range=out_of_range.strip().lower() == "true",
        )


def _illegal(name: str, value: str, explanation: str) -> InvalidOptionError:
    return InvalidOptionError(
        f"[DELTA_ILLEGAL_OPTION] Invalid value '{value}' for option '{name}', {explanation}"
    )


def _bool(options: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = options.get(key)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise _illegal(key, value, "must be 'true' or 'false'")
    return lowered == "true"


def _version(value: str, name: str) -> int:
    try:
        version = int(value)
    except ValueError:
        raise InvalidOptionError(
            f"[DELTA_VERSION_INVALID] The provided version ({value}) is not a valid version (option {name})."
        ) from None
    if version < 0:
        raise _illegal(name, value, "must be greater than or equal to zero")
    return version


def _optional_version(options: Mapping[str, str], key: str, name: str) -> int | None:
    return _version(options[key].strip(), name) if key in options else None


def _time_zone(name: str | None) -> _dt.tzinfo:
    """The session time zone (UTC when the session's is unknown), checked as Spark checks it."""
    if name is None:
        return UTC
    try:
        return parse_zone(name)
    except ValueError:
        raise InvalidOptionError(
            f"[INVALID_CONF_VALUE.TIME_ZONE] The value '{name}' in the config \"{TIME_ZONE_KEY}\" is "
            "invalid. Cannot resolve the given timezone."
        ) from None


def _timestamp(options: Mapping[str, str], key: str, zone: _dt.tzinfo) -> _dt.datetime | None:
    """A timestamp option as Spark casts the string (a time without a zone is in ``zone``)."""
    if key not in options:
        return None
    value = options[key]
    try:
        return to_datetime(value, zone)
    except ValueError:
        raise InvalidOptionError(
            f"[DELTA_TIMESTAMP_INVALID] The provided timestamp ('{value}') cannot be converted to a valid "
            "timestamp."
        ) from None


def _positive(options: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in options:
        return None
    value = options[key]
    try:
        number = int(value)
    except ValueError:
        raise _illegal(name, value, "must be a positive integer") from None
    if number <= 0:
        raise _illegal(name, value, "must be a positive integer")
    return number


def _size(options: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in options:
        return None
    value = options[key]
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgtp]?)b?\s*", value.lower())
    if match is None or int(match.group(1)) <= 0:
        raise _illegal(name, value, "must be a size configuration such as '10g'")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2) or "b"]


# -- schema ---------------------------------------------------------------------------------------
def _nullable(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def spark_schema(schema_string: str, change_feed: bool) -> StructType:
    """The Spark schema of a Delta ``schemaString`` (all nullable), plus CDC columns if asked."""
    parsed = StructType.fromJson(orjson.loads(schema_string))
    fields = [StructField(f.name, _nullable(f.dataType), True) for f in parsed.fields]
    if change_feed:
        fields += [
            StructField(CDC_TYPE_COLUMN, StringType(), True),
            StructField(CDC_COMMIT_VERSION, LongType(), True),
            StructField(CDC_COMMIT_TIMESTAMP, TimestampType(), True),
        ]
    return StructType(fields)


def _arrow_target(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# -- partitions -----------------------------------------------------------------------------------
class FilesPartition(InputPartition):
    """A group of file reads executed by one Spark task."""

    def __init__(self, reads: Sequence[ChangeRead]) -> None:
        super().__init__(tuple(reads))

    @property
    def reads(self) -> tuple[ChangeRead, ...]:
        return self.value


def split_reads(reads: Sequence[ChangeRead], parallelism: int = PARALLELISM_HINT) -> list[FilesPartition]:
    """Pack reads into partitions the way Spark packs files: each file costs its size plus
    :data:`OPEN_COST_BYTES`; a partition holds about ``total / parallelism`` bytes, between
    :data:`OPEN_COST_BYTES` and :data:`TARGET_PARTITION_BYTES`. Larger files are placed first."""
    if not reads:
        return []
    costs = [int(getattr(read.file, "size", 0) or 0) + OPEN_COST_BYTES for read in reads]
    target = min(TARGET_PARTITION_BYTES, max(OPEN_COST_BYTES, sum(costs) // max(parallelism, 1)))
    count = max(1, min(len(reads), math.ceil(sum(costs) / target)))
    buckets: list[list[ChangeRead]] = [[] for _ in range(count)]
    loads = [0] * count
    for index in sorted(range(len(reads)), key=lambda i: -costs[i]):
        lightest = loads.index(min(loads))
        buckets[lightest].append(reads[index])
        loads[lightest] += costs[index]
    return [
        FilesPartition(sorted(bucket, key=lambda read: (read.version, read.file.path))) for bucket in buckets
    ]


def _record_batches(
    reader: TableReader, partition: FilesPartition, change_feed: bool, schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of a partition in the query's schema (fixed when the query was planned:
    columns added to the table later are not read)."""
    target = _arrow_target(schema)
    cdc_columns = {CDC_TYPE_COLUMN, CDC_COMMIT_VERSION, CDC_COMMIT_TIMESTAMP} if change_feed else set()
    columns = [name for name in schema.fieldNames() if name not in cdc_columns]
    for read in partition.reads:
        table = read_change(reader, read, columns) if change_feed else reader.read_file(read.file, columns)
        if table.num_rows == 0:
            continue
        yield from table.cast(target).to_batches()


# -- batch ----------------------------------------------------------------------------------------
class DeltaLogBatchReader(DataSourceReader):
    """Reads a snapshot or a change range; the plan is made once, on the driver side.

    ``version`` pins the snapshot that ``schema()`` resolved, so the files read are those of the
    schema Spark planned with even if the table changed since.
    """

    def __init__(self, settings: ReadSettings, schema: StructType, version: int | None = None) -> None:
        self.settings = settings
        self.schema = schema
        self.version = version
        self.pushed: Predicate = TRUE
        self._plan: tuple[TableReader, list[ChangeRead]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Tasks need the table reader, not the whole plan (their partition carries the reads)."""
        state = dict(self.__dict__)
        if self._plan is not None:
            state["_plan"] = (self._plan[0], [])
        return state

    def _snapshot(self, delta_log: DeltaLog) -> Snapshot:
        if self.version is not None:
            return delta_log.snapshot(version=self.version)
        return _snapshot(delta_log, self.settings)

    def _make_plan(self) -> tuple[TableReader, list[ChangeRead]]:
        settings = self.settings
        delta_log = DeltaLog.for_table(settings.path, settings.conf)
        if settings.read_change_feed:
            resolved = _change_range(delta_log, settings)
            if resolved is None:
                return TableReader.for_metadata(delta_log.table_path, delta_log.update().metadata), []
            plan = plan_changes(delta_log, *resolved)
            return plan.reader(settings.conf), plan.reads
        return self._snapshot_plan(self._snapshot(delta_log), self.pushed)

    def _snapshot_plan(self, snapshot: Snapshot, pushed: Predicate) -> tuple[TableReader, list[ChangeRead]]:
        """The files of ``snapshot`` that may hold rows matching ``pushed``, as reads."""
        reader = TableReader.for_metadata(
            snapshot.table_path, snapshot.metadata, snapshot.protocol, self.settings.conf
        )
        files = snapshot.files_table()
        if pushed != TRUE:
            kept = prune(files, pushed, snapshot.config)
            logger.debug("pushed filters keep %d of %d files of %s", kept.num_rows, files.num_rows, snapshot)
            files = kept
        return reader, [ChangeRead(add, None, snapshot.version, 0) for add in add_actions(files)]

    def partitions(self) -> Sequence[InputPartition]:
        with delta_errors_first():
            if self._plan is None:
                self._plan = self._make_plan()
            return split_reads(self._plan[1])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilesPartition):  # Spark plans one empty partition for none
            return
        with delta_errors_first():
            reader, _ = self._plan or self._make_plan()
            yield from _record_batches(reader, partition, self.settings.read_change_feed, self.schema)


class DeltaLogPushdownReader(DeltaLogBatchReader):
    """A snapshot reader that takes Spark's pushed filters (used while Spark pushes them).

    The filters prune the snapshot's files by partition values and statistics before partitions
    are planned. Spark still applies every filter that this does not decide exactly: all but the
    filters on partition columns that partition values alone decide for every file
    (:func:`~replay.state.pruning.decided_by_partition_values`), since statistics only say which
    files may hold a matching row.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - PySpark's name
        with delta_errors_first():
            delta_log = DeltaLog.for_table(self.settings.path, self.settings.conf)
            snapshot = self._snapshot(delta_log)
            predicates = [to_predicate(spark_filter, self.schema) for spark_filter in filters]
            self.pushed = And(tuple(predicates)) if predicates else TRUE
            self._plan = self._snapshot_plan(snapshot, self.pushed)
            files, config = snapshot.files_table(), snapshot.config
            return [
                spark_filter
                for spark_filter, predicate in zip(filters, predicates, strict=True)
                if not decided_by_partition_values(files, predicate, config)
            ]


def _change_range(delta_log: DeltaLog, settings: ReadSettings) -> tuple[int, int] | None:
    """The versions a batch change read covers (``None``: nothing to read), from its options."""
    return resolve_change_range(
        delta_log,
        settings.starting_version if isinstance(settings.starting_version, int) else None,
        settings.ending_version,
        settings.starting_timestamp,
        settings.ending_timestamp,
        allow_out_of_range=settings.allow_out_of_range,
    )


def _change_read_snapshot(delta_log: DeltaLog, settings: ReadSettings) -> Snapshot:
    """The snapshot whose schema a change read uses: the latest, or the end version's for a
    bounded batch read of a column-mapping table (as :func:`replay.cdc.plan_changes` reads)."""
    if settings.ending_version is None and settings.ending_timestamp is None:
        return delta_log.update()
    resolved = _change_range(delta_log, settings)
    return delta_log.update() if resolved is None else change_read_snapshot(delta_log, *resolved)


def _snapshot(delta_log: DeltaLog, settings: ReadSettings) -> Snapshot:
    if settings.version_as_of is not None:
        return delta_log.snapshot(version=settings.version_as_of)
    if settings.timestamp_as_of is not None:
        return delta_log.snapshot(timestamp=settings.timestamp_as_of)
    return delta_log.update()


# -- streaming ------------------------------------------------------------------------------------
class DeltaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A Delta streaming source: change feed or appends, with admission control.

    Picklable: the :class:`DeltaSource` (log, caches) is rebuilt lazily on each side.
    """

    def __init__(self, settings: ReadSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema
        self._source: DeltaSource | None = None
        self._reader: TableReader | None = None
        self._available_now_end: DeltaSourceOffset | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_source"] = None
        return state

    @property
    def source(self) -> DeltaSource:
        if self._source is None:
            settings = self.settings
            self._source = DeltaSource(
                DeltaLog.for_table(settings.path, settings.conf),
                read_change_feed=settings.read_change_feed,
                starting_version=settings.starting_version,
                starting_timestamp=settings.starting_timestamp,
                fail_on_data_loss=settings.fail_on_data_loss,
                exclude_regex=settings.exclude_regex,
                stream_options=settings.stream_options,
                allow_out_of_range=settings.allow_out_of_range,
            )
        return self._source

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        return self.source.initial_offset().to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark's name
        settings = self.settings
        if settings.max_bytes_per_trigger is not None and settings.max_files_per_trigger is None:
            return ReadMaxBytes(settings.max_bytes_per_trigger)
        return ReadMaxFiles(settings.max_files_per_trigger or 1000)

    def _limits(self, limit: ReadLimit | None) -> AdmissionLimits | None:
        settings = self.settings
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxFiles):
            return AdmissionLimits(max_files=limit.max_files, max_bytes=settings.max_bytes_per_trigger)
        if isinstance(limit, ReadMaxBytes):
            return AdmissionLimits(max_files=settings.max_files_per_trigger, max_bytes=limit.max_bytes)
        return AdmissionLimits(
            max_files=settings.max_files_per_trigger, max_bytes=settings.max_bytes_per_trigger
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - PySpark's name
        source = self.source
        start_offset = source.parse_offset(start)
        return source.latest_offset(start_offset, self._limits(limit), self._available_now_end).to_dict()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark's name
        """Freeze the end at the latest version now: later commits wait for the next run."""
        source = self.source
        latest = source.delta_log.update().version
        self._available_now_end = DeltaSourceOffset(source.table_id, latest + 1, BASE_INDEX, False)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        source = self.source
        start_offset, end_offset = source.parse_offset(start), source.parse_offset(end)
        if end_offset <= start_offset and end_offset.is_initial_snapshot == start_offset.is_initial_snapshot:
            return []
        reads = source.batch_reads(start_offset, end_offset)
        self._reader = source.reader()
        return split_reads(reads)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesPartition)
        reader = self._reader or self.source.reader()
        yield from _record_batches(reader, partition, self.settings.read_change_feed, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: offsets carry all state."""


# -- data source ----------------------------------------------------------------------------------
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

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        with delta_errors_first():
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

    def schema(self) -> StructType:
        with delta_errors_first():
            settings = self.settings
            delta_log = DeltaLog.for_table(settings.path, settings.conf)
            if settings.read_change_feed:
                snapshot = _change_read_snapshot(delta_log, settings)
            else:
                snapshot = _snapshot(delta_log, settings)
                self.version = snapshot.version
            schema_string = snapshot.metadata.schema_string or snapshot.schema.to_json()
            return spark_schema(schema_string, settings.read_change_feed)

    def _release_link(self) -> None:
        """Forget the session link: what comes next is pickled for executors."""
        self._link = None

    def pushdown_enabled(self) -> bool:
        """Whether Spark pushes filters to this query's reader (the session's setting now)."""
        current = self._link.get(PUSHDOWN_KEY, "false") if self._link is not None else None
        value = current if current is not None else self.session_conf.get(PUSHDOWN_KEY, "false")
        return value.strip().lower() == "true"

    def reader(self, schema: StructType) -> DataSourceReader:
        pushdown = self.pushdown_enabled() and not self.settings.read_change_feed
        self._release_link()
        reader_class = DeltaLogPushdownReader if pushdown else DeltaLogBatchReader
        return reader_class(self.settings, schema, self.version)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark's name
        self._release_link()
        return DeltaLogStreamReader(self.settings, schema)

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


def session_time_zone(spark: SparkSession) -> str | None:
    """``spark.sql.session.timeZone`` as Spark applies it: the value set, else Spark's default (the
    JVM's zone). ``spark.conf.get(key, None)`` would give ``None`` for an unset key."""
    try:
        return str(spark.conf.get(TIME_ZONE_KEY))
    except Exception:  # noqa: BLE001 - Spark Connect or an old session: the library's UTC applies
        return None


def register(spark: SparkSession) -> type[DeltaLogDataSource]:
    """Register the ``deltalog`` format on ``spark``, and ``delta`` as well when Delta Lake's own
    data source is not on the classpath (so existing ``format("delta")`` code runs unchanged).

    Turns on filter pushdown for Python data sources in the session
    (``spark.sql.python.filterPushdown.enabled``) unless it has been turned off explicitly; with it
    off, reads work without pushdown. Settings changed in the session later (storage keys, Delta
    confs, the time zone, pushdown) apply to the next query: they are read when a query is
    planned. Returns the ``deltalog`` class.
    """
    conf = _captured_settings(spark)
    check_log_store_conf(conf)  # every store setting, now rather than at the first load
    zone = session_time_zone(spark)
    if zone is not None:
        conf[TIME_ZONE_KEY] = zone
    if conf.get(PUSHDOWN_KEY, "").strip().lower() != "false":
        spark.conf.set(PUSHDOWN_KEY, "true")
        conf[PUSHDOWN_KEY] = "true"
    link = SessionLink.of(spark)
    configured = _configured("ConfiguredDeltaLogDataSource", FORMAT_NAME, conf, link)
    spark.dataSource.register(configured)
    if not delta_source_on_classpath(spark):
        spark.dataSource.register(_configured("ConfiguredDeltaDataSource", DELTA_FORMAT_NAME, conf, link))
    return configured
