"""``create_log_store``: the one entry point that turns a configuration into a LogStore."""

from __future__ import annotations

from collections.abc import Mapping

from logstores.base import LogStore
from logstores.conf import ConfLike, get_delta_conf, to_conf_dict
from logstores.delegating import DelegatingLogStore, StoreChoice, choose_store_for_scheme, store_scheme
from logstores.errors import LogStoreConfError
from logstores.registry import canonical_alias, load_log_store_class

LOG_STORE_CLASS_KEY = "spark.delta.logStore.class"
_KEY_PREFIXES = ("spark.delta.logStore.", "delta.logStore.")


def create_log_store(conf: ConfLike | None = None) -> LogStore:
    """The LogStore Delta would use under ``conf``.

    ``conf`` may be a mapping, a ``pyspark.SparkConf``, a ``SparkSession`` or ``spark.conf``.
    If ``spark.delta.logStore.class`` (or ``delta.logStore.class``) is set, that class is loaded
    and built from the conf; otherwise a :class:`DelegatingLogStore` picks a store per scheme.
    Every store setting is checked first (see :func:`check_log_store_conf`), so a bad one fails
    here rather than when a path of its scheme is first used.
    Raises :class:`LogStoreConfError` for conflicting, inconsistent or unloadable settings.
    """
    settings = to_conf_dict(conf)
    class_name = _checked_class_name(settings)
    if class_name is None or canonical_alias(class_name) == "delegating":
        return DelegatingLogStore(settings)
    return load_log_store_class(class_name, key=_spelled(settings, LOG_STORE_CLASS_KEY))(settings)


def explain_log_store(uri: str, conf: ConfLike | None = None) -> StoreChoice:
    """Which store class :func:`create_log_store` would use for ``uri``, and which key chose it."""
    settings = to_conf_dict(conf)
    class_name = _checked_class_name(settings)
    if class_name is None or canonical_alias(class_name) == "delegating":
        return choose_store_for_scheme(store_scheme(uri), settings)
    key = _spelled(settings, LOG_STORE_CLASS_KEY)
    return StoreChoice(load_log_store_class(class_name, key=key), f"{key} = {class_name}")


def check_log_store_conf(conf: ConfLike | None = None) -> None:
    """Check every store setting of ``conf`` at once, loading each class it names.

    The settings are ``spark.delta.logStore.class`` and every ``spark.delta.logStore.<scheme>.impl``
    (each also without ``spark.``). Delta's own errors come first, as Delta raises them: a class
    key together with scheme keys (``DELTA_INVALID_LOGSTORE_CONF``) or one key set to two values
    (``DELTA_INCONSISTENT_LOGSTORE_CONFS``). Then each named class is resolved; one
    :class:`LogStoreConfError` lists every key whose class cannot be used, with its value and the
    reason (an unknown name with its close matches, a module without that class, a missing
    dependency and what to install, a class that is not a LogStore).
    """
    _checked_class_name(to_conf_dict(conf))


def _checked_class_name(settings: Mapping[str, str]) -> str | None:
    """The class key's value, after :func:`check_log_store_conf`'s checks of ``settings``."""
    class_name = _validated_class_name(settings)
    problems: dict[str, str] = {}
    for key, name in _store_names(settings).items():
        try:
            load_log_store_class(name, key=key)
        except LogStoreConfError as exc:
            problems[f"{key} = {name}"] = str(exc)
    if len(problems) == 1:
        raise LogStoreConfError(next(iter(problems.values())))
    if problems:
        details = "\n".join(f"- {problem}" for problem in problems.values())
        raise LogStoreConfError(
            f"{len(problems)} LogStore settings name no usable class: {'; '.join(problems)}\n{details}"
        )
    return class_name


def _store_names(settings: Mapping[str, str]) -> dict[str, str]:
    """Each store-choosing key (one spelling per key, ``spark.`` first) and the name it sets.

    Both spellings of a key hold the same value here: :func:`_validated_class_name` checked it."""
    class_keys, scheme_keys = _log_store_keys(settings)
    bases = sorted({key.removeprefix("spark.") for key in (*class_keys, *scheme_keys)})
    spelled = [_spelled(settings, f"spark.{base}") for base in bases]
    return {key: settings[key] for key in spelled}


def _validated_class_name(settings: Mapping[str, str]) -> str | None:
    class_keys, scheme_keys = _log_store_keys(settings)
    if class_keys and scheme_keys:
        raise LogStoreConfError(
            f"[DELTA_INVALID_LOGSTORE_CONF] (`{', '.join(class_keys)}`) and "
            f"(`{', '.join(scheme_keys)}`) cannot be set at the same time. "
            "Please set only one group of them."
        )
    for key in scheme_keys:  # raises DELTA_INCONSISTENT_LOGSTORE_CONFS
        get_delta_conf(settings, key)
    return get_delta_conf(settings, LOG_STORE_CLASS_KEY)


def _log_store_keys(settings: Mapping[str, str]) -> tuple[list[str], list[str]]:
    keys = sorted(key for key in settings if key.startswith(_KEY_PREFIXES) and ".options." not in key)
    return [key for key in keys if key.endswith("class")], [key for key in keys if key.endswith(".impl")]


def _spelled(settings: Mapping[str, str], key: str) -> str:
    """The spelling of ``key`` the user actually set (with or without ``spark.``)."""
    return key if key in settings else key.removeprefix("spark.")
