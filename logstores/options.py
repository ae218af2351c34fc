"""Storage options for fsspec filesystems, derived from a Spark/Hadoop configuration.

Two sources, the later one winning:

1. the usual Hadoop connector keys (``fs.s3a.endpoint``, ``fs.gs.project.id``,
   ``fs.azure.account.key.<account>.dfs.core.windows.net``, ...), plain or ``spark.hadoop.``;
2. the explicit escape hatch ``spark.delta.logStore.<scheme>.options.<name>`` (or without
   ``spark.``), passed to that scheme's filesystem as the storage option ``<name>``.

Values arrive as strings; ``"true"``/``"false"`` become booleans and JSON objects become dicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from logstores.cloud_options import CLOUD_OPTION_MAPPERS
from logstores.conf import get_delta_confs_with_prefix, hadoop_conf

OPTIONS_KEY_PREFIX = "delta.logStore."
OPTIONS_KEY_INFIX = ".options."

FSSPEC_PROTOCOLS: dict[str, str] = {
    "": "file",
    "file": "file",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gcs",
    "abfss": "abfs",
    "az": "abfs",
    "wasb": "abfs",
    "wasbs": "abfs",
}
"""URI scheme -> fsspec protocol, where they differ (everything else maps to itself)."""

OptionMapper = Callable[[str, Mapping[str, str]], dict[str, Any]]

HADOOP_OPTION_MAPPERS: dict[str, OptionMapper] = {**CLOUD_OPTION_MAPPERS}
"""fsspec protocol -> function(scheme, hadoop conf) returning storage options."""


def fsspec_protocol(scheme: str) -> str:
    """The fsspec protocol serving a URI scheme (``s3a`` -> ``s3``)."""
    scheme = scheme.lower()
    return FSSPEC_PROTOCOLS.get(scheme, scheme)


def coerce_option(value: str) -> Any:
    """Turn a conf string into the Python value an fsspec option expects."""
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if value.strip().startswith("{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def explicit_options(scheme: str, conf: Mapping[str, str]) -> dict[str, Any]:
    """The ``(spark.)delta.logStore.<scheme>.options.<name>`` entries as storage options.

    Raises :class:`~logstores.errors.LogStoreConfError` if both spellings of one key disagree.
    """
    prefix = f"{OPTIONS_KEY_PREFIX}{scheme.lower()}{OPTIONS_KEY_INFIX}"
    return {name: coerce_option(value) for name, value in get_delta_confs_with_prefix(conf, prefix).items()}


def storage_options(scheme: str, conf: Mapping[str, str]) -> dict[str, Any]:
    """All fsspec storage options for ``scheme`` under ``conf``."""
    protocol = fsspec_protocol(scheme)
    mapper = HADOOP_OPTION_MAPPERS.get(protocol)
    options = mapper(scheme.lower(), hadoop_conf(conf)) if mapper else {}
    options.update(explicit_options(scheme, conf))
    return options
