"""Cloud stores against real emulators: races, listing cost, ambiguous commits, bad input, conf."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import SparkConf

from logstores import (
    AccessDeniedError,
    AzureLogStore,
    BucketNotFoundError,
    ConditionalWriteUnsupportedError,
    DelegatingLogStore,
    GCSLogStore,
    LogStore,
    LogStoreError,
    S3DynamoDBLogStore,
    S3LogStore,
    S3SingleDriverLogStore,
    create_log_store,
    explain_log_store,
)
from logstores.cloud_options import azure_options, gcs_options, s3_options
from logstores.options import storage_options
from logstores.s3 import key_before
from replay.delta_log import DeltaLog
from tests.cloud_servers import (
    AWS_TEST_KEY,
    AWS_TEST_SECRET,
    AZURITE_ACCOUNT,
    CLOUD_STORE_FIXTURES,
    Azurite,
    Fault,
    FaultProxy,
    GCSServer,
    MotoServer,
    dynamodb_settings,
    free_port,
    s3_settings,
    unique_name,
)
from tests.paths import REPO_ROOT
from tests.store_cases import StoreUnderTest

pytestmark = pytest.mark.cloud

ProxyFactory = Callable[[str], FaultProxy]


@pytest.fixture(params=CLOUD_STORE_FIXTURES)
def cloud(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


# -- races -----------------------------------------------------------------------------------------
def test_eight_writers_with_their_own_store_race_for_one_commit(cloud: StoreUnderTest) -> None:
    log = cloud.log_dir()
    cloud.store.write(f"{log}/{commit_name(0)}", ["base"])
    stores = [type(cloud.store)(dict(cloud.store.conf)) for _ in range(8)]
    barrier = threading.Barrier(8)
    outcomes: dict[int, str] = {}

    def writer(index: int) -> None:
        barrier.wait()
        try:
            stores[index].write(f"{log}/{commit_name(1)}", [f"writer {index}"])
            outcomes[index] = "won"
        except FileExistsError as exc:
            outcomes[index] = "lost" if commit_name(1) in str(exc) else f"bad message: {exc}"

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes.values()) == ["lost"] * 7 + ["won"]
    [winner] = [index for index, outcome in outcomes.items() if outcome == "won"]
    assert cloud.store.read(f"{log}/{commit_name(1)}") == [f"writer {winner}"]


def test_four_writers_commit_25_versions_each_without_loss(cloud: StoreUnderTest) -> None:
    log = cloud.log_dir()
    writers, commits_each = 4, 25
    stores = [type(cloud.store)(dict(cloud.store.conf)) for _ in range(writers)]
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        store, version = stores[index], 0
        barrier.wait()
        try:
            for commit in range(commits_each):
                while True:
                    try:
                        store.write(f"{log}/{commit_name(version)}", [f"writer {index} commit {commit}"])
                        break
                    except FileExistsError:
                        version += 1
                version += 1
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    listed = [status.name for status in cloud.store.list_from(f"{log}/{commit_name(0)}")]
    assert listed == [commit_name(version) for version in range(writers * commits_each)]
    contents = Counter(tuple(cloud.store.read(f"{log}/{name}")) for name in listed)
    expected = {(f"writer {w} commit {c}",) for w in range(writers) for c in range(commits_each)}
    assert set(contents) == expected
    assert set(contents.values()) == {1}


# -- listing cost ----------------------------------------------------------------------------------
def test_s3_list_from_starts_after_the_previous_key(
    moto_server: MotoServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    store = S3LogStore(s3_settings(moto_server, proxy.endpoint))
    store.list_page_size = 10
    bucket = moto_server.create_bucket()
    client = moto_server.client("s3")
    for version in range(35):
        client.put_object(Bucket=bucket, Key=f"t/_delta_log/{commit_name(version)}", Body=b"x\n")
    log = f"s3://{bucket}/t/_delta_log"

    proxy.requests.clear()
    assert [s.name for s in store.list_from(f"{log}/{commit_name(30)}")] == [
        commit_name(v) for v in range(30, 35)
    ]
    [listing] = proxy.matching("GET", "list-type=2")
    assert f"start-after=t%2F_delta_log%2F{commit_name(30)[:-5]}.jsom" in listing.path  # "n" - 1 = "m"
    assert len(proxy.requests) == 1

    proxy.requests.clear()
    assert len(list(store.list_from(f"{log}/{commit_name(0)}"))) == 35
    assert len(proxy.matching("GET", "list-type=2")) == 4  # 35 keys, 10 per page


def test_gcs_list_from_uses_start_offset(gcs_server: GCSServer, fault_proxy: ProxyFactory) -> None:
    proxy = fault_proxy(gcs_server.endpoint)
    store = GCSLogStore(gcs_server.conf(proxy.endpoint))
    store.list_page_size = 10
    bucket = gcs_server.create_bucket()
    log = f"gs://{bucket}/t/_delta_log"
    for version in range(25):
        store.write(f"{log}/{commit_name(version)}", ["x"], overwrite=True)

    proxy.requests.clear()
    assert [s.name for s in store.list_from(f"{log}/{commit_name(20)}")] == [
        commit_name(v) for v in range(20, 25)
    ]
    [listing] = proxy.matching("GET", "/o?")
    assert f"startOffset=t/_delta_log/{commit_name(20)}" in listing.path
    assert len(proxy.requests) == 1


def test_azure_list_from_sends_one_listing_from_start_from(
    azurite_server: Azurite, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(azurite_server.endpoint)
    store = AzureLogStore(azurite_server.conf(proxy.endpoint))
    table = f"abfs://{azurite_server.create_container()}/t"
    log = f"{table}/_delta_log"
    for version in range(25):
        store.write(f"{log}/{commit_name(version)}", ["x"], overwrite=True)
    store.write(f"{table}/_delta_log_sibling/{commit_name(30)}", ["x"], overwrite=True)

    proxy.requests.clear()
    assert [s.name for s in store.list_from(f"{log}/{commit_name(20)}")] == [
        commit_name(v) for v in range(20, 25)
    ]
    [listing] = proxy.requests  # adlfs's own ls sends one request for "_delta_log" and one for "_delta_log/"
    assert "comp=list" in listing.path and "prefix=t/_delta_log/&" in listing.path
    assert f"startFrom=t/_delta_log/{commit_name(20)}" in listing.path


def test_azure_list_from_without_start_from_support(
    azurite_server: Azurite, fault_proxy: ProxyFactory
) -> None:
    """A service that refuses ``startFrom`` (an older API version) gets whole-prefix listings."""
    proxy = fault_proxy(azurite_server.endpoint)
    store = AzureLogStore(azurite_server.conf(proxy.endpoint))
    log = f"abfs://{azurite_server.create_container()}/t/_delta_log"
    for version in range(5):
        store.write(f"{log}/{commit_name(version)}", ["x"], overwrite=True)
    proxy.faults.append(Fault("GET", "startFrom=", status=400, landed=False))

    proxy.requests.clear()
    for _ in range(2):
        assert [s.name for s in store.list_from(f"{log}/{commit_name(3)}")] == [
            commit_name(3),
            commit_name(4),
        ]
    assert ["startFrom=" in r.path for r in proxy.requests] == [True, False, False]


def test_key_before_matches_delta() -> None:
    assert key_before("b") == "a"
    assert key_before("aa/ab") == "aa/aa"
    assert key_before("\x01\x02") == "\x01\x01"
    assert key_before("♥b") == "♥a"
    assert key_before("abc\x00") == "abc"
    assert key_before("") is None


# -- ambiguous commits -----------------------------------------------------------------------------
def test_s3_commit_whose_response_was_lost_succeeds(
    moto_server: MotoServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    store = S3LogStore(s3_settings(moto_server, proxy.endpoint))
    bucket = moto_server.create_bucket()
    target = f"s3://{bucket}/t/_delta_log/{commit_name(0)}"
    store.write(f"s3://{bucket}/t/_delta_log/warm-up", ["x"])  # the bucket check is done
    proxy.faults.append(Fault("PUT", commit_name(0), status=503, landed=True))
    store.write(target, ["ours"])
    assert store.read(target) == ["ours"]
    assert len(proxy.matching("PUT", commit_name(0))) == 2  # applied + the SDK's retry that got 412


def single_attempt_s3_conf(moto_server: MotoServer, endpoint: str) -> dict[str, str]:
    """S3 settings through ``endpoint`` with no SDK retries and no conditional-write probe."""
    return s3_settings(
        moto_server,
        endpoint,
        **{
            "spark.delta.logStore.s3.verifyConditionalWrites": "false",
            "spark.delta.logStore.s3.options.config_kwargs": '{"retries": {"total_max_attempts": 1}}',
        },
    )


def test_s3_ambiguous_write_over_another_writers_object(
    moto_server: MotoServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    store = S3LogStore(single_attempt_s3_conf(moto_server, proxy.endpoint))
    bucket = moto_server.create_bucket()
    key = f"t/_delta_log/{commit_name(3)}"
    moto_server.client("s3").put_object(Bucket=bucket, Key=key, Body=b"theirs\n")  # no commit token
    proxy.faults.append(Fault("PUT", commit_name(3), status=503, landed=False))
    with pytest.raises(FileExistsError, match=commit_name(3)):
        store.write(f"s3://{bucket}/{key}", ["ours"])
    # After an ambiguous failure, identical bytes without a token count as our own commit.
    proxy.faults.append(Fault("PUT", commit_name(3), status=503, landed=False))
    store.write(f"s3://{bucket}/{key}", ["theirs"])
    assert len(proxy.matching("PUT", commit_name(3))) == 2  # each decided by re-reading, not by a retry
    # Without an ambiguous failure they are a conflict.
    with pytest.raises(FileExistsError, match=commit_name(3)):
        store.write(f"s3://{bucket}/{key}", ["theirs"])


def test_s3_identical_bytes_of_another_token_do_not_win(moto_server: MotoServer) -> None:
    bucket = moto_server.create_bucket()
    target = f"s3://{bucket}/t/_delta_log/{commit_name(0)}"
    first, second = S3LogStore(s3_settings(moto_server)), S3LogStore(s3_settings(moto_server))
    first.write(target, ["same"])
    with pytest.raises(FileExistsError):
        second.write(target, ["same"])


def test_s3_outcome_unknown_after_every_attempt(moto_server: MotoServer, fault_proxy: ProxyFactory) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    store = S3LogStore(single_attempt_s3_conf(moto_server, proxy.endpoint))
    bucket = moto_server.create_bucket()
    proxy.faults.append(Fault("PUT", commit_name(0), status=500, landed=False, times=100))
    with pytest.raises(LogStoreError, match=f"could not tell whether .*{commit_name(0)} was written"):
        store.write(f"s3://{bucket}/t/_delta_log/{commit_name(0)}", ["x"])
    assert len(proxy.matching("PUT", commit_name(0))) == 3


def test_gcs_commit_whose_response_was_lost_succeeds(
    gcs_server: GCSServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(gcs_server.endpoint)
    store = GCSLogStore(gcs_server.conf(proxy.endpoint))
    target = f"gs://{gcs_server.create_bucket()}/t/_delta_log/{commit_name(0)}"
    proxy.faults.append(Fault("POST", "/upload/storage/v1/b/", status=503, landed=True))
    store.write(target, ["ours"])
    assert store.read(target) == ["ours"]
    assert len(proxy.matching("POST", "/upload/storage/v1/b/")) == 2


SMALL_CHUNKS = 256 * 1024  # GCS's smallest resumable chunk, so that a resumable upload stays small


def resumable_requests(proxy: FaultProxy) -> tuple[list[Any], list[Any]]:
    """The requests of resumable uploads: session initiations and chunks."""
    uploads = proxy.matching("POST", "uploadType=resumable")
    return [r for r in uploads if "upload_id=" not in r.path], [r for r in uploads if "upload_id=" in r.path]


def test_gcs_put_if_absent_sends_the_precondition_on_every_upload_path(
    gcs_server: GCSServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(gcs_server.endpoint)
    store = GCSLogStore(gcs_server.conf(proxy.endpoint))
    store.resumable_chunk_bytes = SMALL_CHUNKS
    log = f"gs://{gcs_server.create_bucket()}/t/_delta_log"
    store.write(f"{log}/{commit_name(0)}", ["small"])
    [multipart] = proxy.matching("POST", "uploadType=multipart")
    assert "ifGenerationMatch=0" in multipart.path
    large = b"x" * (2 * SMALL_CHUNKS + 1000)
    store.write_bytes(f"{log}/{commit_name(1)}", large)
    initiations, chunks = resumable_requests(proxy)
    assert len(initiations) == 1 and "ifGenerationMatch=0" in initiations[0].path
    assert [c.headers["Content-Range"] for c in chunks] == [
        f"bytes {start}-{min(start + SMALL_CHUNKS, len(large)) - 1}/{len(large)}"
        for start in range(0, len(large), SMALL_CHUNKS)
    ]
    assert store.read_bytes(f"{log}/{commit_name(1)}") == large
    proxy.requests.clear()
    store.write_bytes(f"{log}/{commit_name(1)}", large + b"y", overwrite=True)  # overwrites: unconditional
    assert "ifGenerationMatch" not in resumable_requests(proxy)[0][0].path


@pytest.mark.parametrize("refused", ["initiation", "final chunk"])
def test_gcs_resumable_commit_refused_by_its_precondition_is_file_exists(
    gcs_server: GCSServer, fault_proxy: ProxyFactory, refused: str
) -> None:
    """fake-gcs-server ignores preconditions on resumable uploads: the proxy answers the 412 GCS
    would give when another writer created the object first."""
    proxy = fault_proxy(gcs_server.endpoint)
    store = GCSLogStore(gcs_server.conf(proxy.endpoint))
    store.resumable_chunk_bytes = SMALL_CHUNKS
    target = f"gs://{gcs_server.create_bucket()}/t/_delta_log/{commit_name(0)}"
    GCSLogStore(gcs_server.conf()).write(target, ["theirs"])
    where, body = ("ifGenerationMatch=0", b"") if refused == "initiation" else ("upload_id=", b"last line")
    proxy.faults.append(Fault("POST", where, status=412, landed=False, body_contains=body))
    proxy.faults.append(Fault("DELETE", "upload_id=", status=404, landed=False))  # a session the 412 ended
    with pytest.raises(FileExistsError, match=commit_name(0)):
        store.write_bytes(target, b"x" * (SMALL_CHUNKS + 1000) + b"\nlast line")
    assert store.read(target) == ["theirs"]
    assert proxy.matching("DELETE") == []
    assert len(resumable_requests(proxy)[0]) == 1  # no second attempt: the object is another writer's


def test_azure_commit_whose_response_was_lost_succeeds(
    azurite_server: Azurite, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(azurite_server.endpoint)
    store = AzureLogStore(azurite_server.conf(proxy.endpoint))
    target = f"abfs://{azurite_server.create_container()}/t/_delta_log/{commit_name(0)}"
    proxy.faults.append(Fault("PUT", commit_name(0), status=503, landed=True))
    store.write(target, ["ours"])
    assert store.read(target) == ["ours"]
    assert len(proxy.matching("PUT", commit_name(0))) == 1  # no SDK retry: our own re-read decided


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["s3", "gs", "abfs"])
def test_unreachable_endpoint_fails_fast_naming_it(scheme: str) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    conf = {
        "s3": {"spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.access.key": "k"},
        "gs": {
            "spark.hadoop.fs.gs.storage.root.url": endpoint,
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        },
        "abfs": {
            "spark.delta.logStore.abfs.options.connection_string": (
                f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint={endpoint}/acct;"
            )
        },
    }[scheme]
    store = create_log_store(conf)
    started = time.monotonic()
    with pytest.raises(LogStoreError, match=f"cannot reach the .* endpoint {endpoint}"):
        store.write(f"{scheme}://bucket/t/_delta_log/{commit_name(0)}", ["x"])
    assert time.monotonic() - started < 6


def test_s3_missing_bucket(moto_server: MotoServer) -> None:
    for store in (S3LogStore(s3_settings(moto_server)), S3SingleDriverLogStore(s3_settings(moto_server))):
        with pytest.raises(FileNotFoundError, match="S3 bucket 'no-such-bucket' does not exist"):
            store.write(f"s3://no-such-bucket/t/_delta_log/{commit_name(0)}", ["x"])
        with pytest.raises(FileNotFoundError, match="S3 bucket 'no-such-bucket' does not exist"):
            list(store.list_from(f"s3://no-such-bucket/t/_delta_log/{commit_name(0)}"))


def test_gcs_missing_bucket(gcs_server: GCSServer) -> None:
    store = GCSLogStore(gcs_server.conf())
    with pytest.raises(FileNotFoundError, match="GCS bucket 'no-such-bucket' does not exist"):
        store.write(f"gs://no-such-bucket/t/_delta_log/{commit_name(0)}", ["x"])
    with pytest.raises(FileNotFoundError, match="GCS bucket 'no-such-bucket' does not exist"):
        list(store.list_from(f"gs://no-such-bucket/t/_delta_log/{commit_name(0)}"))


GCSFS_FIRST = """
import json, os, sys, time
import gcsfs  # first, with GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT unset: gcsfs picks its extended class
before = dict(os.environ)
from logstores.gcs import GCSLogStore
changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
store = GCSLogStore(json.loads(sys.argv[1]))
first = sys.argv[2] + "/_delta_log/" + "0" * 20 + ".json"
started = time.monotonic()
store.write(first, ["x"])
names = [status.path.rsplit("/", 1)[-1] for status in store.list_from(first)]
base = type(store.filesystem(first)).__mro__[1]
from logstores import open_filesystem  # data files (and deletion vectors) go through fsspec
fs, path = open_filesystem(sys.argv[2] + "/part-0.parquet", json.loads(sys.argv[1]))
fs.pipe_file(path, b"data")
data = fs.cat_file(path)
print(json.dumps({"changed": changed, "names": names, "seconds": time.monotonic() - started,
                  "base": f"{base.__module__}.{base.__name__}", "data_class": type(fs).__name__,
                  "data": data.decode()}))
