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
from types import ModuleType
from typing import cast

from logstores.base import LogStore
from logstores.close_names import close_matches
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
    "az": "azure",
    "gs": "gcs",
    "gcs": "gcs",
    "file": "local",
    "memory": "memory",
}
"""URI scheme -> alias of the store used when no ``spark.delta.logStore.<scheme>.impl`` is set.

A bare local path has the scheme ``file`` (see :func:`logstores.delegating.store_scheme`). ``az``
and ``gcs`` are fsspec's (and delta-rs's) names for Azure and GCS, which Hadoop does not have."""

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
    Raises :class:`LogStoreConfError` when the name resolves to nothing (listing the close
    matches among the aliases, Delta's class names, the built-in Python paths and the installed
    plugins), when its module has no such class, when its module or one of its dependencies is
    not installed (saying what to install), or when the class is not a ``LogStore`` subclass.
    """
    source = _source(name, key)
    alias = canonical_alias(name)
    if alias is not None:
        known = KNOWN_LOG_STORES[alias]
        cls = _import_class(known.class_path, name, key, known.extra)
    else:
        cls = _plugin_or_path(name.strip(), key)
    if not (isinstance(cls, type) and issubclass(cls, LogStore)):
        raise LogStoreConfError(
            f"Can not use {name} as a LogStore ({source}): it is not a subclass of logstores.LogStore"
        )
    return cls


def _source(name: str, key: str | None) -> str:
    return f"{key} = {name}" if key else name


def _where(key: str | None) -> str:
    return f" for key {key}" if key else ""


def _plugin_or_path(name: str, key: str | None) -> type:
    for entry in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            return cast(type, entry.load())
        except ImportError as exc:
            raise _import_error(name, key, entry.module, exc, None) from exc
        except AttributeError:
            raise LogStoreConfError(
                f"LogStore plugin '{name}'{_where(key)} cannot be loaded: its entry point "
                f"{entry.value!r} names a class that module {entry.module} does not define"
            ) from None
    return _import_class(name, name, key, None)


def _import_class(class_path: str, name: str, key: str | None, extra: str | None) -> type:
    """Import ``module:Class`` or ``module.Class``; ``name`` and ``key`` are what the user set."""
    module_name, _, attribute = class_path.partition(":")
    if not attribute:
        module_name, _, attribute = class_path.rpartition(".")
    if not module_name or not attribute:
        why = "it is not an alias, a Delta class name or a plugin"
        raise LogStoreConfError(_unknown_name(name, key, why))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _import_error(name, key, module_name, exc, extra) from exc
    try:
        return cast(type, getattr(module, attribute))
    except AttributeError:
        raise LogStoreConfError(_missing_class(name, key, module, attribute)) from None


def _import_error(
    name: str, key: str | None, module_name: str, exc: ImportError, extra: str | None
) -> LogStoreConfError:
    """The error for a module that cannot be imported: absent (an unknown name), or present but
    missing one of its own dependencies (what to install), or failing for another reason."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
        return LogStoreConfError(_unknown_name(name, key, f"there is no Python module {module_name}"))
    where = _where(key)
    if missing:
        install = (
            f"pip install 'delta-logstores[{extra}]'"
            if extra
            else f"install the distribution that provides the Python module '{missing}'"
        )
        return LogStoreConfError(
            f"LogStore class '{name}'{where} cannot be loaded: its module {module_name} needs the "
            f"module '{missing}', which is not installed; {install}"
        )
    return LogStoreConfError(
        f"LogStore class '{name}'{where} cannot be loaded: importing its module {module_name} failed ({exc})"
    )


def _missing_class(name: str, key: str | None, module: ModuleType, attribute: str) -> str:
    where = _where(key)
    stores = sorted(
        member
        for member, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, LogStore) and value is not LogStore
    )
    matches = close_matches(attribute, stores)
    hint = f" Did you mean {module.__name__}.{matches[0]}?" if matches else ""
    listed = ", ".join(stores) if stores else "none"
    return (
        f"LogStore class '{name}'{where} not found: module {module.__name__} has no attribute "
        f"'{attribute}'.{hint} LogStore classes in {module.__name__}: {listed}"
    )


def _unknown_name(name: str, key: str | None, why: str) -> str:
    """An unknown name: its close matches, or (when none is close) how stores are named."""
    where = _where(key)
    plugins = _installed_plugins()
    matches = close_matches(name, [*KNOWN_LOG_STORES, *JVM_CLASS_NAMES, *_OUR_NAMES, *plugins])
    if matches:
        others = f" (or {', '.join(matches[1:])})" if len(matches) > 1 else ""
        return f"Unknown LogStore class '{name}'{where}. Did you mean {matches[0]}?{others}"
    held = ", ".join(repr(plugin) for plugin in plugins) if plugins else "no plugins"
    return (
        f"Unknown LogStore class '{name}'{where}: {why}. A LogStore is named by an alias "
        f"({', '.join(sorted(KNOWN_LOG_STORES))}), a Delta class name (io.delta.storage.<Name>), a "
        "Python path such as 'package.module.ClassName', or the name of an installed plugin (the "
        f"entry-point group '{ENTRY_POINT_GROUP}' was searched and holds {held})"
    )


def _installed_plugins() -> list[str]:
    return sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})
