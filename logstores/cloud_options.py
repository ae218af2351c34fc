"""Hadoop connector settings of S3A, the GCS connector and ABFS/WASB as fsspec storage options.

Each mapper receives the scheme and the Hadoop view of the configuration (plain keys, with
``spark.hadoop.*`` already folded in) and returns options for s3fs, gcsfs or adlfs:

=========================================================  ===========================================
Hadoop key                                                 storage option
=========================================================  ===========================================
``fs.s3a.endpoint`` (scheme added from                     ``endpoint_url``
``fs.s3a.connection.ssl.enabled`` when missing)
``fs.s3a.access.key`` / ``secret.key`` / ``session.token``  ``key`` / ``secret`` / ``token``
``fs.s3a.path.style.access=true``                          ``config_kwargs.s3.addressing_style="path"``
``fs.s3a.endpoint.region`` (or ``fs.s3a.region``)          ``client_kwargs.region_name``
``fs.s3a.aws.credentials.provider`` = ``...Anonymous...``  ``anon=True``
``fs.gs.project.id``                                       ``project``
``fs.gs.auth.service.account.json.keyfile``                ``token`` (the key file path)
``fs.gs.auth.type=UNAUTHENTICATED`` (or                    ``token="anon"``
``fs.gs.auth.null.enable=true``)
``fs.gs.storage.root.url``, else ``STORAGE_EMULATOR_HOST`` ``endpoint_url``
``fs.azure.account.key.<account>.(dfs|blob).core...``      ``account_name`` + ``account_key``
``fs.azure.sas.<container>.<account>.blob.core...``        ``account_name`` + ``sas_token``
``fs.azure.account.oauth2.client.id/.secret/.endpoint``    ``client_id`` / ``client_secret`` /
                                                           ``tenant_id`` (from the endpoint URL)
``fs.azure.storage.connection.string``                     ``connection_string``
=========================================================  ===========================================

Anything else is reachable through ``spark.delta.logStore.<scheme>.options.<name>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

ANONYMOUS_PROVIDERS = ("AnonymousAWSCredentialsProvider",)


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def s3_options(scheme: str, conf: Mapping[str, str]) -> dict[str, Any]:
    """s3fs options from ``fs.s3a.*`` keys (used for ``s3``, ``s3a`` and ``s3n`` alike)."""
    options: dict[str, Any] = {}
    endpoint = conf.get("fs.s3a.endpoint", "").strip()
    if endpoint:
        if "://" not in endpoint:
            ssl = conf.get("fs.s3a.connection.ssl.enabled", "true").strip().lower() != "false"
            endpoint = ("https://" if ssl else "http://") + endpoint
        options["endpoint_url"] = endpoint
    for hadoop_key, option in (
        ("fs.s3a.access.key", "key"),
        ("fs.s3a.secret.key", "secret"),
        ("fs.s3a.session.token", "token"),
    ):
        if conf.get(hadoop_key):
            options[option] = conf[hadoop_key]
    if any(name in conf.get("fs.s3a.aws.credentials.provider", "") for name in ANONYMOUS_PROVIDERS):
        options["anon"] = True
    if _truthy(conf.get("fs.s3a.path.style.access")):
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    region = conf.get("fs.s3a.endpoint.region") or conf.get("fs.s3a.region")
    if region:
        options["client_kwargs"] = {"region_name": region.strip()}
    return options


def gcs_options(scheme: str, conf: Mapping[str, str]) -> dict[str, Any]:
    """gcsfs options from ``fs.gs.*`` keys and the ``STORAGE_EMULATOR_HOST`` variable."""
    options: dict[str, Any] = {}
    if conf.get("fs.gs.project.id"):
        options["project"] = conf["fs.gs.project.id"]
    if conf.get("fs.gs.auth.service.account.json.keyfile"):
        options["token"] = conf["fs.gs.auth.service.account.json.keyfile"]
    if conf.get("fs.gs.auth.type", "").strip().upper() == "UNAUTHENTICATED" or _truthy(
        conf.get("fs.gs.auth.null.enable")
    ):
        options["token"] = "anon"
    endpoint = conf.get("fs.gs.storage.root.url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if endpoint and endpoint != "default":
        endpoint = endpoint.strip().rstrip("/")
        options["endpoint_url"] = endpoint if "://" in endpoint else f"http://{endpoint}"
    return options


_ACCOUNT_KEY = re.compile(r"^fs\.azure\.account\.key\.([^.]+)\.(?:dfs|blob)\.core\.windows\.net$")
_SAS_KEY = re.compile(r"^fs\.azure\.sas\.[^.]+\.([^.]+)\.(?:dfs|blob)\.core\.windows\.net$")
_TENANT = re.compile(r"login\.microsoftonline\.com/([^/]+)/")


def azure_options(scheme: str, conf: Mapping[str, str]) -> dict[str, Any]:
    """adlfs options from ``fs.azure.*`` keys (account key, SAS, OAuth client, connection string)."""
    options: dict[str, Any] = {}
    for key in sorted(conf):
        account_key = _ACCOUNT_KEY.match(key)
        if account_key:
            options["account_name"] = account_key.group(1)
            options["account_key"] = conf[key]
            continue
        sas = _SAS_KEY.match(key)
        if sas:
            options.setdefault("account_name", sas.group(1))
            options["sas_token"] = conf[key]
    for hadoop_key, option in (
        ("fs.azure.account.oauth2.client.id", "client_id"),
        ("fs.azure.account.oauth2.client.secret", "client_secret"),
        ("fs.azure.storage.connection.string", "connection_string"),
    ):
        if conf.get(hadoop_key):
            options[option] = conf[hadoop_key]
    tenant = _TENANT.search(conf.get("fs.azure.account.oauth2.client.endpoint", ""))
    if tenant:
        options["tenant_id"] = tenant.group(1)
    return options


CLOUD_OPTION_MAPPERS: dict[str, Callable[[str, Mapping[str, str]], dict[str, Any]]] = {
    "s3": s3_options,
    "gcs": gcs_options,
    "abfs": azure_options,
}
"""fsspec protocol -> mapper, merged into :data:`logstores.options.HADOOP_OPTION_MAPPERS`."""
