"""Delta's conflict checker through ``Transaction``: the cases of Delta's conflict suites, at each
isolation level, a model-based property over partitions, and commits whose outcome is in doubt."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import DeltaLog, write_table
from replay.log.table_io import TableIO
from replay.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from replay.protocol.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationError,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
    UnsupportedTableFeatureError,
)
from replay.protocol.predicates import Compare, In, Predicate
from replay.txn import transaction as transaction_module
from replay.txn.transaction import CommitOutcome, Transaction

X_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "x", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)
LEVELS = ("Serializable", "WriteSerializable")


def metadata(level: str, partitioned: bool = True) -> Metadata:
    return Metadata(
        id=str(uuid.uuid4()),
        schema_string=X_SCHEMA,
        partition_columns=["x"] if partitioned else [],
        configuration={"delta.isolationLevel": level},
    )


def add(path: str, x: int | None = None, *, data_change: bool = True, max_id: int | None = None) -> AddFile:
    stats = None
    if max_id is not None:
        stats = json.dumps(
            {"numRecords": 1, "minValues": {"id": 0}, "maxValues": {"id": max_id}, "nullCount": {"id": 0}}
        )
    return AddFile(
        path=path,
        partition_values={"x": str(x)} if x is not None else {},
        size=1,
        modification_time=1,
        data_change=data_change,
        stats=stats,
    )


def remove(path: str, x: int | None = None, *, data_change: bool = True) -> RemoveFile:
    return RemoveFile(
        path=path,
        deletion_timestamp=1,
        data_change=data_change,
        partition_values={"x": str(x)} if x is not None else {},
    )


def x_is(*values: int) -> Predicate:
    return Compare(("x",), "=", values[0]) if len(values) == 1 else In(("x",), values)


@dataclass(frozen=True)
class Case:
    """One of Delta's conflict cases: ``expected`` maps an isolation level to the exception (or None)."""

    name: str
    expected: dict[str, type[Exception] | None]
    reads: Callable[[Transaction], None] = lambda txn: None
    concurrent: Sequence[Action] = ()
    actions: Sequence[Action] = ()
    setup: Sequence[Action] = ()
    partitioned: bool = True
    concurrent_reads_whole_table: bool = False


def both(error: type[Exception] | None) -> dict[str, type[Exception] | None]:
    return dict.fromkeys(LEVELS, error)


def only_serializable(error: type[Exception]) -> dict[str, type[Exception] | None]:
    return {"Serializable": error, "WriteSerializable": None}


def read_matching(predicate: Predicate) -> Callable[[Transaction], None]:
    """What ``filterFiles(predicate)`` records: the predicate and the files it selects."""

    def reads(txn: Transaction) -> None:
        assert txn.read_snapshot is not None
        from replay.state.pruning import prune

        txn.read_predicate(predicate)
        txn.read_files(prune(txn.read_snapshot.files_table(), predicate, txn.read_snapshot.config))

    return reads


def whole_table(txn: Transaction) -> None:
    txn.read_whole_table()


def app_id(name: str) -> Callable[[Transaction], None]:
    def reads(txn: Transaction) -> None:
        txn.app_transaction_version(name)

    return reads


def reading(*steps: Callable[[Transaction], None]) -> Callable[[Transaction], None]:
    def reads(txn: Transaction) -> None:
        for step in steps:
            step(txn)

    return reads


