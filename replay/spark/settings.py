"""The settings of a ``deltalog`` read: its options, and what it takes from the Spark session.

:class:`ReadSettings` holds a read's validated options (names as in Delta, matched
case-insensitively; values parsed by :mod:`replay.spark.options`). Storage settings come from the
session and from options that look like storage settings (``fs.*``, ``spark.hadoop.*``,
``[spark.]delta.logStore.*``, ``[spark.]io.delta.storage.*``, and our request bounds
``[spark.]delta.logstores.*``); Spark hands options over in lower case, so Delta's camel-case key
names are restored (:func:`canonical_key`).
:func:`session_settings` picks from a session's settings those a ``deltalog`` source uses.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from replay.cdc import SCHEMA_MODE_KEY, StreamOptions
from replay.spark.options import (
    TIME_ZONE_KEY,
    InvalidOptionError,
    bool_option,
    lower_keys,
    positive_option,
    size_option,
    time_zone,
    timestamp_option,
    version_option,
    version_value,
)
from replay.spark.row_ids import COLUMNS_OPTION, FILES_OPTION, ROW_IDS_OPTION, name_list
from replay.spark.writer import WRITE_SESSION_KEYS

STORAGE_KEY_PREFIXES = (
    "fs.",
    "spark.hadoop.",
    "spark.delta.logStore.",
    "delta.logStore.",
    "spark.io.delta.storage.",
    "io.delta.storage.",
    "spark.delta.logstores.",
    "delta.logstores.",
)
_CAMEL_CASE_WORDS = (
    "logStore",
    "S3DynamoDBLogStore",
    "tableName",
    "provisionedThroughput",
    "requestTimeoutMs",
)
OUT_OF_RANGE_KEY = "spark.databricks.delta.changeDataFeed.timestampOutOfRange.enabled"
SESSION_KEYS = (OUT_OF_RANGE_KEY, SCHEMA_MODE_KEY)
"""Delta SQL confs read from the session (or from the read options) besides storage settings."""
PUSHDOWN_KEY = "spark.sql.python.filterPushdown.enabled"
"""Spark calls a Python reader's ``pushFilters`` only when this is true (and fails the query if the
reader has one while it is false), so the reader handed out follows it.

:func:`replay.spark.register` leaves it as the session has it (Spark's default: off), because PySpark 4.3
does not keep a pushed read to the query that pushed it. ``PythonScanBuilder.pushFilters``
stores the read planned with the filters (the pickled reader and its partitions) on the
relation's ``PythonDataSourceV2``, and every later scan of that relation that pushes no filter
Spark can translate (``df.count()``, ``df.collect()``, a temp view over ``df``) reuses it
without calling Python (``PythonBatch`` asks the provider for its read info, which is only
planned anew while none is stored). The files the first query pruned away are then missing
from every such query. Nothing a Python reader does can prevent it: the later query never
reaches Python. With pushdown off, every query reads every file and Spark filters the rows."""


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
    only_files: tuple[str, ...] | None = None
    """Internal: read only these files of the snapshot (:mod:`replay.spark.row_ids`)."""
    only_columns: tuple[str, ...] | None = None
    """Internal: read only these columns."""
    row_ids: bool = False
    """Internal: add each row's file and physical row index."""

    @classmethod
    def from_options(cls, options: Mapping[str, str], session_conf: Mapping[str, str]) -> ReadSettings:
        """Parse data source options; raises :class:`InvalidOptionError` naming the option."""
        raw = {str(key): str(value) for key, value in options.items()}
        lowered = lower_keys(raw)
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
        zone = time_zone(lowered.get(TIME_ZONE_KEY.lower(), session_conf.get(TIME_ZONE_KEY)))
        starting_version: int | str | None = None
        if "startingversion" in lowered:
            value = lowered["startingversion"].strip()
            latest = value.lower() == "latest"
            starting_version = "latest" if latest else version_value(value, "startingVersion")
        return cls(
            path=path,
            conf=conf,
            read_change_feed=bool_option(lowered, "readchangefeed") or bool_option(lowered, "readchangedata"),
            version_as_of=version_option(lowered, "versionasof", "versionAsOf"),
            timestamp_as_of=timestamp_option(lowered, "timestampasof", zone),
            starting_version=starting_version,
            ending_version=version_option(lowered, "endingversion", "endingVersion"),
            starting_timestamp=timestamp_option(lowered, "startingtimestamp", zone),
            ending_timestamp=timestamp_option(lowered, "endingtimestamp", zone),
            max_files_per_trigger=positive_option(lowered, "maxfilespertrigger", "maxFilesPerTrigger"),
            max_bytes_per_trigger=size_option(lowered, "maxbytespertrigger", "maxBytesPerTrigger"),
            fail_on_data_loss=bool_option(lowered, "failondataloss", default=True),
            exclude_regex=lowered.get("excluderegex"),
            stream_options=StreamOptions(
                ignore_deletes=bool_option(lowered, "ignoredeletes"),
                ignore_changes=bool_option(lowered, "ignorechanges"),
                skip_change_commits=bool_option(lowered, "skipchangecommits"),
            ),
            allow_out_of_range=out_of_range.strip().lower() == "true",
            only_files=name_list(lowered, FILES_OPTION),
            only_columns=name_list(lowered, COLUMNS_OPTION),
            row_ids=bool_option(lowered, ROW_IDS_OPTION.lower()),
        )
