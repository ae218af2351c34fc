"""Configuration handling: Spark objects to plain mappings, and Delta's key conventions.

Delta reads every log store key in two spellings, with and without the ``spark.`` prefix,
and Hadoop settings either plain (``fs.s3a.endpoint``) or as ``spark.hadoop.fs.s3a.endpoint``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Protocol

from logstores.errors import LogStoreConfError

SPARK_PREFIX = "spark."
HADOOP_PREFIX = "spark.hadoop."


class SparkConfLike(Protocol):
    """``pyspark.SparkConf`` (``getAll()`` method) or ``spark.conf`` (``getAll`` property)."""

    @property
    def getAll(self) -> object: ...  # noqa: N802 - PySpark's name


class SparkContextLike(Protocol):
    def getConf(self) -> SparkConfLike: ...  # noqa: N802 - PySpark's name


class SparkSessionLike(Protocol):
    """A ``SparkSession``: its ``SparkContext`` conf and its runtime conf."""

    @property
    def sparkContext(self) -> SparkContextLike: ...  # noqa: N802 - PySpark's name

    @property
    def conf(self) -> SparkConfLike: ...


ConfLike = Mapping[str, object] | SparkConfLike | SparkSessionLike
"""A plain mapping, ``pyspark.SparkConf``, ``SparkSession`` or ``spark.conf`` (RuntimeConfig)."""


def to_conf_dict(conf: ConfLike | None) -> dict[str, str]:
    """Flatten any supported configuration object into a ``dict[str, str]``.

    PySpark objects are recognised by their shape, so pyspark is never imported here. For a
    SparkSession the SparkConf comes first and the session's runtime settings override it.
    """
    if conf is None:
        return {}
    if isinstance(conf, Mapping):
        return {str(key): str(value) for key, value in conf.items()}
    runtime = getattr(conf, "conf", None)
    if runtime is not None and hasattr(runtime, "getAll"):  # a SparkSession, classic or Spark Connect
        merged: dict[str, str] = {}
        with contextlib.suppress(Exception):  # Spark Connect sessions have no SparkContext
            merged.update(to_conf_dict(conf.sparkContext.getConf()))  # type: ignore[union-attr]
        merged.update(to_conf_dict(runtime))
        return merged
    get_all = getattr(conf, "getAll", None)
    if get_all is not None:
        entries = get_all() if callable(get_all) else get_all  # SparkConf vs RuntimeConfig
        items = entries.items() if isinstance(entries, Mapping) else entries
        return {str(key): str(value) for key, value in items}
    raise TypeError(
        "conf must be a mapping, a pyspark SparkConf, a SparkSession or spark.conf, "
        f"not {type(conf).__name__}"
    )


def unprefixed(key: str) -> str:
    """``spark.delta.logStore.class`` -> ``delta.logStore.class``."""
    return key[len(SPARK_PREFIX) :] if key.startswith(SPARK_PREFIX) else key


ConflictMessage = Callable[[str, str, str, str], str]
"""Builds the error for a key set in both spellings: ``(spark_key, spark_value, key, value)``."""


def _inconsistent_logstore_confs(spark_key: str, spark_value: str, base_key: str, base_value: str) -> str:
    return (
        f"[DELTA_INCONSISTENT_LOGSTORE_CONFS] ({base_key} = {base_value}, {spark_key} = {spark_value}) "
        "cannot be set to different values. Please only set one of them, or set them to the same value."
    )


def get_delta_conf(
    conf: Mapping[str, str], key: str, conflict: ConflictMessage = _inconsistent_logstore_confs
) -> str | None:
    """The value of a Delta key, read with and without the ``spark.`` prefix (``key`` in either form).

    Delta reads its keys in both spellings; this is the one place that does. Raises
    :class:`LogStoreConfError` with ``conflict``'s message (by default Delta's
    ``DELTA_INCONSISTENT_LOGSTORE_CONFS``) when both are set to different values.
    """
    base_key = unprefixed(key)
    spark_key = SPARK_PREFIX + base_key
    spark_value, base_value = conf.get(spark_key), conf.get(base_key)
    if spark_value is not None and base_value is not None and spark_value != base_value:
        raise LogStoreConfError(conflict(spark_key, spark_value, base_key, base_value))
    return spark_value if spark_value is not None else base_value


def get_delta_confs_with_prefix(conf: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Every Delta key starting with ``prefix`` (in either spelling), by the rest of its name.

    Each key is read with :func:`get_delta_conf`, so the two spellings must agree.
    """
    base_prefix = unprefixed(prefix)
    spark_prefix = SPARK_PREFIX + base_prefix
    suffixes = {
        key[len(start) :]
        for key in conf
        for start in (spark_prefix, base_prefix)
        if key.startswith(start) and len(key) > len(start)
    }
    values = {suffix: get_delta_conf(conf, base_prefix + suffix) for suffix in sorted(suffixes)}
    return {suffix: value for suffix, value in values.items() if value is not None}


def hadoop_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop view of a Spark conf: plain keys, overridden by ``spark.hadoop.*`` keys."""
    result = {key: value for key, value in conf.items() if not key.startswith(HADOOP_PREFIX)}
    for key, value in conf.items():
        if key.startswith(HADOOP_PREFIX):
            result[key[len(HADOOP_PREFIX) :]] = value
    return result


def parse_spark_defaults(text: str) -> dict[str, str]:
    """Parse ``spark-defaults.conf`` (Java properties: ``key value``, ``key=value`` or ``key: value``).

    Blank lines and lines starting with ``#`` or ``!`` are skipped; a trailing backslash continues
    the line. Raises :class:`LogStoreConfError` naming the line for a key without a value.
    """
    settings: dict[str, str] = {}
    logical: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry, logical = "".join(logical), []
        separator = min(
            (index for index in (entry.find("="), entry.find(":"), _first_space(entry)) if index > 0),
            default=-1,
        )
        if separator < 0:
            raise LogStoreConfError(
                f"line {number} has no value (expected 'key value'; the line is not shown)"
            )
        key = entry[:separator].strip()
        value = entry[separator + 1 :].strip()
        if value[:1] in "=:" and entry[separator].isspace():
            value = value[1:].strip()
        settings[key] = value
    return settings


def _first_space(text: str) -> int:
    return next((index for index, char in enumerate(text) if char.isspace()), -1)
