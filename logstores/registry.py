"""Where every log store class lives, and how a class name from configuration is loaded.

Names accepted wherever a store class is configured:

* a short alias from :data:`KNOWN_LOG_STORES` (``s3``, ``local``, ...);
* Delta's JVM class names (:data:`JVM_CLASS_NAMES`), so a conf written for Delta on Spark works;
* a Python dotted path, ``pkg.mod.Class`` or ``pkg.mod:Class``;
* a name registered by a third-party package under the entry-point group ``delta_logstores``.

Modules are imported only when a store is first asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points

from logstores.base import LogStore
from logstores.errors import LogStoreConfError

ENTRY_POINT_GROUP = "delta_logstores"


@dataclass(frozen=True, slots=True)
class KnownLogStore:
    """A built-in store: its class path and the extra that installs what it needs."""

    class_path: str
    extra: str | None = None


KNOWN_LOG_STORES: dict[str, KnownLogStore] = {
    "local": KnownLogStore("logstores.local:LocalLogStore"),
    "memory": KnownLogStore("logstores.memory:MemoryLogStore"),
    "hdfs": KnownLogStore("logstores.hdfs:HDFSLogStore"),
    "s3": KnownLogStore("logstores.s3:S3LogStore", "s3"),
    "s3-single-driver": KnownLogStore("logstores.s3:S3SingleDriverLogStore", "s3"),
    "s3-dynamodb": KnownLogStore("logstores.s3_dynamodb:S3DynamoDBLogStore", "s3"),
    "gcs": KnownLogStore("logstores.gcs:GCSLogStore", "gcs"),
    "azure": KnownLogStore("logstores.azure:AzureLogStore", "azure"),
    "delegating": KnownLogStore("logstores.delegating:DelegatingLogStore"),
}
"""Alias -> built-in store."""

_JVM_STORES = {
    "S3SingleDriverLogStore": "s3-single-driver",
    "HDFSLogStore": "hdfs",
    "LocalLogStore": "local",
    "AzureLogStore": "azure",
    "GCSLogStore": "gcs",
    "DelegatingLogStore": "delegating",
}
JVM_CLASS_NAMES: dict[str, str] = {
    **{f"io.delta.storage.{name}": alias for name, alias in _JVM_STORES.items()},
    **{f"org.apache.spark.sql.delta.storage.{name}": alias for name, alias in _JVM_STORES.items()},
    "io.delta.storage.S3DynamoDBLogStore": "s3-dynamodb",
}
"""Delta Lake JVM class name -> alias of our equivalent."""

SCHEME_DEFAULTS: dict[str, str] = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "wasb": "azure",
    "wasbs": "azure",
    "gs": "gcs",
    "file": "local",
    "": "local",
    "memory": "memory",
}
"""URI scheme -> alias of the store used when no ``spark.delta.logStore.<scheme>.impl`` is set."""

DEFAULT_SCHEME_STORE = "hdfs"
"""Alias of the store for schemes missing from :data:`SCHEME_DEFAULTS`."""

_OUR_NAMES = {known.class_path.replace(":", "."): alias for alias, known in KNOWN_LOG_STORES.items()}


def canonical_alias(name: str) -> str | None:
    """The built-in alias ``name`` refers to (alias, JVM name or our class path), if any."""
    name = name.strip()
    if name in KNOWN_LOG_STORES:
        return name
    return JVM_CLASS_NAMES.get(name) or _OUR_NAMES.get(name.replace(":", "."))


def load_log_store_class(name: str, *, key: str | None = None) -> type[LogStore]:
    """Resolve a configured store name to a :class:`LogStore` subclass.

    ``key`` is the configuration key the name came from; it is named in every error.
    Raises :class:`LogStoreConfError` when the class cannot be found or imported (saying which
    extra to install for built-in stores) or is not a ``LogStore`` subclass.
    """
    source = f"{key} = {name}" if key else name
    alias = canonical_alias(name)
    if alias is not None:
        known = KNOWN_LOG_STORES[alias]
        cls = _import_class(known.class_path, source, known.extra)
    else:
        plugin = _entry_point(name.strip())
        cls = plugin if plugin is not None else _import_class(name.strip(), source, None)
    if not (isinstance(cls, type) and issubclass(cls, LogStore)):
        raise LogStoreConfError(
            f"Can not use {name} as a LogStore ({source}): it is not a subclass of logstores.LogStore"
        )
    return cls


def _entry_point(name: str) -> type | None:
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=name):
        return entry.load()
    return None


def _installed_plugins() -> str:
    names = sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})
    return f"{', '.join(repr(name) for name in names)}" if names else "no plugins"


def _import_class(class_path: str, source: str, extra: str | None) -> type:
    module_name, _, attribute = class_path.partition(":")
    if not attribute:
        module_name, _, attribute = class_path.rpartition(".")
    if not module_name or not attribute:
        raise LogStoreConfError(
            f"Can not instantiate LogStore class ({source}): expected an alias, a Delta class name or a "
            "Python path such as 'package.module.ClassName', or the name of an installed plugin (the "
            f"entry-point group '{ENTRY_POINT_GROUP}' was searched and holds {_installed_plugins()}; "
            f"aliases: {', '.join(sorted(KNOWN_LOG_STORES))})"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing_dependency = extra and exc.name and exc.name.split(".")[0] != module_name.split(".")[0]
        hint = f"; install it with: pip install 'delta-logstores[{extra}]'" if missing_dependency else ""
        raise LogStoreConfError(
            f"Can not instantiate LogStore class ({source}): cannot import {module_name} ({exc}){hint}"
        ) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise LogStoreConfError(
            f"Can not instantiate LogStore class ({source}): {module_name} has no attribute {attribute}"
        ) from None