"""


@pytest.mark.timeout(120)
def test_gcs_store_needs_no_process_wide_setting(gcs_server: GCSServer) -> None:
    """gcsfs imported first, without GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT: the store still lists, and
    data files are still written and read, in seconds on the emulator (no bucket-type probe), and
    importing the store changes no variable."""
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    uri = f"gs://{gcs_server.create_bucket()}/t"
    argv = [sys.executable, "-c", GCSFS_FIRST, json.dumps(gcs_server.conf()), uri]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=45, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["changed"] == []
    assert report["names"] == ["0" * 20 + ".json"]
    assert report["seconds"] < 15
    assert report["base"] == "gcsfs.core.GCSFileSystem"
    assert (report["data_class"], report["data"]) == ("GCSFileSystem", "data")


def test_azure_missing_container(azurite_server: Azurite) -> None:
    store = AzureLogStore(azurite_server.conf())
    with pytest.raises(FileNotFoundError, match="Azure container 'no-such-container' does not exist"):
        store.write(f"abfs://no-such-container/t/_delta_log/{commit_name(0)}", ["x"])


def test_azure_store_refuses_adls_gen1() -> None:
    with pytest.raises(LogStoreError, match=r"ADLS Gen1 \(adl://\) has been retired"):
        AzureLogStore({"spark.delta.logStore.adl.options.store_name": "x"}).write("adl://x/t/0", ["x"])


def test_azure_wrong_key_is_a_permission_error_without_the_key(azurite_server: Azurite) -> None:
    wrong_key = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXk="
    store = AzureLogStore(azurite_server.conf(key=wrong_key))
    container = azurite_server.create_container()
    with pytest.raises(
        AccessDeniedError, match=f"access to abfs://{container}/t/_delta_log/.* was denied"
    ) as info:
        store.write(f"abfs://{container}/t/_delta_log/{commit_name(0)}", ["x"])
    assert wrong_key not in str(info.value)
    assert wrong_key not in repr(store)


def test_s3_wrong_credentials_are_a_permission_error_without_the_secret(
    moto_server_checking_credentials: MotoServer,
) -> None:
    secret = "wrong-secret-that-must-not-leak"
    conf = s3_settings(moto_server_checking_credentials, **{"spark.hadoop.fs.s3a.secret.key": secret})
    uri = f"s3a://bucket/t/_delta_log/{commit_name(0)}"
    endpoint = moto_server_checking_credentials.endpoint
    for store in (S3LogStore(conf), S3SingleDriverLogStore(conf)):
        with pytest.raises(
            AccessDeniedError, match=rf"access to {uri} was denied by {endpoint} \((InvalidAccessKeyId|403)\)"
        ) as info:
            store.write(uri, ["x"])
        assert secret not in str(info.value)
    dynamo = S3DynamoDBLogStore(dynamodb_settings(moto_server_checking_credentials, unique_name("ddb")))
    denied = r"access to DynamoDB table `.*` in us-east-1 was denied \((UnrecognizedClientException|403)\)"
    with pytest.raises(AccessDeniedError, match=denied) as info:
        dynamo.get_latest_external_entry("s3a://bucket/t")
    assert AWS_TEST_SECRET not in str(info.value)


def test_missing_s3_credentials_are_an_access_error_naming_the_settings(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No key in the settings and none in AWS's chain: botocore's bare "Unable to locate
    credentials" becomes an error naming the path (or DynamoDB table) and where credentials go."""
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    keyless = {
        key: value
        for key, value in s3_settings(moto_server).items()
        if not key.endswith((".access.key", ".secret.key"))
    }
    bucket = moto_server.create_bucket()
    uri = f"s3a://{bucket}/t/_delta_log/{commit_name(0)}"
    with pytest.raises(AccessDeniedError) as error:
        S3LogStore(keyless).write(uri, ["x"])
    assert str(error.value) == (
        f"no AWS credentials to access {uri} at {moto_server.endpoint}: set fs.s3a.access.key and "
        "fs.s3a.secret.key (or the AWS environment variables, profile or instance role)"
    )
    table = unique_name("ddb")
    dynamo_keyless = {
        k: v for k, v in dynamodb_settings(moto_server, table).items() if k in keyless or "ddb." in k
    }
    with pytest.raises(AccessDeniedError, match=rf"no AWS credentials to access DynamoDB table `{table}`"):
        S3DynamoDBLogStore(dynamo_keyless).get_latest_external_entry(f"s3a://{bucket}/t")