CASES = [
    # allowed concurrent actions
    Case("append / append", both(None), concurrent=[add("a", 1)], actions=[add("b", 1)]),
    Case(
        "disjoint txns",
        both(None),
        reads=app_id("t1"),
        concurrent=[SetTransaction("t2", 0, 1234)],
    ),
    Case(
        "disjoint delete / read",
        both(None),
        setup=[add("a", 2)],
        reads=read_matching(x_is(1)),
        concurrent=[remove("a", 2)],
    ),
    Case("disjoint add / read", both(None), reads=read_matching(x_is(1)), concurrent=[add("a", 2)]),
    # disallowed concurrent actions
    Case(
        "delete / delete",
        both(ConcurrentDeleteDeleteException),
        setup=[add("a", 1)],
        concurrent=[remove("a", 1)],
        actions=[remove("a", 1)],
    ),
    Case(
        "add / read + write",
        only_serializable(ConcurrentAppendException),
        reads=read_matching(x_is(1)),
        concurrent=[add("a", 1)],
        actions=[add("b", 1)],
    ),
    Case(
        "add in part=2 / read from part=1,2 and write to part=1",
        only_serializable(ConcurrentAppendException),
        reads=reading(read_matching(x_is(1)), read_matching(x_is(2))),
        concurrent=[add("a", 1)],
        actions=[add("b", 2)],
    ),
    Case(
        "delete / read",
        both(ConcurrentDeleteReadException),
        setup=[add("a", 1)],
        reads=read_matching(x_is(1)),
        concurrent=[remove("a", 1)],
    ),
    Case("schema change", both(MetadataChangedException), concurrent=[metadata("Serializable")]),
    Case(
        "conflicting txns",
        both(ConcurrentTransactionException),
        reads=app_id("t1"),
        concurrent=[SetTransaction("t1", 0, 1234)],
    ),
    Case(
        "upgrade / upgrade",
        both(ProtocolChangedException),
        concurrent=[Protocol(1, 3)],
        actions=[Protocol(1, 3)],
    ),
    Case(
        "taint whole table",
        only_serializable(ConcurrentAppendException),
        setup=[add("a", 2)],
        reads=reading(read_matching(x_is(1)), whole_table),
        concurrent=[add("b", 3)],
        actions=[add("c", 4)],
    ),
    Case(
        "taint whole table + concurrent remove",
        both(ConcurrentDeleteReadException),
        partitioned=False,
        setup=[add("a")],
        reads=whole_table,
        concurrent=[remove("a")],
        actions=[add("b")],
    ),
    # beyond Delta's suite: what WriteSerializable still refuses, statistics, compaction, domains
    Case(
        "non-blind add / read + write",
        both(ConcurrentAppendException),
        setup=[add("a", 1)],
        reads=read_matching(x_is(1)),
        concurrent=[remove("a", 1), add("a2", 1)],
        concurrent_reads_whole_table=True,
        actions=[add("b", 1)],
    ),
    Case(
        "add / read by a data predicate the file's statistics exclude",
        both(None),
        partitioned=False,
        reads=read_matching(Compare(("id",), ">", 100)),
        concurrent=[add("a", max_id=50)],
        concurrent_reads_whole_table=True,
        actions=[add("b")],
    ),
    Case(
        "add / read by a data predicate the file's statistics allow",
        both(ConcurrentAppendException),
        partitioned=False,
        reads=read_matching(Compare(("id",), ">", 100)),
        concurrent=[add("a", max_id=150)],
        concurrent_reads_whole_table=True,
        actions=[add("b")],
    ),
    Case(
        "compaction / append",
        both(None),
        setup=[add("a", 1), add("b", 1)],
        reads=read_matching(x_is(1)),
        concurrent=[add("c", 1)],
        actions=[
            remove("a", 1, data_change=False),
            remove("b", 1, data_change=False),
            add("ab", 1, data_change=False),
        ],
    ),
    Case(
        "compaction / delete",
        both(ConcurrentDeleteReadException),
        setup=[add("a", 1), add("b", 1)],
        reads=read_matching(x_is(1)),
        concurrent=[remove("a", 1)],
        actions=[
            remove("a", 1, data_change=False),
            remove("b", 1, data_change=False),
            add("ab", 1, data_change=False),
        ],
    ),
    Case(
        "same metadata domain",
        both(ConcurrentTransactionException),
        concurrent=[DomainMetadata("d", "{}")],
        actions=[DomainMetadata("d", "{}")],
    ),
    Case(
        "different metadata domains",
        both(None),
        concurrent=[DomainMetadata("d", "{}")],
        actions=[DomainMetadata("e", "{}")],
    ),
    Case("protocol upgrade / append", both(None), concurrent=[Protocol(1, 3)], actions=[add("b", 1)]),
    Case(
        "protocol this library cannot write / append",
        both(UnsupportedTableFeatureError),
        concurrent=[Protocol(1, 7, None, ["appendOnly", "futureWriterFeature"])],
        actions=[add("b", 1)],
    ),
]


def run_case(root: Path, case: Case, level: str) -> int:
    log = DeltaLog.for_table(str(root))
    log.commit([Protocol(1, 2), metadata(level, case.partitioned)], "CREATE TABLE", read_version=-1)
    if case.setup:
        log.commit(list(case.setup))
    txn = Transaction.for_table(log.io)
    case.reads(txn)
    log.commit(list(case.concurrent), "TRUNCATE", reads_whole_table=case.concurrent_reads_whole_table)
    txn.add_actions(case.actions)
    return txn.commit()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_delta_conflict_cases(tmp_path: Path, case: Case, level: str) -> None:
    expected = case.expected[level]
    if expected is None:
        version = run_case(tmp_path, case, level)
        assert version == DeltaLog.for_table(str(tmp_path)).latest_version()
        return
    with pytest.raises(expected) as caught:
        run_case(tmp_path, case, level)
    if isinstance(caught.value, ConcurrentModificationError):
        first = str(caught.value).splitlines()[0]
        assert first.startswith(f"[{expected.error_class}] {expected.delta_name}: ")  # type: ignore[attr-defined]
        table = DeltaLog.for_table(str(tmp_path)).table_path
        assert f"version {caught.value.winning_version} of table {table}, operation TRUNCATE" in first
        assert caught.value.winning_operation == "TRUNCATE"


