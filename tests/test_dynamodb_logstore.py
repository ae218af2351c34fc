"""S3DynamoDBLogStore on moto (S3 + DynamoDB): Delta's protocol, its faults and its repairs.

Writers are "killed" after each protocol step by raising a BaseException from the step hook
(like Delta's FailingS3DynamoDBLogStore), which no protocol code may swallow.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from logstores import LogStoreConfError, LogStoreError, S3DynamoDBLogStore
from logstores.s3_dynamodb import ExternalCommitEntry, get_param, is_delta_log_path
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol, RemoveFile
from replay.protocol.errors import ConcurrentModificationError
from replay.txn.transaction import commit_actions as commit
from tests.cloud_servers import Fault, FaultProxy, MotoServer, dynamodb_settings, free_port, unique_name

pytestmark = pytest.mark.cloud

SPARK_PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore."
BASE_PREFIX = "io.delta.storage.S3DynamoDBLogStore."
TEMP_PATH = re.compile(
    r"^\.tmp/(\d{20}\.json)\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


class WriterKilled(BaseException):
    """The writing process died at a protocol step."""


class KilledStore(S3DynamoDBLogStore):
    """The real store, dying right after ``step``: ``temp``, ``entry`` or ``copy``."""

    def __init__(self, conf: dict[str, str], step: str) -> None:
        super().__init__(conf)
        self.step = step

    def put_external_entry(self, entry: ExternalCommitEntry, overwrite: bool) -> None:
        if self.step == "temp" and not overwrite:
            raise WriterKilled("after writing the temp file")
        super().put_external_entry(entry, overwrite)

    def write_copy_temp_file(self, entry: ExternalCommitEntry, target: str, data: bytes) -> None:
        if self.step == "entry":
            raise WriterKilled("after putting the incomplete entry")
        super().write_copy_temp_file(entry, target, data)

    def write_put_complete_entry(self, entry: ExternalCommitEntry) -> None:
        if self.step == "copy":
            raise WriterKilled("after copying the temp file")
        super().write_put_complete_entry(entry)


@dataclass
class Table:
    """One Delta table on moto S3 with its own DynamoDB table."""

    moto: MotoServer
    conf: dict[str, str]
    ddb_table: str
    bucket: str

    @property
    def root(self) -> str:
        return f"s3a://{self.bucket}/table"

    @property
    def log(self) -> str:
        return f"{self.root}/_delta_log"

    def path(self, version: int) -> str:
        return f"{self.log}/{commit_name(version)}"

    def store(self) -> S3DynamoDBLogStore:
        return S3DynamoDBLogStore(self.conf)

    def items(self) -> dict[str, dict[str, Any]]:
        """fileName -> item (plain values) of this table's entries."""
        client = self.moto.client("dynamodb")
        items = client.scan(TableName=self.ddb_table, ConsistentRead=True)["Items"]
        return {
            item["fileName"]["S"]: {key: next(iter(value.values())) for key, value in item.items()}
            for item in items
            if item["tablePath"]["S"] == self.root
        }

    def object_keys(self, prefix: str = "table/") -> list[str]:
        listing = self.moto.client("s3").list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for item in listing.get("Contents", [])]

    def body(self, version: int) -> bytes:
        key = f"table/_delta_log/{commit_name(version)}"
        return self.moto.client("s3").get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def delete_file(self, version: int) -> None:
        self.moto.client("s3").delete_object(
            Bucket=self.bucket, Key=f"table/_delta_log/{commit_name(version)}"
        )


@pytest.fixture
def table(moto_server: MotoServer) -> Table:
    ddb_table = unique_name("ddb")
    return Table(
        moto_server, dynamodb_settings(moto_server, ddb_table), ddb_table, moto_server.create_bucket()
    )


