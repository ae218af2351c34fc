"""``replay.commit``: optimistic commits, conflict detection, commitInfo, in-commit timestamps."""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import orjson
import pytest

from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, CommitInfo, Metadata, Protocol, RemoveFile, SetTransaction
from replay.protocol.errors import (
    AppendOnlyTableError,
    ConcurrentModificationError,
    CorruptLogError,
    MissingVersionsError,
    UnsupportedTableFeatureError,
)
from replay.txn.committer import encode_operation_parameters
from replay.txn.transaction import commit_actions as commit
from tests.custom_stores import TextOnlyLogStore

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'


def new_table(uri: str, configuration: dict[str, str] | None = None) -> DeltaLog:
    log = DeltaLog.for_table(uri)
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=SCHEMA, configuration=configuration or {})
    assert commit(log.io, [Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1) == 0
    return log


def add(path: str) -> AddFile:
    return AddFile(path=path, size=1, modification_time=1, data_change=True)


def remove(path: str) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=int(time.time() * 1000), data_change=True)


def lines(log: DeltaLog, version: int) -> list[dict]:
    return [orjson.loads(line) for line in log.store.read(f"{log.log_path}/{version:020d}.json")]


def test_creating_a_table_makes_the_log_directory(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    assert (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").is_file()
    first = lines(log, 0)
    assert list(first[0]) == ["commitInfo"]
    assert first[0]["commitInfo"]["operation"] == "CREATE TABLE"
    assert "readVersion" not in first[0]["commitInfo"]
    assert [next(iter(line)) for line in first[1:]] == ["protocol", "metaData"]


def test_creating_a_table_needs_protocol_and_metadata(tmp_path: Path) -> None:
    log = DeltaLog.for_table(str(tmp_path / "t"))
    with pytest.raises(
        ValueError, match=r"Cannot create table .*/t: the first commit needs a protocol and metadata"
    ):
        commit(log.io, [add("a")], read_version=-1)
    with pytest.raises(ValueError, match="needs a metadata action"):
        commit(log.io, [Protocol(1, 2)], read_version=-1)


def test_commit_info_is_first_and_parameters_are_json_encoded(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    parameters = {"mode": "Append", "partitionBy": ["p"], "n": 3, "flag": True, "none": None}
    stray = CommitInfo({"operation": "IGNORED"})
    version = commit(log.io, [stray, add("a")], "WRITE", parameters, operation_metrics={"numFiles": 1})
    assert version == 1
    info = lines(log, 1)[0]["commitInfo"]
    assert info["operationParameters"] == {
        "mode": "Append",
        "partitionBy": '["p"]',
        "n": "3",
        "flag": "true",
        "none": None,
    }
    assert info["operation"] == "WRITE"
    assert info["readVersion"] == 0
    assert info["isBlindAppend"] is True
    assert info["isolationLevel"] == "Serializable"
    assert info["operationMetrics"] == {"numFiles": "1"}
    assert abs(info["timestamp"] - time.time() * 1000) < 60_000
    assert [next(iter(line)) for line in lines(log, 1)] == ["commitInfo", "add"]
    assert encode_operation_parameters(None) == {}


def test_blind_append_retries_after_a_concurrent_append(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    assert commit(log.io, [add("winner")], read_version=0) == 1
    assert commit(log.io, [add("late")], read_version=0) == 2
    assert lines(log, 2)[0]["commitInfo"]["readVersion"] == 0
    assert sorted(a.path for a in log.snapshot().files()) == ["late", "winner"]


def test_delete_of_a_file_removed_concurrently_conflicts(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [add("a"), add("b")])
    assert commit(log.io, [remove("a")], "DELETE", read_version=1) == 2
    assert commit(log.io, [add("c")], read_version=1) == 3
    with pytest.raises(ConcurrentModificationError) as caught:
        commit(log.io, [remove("a")], "DELETE", read_version=1)
    assert caught.value.winning_version == 2
    message = str(caught.value)
    assert "ConcurrentDeleteDeleteException" in message
    assert "(for example a in the root of the table)" in message
    assert "version 2 of table" in message
    assert log.latest_version() == 3


def test_removing_other_files_does_not_conflict(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [add("a"), add("b")])
    commit(log.io, [remove("a")], read_version=1)
    assert commit(log.io, [remove("b")], read_version=1) == 3
    assert log.snapshot().files() == []


@pytest.mark.parametrize(
    ("winner", "mine", "expected"),
    [
        (Protocol(1, 4), Protocol(1, 3), "ProtocolChangedException"),
        (Metadata(id="other", schema_string=SCHEMA), None, "MetadataChangedException"),
        (SetTransaction("app", 7, 1), None, "ConcurrentTransactionException"),
    ],
)
def test_winner_changing_protocol_metadata_or_same_txn_conflicts(
    tmp_path: Path, winner: object, mine: Protocol | None, expected: str
) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [winner], read_version=0)
    with pytest.raises(ConcurrentModificationError, match=expected) as caught:
        commit(log.io, [*([mine] if mine else []), SetTransaction("app", 8, 2), add("x")], read_version=0)
    assert caught.value.winning_version == 1


def test_a_protocol_upgrade_does_not_fail_an_append(tmp_path: Path) -> None:
    """Delta fails only a transaction that changes the protocol too (or one the new protocol forbids)."""
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [Protocol(1, 4)], read_version=0)
    assert commit(log.io, [add("x")], read_version=0) == 2


def test_other_application_ids_do_not_conflict(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [SetTransaction("other", 1, 1)], read_version=0)
    assert commit(log.io, [SetTransaction("app", 1, 1), add("x")], read_version=0) == 2
    assert log.snapshot().set_transactions == {"other": 1, "app": 1}


def test_whole_table_readers_conflict_with_concurrent_appends_unless_write_serializable(
    tmp_path: Path,
) -> None:
    log = new_table(str(tmp_path / "t"))  # Serializable, Delta's default
    commit(log.io, [add("new")], read_version=0)
    with pytest.raises(ConcurrentModificationError, match=r"ConcurrentAppendException: Files were added to"):
        commit(log.io, [add("replacement")], "WRITE", read_version=0, reads_whole_table=True)
    relaxed = new_table(str(tmp_path / "w"), {"delta.isolationLevel": "WriteSerializable"})
    commit(relaxed.io, [add("new")], read_version=0)
    # WriteSerializable: the blind append is ordered before the reader
    assert commit(relaxed.io, [add("replacement")], "WRITE", read_version=0, reads_whole_table=True) == 2


def test_concurrent_table_creation_conflicts(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    new_table(uri)
    with pytest.raises(ConcurrentModificationError, match="writing to an empty directory") as caught:
        new_table(uri)
    assert caught.value.winning_version == 0


def test_gives_up_after_max_attempts(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [add("a")])
    commit(log.io, [add("b")])
    with pytest.raises(ConcurrentModificationError, match="after 1 attempts") as caught:
        commit(log.io, [add("c")], read_version=0, max_attempts=1)
    assert caught.value.winning_version == 2


def test_in_commit_timestamps_are_monotonic(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"), {"delta.enableInCommitTimestamps": "true"})
    first = lines(log, 0)[0]["commitInfo"]
    assert next(iter(first)) == "inCommitTimestamp"
    # a commit from a writer whose clock runs far ahead
    future = first["inCommitTimestamp"] + 10_000_000
    ahead = orjson.dumps({"commitInfo": {"inCommitTimestamp": future, "timestamp": future}}).decode()
    log.store.write(f"{log.log_path}/{1:020d}.json", [ahead], overwrite=False)
    assert commit(log.io, [add("a")]) == 2
    assert lines(log, 2)[0]["commitInfo"]["inCommitTimestamp"] == future + 1
    assert commit(log.io, [add("b")], read_version=1) == 3  # retried past the race, still monotonic
    assert lines(log, 3)[0]["commitInfo"]["inCommitTimestamp"] == future + 2


def test_no_in_commit_timestamps_unless_enabled(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    commit(log.io, [add("a")])
    assert "inCommitTimestamp" not in lines(log, 1)[0]["commitInfo"]


# -- many writers ------------------------------------------------------------------------------------
WRITERS = 4
APPENDS = 25


def append_many(uri: str, writer: int) -> list[int]:
    """One writer's appends: each commit is blind (read version = latest at call time)."""
    log = DeltaLog.for_table(uri)
    return [commit(log.io, [add(f"w{writer}-{index}")]) for index in range(APPENDS)]


def check_all_committed(uri: str, versions: list[int]) -> None:
    log = DeltaLog.for_table(uri)
    assert sorted(versions) == list(range(1, WRITERS * APPENDS + 1))
    snapshot = log.snapshot()
    assert snapshot.version == WRITERS * APPENDS
    paths = [a.path for a in snapshot.files()]
    assert sorted(paths) == sorted(f"w{w}-{i}" for w in range(WRITERS) for i in range(APPENDS))
    for version in range(1, WRITERS * APPENDS + 1):
        assert sum(isinstance(a, AddFile) for a in log.read_version(version)) == 1


@pytest.mark.parametrize("where", ["local", "memory"])
def test_four_writer_threads(tmp_path: Path, where: str) -> None:
    uri = str(tmp_path / "t") if where == "local" else f"memory://commit-{uuid.uuid4().hex}/t"
    new_table(uri)
    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(append_many, [uri] * WRITERS, range(WRITERS)))
    check_all_committed(uri, [v for versions in results for v in versions])


def test_four_writer_processes_on_local_disk(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    new_table(uri)
    with ProcessPoolExecutor(WRITERS, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(append_many, [uri] * WRITERS, range(WRITERS)))
    check_all_committed(uri, [v for versions in results for v in versions])


def test_delta_log_commit_and_checkpoint_delegate(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    assert log.commit([add("a")], "WRITE", {"mode": "Append"}) == 1
    assert lines(log, 1)[0]["commitInfo"]["operationParameters"] == {"mode": "Append"}
    assert log.checkpoint().version == 1
    assert (tmp_path / "t" / "_delta_log" / f"{1:020d}.checkpoint.parquet").is_file()


def test_delta_log_commit_checks_conflicts_since_its_read_version(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    log.commit([add("a")])
    assert log.commit([remove("a")], "DELETE", read_version=1) == 2
    with pytest.raises(ConcurrentModificationError) as error:
        log.commit([remove("a")], "DELETE", read_version=1)
    assert error.value.winning_version == 2
    assert log.commit([add("b")], read_version=1) == 3  # a blind append still goes through


# -- Delta's writer checks on every commit path ----------------------------------------------------
def raw_table(uri: str, protocol: Protocol, configuration: dict[str, str] | None = None) -> DeltaLog:
    """A table whose first commit is written directly (this library would refuse some of these)."""
    log = DeltaLog.for_table(uri)
    log.store.create_directories(log.log_path)
    metadata = Metadata(id="t", schema_string=SCHEMA, configuration=configuration or {})
    log.store.write(f"{log.log_path}/{0:020d}.json", [protocol.json(), metadata.json(), add("a").json()])
    return log


def versions_of(log: DeltaLog) -> list[str]:
    return sorted(status.path.rsplit("/", 1)[-1] for status in log.store.list_from(f"{log.log_path}/0"))


def test_append_only_tables_refuse_data_removal_on_every_commit_path(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"), {"delta.appendOnly": "true"})
    log.commit([add("a")])
    message = (
        "[DELTA_CANNOT_MODIFY_APPEND_ONLY] This table is configured to only allow appends. If you would like "
        f"to permit updates or deletes, use 'ALTER TABLE {log.table_path} SET TBLPROPERTIES "
        "(delta.appendOnly=false)'."
    )
    with pytest.raises(AppendOnlyTableError) as info:
        log.commit([remove("a")], "DELETE")
    assert str(info.value) == message
    with pytest.raises(AppendOnlyTableError):
        commit(log.io, [remove("a")], "DELETE", read_version=1)
    metadata = log.update().metadata
    unprotected = dataclasses.replace(metadata, configuration={"delta.appendOnly": "false"})
    with pytest.raises(AppendOnlyTableError):  # the table is append-only when the commit is made
        log.commit([unprotected, remove("a")], "DELETE")
    assert versions_of(log) == [f"{0:020d}.json", f"{1:020d}.json"]
    compaction = RemoveFile(path="a", deletion_timestamp=1, data_change=False)
    assert log.commit([compaction, AddFile(path="b", size=1, modification_time=1, data_change=False)]) == 2
    assert log.commit([unprotected]) == 3
    protected = dataclasses.replace(metadata, configuration={"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyTableError):  # and when the commit makes it append-only
        log.commit([protected, remove("b")], "DELETE")
    assert log.commit([remove("b")], "DELETE") == 4


@pytest.mark.parametrize(
    ("protocol", "message"),
    [
        (
            Protocol(1, 8),
            r'^\[DELTA_INVALID_PROTOCOL_VERSION\] Unsupported Delta protocol version: table ".*/t" requires '
            r"reader version 1 and writer version 8, but this library supports reader versions 1, 2, 3 and "
            r"writer versions 1, 2, 3, 4, 5, 6, 7\. Please upgrade to a newer release\.$",
        ),
        (
            Protocol(3, 7, [], ["appendOnly", "futureWriterFeature", "domainMetadata"]),
            r'^\[DELTA_UNSUPPORTED_FEATURES_FOR_WRITE\] Unsupported Delta write feature: table ".*/t" '
            r"requires writer table feature\(s\) that are unsupported by this library: "
            r"futureWriterFeature\.$",
        ),
        (
            Protocol(3, 7, ["futureFeature"], ["futureFeature"]),
            r'^\[DELTA_UNSUPPORTED_FEATURES_FOR_READ\] Unsupported Delta read feature: table ".*/t" requires '
            r"reader table feature\(s\) that are unsupported by this library: futureFeature\.$",
        ),
    ],
    ids=["writer-version", "writer-feature", "reader-feature"],
)
def test_commits_to_tables_this_library_cannot_write_are_refused(
    tmp_path: Path, protocol: Protocol, message: str
) -> None:
    log = raw_table(str(tmp_path / "t"), protocol)
    for attempt in (lambda: log.commit([add("b")]), lambda: commit(log.io, [add("b")])):
        with pytest.raises(UnsupportedTableFeatureError, match=message):
            attempt()
    assert versions_of(log) == [f"{0:020d}.json"]


def test_a_commit_cannot_upgrade_the_protocol_beyond_this_library(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    with pytest.raises(
        UnsupportedTableFeatureError, match=r"DELTA_UNSUPPORTED_FEATURES_FOR_WRITE.*futureWriterFeature"
    ):
        log.commit([Protocol(1, 7, None, ["appendOnly", "futureWriterFeature"])], "UPGRADE PROTOCOL")
    with pytest.raises(
        UnsupportedTableFeatureError, match=r"DELTA_INVALID_PROTOCOL_VERSION.*reader version 4"
    ):
        commit(log.io, [Protocol(4, 7, [], [])], "UPGRADE PROTOCOL")
    assert log.commit([Protocol(1, 7, None, ["appendOnly", "invariants", "changeDataFeed"])]) == 1
    with pytest.raises(UnsupportedTableFeatureError, match="DELTA_INVALID_PROTOCOL_VERSION"):
        new_log = DeltaLog.for_table(str(tmp_path / "new"))
        new_log.commit([Protocol(1, 9), Metadata(id="n", schema_string=SCHEMA)], read_version=-1)
    assert not (tmp_path / "new" / "_delta_log").exists()


@pytest.mark.parametrize("missing", [0, 1], ids=["truncated", "gap"])
def test_commits_on_a_log_missing_versions_are_refused(tmp_path: Path, missing: int) -> None:
    log = new_table(str(tmp_path / "t"))
    log.commit([add("a")])
    log.commit([add("b")])
    (tmp_path / "t" / "_delta_log" / f"{missing:020d}.json").unlink()
    for attempt in (lambda: log.commit([add("c")]), lambda: commit(log.io, [add("c")])):
        with pytest.raises(
            MissingVersionsError, match=r"DELTA_TRUNCATED_TRANSACTION_LOG|DELTA_VERSIONS_NOT_CONTIGUOUS"
        ):
            attempt()
    assert f"{3:020d}.json" not in versions_of(log)


# -- typed errors for what is not a readable commit file ------------------------------------------
class DecodingStore(TextOnlyLogStore):
    """A text store whose ``read_bytes`` decodes lines (and so raises ``UnicodeDecodeError``)."""

    def read_bytes(self, path: str) -> bytes:
        return "".join(f"{line}\n" for line in self.read(path)).encode("utf-8")


@pytest.mark.parametrize("store_class", [TextOnlyLogStore, DecodingStore], ids=["text-only", "decoding"])
def test_invalid_utf8_in_a_winning_commit_is_a_corrupt_log_error(store_class: type[TextOnlyLogStore]) -> None:
    store = store_class()
    log = DeltaLog(f"memory://utf8-{uuid.uuid4().hex}/t", store=store)
    commit(log.io, [Protocol(1, 2), Metadata(id="t", schema_string=SCHEMA)], read_version=-1)
    winner = f"{log.log_path}/{1:020d}.json"
    store.files[winner] = ["placeholder"]  # version 1 is taken ...
    store.raw[winner] = b'{"commitInfo":{}}\n{"add":{"path":"\xff\xfe"}}\n'  # ... by a damaged commit
    with pytest.raises(CorruptLogError) as info:
        commit(log.io, [add("mine")], read_version=0)  # loses the race and checks the winner
    assert str(info.value).startswith(f"malformed action at {winner} line 2: not valid UTF-8 (")
    assert (info.value.path, info.value.line) == (winner, 2)


def test_a_directory_named_like_a_commit_is_named_in_the_error(tmp_path: Path) -> None:
    log = new_table(str(tmp_path / "t"))
    directory = tmp_path / "t" / "_delta_log" / f"{1:020d}.json"
    directory.mkdir()
    assert log.latest_version() == 0 and log.snapshot().version == 0  # listing skips directories
    message = f"log file {log.log_path}/{1:020d}.json of table {log.table_path} is a directory, not a file"
    with pytest.raises(CorruptLogError, match=re.escape(message)):
        log.read_version(1)
    with pytest.raises(CorruptLogError, match=re.escape(message)):
        log.commit([add("a")])  # version 1 cannot be written, and the "winner" is not a commit