def test_concurrent_appends_name_the_partition(tmp_path: Path) -> None:
    case = next(case for case in CASES if case.name == "add / read + write")
    with pytest.raises(
        ConcurrentAppendException, match=r"Files were added to partition \[x=1\] by a concurrent"
    ):
        run_case(tmp_path, case, "Serializable")


def test_the_commit_records_the_isolation_level_used(tmp_path: Path) -> None:
    compaction = next(case for case in CASES if case.name == "compaction / append")
    version = run_case(tmp_path / "c", compaction, "Serializable")
    info = DeltaLog.for_table(str(tmp_path / "c")).read_version(version)[0]
    assert info.to_dict()["commitInfo"]["isolationLevel"] == "SnapshotIsolation"
    append = next(case for case in CASES if case.name == "append / append")
    version = run_case(tmp_path / "a", append, "WriteSerializable")
    info = DeltaLog.for_table(str(tmp_path / "a")).read_version(version)[0]
    assert info.to_dict()["commitInfo"]["isolationLevel"] == "WriteSerializable"
    assert info.to_dict()["commitInfo"]["isBlindAppend"] is True


# -- a model of the rules, over partitions --------------------------------------------------------
PARTITIONS = range(4)


@dataclass(frozen=True)
class Writer:
    """A transaction over partitions: it reads ``reads`` (and their files), removes some of those
    files and adds files to ``adds``; without reads it is a blind append."""

    reads: frozenset[int] = frozenset()
    removes: frozenset[int] = frozenset()  # partitions whose file it removes (among those read)
    adds: frozenset[int] = frozenset()
    whole_table: bool = False
    compaction: bool = False  # its removes and adds change no data
    files: dict[int, str] = field(default_factory=dict)

    @property
    def read_partitions(self) -> frozenset[int]:
        return frozenset(PARTITIONS) if self.whole_table else self.reads

    @property
    def blind(self) -> bool:
        return not self.whole_table and not self.reads and not self.removes


def writers() -> st.SearchStrategy[Writer]:
    @st.composite
    def build(draw: st.DrawFn) -> Writer:
        whole = draw(st.booleans())
        reads = frozenset(draw(st.sets(st.sampled_from(PARTITIONS), max_size=3)))
        readable = frozenset(PARTITIONS) if whole else reads
        removes = (
            frozenset(draw(st.sets(st.sampled_from(sorted(readable)), max_size=2)))
            if readable
            else frozenset()
        )
        adds = frozenset(draw(st.sets(st.sampled_from(PARTITIONS), max_size=2)))
        compaction = bool(removes) and draw(st.booleans())
        return Writer(reads, removes, adds if not compaction else removes, whole, compaction)

    return build()


def expected_conflict(mine: Writer, winner: Writer, level: str) -> type[Exception] | None:
    """The rules, restated over partitions (Delta's order: appends, delete-read, delete-delete)."""
    changes_data = not mine.compaction and bool(mine.removes or mine.adds)
    my_level = level if changes_data else "SnapshotIsolation"  # no data change: SnapshotIsolation
    if my_level != "SnapshotIsolation" and not mine.blind:
        counted = winner.adds if (level == "Serializable" or not winner.blind) else frozenset()
        if counted & mine.read_partitions:
            return ConcurrentAppendException
    if winner.removes & mine.read_partitions or (mine.whole_table and winner.removes):
        return ConcurrentDeleteReadException
    if winner.removes & mine.removes:
        return ConcurrentDeleteDeleteException
    return None


def _actions(writer: Writer, tag: str) -> list[Action]:
    change = not writer.compaction
    actions: list[Action] = [remove(f"f{p}", p, data_change=change) for p in sorted(writer.removes)]
    actions += [add(f"{tag}{p}", p, data_change=change) for p in sorted(writer.adds)]
    return actions