def test_s3_service_ignoring_if_none_match_is_refused(
    moto_server: MotoServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    proxy.dropped_headers.add("if-none-match")
    bucket = moto_server.create_bucket()
    target = f"s3://{bucket}/t/_delta_log/{commit_name(0)}"
    store = S3LogStore(s3_settings(moto_server, proxy.endpoint))
    with pytest.raises(
        ConditionalWriteUnsupportedError, match=r"S3SingleDriverLogStore .* S3DynamoDBLogStore"
    ):
        store.write(target, ["x"])
    assert moto_server.client("s3").list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # probe removed
    # The DynamoDB store gives mutual exclusion on such a service.
    dynamo = S3DynamoDBLogStore(dynamodb_settings(moto_server, unique_name("ddb"), proxy.endpoint))
    dynamo.write(target, ["x"])
    with pytest.raises(FileExistsError):
        dynamo.write(target, ["y"])


def test_s3_service_rejecting_if_none_match_is_refused(
    moto_server: MotoServer, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    proxy.faults.append(Fault("PUT", "conditional-write-check", status=501, landed=False))
    store = S3LogStore(s3_settings(moto_server, proxy.endpoint))
    with pytest.raises(ConditionalWriteUnsupportedError, match="answered 501"):
        store.write(f"s3://{moto_server.create_bucket()}/t/_delta_log/{commit_name(0)}", ["x"])


# -- configuration ---------------------------------------------------------------------------------
def spark_conf(settings: dict[str, str]) -> SparkConf:
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    return conf


def test_spark_conf_reaches_s3(moto_server: MotoServer) -> None:
    conf = spark_conf(moto_server.s3a_conf())
    bucket = moto_server.create_bucket()
    store = create_log_store(conf)
    assert isinstance(store, DelegatingLogStore)
    for scheme in ("s3", "s3a", "s3n"):
        assert explain_log_store(f"{scheme}://{bucket}/t", conf).store_class is S3LogStore
        store.write(f"{scheme}://{bucket}/{scheme}/_delta_log/{commit_name(0)}", ["hello"])
    body = moto_server.client("s3").get_object(Bucket=bucket, Key=f"s3a/_delta_log/{commit_name(0)}")["Body"]
    assert body.read() == b"hello\n"


def test_spark_conf_chooses_the_dynamodb_store(moto_server: MotoServer) -> None:
    table = unique_name("ddb")
    settings = {
        **dynamodb_settings(moto_server, table),
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore",
    }
    bucket = moto_server.create_bucket()
    store = create_log_store(spark_conf(settings))
    store.write(f"s3a://{bucket}/t/_delta_log/{commit_name(0)}", ["hello"])
    items = moto_server.client("dynamodb").scan(TableName=table)["Items"]
    assert [(item["tablePath"]["S"], item["fileName"]["S"], item["complete"]["S"]) for item in items] == [
        (f"s3a://{bucket}/t", commit_name(0), "true")
    ]


def test_spark_conf_reaches_gcs(gcs_server: GCSServer) -> None:
    conf = spark_conf(gcs_server.conf())
    store = create_log_store(conf)
    assert explain_log_store("gs://b/t", conf).store_class is GCSLogStore
    target = f"gs://{gcs_server.create_bucket()}/t/_delta_log/{commit_name(0)}"
    store.write(target, ["hello"])
    assert store.read(target) == ["hello"]


@pytest.mark.parametrize("scheme", ["abfs", "abfss", "wasb", "wasbs"])
def test_spark_conf_reaches_azure(azurite_server: Azurite, scheme: str) -> None:
    settings = {
        f"spark.delta.logStore.{scheme}.options.connection_string": azurite_server.connection_string()
    }
    conf = spark_conf(settings)
    store = create_log_store(conf)
    assert explain_log_store(f"{scheme}://c/t", conf).store_class is AzureLogStore
    container = azurite_server.create_container()
    host = "dfs" if scheme.startswith("abfs") else "blob"
    root = f"{scheme}://{container}@{AZURITE_ACCOUNT}.{host}.core.windows.net/t"
    store.write(f"{root}/_delta_log/{commit_name(0)}", ["hello"])
    [status] = store.list_from(f"{root}/_delta_log/{commit_name(0)}")
    assert status.path == f"{root}/_delta_log/{commit_name(0)}"
    assert store.read(status.path) == ["hello"]


@pytest.mark.spark
def test_spark_session_conf_reaches_every_cloud(
    spark: Any, moto_server: MotoServer, gcs_server: GCSServer, azurite_server: Azurite
) -> None:
    settings = {
        **moto_server.s3a_conf(),
        **gcs_server.conf(),
        "spark.delta.logStore.abfss.options.connection_string": azurite_server.connection_string(),
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        store = create_log_store(spark)
    finally:
        for key in settings:
            spark.conf.unset(key)
    roots = [
        f"s3a://{moto_server.create_bucket()}/t",
        f"gs://{gcs_server.create_bucket()}/t",
        f"abfss://{azurite_server.create_container()}@{AZURITE_ACCOUNT}.dfs.core.windows.net/t",
    ]
    for root in roots:
        store.write(f"{root}/_delta_log/{commit_name(0)}", [root])
        assert [s.path for s in store.list_from(f"{root}/_delta_log/0")] == [
            f"{root}/_delta_log/{commit_name(0)}"
        ]
        assert store.read(f"{root}/_delta_log/{commit_name(0)}") == [root]
    assert "'secret': '***'" in repr(store)


def test_s3a_keys_map_to_s3fs_options() -> None:
    conf = {
        "fs.s3a.endpoint": "minio.local:9000",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "AK",
        "fs.s3a.secret.key": "SK",
        "fs.s3a.session.token": "ST",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": "eu-west-1",
    }
    assert s3_options("s3a", conf) == {
        "endpoint_url": "http://minio.local:9000",
        "key": "AK",
        "secret": "SK",
        "token": "ST",
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    anonymous = {
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    }
    assert s3_options("s3", {"fs.s3a.endpoint": "s3.example.com", **anonymous}) == {
        "endpoint_url": "https://s3.example.com",
        "anon": True,
    }


def test_gcs_keys_map_to_gcsfs_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert gcs_options(
        "gs", {"fs.gs.project.id": "p", "fs.gs.auth.service.account.json.keyfile": "/k.json"}
    ) == {
        "project": "p",
        "token": "/k.json",
    }
    assert gcs_options(
        "gs", {"fs.gs.auth.type": "UNAUTHENTICATED", "fs.gs.storage.root.url": "http://h:1/"}
    ) == {
        "token": "anon",
        "endpoint_url": "http://h:1",
    }
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "localhost:4443")
    assert gcs_options("gs", {}) == {"endpoint_url": "http://localhost:4443"}


def test_azure_keys_map_to_adlfs_options() -> None:
    assert azure_options("abfss", {"fs.azure.account.key.acct.dfs.core.windows.net": "KEY"}) == {
        "account_name": "acct",
        "account_key": "KEY",
    }
    assert azure_options("wasbs", {"fs.azure.sas.cont.acct.blob.core.windows.net": "sv=1&sig=x"}) == {
        "account_name": "acct",
        "sas_token": "sv=1&sig=x",
    }
    oauth = {
        "fs.azure.account.oauth2.client.id": "cid",
        "fs.azure.account.oauth2.client.secret": "cs",
        "fs.azure.account.oauth2.client.endpoint": "https://login.microsoftonline.com/tenant-1/oauth2/token",
        "fs.azure.storage.connection.string": "AccountName=a;AccountKey=b",
    }
    assert azure_options("abfs", oauth) == {
        "client_id": "cid",
        "client_secret": "cs",
        "connection_string": "AccountName=a;AccountKey=b",
        "tenant_id": "tenant-1",
    }


def test_explicit_options_override_hadoop_keys() -> None:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": "http://from-hadoop:1",
        "spark.delta.logStore.s3a.options.endpoint_url": "http://explicit:2",
        "delta.logStore.gs.options.project": "explicit-project",
        "spark.hadoop.fs.gs.project.id": "hadoop-project",
    }
    assert storage_options("s3a", conf)["endpoint_url"] == "http://explicit:2"
    assert storage_options("gs", conf)["project"] == "explicit-project"


# -- secrets ---------------------------------------------------------------------------------------
def test_secrets_never_reach_repr_errors_or_logs(
    moto_server: MotoServer, azurite_server: Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cr3t-Value-That-Must-Not-Leak"
    caplog.set_level(logging.DEBUG)
    s3 = create_log_store(
        {
            **s3_settings(moto_server),
            "spark.hadoop.fs.s3a.secret.key": secret,
            "spark.hadoop.fs.s3a.session.token": secret,
        }
    )
    bucket = moto_server.create_bucket()
    s3.write(f"s3a://{bucket}/t/_delta_log/{commit_name(0)}", ["x"])
    with pytest.raises(FileExistsError) as conflict:
        s3.write(f"s3a://{bucket}/t/_delta_log/{commit_name(0)}", ["x"])
    with pytest.raises(FileNotFoundError) as missing:
        list(s3.list_from(f"s3a://no-such-bucket/t/_delta_log/{commit_name(0)}"))
    azure_key = "c2VjcmV0LWF6dXJlLWtleS10aGF0LW11c3Qtbm90LWxlYWs="
    azure = create_log_store(
        {
            "spark.delta.logStore.abfs.options.connection_string": azurite_server.connection_string(
                key=azure_key
            )
        }
    )
    with pytest.raises(PermissionError) as denied:
        azure.write(f"abfs://{azurite_server.create_container()}/t/_delta_log/{commit_name(0)}", ["x"])
    our_logs = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("logstores"))
    assert "LogStore" in our_logs  # the stores did log
    for text in (repr(s3), repr(azure), str(conflict.value), str(missing.value), str(denied.value), our_logs):
        assert secret not in text
        assert azure_key not in text
    for option in ("key", "secret", "token"):
        assert f"'{option}': '***'" in repr(s3)
    assert AWS_TEST_KEY not in repr(s3)


def test_every_cloud_store_is_exported() -> None:
    import logstores

    for name in (
        "S3LogStore",
        "S3SingleDriverLogStore",
        "S3DynamoDBLogStore",
        "GCSLogStore",
        "AzureLogStore",
    ):
        assert name in logstores.__all__
        assert issubclass(getattr(logstores, name), LogStore)


@pytest.mark.parametrize("where", ["s3", "gcs", "azure"])
def test_a_missing_bucket_is_named_instead_of_no_commit_files(
    where: str, moto_server: MotoServer, gcs_server: GCSServer, azurite_server: Azurite
) -> None:
    uri, conf, kind = {
        "s3": ("s3a://no-such-bucket/t", s3_settings(moto_server), "S3 bucket"),
        "gcs": ("gs://no-such-bucket/t", gcs_server.conf(), "GCS bucket"),
        "azure": ("abfs://no-such-container/t", azurite_server.conf(), "Azure container"),
    }[where]
    name = uri.split("/")[2]
    with pytest.raises(BucketNotFoundError, match=f"{kind} '{name}' does not exist") as error:
        DeltaLog.for_table(uri, conf).snapshot()
    assert error.value.bucket == name
    assert isinstance(error.value, FileNotFoundError)
    # the log directory listed, whole (not the "00000000000000000000." the listing starts from)
    assert str(error.value) == f"{kind} '{name}' does not exist ({uri}/_delta_log/)"
