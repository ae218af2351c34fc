"""delta-rs's ``storage_options`` and ``write_deltalake``: code written for deltalake reaches the
same storage with its import changed. Every spelling object_store accepts maps to one setting; an
option that cannot be honoured is refused, naming it; and on moto S3 (also with DynamoDB commits)
and Azurite, a table is written by one library and read and appended to by the other with the same
options."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable
from deltalake import write_deltalake as rust_write
from hypothesis import given
from hypothesis import strategies as st

from logstores import LogStoreConfError, delta_rs_options
from logstores.delta_rs_options import AZURITE_ACCOUNT, conf_from_storage_options
from replay import DeltaTable, TableAlreadyExistsError, write_deltalake
from replay.protocol.errors import DeltaError
from tests.cloud_servers import Azurite, MotoServer, unique_name
from tests.dml_cases import normalised

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["a", "b", "a"]})
MORE = pa.table({"id": pa.array([4], pa.int64()), "p": ["b"]})
S3 = {
    "access_key_id": ("spark.hadoop.fs.s3a.access.key", "AKID"),
    "secret_access_key": ("spark.hadoop.fs.s3a.secret.key", "SECRET"),
    "session_token": ("spark.hadoop.fs.s3a.session.token", "TOKEN"),
    "region": ("spark.hadoop.fs.s3a.endpoint.region", "eu-west-1"),
    "endpoint": ("spark.hadoop.fs.s3a.endpoint", "http://127.0.0.1:9000"),
}


def spellings(name: str, prefix: str) -> st.SearchStrategy[str]:
    """The ways object_store accepts a key: with or without its prefix, in any case."""
    return st.sampled_from([name, prefix + name]).flatmap(
        lambda key: st.sampled_from([key, key.upper(), key.title()])
    )


@given(st.sampled_from(sorted(S3)).flatmap(lambda name: st.tuples(st.just(name), spellings(name, "aws_"))))
def test_every_spelling_of_an_s3_option_sets_one_setting(named: tuple[str, str]) -> None:
    name, spelled = named
    key, value = S3[name]
    conf = conf_from_storage_options("s3://bucket/t", {spelled: value})
    assert conf[key] == value
    if name == "endpoint":  # object_store sends path-style requests unless told otherwise
        assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
        assert "spark.hadoop.fs.s3a.path.style.access" not in conf_from_storage_options(
            "s3://bucket/t", {spelled: value, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}
        )


def test_options_set_the_stores_settings() -> None:
    locked = conf_from_storage_options(
        "s3a://bucket/t",
        {
            "AWS_REGION": "eu-west-1",
            "AWS_S3_LOCKING_PROVIDER": "dynamodb",
            "DELTA_DYNAMO_TABLE_NAME": "locks",
            "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000",
            "AWS_ALLOW_HTTP": "true",  # accepted: nothing to change
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
            "timeout": "2m",
            "AZURE_STORAGE_ACCOUNT_NAME": "other-cloud",  # ignored, as delta-rs ignores it
        },
    )
    assert locked == {  # delta-rs 1.x commits with conditional writes, not through DynamoDB
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.delta.logstores.requestTimeoutMs": "120000",
    }
    assert conf_from_storage_options(
        "abfss://c@acct.dfs.core.windows.net/t",
        {"azure_storage_account_name": "acct", "AZURE_STORAGE_SAS_KEY": "sv=1&sig=x", "tenant_id": "t1"},
    ) == {
        "delta.logStore.abfss.options.account_name": "acct",
        "delta.logStore.abfss.options.sas_token": "sv=1&sig=x",
        "delta.logStore.abfss.options.tenant_id": "t1",
    }
    # a key several clouds have, without its prefix, is the table's cloud's
    endpoint = {"account_name": "acct", "account_key": "a2V5", "endpoint": "https://acct.example/x"}
    assert conf_from_storage_options("az://c/t", endpoint) == {
        "delta.logStore.az.options.connection_string": "DefaultEndpointsProtocol=https;AccountName=acct;"
        "AccountKey=a2V5;BlobEndpoint=https://acct.example/x;"
    }
    assert "spark.hadoop.fs.s3a.endpoint" in conf_from_storage_options("s3://b/t", {"endpoint": "http://x"})
    emulated = conf_from_storage_options("az://c/t", {"AZURE_STORAGE_USE_EMULATOR": "true"})
    assert f"AccountName={AZURITE_ACCOUNT};" in emulated["delta.logStore.az.options.connection_string"]
    assert conf_from_storage_options("gs://b/t", {"GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"}) == {
        "spark.hadoop.fs.gs.auth.service.account.json.keyfile": "/keys/sa.json"
    }
    assert conf_from_storage_options("/tmp/t", {"AWS_REGION": "eu-west-1"}) == {}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"AWS_SERVER_SIDE_ENCRYPTION": "aws:kms"}, "'AWS_SERVER_SIDE_ENCRYPTION' is not supported"),
        ({"AWS_ACESS_KEY_ID": "x"}, "Did you mean AWS_ACCESS_KEY_ID"),
        ({"AWS_SKIP_SIGNATURE": "maybe"}, "AWS_SKIP_SIGNATURE='maybe' is neither true nor false"),
        ({"timeout": "soon"}, "timeout='soon' is not a duration"),
        ({"AWS_REGION": "x", "BUCKET_REGION_HINT": "y"}, "'BUCKET_REGION_HINT' is not supported"),
    ],
)
def test_an_option_that_cannot_be_honoured_is_refused_by_name(options: dict[str, str], named: str) -> None:
    with pytest.raises(LogStoreConfError, match=named.replace("(", r"\(")):
        conf_from_storage_options("s3://bucket/t", options)
    with pytest.raises(LogStoreConfError, match="AZURE_STORAGE_ENDPOINT needs"):
        conf_from_storage_options("az://c/t", {"AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:1"})


def test_write_deltalake_takes_deltalakes_arguments(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    write_deltalake(uri, ROWS, partition_by="p", name="orders", description="all orders")
    with pytest.raises(TableAlreadyExistsError):
        write_deltalake(uri, ROWS)  # mode="error", deltalake's default
    write_deltalake(uri, ROWS, mode="ignore")
    write_deltalake(uri, MORE.append_column("note", pa.array(["x"])), mode="append", schema_mode="merge")
    write_deltalake(DeltaTable(uri), MORE, mode="overwrite", predicate="p = 'b'")
    table = DeltaTable(uri)
    assert (table.metadata().name, table.metadata().description) == ("orders", "all orders")
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 3, 4]
    assert normalised(table.to_pyarrow_table()) == normalised(RustTable(str(uri)).to_pyarrow_table())
    with pytest.raises(DeltaError, match="writer_properties, post_commithook_properties not supported"):
        write_deltalake(uri, MORE, mode="append", writer_properties=object(), post_commithook_properties=1)
    with pytest.raises(DeltaError, match="schema_mode must be"):
        write_deltalake(uri, MORE, mode="append", schema_mode="replace")
    assert DeltaTable(uri).version() == 2


def s3_options(moto: MotoServer) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": moto.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def _both_ways(uri: str, options: dict[str, str]) -> None:
    """Ours creates, delta-rs appends, ours appends: both read every row with the same options."""
    write_deltalake(uri, ROWS, partition_by=["p"], storage_options=options)
    rust_write(uri, MORE, mode="append", storage_options=options)
    write_deltalake(uri, MORE, mode="append", storage_options=options)
    ours, theirs = DeltaTable(uri, storage_options=options), RustTable(uri, storage_options=options)
    assert ours.version() == theirs.version() == 2
    assert normalised(ours.to_pyarrow_table()) == normalised(theirs.to_pyarrow_table())
    assert sorted(ours.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4, 4]
    assert sorted(ours.to_pyarrow_dataset().to_table().column("id").to_pylist()) == [1, 2, 3, 4, 4]
    assert DeltaTable.is_deltatable(uri, options)


@pytest.mark.cloud
def test_the_same_options_reach_s3_for_both_libraries(moto_server: MotoServer) -> None:
    _both_ways(f"s3://{moto_server.create_bucket()}/t", s3_options(moto_server))


@pytest.mark.cloud
def test_delta_rs_locking_options_commit_as_delta_rs_does(
    moto_server: MotoServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta-rs 1.x ignores its old DynamoDB locking options and commits with S3 conditional
    writes; so do these options here (with a warning), so that both commit safely side by side."""
    table = unique_name("locks")
    options = {
        **s3_options(moto_server),
        "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "DELTA_DYNAMO_TABLE_NAME": table,
        "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint,
    }
    uri = f"s3://{moto_server.create_bucket()}/t"
    monkeypatch.setattr(delta_rs_options, "_WARNED", set())  # the warning comes once per process
    with caplog.at_level(logging.WARNING, logger="logstores.delta_rs_options"):
        _both_ways(uri, options)
    assert (
        "AWS_S3_LOCKING_PROVIDER,DELTA_DYNAMO_TABLE_NAME,AWS_ENDPOINT_URL_DYNAMODB: delta-rs 1.x"
        in caplog.text
    )
    store = DeltaTable(uri, storage_options=options).delta_log.store
    assert type(store.get_delegate(f"{uri}/_delta_log/00000000000000000000.json")).__name__ == "S3LogStore"
    assert table not in moto_server.client("dynamodb").list_tables()["TableNames"]


