"""delta-rs's ``storage_options`` as this library's settings, so that code written for deltalake
ports unchanged: ``DeltaTable(uri, storage_options={...})`` and ``write_deltalake(...,
storage_options={...})`` reach the same storage.

delta-rs passes the options to the Rust ``object_store`` crate, whose keys are case-insensitive
and come with or without their cloud's prefix (``AWS_REGION``, ``aws_region`` and ``region`` are
one key). :func:`conf_from_storage_options` turns the keys of the table's cloud into the settings
the stores already read:

======================================================  =============================================
storage option (any spelling object_store accepts)      setting
======================================================  =============================================
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /     ``fs.s3a.access.key`` / ``secret.key`` /
``AWS_SESSION_TOKEN``                                   ``session.token``
``AWS_ENDPOINT_URL``                                    ``fs.s3a.endpoint`` (path-style requests, as
                                                        object_store sends them, unless
                                                        ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true``)
``AWS_REGION`` / ``AWS_DEFAULT_REGION``                 ``fs.s3a.endpoint.region``
``AWS_SKIP_SIGNATURE=true``                             anonymous requests
``AWS_PROFILE``                                         s3fs's ``profile``
``AWS_S3_LOCKING_PROVIDER=dynamodb``,                   nothing, with a warning: delta-rs 1.x no
``DELTA_DYNAMO_TABLE_NAME``,                            longer commits through DynamoDB either, and
``AWS_ENDPOINT_URL_DYNAMODB``                           S3 commits use conditional writes, safe
                                                        beside delta-rs's own
``AZURE_STORAGE_ACCOUNT_NAME`` / ``_ACCOUNT_KEY`` /     adlfs's ``account_name`` / ``account_key`` /
``_SAS_KEY`` / ``_CLIENT_ID`` / ``_CLIENT_SECRET`` /    ``sas_token`` / ``client_id`` /
``_TENANT_ID``                                          ``client_secret`` / ``tenant_id``
``AZURE_STORAGE_USE_EMULATOR=true``                     Azurite's development account at
                                                        ``$AZURITE_BLOB_STORAGE_URL`` (default
                                                        ``http://127.0.0.1:10000``)
``AZURE_STORAGE_ENDPOINT`` (with an account key)        the blob endpoint of a connection string
``GOOGLE_SERVICE_ACCOUNT`` / ``_PATH`` /                ``fs.gs.auth.service.account.json.keyfile``
``GOOGLE_APPLICATION_CREDENTIALS``
``GOOGLE_SERVICE_ACCOUNT_KEY`` (the JSON key)           gcsfs's ``token``
``GOOGLE_SKIP_SIGNATURE=true``                          anonymous requests
``timeout`` (``30s``, ``2m``, ``500ms``)                ``delta.logstores.requestTimeoutMs``
======================================================  =============================================

Keys that change nothing here are accepted: the bucket or container name, ``ALLOW_HTTP`` (plain
HTTP endpoints are always allowed), ``AWS_S3_ALLOW_UNSAFE_RENAME`` and ``AWS_CONDITIONAL_PUT``
(S3 commits always use conditional writes). Any other key, such as server-side encryption, is
refused with :class:`~logstores.errors.LogStoreConfError` naming it: an option is honoured or
refused, never dropped. Options of another cloud than the table's are ignored, as delta-rs
ignores them.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from logstores.close_names import close_matches
from logstores.conf import ConfLike, to_conf_dict
from logstores.errors import LogStoreConfError
from logstores.options import OPTIONS_KEY_PREFIX, fsspec_protocol

_S3 = {
    "access_key_id": "access_key_id",
    "secret_access_key": "secret_access_key",
    "session_token": "token",
    "token": "token",
    "region": "region",
    "default_region": "region",
    "endpoint": "endpoint",
    "endpoint_url": "endpoint",
    "virtual_hosted_style_request": "virtual_hosted",
    "skip_signature": "skip_signature",
    "profile": "profile",
    "s3_locking_provider": "dynamodb",
    "endpoint_url_dynamodb": "dynamodb",
    "bucket": "",
    "bucket_name": "",
    "s3_allow_unsafe_rename": "",
    "conditional_put": "",
}
"""S3 keys without their ``aws_`` prefix -> what they set (``""``: nothing to set)."""
_AZURE = {
    "storage_account_name": "account_name",
    "account_name": "account_name",
    "storage_account_key": "account_key",
    "storage_access_key": "account_key",
    "storage_master_key": "account_key",
    "access_key": "account_key",
    "account_key": "account_key",
    "master_key": "account_key",
    "storage_sas_key": "sas_token",
    "storage_sas_token": "sas_token",
    "sas_key": "sas_token",
    "sas_token": "sas_token",
    "storage_client_id": "client_id",
    "client_id": "client_id",
    "storage_client_secret": "client_secret",
    "client_secret": "client_secret",
    "storage_tenant_id": "tenant_id",
    "storage_authority_id": "tenant_id",
    "tenant_id": "tenant_id",
    "authority_id": "tenant_id",
    "storage_use_emulator": "use_emulator",
    "use_emulator": "use_emulator",
    "storage_endpoint": "endpoint",
    "endpoint": "endpoint",
    "container_name": "",
}
"""Azure keys without their ``azure_`` prefix -> what they set."""
_GOOGLE = {
    "service_account": "keyfile",
    "service_account_path": "keyfile",
    "application_credentials": "keyfile",
    "service_account_key": "key",
    "skip_signature": "skip_signature",
    "bucket": "",
    "bucket_name": "",
}
"""GCS keys without their ``google_`` prefix -> what they set."""
_ANY_CLOUD = {"allow_http": "", "timeout": "timeout"}
"""object_store's client keys (any prefix) -> what they set."""
_STANDALONE = {"delta_dynamo_table_name": ("s3", "dynamodb")}
"""Keys without a cloud prefix -> (cloud, what they set)."""
_log = logging.getLogger(__name__)
_WARNED: set[str] = set()
"""The DynamoDB options warned about once in this process."""
_CLOUDS = {"s3": ("aws_", _S3), "azure": ("azure_", _AZURE), "gcs": ("google_", _GOOGLE)}
_CLOUD_OF_PROTOCOL = {"s3": "s3", "abfs": "azure", "az": "azure", "adl": "azure", "gcs": "gcs"}

