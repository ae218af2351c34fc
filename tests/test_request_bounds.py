"""Every storage request is bounded: timeouts and attempts from our key and the Hadoop keys, typed
errors naming the endpoint, and commit races that always finish, even when a request stalls."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from logstores import (
    AzureLogStore,
    GCSLogStore,
    LogStore,
    LogStoreConfError,
    LogStoreError,
    S3DynamoDBLogStore,
    S3LogStore,
    S3SingleDriverLogStore,
)
from logstores.timeouts import (
    DEFAULT_ATTEMPTS,
    DEFAULT_REQUEST_TIMEOUT_MS,
    RequestBounds,
    endpoint_address,
    fsspec_timeout_options,
    request_bounds,
)
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.txn.transaction import commit_actions as commit
from tests.cloud_servers import (
    Azurite,
    Fault,
    FaultProxy,
    GCSServer,
    MotoServer,
    StalledEndpoint,
    dynamodb_settings,
    s3_settings,
    unique_name,
)

pytestmark = pytest.mark.cloud

TIMEOUT_KEY = "spark.delta.logstores.requestTimeoutMs"
FAST = {TIMEOUT_KEY: "2000"}
STALLED = {TIMEOUT_KEY: "1000"}
"""The bound of the stalled-endpoint test: any bound shows the failure, a short one sooner."""
SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
COMMIT = f"{0:020d}.json"


# -- where the bounds come from ------------------------------------------------------------------------
def test_defaults_are_at_most_a_minute_with_three_attempts() -> None:
    bounds = request_bounds({}, "s3")
    assert bounds.read_timeout_s == DEFAULT_REQUEST_TIMEOUT_MS / 1000 <= 60
    assert bounds.connect_timeout_s <= bounds.read_timeout_s
    assert bounds.attempts == DEFAULT_ATTEMPTS == 3


@pytest.mark.parametrize("spelling", [TIMEOUT_KEY, TIMEOUT_KEY.removeprefix("spark.")])
def test_our_key_bounds_every_service_and_caps_the_connect_timeout(spelling: str) -> None:
    for service in ("s3", "gcs", "azure", "fsspec"):
        bounds = request_bounds({spelling: "2000"}, service)
        assert (bounds.read_timeout_s, bounds.connect_timeout_s) == (2.0, 2.0)


@pytest.mark.parametrize(
    ("service", "read_key", "connect_key", "retry_key"),
    [
        ("s3", "fs.s3a.connection.timeout", "fs.s3a.connection.establish.timeout", "fs.s3a.attempts.maximum"),
        ("gcs", "fs.gs.http.read-timeout", "fs.gs.http.connect-timeout", "fs.gs.http.max.retry"),
        (
            "azure",
            "fs.azure.http.read.timeout",
            "fs.azure.http.connection.timeout",
            "fs.azure.io.retry.max.retries",
        ),
    ],
)
def test_hadoop_keys_are_honoured(service: str, read_key: str, connect_key: str, retry_key: str) -> None:
    conf = {f"spark.hadoop.{read_key}": "30s", connect_key: "1500", retry_key: "4"}
    assert request_bounds(conf, service) == RequestBounds(1.5, 30.0, 5)
    # Our key, the one for every store, wins over the connector's read timeout.
    assert request_bounds({**conf, TIMEOUT_KEY: "5000"}, service).read_timeout_s == 5.0
    with pytest.raises(LogStoreConfError, match=read_key):
        request_bounds({read_key: "soon"}, service)
    with pytest.raises(LogStoreConfError, match=retry_key):
        request_bounds({retry_key: "-1"}, service)


def test_invalid_timeout_names_the_key() -> None:
    with pytest.raises(LogStoreConfError, match=f"{TIMEOUT_KEY} must be a positive duration"):
        request_bounds({TIMEOUT_KEY: "0"}, "s3")
    with pytest.raises(LogStoreConfError, match="requestTimeoutMs"):
        S3LogStore({TIMEOUT_KEY: "never"})


def test_backoff_grows_and_is_capped() -> None:
    bounds = RequestBounds(1.0, 2.0, 10, backoff_base_s=0.2, backoff_max_s=1.0)
    assert 0.1 <= bounds.backoff(1) <= 0.2
    assert 0.2 <= bounds.backoff(2) <= 0.4
    assert 0.5 <= bounds.backoff(9) <= 1.0
    assert bounds.worst_case_s >= 10 * 3.0


def test_generic_filesystems_get_timeouts_where_they_take_them() -> None:
    bounds = RequestBounds(2.0, 5.0, 3)
    assert fsspec_timeout_options("hdfs", bounds)["extra_conf"]["dfs.client.socket-timeout"] == "5000"
    assert fsspec_timeout_options("sftp", bounds)["timeout"] == 2.0
    assert fsspec_timeout_options("ftp", bounds) == {"timeout": 5.0}
    timeout = fsspec_timeout_options("https", bounds)["client_kwargs"]["timeout"]
    assert (timeout.sock_connect, timeout.sock_read) == (2.0, 5.0)
    assert fsspec_timeout_options("file", bounds) == {}


def test_sdk_clients_receive_the_bounds(
    moto_server: MotoServer, gcs_server: GCSServer, azurite_server: Azurite
) -> None:
    s3 = S3LogStore({**s3_settings(moto_server), **FAST})
    options = s3.filesystem_options("s3")["config_kwargs"]
    assert (options["connect_timeout"], options["read_timeout"]) == (2.0, 2.0)
    assert options["retries"]["total_max_attempts"] == 3
    assert s3.filesystem("s3://b/k").retries == 1  # one retry layer: botocore's
    gcs = GCSLogStore({**gcs_server.conf(), **FAST})
    timeout = gcs.filesystem("gs://b/k").requests_timeout
    assert (timeout.sock_connect, timeout.sock_read, timeout.total) == (2.0, 2.0, None)
    azure = AzureLogStore({**azurite_server.conf(), **FAST})
    client = azure.filesystem("abfs://c/k").service_client
    assert client._config.retry_policy.total_retries == 2
    assert endpoint_address("https://s3.amazonaws.com") == "s3.amazonaws.com:443"
    assert endpoint_address("http://user:pw@127.0.0.1:9000/x") == "127.0.0.1:9000"


# -- an endpoint that never answers ----------------------------------------------------------------------
def stalled_stores(stalled: StalledEndpoint, moto_server: MotoServer) -> dict[str, tuple[LogStore, str]]:
    """Every cloud store with the stalled endpoint as its (DynamoDB) endpoint, and a path to write."""
    endpoint = stalled.endpoint
    s3 = {**s3_settings(moto_server, endpoint), **STALLED}
    ddb = {
        **dynamodb_settings(moto_server, unique_name("ddb"), endpoint),
        **s3_settings(moto_server),
        **STALLED,
    }
    gcs = {
        "spark.hadoop.fs.gs.storage.root.url": endpoint,
        "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        **STALLED,
    }
    connection = (
        f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint={endpoint}/acct;"
    )
    azure = {"spark.delta.logStore.abfs.options.connection_string": connection, **STALLED}
    bucket = moto_server.create_bucket()
    return {
        "S3LogStore": (S3LogStore(s3), f"s3a://bucket/t/_delta_log/{COMMIT}"),
        "S3SingleDriverLogStore": (S3SingleDriverLogStore(s3), f"s3a://bucket/t/_delta_log/{COMMIT}"),
        "S3DynamoDBLogStore": (S3DynamoDBLogStore(ddb), f"s3a://{bucket}/t/_delta_log/{COMMIT}"),
        "GCSLogStore": (GCSLogStore(gcs), f"gs://bucket/t/_delta_log/{COMMIT}"),
        "AzureLogStore": (AzureLogStore(azure), f"abfs://container/t/_delta_log/{COMMIT}"),
    }


@pytest.mark.timeout(120)
def test_a_stalled_endpoint_fails_every_store_in_bounded_time_naming_it(
    stalled_endpoint: StalledEndpoint, moto_server: MotoServer
) -> None:
    stores = stalled_stores(stalled_endpoint, moto_server)

    def attempt(name: str) -> tuple[float, BaseException | None]:
        store, path = stores[name]
        started = time.monotonic()
        try:
            store.write(path, ["x"])
        except BaseException as exc:  # noqa: BLE001 - inspected below
            return time.monotonic() - started, exc
        return time.monotonic() - started, None

    with ThreadPoolExecutor(len(stores)) as pool:
        results = dict(zip(stores, pool.map(attempt, stores), strict=True))
    for name, (elapsed, error) in results.items():
        assert isinstance(error, LogStoreError), f"{name}: {error!r}"
        message = str(error)
        assert f"127.0.0.1:{stalled_endpoint.port}" in message, f"{name}: {message}"
        assert stores[name][1] in message or "_delta_log" in message, f"{name}: {message}"
        assert "timed out" in message or "no answer" in message, f"{name}: {message}"
        assert elapsed < 45, f"{name} took {elapsed:.1f} s"
    durations = {name: round(elapsed, 1) for name, (elapsed, _) in results.items()}
    print(f"time to fail on a stalled endpoint: {durations}")


# -- commit races that always finish ---------------------------------------------------------------------
WRITERS, COMMITS = 4, 10


def race_once(make_store: Callable[[], LogStore], root: str) -> None:
    """4 writers with their own store commit 10 appends each through replay's committer."""
    uri = f"{root}/race-{uuid.uuid4().hex[:8]}"
    creator = DeltaLog(uri, None, make_store())
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=SCHEMA, configuration={})
    commit(creator.io, [Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1)
    logs = [DeltaLog(uri, None, make_store()) for _ in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)
    versions: list[int] = []
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        barrier.wait()
        try:
            for number in range(COMMITS):
                add = AddFile(path=f"w{index}-{number}", size=1, modification_time=1, data_change=True)
                versions.append(commit(logs[index].io, [add]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(index,), daemon=True) for index in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(versions) == list(range(1, WRITERS * COMMITS + 1))
    check = DeltaLog(uri, None, make_store())
    expected = {f"w{w}-{n}" for w in range(WRITERS) for n in range(COMMITS)}
    assert sorted(add.path for add in check.snapshot().files()) == sorted(expected)
    for version in range(1, WRITERS * COMMITS + 1):
        assert sum(isinstance(action, AddFile) for action in check.read_version(version)) == 1


RACE_LOOPS = {"s3": 2, "s3_single_driver": 2, "s3_dynamodb": 1, "gcs": 4, "azure": 2}


def race_target(
    kind: str, moto: MotoServer, gcs: GCSServer, azurite_server: Azurite
) -> tuple[Callable[[], LogStore], str]:
    conf: dict[str, Any]
    if kind == "s3":
        conf = {**s3_settings(moto), **FAST}
        return (lambda: S3LogStore(conf)), f"s3a://{moto.create_bucket()}"
    if kind == "s3_single_driver":
        conf = {**s3_settings(moto), **FAST}
        return (lambda: S3SingleDriverLogStore(conf)), f"s3a://{moto.create_bucket()}"
    if kind == "s3_dynamodb":
        conf = {**dynamodb_settings(moto, unique_name("race")), **FAST}
        return (lambda: S3DynamoDBLogStore(conf)), f"s3a://{moto.create_bucket()}"
    if kind == "gcs":
        conf = {**gcs.conf(), **FAST}
        return (lambda: GCSLogStore(conf)), f"gs://{gcs.create_bucket()}"
    conf = {**azurite_server.conf(), **FAST}
    return (lambda: AzureLogStore(conf)), f"abfs://{azurite_server.create_container()}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", sorted(RACE_LOOPS))
def test_commit_races_finish_with_every_commit_once(
    kind: str, moto_server: MotoServer, gcs_server: GCSServer, azurite_server: Azurite
) -> None:
    make_store, root = race_target(kind, moto_server, gcs_server, azurite_server)
    started = time.monotonic()
    for _ in range(RACE_LOOPS[kind]):
        race_once(make_store, root)
    print(f"{kind}: {RACE_LOOPS[kind]} race loops in {time.monotonic() - started:.1f} s")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("landed", [False, True])
def test_gcs_race_finishes_when_the_emulator_stalls_a_request(
    gcs_server: GCSServer, fault_proxy: Callable[[str], FaultProxy], landed: bool
) -> None:
    proxy = fault_proxy(gcs_server.endpoint)
    conf = {**gcs_server.conf(proxy.endpoint), **FAST}
    proxy.faults.append(Fault("POST", "/upload/storage/v1/b/", landed=landed, stall_s=60))
    started = time.monotonic()
    race_once(lambda: GCSLogStore(conf), f"gs://{gcs_server.create_bucket()}")
    assert proxy.faults[0].times == 0  # the stall happened
    assert time.monotonic() - started < 60


@pytest.mark.timeout(120)
def test_s3_put_with_a_stalled_answer_is_resolved_by_reading_back(
    moto_server: MotoServer, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    conf = {**s3_settings(moto_server, proxy.endpoint), **FAST}
    conf["spark.delta.logStore.s3.verifyConditionalWrites"] = "false"
    store = S3LogStore(conf)
    target = f"s3a://{moto_server.create_bucket()}/t/_delta_log/{COMMIT}"
    proxy.faults.append(Fault("PUT", COMMIT, landed=True, stall_s=60))
    started = time.monotonic()
    store.write(target, ["ours"])  # applied, answer lost; the retry meets 412; the read-back decides
    assert store.read(target) == ["ours"]
    assert len(proxy.matching("PUT", COMMIT)) == 2
    assert time.monotonic() - started < 30