# -- the protocol ----------------------------------------------------------------------------------
def test_a_commit_leaves_a_complete_entry_in_delta_layout(table: Table) -> None:
    before = int(time.time())
    table.store().write(table.path(0), ["zero"])
    [(name, item)] = table.items().items()
    assert name == commit_name(0)
    assert set(item) == {"tablePath", "fileName", "tempPath", "complete", "expireTime"}
    assert item["tablePath"] == table.root
    assert item["complete"] == "true"
    assert TEMP_PATH.match(item["tempPath"]).group(1) == commit_name(0)
    assert before + 86_400 <= int(item["expireTime"]) <= int(time.time()) + 86_400
    assert table.object_keys() == [f"table/_delta_log/{commit_name(0)}"]  # the temp file is gone
    assert table.body(0) == b"zero\n"


def test_second_write_of_a_version_conflicts_and_overwrite_does_not(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    with pytest.raises(FileExistsError, match=commit_name(0)):
        store.write(table.path(0), ["again"])
    store.write(table.path(0), ["replaced"], overwrite=True)
    assert store.read(table.path(0)) == ["replaced"]
    assert list(table.items()) == [commit_name(0)]


def test_first_commit_needs_no_predecessor_but_later_ones_do(table: Table) -> None:
    store = table.store()
    with pytest.raises(LogStoreError) as info:
        store.write(table.path(1), ["one"])
    assert str(info.value) == (
        f"previous commit {table.path(0)} doesn't exist on the file system but does in the external log store"
    )
    store.write(table.path(0), ["zero"])
    table.delete_file(0)
    with pytest.raises(LogStoreError) as info:
        store.write(table.path(1), ["one"])
    assert str(info.value).startswith(f"previous commit {table.path(0)} doesn't exist")
    with pytest.raises(LogStoreError) as info:
        store.write(table.path(0), ["zero again"])
    assert str(info.value) == f"Old entries for table {table.root} still exist in the external log store"


def test_expired_entries_leave_the_file_system_check(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    store.write(table.path(1), ["one"])
    with pytest.raises(FileExistsError, match=re.escape(table.path(1))):
        store.write(table.path(1), ["uno"])
    assert sorted(table.items()) == [commit_name(0), commit_name(1)]
    client = table.moto.client("dynamodb")
    for name in table.items():  # what the TTL does a day later
        client.delete_item(
            TableName=table.ddb_table, Key={"tablePath": {"S": table.root}, "fileName": {"S": name}}
        )
    with pytest.raises(FileExistsError, match=re.escape(table.path(1))):
        store.write(table.path(1), ["uno"])
    assert table.body(1) == b"one\n"


def test_non_commit_files_use_the_protocol_too(table: Table) -> None:
    store = table.store()
    store.write(f"{table.log}/_last_checkpoint", ["{}"])
    store.write_bytes(f"{table.log}/{0:020d}.checkpoint.parquet", b"PAR1")
    assert store.read_bytes(f"{table.log}/{0:020d}.checkpoint.parquet") == b"PAR1"
    assert sorted(table.items()) == [f"{0:020d}.checkpoint.parquet", "_last_checkpoint"]


# -- faults and repairs ----------------------------------------------------------------------------
@pytest.mark.parametrize("repairer", ["next writer", "reader"])
@pytest.mark.parametrize("step", ["temp", "entry", "copy"])
def test_a_writer_killed_after_each_step_is_repaired(table: Table, step: str, repairer: str) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    with pytest.raises(WriterKilled):
        KilledStore(table.conf, step).write(table.path(1), ["killed writer"])
    committed = step != "temp"  # the entry put is the commit point
    assert (commit_name(1) in table.items()) is committed
    if committed:
        assert table.items()[commit_name(1)]["complete"] == "false"
    assert (f"table/_delta_log/{commit_name(1)}" in table.object_keys()) is (step == "copy")

    if repairer == "reader":
        listed = [status.name for status in store.list_from(table.path(0))]
        assert listed == ([commit_name(0), commit_name(1)] if committed else [commit_name(0)])
        store.write(table.path(2 if committed else 1), ["next writer"])
    else:
        if committed:
            with pytest.raises(FileExistsError, match=commit_name(1)):
                store.write(table.path(1), ["next writer"])
        store.write(table.path(2 if committed else 1), ["next writer"])

    last = 2 if committed else 1
    assert [status.name for status in store.list_from(table.path(0))] == [
        commit_name(v) for v in range(last + 1)
    ]
    assert store.read(table.path(1)) == (["killed writer"] if committed else ["next writer"])
    assert store.read(table.path(last)) == ["next writer"]
    assert {name: item["complete"] for name, item in table.items().items()} == {
        commit_name(v): "true" for v in range(last + 1)
    }
    temps = [key.split("/_delta_log/")[1] for key in table.object_keys() if "/.tmp/" in key]
    if step == "temp":  # the killed writer's temp file stays, harmless (Delta leaves all of them)
        assert len(temps) == 1
        assert TEMP_PATH.match(temps[0]).group(1) == commit_name(1)
    else:
        assert temps == []


def test_an_incomplete_entry_written_by_delta_on_the_jvm_is_repaired(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    temp = f".tmp/{commit_name(1)}.0b5f3c1e-2f7a-4a8e-9d1c-3e4f5a6b7c8d"
    table.moto.client("s3").put_object(
        Bucket=table.bucket, Key=f"table/_delta_log/{temp}", Body=b"from the jvm\n"
    )
    table.moto.client("dynamodb").put_item(
        TableName=table.ddb_table,
        Item={
            "tablePath": {"S": table.root},
            "fileName": {"S": commit_name(1)},
            "tempPath": {"S": temp},
            "complete": {"S": "false"},
        },
    )
    assert [status.name for status in store.list_from(table.path(0))] == [commit_name(0), commit_name(1)]
    assert table.body(1) == b"from the jvm\n"
    entry = table.items()[commit_name(1)]
    assert entry["complete"] == "true"
    assert abs(int(entry["expireTime"]) - (int(time.time()) + 86_400)) < 60


def test_entries_of_another_table_are_left_alone(table: Table) -> None:
    other = f"s3a://{table.bucket}/other"
    store = table.store()
    store.write(table.path(0), ["zero"])
    table.moto.client("dynamodb").put_item(
        TableName=table.ddb_table,
        Item={
            "tablePath": {"S": other},
            "fileName": {"S": commit_name(5)},
            "tempPath": {"S": f".tmp/{commit_name(5)}.x"},
            "complete": {"S": "false"},
        },
    )
    assert [status.name for status in store.list_from(table.path(0))] == [commit_name(0)]
    store.write(table.path(1), ["one"])
    item = table.moto.client("dynamodb").get_item(
        TableName=table.ddb_table, Key={"tablePath": {"S": other}, "fileName": {"S": commit_name(5)}}
    )["Item"]
    assert item["complete"]["S"] == "false"


def test_listing_asks_dynamodb_once_and_only_for_log_paths(
    moto_server: MotoServer, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(moto_server.endpoint)
    conf = {
        **dynamodb_settings(moto_server, unique_name("ddb")),
        f"{SPARK_PREFIX}ddb.endpoint": proxy.endpoint,
    }
    store = S3DynamoDBLogStore(conf)
    root = f"s3a://{moto_server.create_bucket()}/t"
    store.write(f"{root}/_delta_log/{commit_name(0)}", ["zero"])
    store.write(f"{root}/part-000.parquet", ["data"], overwrite=True)

    def queries() -> int:
        return sum(r.headers.get("X-Amz-Target") == "DynamoDB_20120810.Query" for r in proxy.requests)

    proxy.requests.clear()
    assert [s.name for s in store.list_from(f"{root}/_delta_log/{commit_name(0)}")] == [commit_name(0)]
    assert queries() == 1
    proxy.requests.clear()
    assert [s.name for s in store.list_from(f"{root}/part-000.parquet")] == ["part-000.parquet"]
    assert queries() == 0


def test_is_delta_log_path() -> None:
    for path in (
        "s3://bucket/_delta_log/0000.json",
        "s3://bucket/_delta_log/0010.checkpoint.parquet",
        "s3://bucket/_delta_log/0000.",
        "s3://bucket/_delta_log/",
        "s3://bucket/_delta_log",
    ):
        assert is_delta_log_path(path), path
    for path in ("s3://bucket/part-000-UUID.parquet", "s3://bucket/__delta_log/", "s3://bucket/_delta_log_"):
        assert not is_delta_log_path(path), path


def test_list_from_a_missing_directory(table: Table) -> None:
    with pytest.raises(FileNotFoundError, match="non-existing-path"):
        list(table.store().list_from(f"s3a://{table.bucket}/non-existing-path/with-parent"))


# -- the DynamoDB table ----------------------------------------------------------------------------
def test_a_missing_table_is_created_on_first_use(moto_server: MotoServer) -> None:
    name = unique_name("created")
    conf = {
        **moto_server.s3a_conf(),
        f"{BASE_PREFIX}ddb.tableName": name,
        f"{BASE_PREFIX}ddb.endpoint": moto_server.endpoint,
        f"{BASE_PREFIX}provisionedThroughput.rcu": "7",
        f"{BASE_PREFIX}provisionedThroughput.wcu": "3",
    }
    client = moto_server.client("dynamodb")
    assert name not in client.list_tables()["TableNames"]
    stores = [S3DynamoDBLogStore(conf) for _ in range(2)]
    bucket = moto_server.create_bucket()
    threads = [
        threading.Thread(
            target=store.write, args=(f"s3a://{bucket}/t{index}/_delta_log/{commit_name(0)}", ["x"])
        )
        for index, store in enumerate(stores)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    description = client.describe_table(TableName=name)["Table"]
    assert description["TableStatus"] == "ACTIVE"
    assert description["KeySchema"] == [
        {"AttributeName": "tablePath", "KeyType": "HASH"},
        {"AttributeName": "fileName", "KeyType": "RANGE"},
    ]
    assert sorted((a["AttributeName"], a["AttributeType"]) for a in description["AttributeDefinitions"]) == [
        ("fileName", "S"),
        ("tablePath", "S"),
    ]
    throughput = description["ProvisionedThroughput"]
    assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (7, 3)
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expireTime")
    assert len(client.scan(TableName=name)["Items"]) == 2


def test_a_table_deleted_while_in_use_is_named(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    table.moto.client("dynamodb").delete_table(TableName=table.ddb_table)
    with pytest.raises(
        LogStoreError, match=f"DynamoDB table `{table.ddb_table}` in us-east-1 does not exist"
    ):
        store.write(table.path(1), ["one"])


# -- configuration ---------------------------------------------------------------------------------
def test_unreachable_dynamodb_endpoint_fails_fast_naming_it(moto_server: MotoServer) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    store = S3DynamoDBLogStore({**moto_server.s3a_conf(), f"{BASE_PREFIX}ddb.endpoint": endpoint})
    started = time.monotonic()
    with pytest.raises(LogStoreError, match=f"cannot reach the DynamoDB endpoint {endpoint}"):
        store.write(f"s3a://{moto_server.create_bucket()}/t/_delta_log/{commit_name(0)}", ["x"])
    assert time.monotonic() - started < 6


def test_get_param_reads_both_prefixes() -> None:
    assert get_param({}, "ddb.tableName", "delta_log") == "delta_log"
    assert get_param({f"{SPARK_PREFIX}ddb.tableName": "a"}, "ddb.tableName", "delta_log") == "a"
    assert get_param({f"{BASE_PREFIX}ddb.tableName": "b"}, "ddb.tableName", "delta_log") == "b"
    same = {f"{SPARK_PREFIX}ddb.tableName": "c", f"{BASE_PREFIX}ddb.tableName": "c"}
    assert get_param(same, "ddb.tableName", "delta_log") == "c"
    different = {f"{SPARK_PREFIX}ddb.tableName": "c", f"{BASE_PREFIX}ddb.tableName": "d"}
    with pytest.raises(LogStoreConfError) as info:
        get_param(different, "ddb.tableName", "delta_log")
    assert str(info.value) == (
        f"Configuration properties `{SPARK_PREFIX}ddb.tableName=c` and `{BASE_PREFIX}ddb.tableName=d` "
        "have different values. Please set only one."
    )


def test_store_settings_and_their_errors() -> None:
    store = S3DynamoDBLogStore(
        {f"spark.hadoop.{BASE_PREFIX}ddb.region": "eu-west-1", f"{SPARK_PREFIX}ddb.ttl": "60"}
    )
    assert (store.table_name, store.region, store.ttl_seconds) == ("delta_log", "eu-west-1", 60)
    with pytest.raises(LogStoreConfError, match=r"^Can't use negative `ddb.ttl` value of -1$"):
        S3DynamoDBLogStore({f"{BASE_PREFIX}ddb.ttl": "-1"})
    with pytest.raises(LogStoreConfError, match=r"ddb\.ttl must be an integer, got 'soon'"):
        S3DynamoDBLogStore({f"{BASE_PREFIX}ddb.ttl": "soon"})
    with pytest.raises(LogStoreConfError, match="have different values"):
        S3DynamoDBLogStore({f"{BASE_PREFIX}ddb.region": "a", f"{SPARK_PREFIX}ddb.region": "b"})


# -- a dead winner met in the commit path ------------------------------------------------------------
SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


class CountingStore(S3DynamoDBLogStore):
    """The real store, counting its conditional entry puts (one per commit attempt)."""

    def __init__(self, conf: dict[str, str]) -> None:
        super().__init__(conf)
        self.entry_puts = 0

    def put_external_entry(self, entry: ExternalCommitEntry, overwrite: bool) -> None:
        if not overwrite:
            self.entry_puts += 1
        super().put_external_entry(entry, overwrite)


def _created(table: Table) -> None:
    log = DeltaLog(table.root, None, table.store())
    metadata = Metadata(id="t", schema_string=SCHEMA, configuration={})
    commit(log.io, [Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1)
    log.commit([AddFile(path="x", size=1, modification_time=1, data_change=True)])


def _remove(path: str) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=1, data_change=True)


def test_a_loser_repairs_the_dead_winner_then_checks_it_and_commits_next(table: Table) -> None:
    _created(table)  # versions 0 and 1
    killed = DeltaLog(table.root, None, KilledStore(table.conf, "entry"))
    with pytest.raises(WriterKilled):  # died after its entry for version 2, before copying 2.json
        killed.commit([AddFile(path="dead", size=1, modification_time=1, data_change=True)], read_version=1)
    assert table.items()[commit_name(2)]["complete"] == "false"
    assert f"table/_delta_log/{commit_name(2)}" not in table.object_keys()

    store = CountingStore(table.conf)
    loser = DeltaLog(table.root, None, store)
    add = AddFile(path="alive", size=1, modification_time=1, data_change=True)
    assert commit(loser.io, [add], read_version=1, max_attempts=20) == 3
    # The listing that loads the commit's base snapshot repairs version 2 (as Delta's list-time
    # fixDeltaLog does), so the writer goes straight to version 3: one entry put, no spinning.
    # A writer that meets the incomplete entry on its put is covered at the store level above.
    assert store.entry_puts == 1
    assert [a.path for a in loser.read_version(2) if isinstance(a, AddFile)] == ["dead"]
    assert sorted(a.path for a in loser.snapshot().files()) == ["alive", "dead", "x"]
    assert {name: item["complete"] for name, item in table.items().items()} == {
        commit_name(v): "true" for v in range(4)
    }


def test_a_conflict_with_the_repaired_commit_names_its_version(table: Table) -> None:
    _created(table)
    with pytest.raises(WriterKilled):
        DeltaLog(table.root, None, KilledStore(table.conf, "entry")).commit([_remove("x")], read_version=1)
    store = CountingStore(table.conf)
    with pytest.raises(
        ConcurrentModificationError, match=r"by a concurrent update \(version 2 of table"
    ) as error:
        commit(
            DeltaLog(table.root, None, store).io, [_remove("x")], "DELETE", read_version=1, max_attempts=20
        )
    assert error.value.winning_version == 2
    assert store.entry_puts == 0  # the base snapshot's listing repaired version 2: no put at all


def test_a_winner_whose_temp_file_is_gone_is_reported_with_its_version(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    with pytest.raises(WriterKilled):
        KilledStore(table.conf, "entry").write(table.path(1), ["killed writer"])
    temp = table.items()[commit_name(1)]["tempPath"]
    table.moto.client("s3").delete_object(Bucket=table.bucket, Key=f"table/_delta_log/{temp}")
    with pytest.raises(LogStoreError, match=f"{commit_name(1)} is committed in .* could not be repaired"):
        table.store().write(table.path(1), ["loser"])


def test_an_entry_put_whose_answer_was_lost_is_recognised_as_ours(
    table: Table, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(table.moto.endpoint)
    conf = {**table.conf, f"{SPARK_PREFIX}ddb.endpoint": proxy.endpoint}
    store = S3DynamoDBLogStore(conf)
    store.write(table.path(0), ["zero"])
    # DynamoDB applies the conditional put of version 1 and answers 500; the SDK's retry then fails
    # the condition on our own entry. Before reading it back, the writer took that for a lost race.
    proxy.faults.append(Fault("POST", "/", status=500, landed=True, body_contains=b"attribute_not_exists"))
    store.write(table.path(1), ["one"])
    assert proxy.faults[0].times == 0
    assert table.body(1) == b"one\n"
    assert table.items()[commit_name(1)]["complete"] == "true"
    assert not [key for key in table.object_keys() if "/.tmp/" in key]


@pytest.mark.timeout(60)
def test_a_dynamodb_endpoint_that_dies_is_named(
    table: Table, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(table.moto.endpoint)
    store = S3DynamoDBLogStore({**table.conf, f"{SPARK_PREFIX}ddb.endpoint": proxy.endpoint})
    store.write(table.path(0), ["zero"])
    proxy.close()
    address = proxy.endpoint.removeprefix("http://")
    with pytest.raises(
        LogStoreError, match=f"cannot reach the DynamoDB endpoint {address}.*{commit_name(0)}"
    ):
        store.write(table.path(1), ["one"])


def test_stale_temp_files_are_removed_but_never_one_a_repair_needs(table: Table) -> None:
    store = table.store()
    store.write(table.path(0), ["zero"])
    with pytest.raises(WriterKilled):  # temp file without entry: garbage
        KilledStore(table.conf, "temp").write(table.path(1), ["orphan"])
    [orphan] = [key for key in table.object_keys() if "/.tmp/" in key]
    with pytest.raises(WriterKilled):  # temp file of an incomplete entry: needed to repair version 1
        KilledStore(table.conf, "entry").write(table.path(1), ["dead winner"])
    probe = "table/_delta_log/.tmp/.conditional-write-check.0123456789abcdef"
    table.moto.client("s3").put_object(Bucket=table.bucket, Key=probe, Body=b"")
    assert store.delete_stale_temp_files(table.log, older_than_s=3600) == []  # all of them are fresh
    removed = store.delete_stale_temp_files(table.log, older_than_s=0)
    assert sorted(path.split(f"{table.bucket}/", 1)[1] for path in removed) == sorted([orphan, probe])
    # The dead winner's commit was completed from its temp file before anything was removed.
    assert table.body(1) == b"dead winner\n"
    assert table.items()[commit_name(1)]["complete"] == "true"
    assert [key for key in table.object_keys() if "/.tmp/" in key] == []