@pytest.mark.cloud
def test_the_emulator_option_reaches_azurite_for_both_libraries(
    azurite_server: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite_server.endpoint)
    _both_ways(f"az://{azurite_server.create_container()}/t", {"AZURE_STORAGE_USE_EMULATOR": "true"})


def test_storage_options_in_the_place_of_conf_are_read_as_storage_options() -> None:
    """deltalake's third argument is storage_options, this library's conf: both are honoured."""
    from logstores.delta_rs_options import with_storage_options

    merged = with_storage_options(
        "s3://bucket/t", {"AWS_REGION": "eu-west-1", "spark.hadoop.fs.s3a.access.key": "AKID"}, None
    )
    assert merged == {
        "spark.hadoop.fs.s3a.access.key": "AKID",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    }
    unchanged = {"spark.delta.logStore.s3.impl": "s3-single-driver", "nodot": "kept"}
    assert with_storage_options("s3://bucket/t", unchanged, None) is unchanged


@pytest.mark.cloud
def test_storage_options_work_wherever_settings_are_taken(
    moto_server: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """write_table, DeltaLog and the command line take delta-rs's options among their settings."""
    from replay import DeltaLog, write_table
    from replay.cli.main import main

    uri, options = f"s3://{moto_server.create_bucket()}/t", s3_options(moto_server)
    write_table(uri, ROWS, conf=options)
    assert DeltaLog.for_table(uri, options).latest_version() == 0
    assert RustTable(uri, storage_options=options).version() == 0
    argv = [
        "read",
        uri,
        "--json",
        *(arg for key, value in options.items() for arg in ("--conf", f"{key}={value}")),
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(row["id"] for row in rows) == [1, 2, 3]
