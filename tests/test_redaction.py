"""No credential is ever shown: a unique secret is planted in every place one can go, and every
output is searched for it (repr, DEBUG logs, errors, the CLI's text, JSON and --debug output)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from logstores import LogStore, LogStoreConfError, create_log_store, explain_log_store
from logstores.redaction import (
    REDACTED,
    SecretFilter,
    is_secret_key,
    redact,
    redact_url,
    scrub,
    secret_values,
)
from replay import DeltaLog, write_table
from replay.cli import main
from tests.cloud_servers import AZURITE_ACCOUNT, Azurite, GCSServer, MotoServer, unique_name
from tests.paths import REPO_ROOT

SECRETS = {
    name: f"Sekr1t-{name}-{index:02d}-mustNotLeak"
    for index, name in enumerate(
        [
            "s3-secret",
            "s3-token",
            "nested",
            "s3-userinfo",
            "ddb-userinfo",
            "azure-key",
            "sas",
            "gcs-userinfo",
            "oauth",
        ]
    )
}


# -- the redaction module ------------------------------------------------------------------------------
def test_redact_is_recursive_and_reads_json_and_urls() -> None:
    options = {
        "key": "AKID",
        "endpoint_url": "http://user:pw@host:9000/x?sig=abc&keep=1",
        "client_kwargs": {"region_name": "eu", "aws_secret_access_key": "s", "nested": [{"token": "t"}]},
        "spark.delta.logStore.s3a.options.client_kwargs": (
            '{"aws_secret_access_key": "s", "region_name": "eu"}'
        ),
        "fs.defaultFS": "abfss://container@account.dfs.core.windows.net/x",
        "plain": "value",
        "spark.delta.logStore.s3a.impl": "s3",
    }
    assert redact(options) == {
        "key": REDACTED,
        "endpoint_url": "http://host:9000/x?sig=***&keep=1",
        "client_kwargs": {
            "region_name": "eu",
            "aws_secret_access_key": REDACTED,
            "nested": [{"token": REDACTED}],
        },
        "spark.delta.logStore.s3a.options.client_kwargs": (
            '{"aws_secret_access_key":"***","region_name":"eu"}'
        ),
        "fs.defaultFS": "abfss://container@account.dfs.core.windows.net/x",
        "plain": "value",
        "spark.delta.logStore.s3a.impl": "s3",
    }


def test_urls_and_texts_lose_userinfo_signatures_and_known_secrets() -> None:
    assert redact_url("https://token@host/p") == "https://host/p"
    assert redact_url("s3a://key:secret@bucket/t") == "s3a://bucket/t"
    assert redact_url("wasbs://c@acct.blob.core.windows.net/p") == "wasbs://c@acct.blob.core.windows.net/p"
    text = 'Could not connect to "http://u:pw@h:1/b?X-Amz-Signature=abc" AccountKey=xyz; and hunter22'
    assert (
        scrub(text, {"hunter22"})
        == 'Could not connect to "http://h:1/b?X-Amz-Signature=***" AccountKey=***; and ***'
    )
    conf = {
        "fs.s3a.secret.key": "s1",
        "fs.s3a.endpoint": "http://u:s2@host",
        "spark.delta.logStore.s3a.options.client_kwargs": '{"aws_secret_access_key": "s3s3"}',
        "spark.delta.logStore.abfs.options.connection_string": "AccountName=a;AccountKey=k4k4;",
        "fs.s3a.endpoint.region": "us-east-1",
    }
    assert secret_values(conf) == {
        "s3s3",
        "k4k4",
        "AccountName=a;AccountKey=k4k4;",
    }  # shorter ones are not searched
    assert is_secret_key("fs.azure.sas.c.a.blob.core.windows.net") and not is_secret_key("fs.s3a.endpoint")


def test_the_secret_filter_scrubs_messages_arguments_and_tracebacks() -> None:
    record = logging.LogRecord("botocore", logging.DEBUG, __file__, 1, "header %s", ("tok-123456",), None)
    try:
        raise RuntimeError("http://u:pw@host failed with tok-123456")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    SecretFilter({"tok-123456"}).filter(record)
    assert record.getMessage() == "header ***"
    assert "tok-123456" not in (record.exc_text or "") and "pw@" not in (record.exc_text or "")


# -- credentials in URI userinfo -------------------------------------------------------------------------
USERINFO_SECRETS = [
    "SeKrA1/SeKrB2",  # a raw "/" ends a URL parser's authority early
    "SeKrA1+SeKrB2/SeKrC3",  # AWS secrets hold "+" and "/"
    "SeKrA1@SeKrB2",  # a raw "@": the host starts after the last one
    "SeKrA1%2FSeKrB2",  # an encoded "/"
    "12/SeKrA1@SeKrB2",  # digits and "/" look like a port and a path
]
"""Every piece of every secret holds ``SeKr``: a text holding ``SeKr`` leaked some of one."""


def userinfo_uris(secret: str) -> list[str]:
    return [
        f"s3a://AKIDEXAMPLE:{secret}@bucket/warehouse/t",
        f"memory://user:{secret}@bucket/t",
        f"gs://u:{secret}@bucket/t?sig=SeKrSig",
    ]


@pytest.mark.parametrize("secret", USERINFO_SECRETS)
def test_the_uri_as_shown_has_no_userinfo_secret(secret: str) -> None:
    s3, memory, gcs = userinfo_uris(secret)
    assert (redact_url(s3), redact_url(memory), redact_url(gcs)) == (
        "s3a://bucket/warehouse/t",
        "memory://bucket/t",
        "gs://bucket/t?sig=***",
    )
    text = f"DeltaLog('{s3}') failed: no commit files in {memory}/_delta_log, see \"{gcs}\""
    assert "SeKr" not in scrub(text)
    assert "s3a://bucket/warehouse/t" in scrub(text)
    assert secret_values({"path": s3}) == {secret}
    for kept in ("abfss://c@acct.dfs.core.windows.net/t", "http://host.example:9000/b/a@b", "hdfs://nn/p"):
        assert redact_url(kept) == kept


@pytest.mark.parametrize("secret", USERINFO_SECRETS)
def test_table_uris_with_userinfo_secrets_are_refused_unshown(
    secret: str, caplog: pytest.LogCaptureFixture, our_logs: ListHandler
) -> None:
    """No table is opened at such a URI (no store takes credentials from one, and a storage SDK
    would show them in its errors): every entry point refuses it with the URI as shown."""
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    for uri in userinfo_uris(secret):
        attempts = [
            lambda uri=uri: DeltaLog(uri),
            lambda uri=uri: DeltaLog(uri).snapshot(),  # TableNotFoundError once, naming the URI
            lambda uri=uri: DeltaLog(uri).snapshot(version=3),  # VersionNotFoundError once
            lambda uri=uri: write_table(uri, pa.table({"a": [1]})),
            lambda uri=uri: create_log_store({}).read(f"{uri}/_delta_log/{0:020d}.json"),
            lambda uri=uri: list(create_log_store({}).list_from(f"{uri}/_delta_log/{0:020d}.json")),
        ]
        for attempt in attempts:
            with pytest.raises(LogStoreConfError, match="carries login details") as caught:
                attempt()
            texts += [str(caught.value), repr(caught.value)]
    assert all("://bucket/" in text for text in texts)
    assert [text for text in texts if "SeKr" in text] == []
    assert "SeKr" not in caplog.text and not any("SeKr" in line for line in our_logs.lines)


def test_cli_output_never_shows_a_userinfo_secret(capsys: pytest.CaptureFixture[str]) -> None:
    outputs: list[str] = []
    for secret in USERINFO_SECRETS:
        for uri in userinfo_uris(secret):
            runs = [
                (["store", uri], 0),
                (["store", uri, "--json"], 0),
                (["snapshot", uri], 2),
                (["history", uri], 2),
                (["read", uri], 2),
                (["changes", uri, "--from", "0"], 2),
            ]
            for argv, expected in runs:
                code, out, err = run_cli(capsys, *argv)
                assert code == expected, err
                outputs += [out, err]
    assert [text for text in outputs if "SeKr" in text] == []
    assert any("s3a://bucket/warehouse/t" in text for text in outputs)


# -- planted secrets, every output searched --------------------------------------------------------------
def planted_confs(moto: MotoServer, gcs: GCSServer, azurite_server: Azurite) -> dict[str, dict[str, str]]:
    port = moto.endpoint.rsplit(":", 1)[1]
    s3 = {
        "spark.hadoop.fs.s3a.endpoint": moto.endpoint,
        "spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": SECRETS["s3-secret"],
        "spark.hadoop.fs.s3a.session.token": SECRETS["s3-token"],
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    }
    return {
        "s3": s3,
        "nested": {
            "spark.hadoop.fs.s3a.endpoint": moto.endpoint,
            "spark.delta.logStore.s3a.options.client_kwargs": json.dumps(
                {"region_name": "us-east-1", "aws_secret_access_key": SECRETS["nested"]}
            ),
        },
        "userinfo": {
            **s3,
            "spark.hadoop.fs.s3a.endpoint": f"http://user:{SECRETS['s3-userinfo']}@127.0.0.1:{port}",
        },
        "dynamodb": {
            **s3,
            "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore",
            "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName": unique_name("ddb"),
            "spark.io.delta.storage.S3DynamoDBLogStore.ddb.endpoint": (
                f"http://user:{SECRETS['ddb-userinfo']}@127.0.0.1:{port}"
            ),
        },
        "azure": {
            "spark.delta.logStore.abfs.options.connection_string": azurite_server.connection_string(
                key=SECRETS["azure-key"].encode().hex()
            ),
            f"spark.hadoop.fs.azure.sas.c.{AZURITE_ACCOUNT}.blob.core.windows.net": (
                f"sv=2020&sig={SECRETS['sas']}"
            ),
            "spark.hadoop.fs.azure.account.oauth2.client.secret": SECRETS["oauth"],
        },
        "gcs": {
            **gcs.conf(),
            "spark.hadoop.fs.gs.storage.root.url": gcs.endpoint.replace(
                "://", f"://u:{SECRETS['gcs-userinfo']}@"
            ),
        },
    }


URIS = {"s3": "s3a", "nested": "s3a", "userinfo": "s3a", "dynamodb": "s3a", "azure": "abfs", "gcs": "gs"}
ALL_SECRETS = [*SECRETS.values(), SECRETS["azure-key"].encode().hex()]


def leaked(*texts: str) -> list[str]:
    return [secret for secret in ALL_SECRETS for text in texts if secret in text]


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def our_logs() -> Iterator[ListHandler]:
    """Raw DEBUG records of this library's loggers (no filter of any kind)."""
    handler = ListHandler()
    loggers = [logging.getLogger("logstores"), logging.getLogger("replay")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def exercise(store: LogStore, uri: str) -> list[str]:
    """Use the store (successfully or not) and return the texts of every error it raised."""
    errors: list[str] = []
    for action in (
        lambda: store.write(f"{uri}/_delta_log/{0:020d}.json", ["x"]),
        lambda: store.read(f"{uri}/_delta_log/{0:020d}.json"),
        lambda: list(store.list_from(f"{uri}/_delta_log/{0:020d}.json")),
    ):
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - every error text is searched
            errors += [str(exc), repr(exc)]
    return errors


@pytest.mark.cloud
@pytest.mark.timeout(240)
def test_planted_secrets_never_appear_in_repr_logs_or_errors(
    moto_server: MotoServer,
    gcs_server: GCSServer,
    azurite_server: Azurite,
    caplog: pytest.LogCaptureFixture,
    our_logs: ListHandler,
) -> None:
    caplog.set_level(logging.DEBUG)
    confs = planted_confs(moto_server, gcs_server, azurite_server)
    every = {key: value for conf in confs.values() for key, value in conf.items()}
    caplog.handler.addFilter(SecretFilter(secret_values(every)))
    buckets = {
        "s3a": moto_server.create_bucket(),
        "abfs": azurite_server.create_container(),
        "gs": gcs_server.create_bucket(),
    }
    texts: list[str] = []
    for name, planted in confs.items():
        conf = {**planted, "spark.delta.logstores.requestTimeoutMs": "3000"}
        scheme = URIS[name]
        uri = f"{scheme}://{buckets[scheme]}/{name}"
        store = create_log_store(conf)
        texts += exercise(store, uri)
        texts += [repr(store), repr(store.get_delegate(uri)), explain_log_store(uri, conf).reason]  # type: ignore[attr-defined]
    assert our_logs.lines, "the stores logged nothing at DEBUG"
    assert leaked(*texts, *our_logs.lines) == []
    assert leaked(*(caplog.text.splitlines())) == []  # third-party records too, through SecretFilter
    assert any("***" in text for text in texts)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def conf_args(conf: dict[str, str]) -> list[str]:
    return [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]


@pytest.mark.cloud
@pytest.mark.timeout(240)
def test_planted_secrets_never_appear_in_cli_output(
    moto_server: MotoServer,
    gcs_server: GCSServer,
    azurite_server: Azurite,
    capsys: pytest.CaptureFixture[str],
) -> None:
    confs = planted_confs(moto_server, gcs_server, azurite_server)
    outputs: list[str] = []
    for name, conf in confs.items():
        uri = f"{URIS[name]}://bucket/{name}"
        for extra in ([], ["--json"]):
            code, out, err = run_cli(capsys, "store", uri, *conf_args(conf), *extra)
            assert code == 0, err
            outputs += [out, err]
        if name in ("s3", "nested", "userinfo", "azure"):  # errors of a table that is not there
            bounded = {**conf, "spark.delta.logstores.requestTimeoutMs": "3000"}
            code, out, err = run_cli(capsys, "snapshot", uri, *conf_args(bounded))
            assert code == 2
            outputs += [out, err]
    for pair in (f"fs.s3a.secret.key {SECRETS['s3-secret']}", f"{SECRETS['s3-secret']}"):
        code, out, err = run_cli(capsys, "store", "s3a://b/t", "--conf", pair)
        assert (code, "is not of the form KEY=VALUE") == (
            2,
            err.split(": ", 2)[-1][21:51],
        ) or "KEY=VALUE" in err
        outputs += [out, err]
    assert leaked(*outputs) == []
    assert any('"***"' in text for text in outputs) and any("***" in text for text in outputs)


@pytest.mark.cloud
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["dynamodb", "userinfo", "azure"])
def test_planted_secrets_never_appear_in_debug_output(
    name: str, moto_server: MotoServer, gcs_server: GCSServer, azurite_server: Azurite, tmp_path: Path
) -> None:
    conf = {
        **planted_confs(moto_server, gcs_server, azurite_server)[name],
        "spark.delta.logstores.requestTimeoutMs": "3000",
    }
    bucket = moto_server.create_bucket() if URIS[name] == "s3a" else azurite_server.create_container()
    uri = f"{URIS[name]}://{bucket}/t"
    conf_file = tmp_path / "spark-defaults.conf"  # keeps the secrets off the command line
    conf_file.write_text("".join(f"{key} {value}\n" for key, value in conf.items()))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "replay", "snapshot", uri, "--conf-file", str(conf_file), "--debug"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "DEBUG" in result.stderr and "Traceback" in result.stderr
    assert leaked(result.stdout, result.stderr) == []