def _start(io: TableIO, writer: Writer) -> Transaction:
    txn = Transaction.for_table(io)
    if writer.whole_table:
        txn.read_whole_table()
    if writer.reads:
        read_matching(x_is(*sorted(writer.reads)))(txn)
    if writer.whole_table:
        assert txn.read_snapshot is not None
        txn.read_files(txn.read_snapshot.files_table())
    return txn


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mine=writers(), winner=writers(), level=st.sampled_from(LEVELS))
def test_conflicts_follow_the_rules_over_partitions(
    tmp_path: Path, mine: Writer, winner: Writer, level: str
) -> None:
    root = tmp_path / uuid.uuid4().hex
    log = DeltaLog.for_table(str(root))
    log.commit([Protocol(1, 2), metadata(level)], "CREATE TABLE", read_version=-1)
    log.commit([add(f"f{p}", p) for p in PARTITIONS])
    current = _start(log.io, mine)
    other = _start(log.io, winner)
    other.add_actions(_actions(winner, "w"))
    other.commit()
    current.add_actions(_actions(mine, "m"))
    expected = expected_conflict(mine, winner, level)
    if expected is None:
        assert current.commit() == 3
    else:
        with pytest.raises(expected):
            current.commit()
        assert current.outcome is CommitOutcome.NOT_COMMITTED


def test_two_writers_on_disjoint_partitions_both_commit(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    first = Transaction.for_table(TableIO.for_table(path), operation="WRITE")
    second = Transaction.for_table(TableIO.for_table(path), operation="WRITE")
    for txn, partition in ((first, "a"), (second, "b")):
        read_matching(Compare(("p",), "=", partition))(txn)
        assert txn.read_snapshot is not None
        for existing in txn.read_snapshot.files():
            if existing.partition_values["p"] == partition:
                txn.add_actions([remove(existing.path)])
        txn.add_actions(
            [AddFile(path=f"new-{partition}", partition_values={"p": partition}, size=1, data_change=True)]
        )
    assert (first.commit(), second.commit()) == (1, 2)


# -- commits whose outcome is in doubt ----------------------------------------------------------
class WritesThenFails:
    """A committer whose write lands but whose caller sees an error (a lost response)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def commit(self, io: TableIO, version: int, lines: Sequence[str]) -> None:
        io.store.write(f"{io.log_path}/{version:020d}.json", lines, overwrite=False)
        raise self.error


class FailsWithoutWriting:
    def commit(self, io: TableIO, version: int, lines: Sequence[str]) -> None:
        raise TimeoutError(f"no answer while writing version {version}")


def new_table(root: Path) -> DeltaLog:
    log = DeltaLog.for_table(str(root))
    log.commit([Protocol(1, 2), metadata("Serializable")], "CREATE TABLE", read_version=-1)
    return log


@pytest.mark.parametrize("error", [FileExistsError("retried request found its own file"), OSError("reset")])
def test_a_commit_whose_success_was_not_reported_is_recognised_by_its_txn_id(
    tmp_path: Path, error: Exception
) -> None:
    log = new_table(tmp_path)
    txn = Transaction(log.io, log.snapshot(), committer=WritesThenFails(error))
    txn.add_actions([SetTransaction("app", 1, 1), add("a", 1)])
    assert txn.commit() == 1  # not a conflict with its own app transaction
    assert txn.outcome is CommitOutcome.COMMITTED
    assert log.update().set_transactions == {"app": 1}


def test_an_interrupted_write_that_landed_is_committed_and_still_interrupts(tmp_path: Path) -> None:
    log = new_table(tmp_path)
    txn = Transaction(log.io, log.snapshot(), committer=WritesThenFails(KeyboardInterrupt()))
    txn.add_actions([add("a", 1)])
    with pytest.raises(KeyboardInterrupt):
        txn.commit()
    assert (txn.outcome, txn.version) == (CommitOutcome.COMMITTED, 1)


def test_a_write_that_failed_in_doubt_is_unknown_not_undone(tmp_path: Path) -> None:
    log = new_table(tmp_path)
    txn = Transaction(log.io, log.snapshot(), committer=FailsWithoutWriting())
    txn.add_actions([add("a", 1)])
    with pytest.raises(TimeoutError):
        txn.commit()
    assert txn.outcome is CommitOutcome.UNKNOWN


def test_an_interrupted_post_commit_hook_never_undoes_a_write_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of a commit that landed stay, whatever a post-commit hook raises."""
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1]}))

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(transaction_module, "run_post_commit_hooks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_table(path, pa.table({"id": [2]}))
    monkeypatch.undo()
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.version == 1
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [1, 2]  # every file still there


def test_a_transaction_commits_once(tmp_path: Path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    txn.add_actions([add("a", 1)])
    assert txn.commit() == 1
    with pytest.raises(RuntimeError, match="already committed"):
        txn.commit()