REQUEST_TIMEOUT = "spark.delta.logstores.requestTimeoutMs"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account (public: Azurite and the Azure SDKs document it)."""
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?\s*")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def conf_from_storage_options(table_uri: str, storage_options: Mapping[str, object]) -> dict[str, str]:
    """The settings that give the table at ``table_uri`` the storage delta-rs's
    ``storage_options`` describe. Raises :class:`LogStoreConfError` naming a key it cannot honour."""
    scheme = urlsplit(table_uri).scheme.lower() if "://" in table_uri else "file"
    cloud = _CLOUD_OF_PROTOCOL.get(fsspec_protocol(scheme))
    settings: dict[str, str] = {}
    for key, raw in storage_options.items():
        key_cloud, meaning = _meaning(key, cloud)
        if key_cloud is not None and key_cloud != cloud:
            continue  # another cloud's option: delta-rs ignores it too
        if meaning:
            _apply(settings, meaning, str(raw), key, scheme, cloud)
    return _finish(settings, scheme)


def with_storage_options(
    table_uri: str, conf: ConfLike | None, storage_options: Mapping[str, object] | None
) -> ConfLike | None:
    """``conf`` with delta-rs's ``storage_options`` for ``table_uri`` on top (``conf`` itself, a
    Spark session or any other form, when there are none).

    A mapping ``conf`` may hold storage options too, as deltalake code that passes them in the
    position of ``conf`` does (``DeltaTable(uri, None, {"AWS_REGION": ...})``): its keys without a
    dot that object_store knows are read as storage options (settings always have a dot)."""
    if isinstance(conf, Mapping):
        found = {key: value for key, value in conf.items() if "." not in str(key) and _known(str(key))}
        if found:
            conf = {key: value for key, value in conf.items() if key not in found}
            storage_options = {**found, **(storage_options or {})}
    if not storage_options:
        return conf
    return {**to_conf_dict(conf), **conf_from_storage_options(table_uri, storage_options)}


def _known(key: str) -> bool:
    return _lookup(key.strip().lower()) is not None


def _meaning(key: str, cloud: str | None = None) -> tuple[str | None, str]:
    """(the cloud a key belongs to, ``None`` for every cloud; what it sets). Raises
    :class:`LogStoreConfError` naming a key object_store does not have, with close matches."""
    lowered = key.strip().lower()
    found = _lookup(lowered, cloud)
    if found is not None:
        return found
    known = [prefix + name for prefix, names in _CLOUDS.values() for name in names] + list(_STANDALONE)
    suggestion = close_matches(lowered, known)
    hint = f" Did you mean {', '.join(name.upper() for name in suggestion)}?" if suggestion else ""
    raise LogStoreConfError(
        f"storage option {key!r} is not supported: this library honours the object_store keys of "
        f"its table's cloud that it can apply, and refuses the rest rather than ignore them.{hint}"
    )


def _lookup(lowered: str, cloud: str | None = None) -> tuple[str | None, str] | None:
    """:func:`_meaning` of a lowercase key, ``None`` if object_store has no such key. A key without
    a prefix that several clouds have (``endpoint``) is ``cloud``'s, the table's, if it has it."""
    if lowered in _STANDALONE:
        return _STANDALONE[lowered]
    for owner, (prefix, names) in _CLOUDS.items():
        if lowered.startswith(prefix):
            bare = lowered.removeprefix(prefix)
            if bare in names:
                return owner, names[bare]
            if bare in _ANY_CLOUD:
                return None, _ANY_CLOUD[bare]
    if lowered in _ANY_CLOUD:
        return None, _ANY_CLOUD[lowered]
    owners = sorted(
        (name for name, (_, names) in _CLOUDS.items() if lowered in names), key=lambda c: c != cloud
    )
    if owners:
        return owners[0], _CLOUDS[owners[0]][1][lowered]
    return None


_AZURE_OPTIONS = ("account_name", "account_key", "sas_token", "client_id", "client_secret", "tenant_id")


def _apply(  # noqa: PLR0917 - one option's parts
    settings: dict[str, str], meaning: str, value: str, key: str, scheme: str, cloud: str | None
) -> None:
    """Record what one option sets (Azure's emulator and endpoint wait for the account)."""
    option = f"{OPTIONS_KEY_PREFIX}{scheme}.options."
    hadoop = "spark.hadoop.fs.s3a."
    simple = {
        "access_key_id": f"{hadoop}access.key",
        "secret_access_key": f"{hadoop}secret.key",
        "token": f"{hadoop}session.token",
        "region": f"{hadoop}endpoint.region",
        "endpoint": f"{hadoop}endpoint",
        "profile": f"{option}profile",
        "keyfile": "spark.hadoop.fs.gs.auth.service.account.json.keyfile",
        "key": f"{option}token",
    }
    if cloud == "azure" and meaning in _AZURE_OPTIONS:
        settings[f"{option}{meaning}"] = value
    elif cloud == "azure" and meaning in ("use_emulator", "endpoint"):
        settings[f"azure.{meaning}"] = value  # resolved with the account in _finish
    elif meaning in simple:
        settings[simple[meaning]] = value
    elif meaning == "virtual_hosted":
        settings["s3.virtual_hosted"] = str(_flag(value, key)).lower()
    elif meaning == "skip_signature":
        if _flag(value, key) and cloud == "s3":
            settings[f"{hadoop}aws.credentials.provider"] = "AnonymousAWSCredentialsProvider"
        elif _flag(value, key):
            settings["spark.hadoop.fs.gs.auth.type"] = "UNAUTHENTICATED"
    elif meaning == "dynamodb":
        settings["s3.dynamodb"] = ",".join(filter(None, [settings.get("s3.dynamodb"), key.upper()]))
    elif meaning == "timeout":
        settings[REQUEST_TIMEOUT] = str(_milliseconds(value, key))


def _finish(settings: dict[str, str], scheme: str) -> dict[str, str]:
    """The settings that depend on several options: path-style requests, Azure's emulator and
    endpoint (one connection string)."""
    dynamodb = settings.pop("s3.dynamodb", None)
    if dynamodb and dynamodb not in _WARNED:
        _WARNED.add(dynamodb)
        _log.warning(
            "storage options %s: delta-rs 1.x no longer commits through DynamoDB, and neither does "
            "this library for these options; commits to %s use S3 conditional writes, as delta-rs's "
            "do. To share a table with Delta on Spark's S3DynamoDBLogStore, set "
            "spark.delta.logStore.%s.impl to io.delta.storage.S3DynamoDBLogStore instead",
            dynamodb,
            scheme,
            scheme,
        )
    virtual = settings.pop("s3.virtual_hosted", None)
    endpoint = settings.get("spark.hadoop.fs.s3a.endpoint")
    if endpoint and virtual != "true":  # object_store's requests are path-style unless asked
        settings["spark.hadoop.fs.s3a.path.style.access"] = "true"
    option = f"{OPTIONS_KEY_PREFIX}{scheme}.options."
    use_emulator = settings.pop("azure.use_emulator", None)
    blob_endpoint = settings.pop("azure.endpoint", None)
    if use_emulator is not None and _flag(use_emulator, "AZURE_STORAGE_USE_EMULATOR"):
        base = os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000").rstrip("/")
        settings.setdefault(f"{option}account_name", AZURITE_ACCOUNT)
        settings.setdefault(f"{option}account_key", AZURITE_KEY)
        blob_endpoint = blob_endpoint or f"{base}/{settings[f'{option}account_name']}"
    if blob_endpoint is not None:
        account, key = settings.get(f"{option}account_name"), settings.get(f"{option}account_key")
        if account is None or key is None:
            raise LogStoreConfError(
                "storage option AZURE_STORAGE_ENDPOINT needs AZURE_STORAGE_ACCOUNT_NAME and "
                "AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_USE_EMULATOR=true)"
            )
        protocol = "https" if blob_endpoint.startswith("https") else "http"
        settings[f"{option}connection_string"] = (
            f"DefaultEndpointsProtocol={protocol};AccountName={account};AccountKey={key};"
            f"BlobEndpoint={blob_endpoint};"
        )
        del settings[f"{option}account_name"], settings[f"{option}account_key"]
    return settings


def _flag(value: str, key: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise LogStoreConfError(f"storage option {key}={value!r} is neither true nor false")
    return lowered in ("true", "1", "yes")


def _milliseconds(value: str, key: str) -> int:
    match = _DURATION.fullmatch(value)
    if match is None:
        raise LogStoreConfError(f"storage option {key}={value!r} is not a duration such as 30s or 2m")
    unit = (match.group(2) or "s")[0] if match.group(2) != "ms" else "ms"
    return round(float(match.group(1)) * _DURATION_MS[unit])
