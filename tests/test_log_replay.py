"""InMemoryLogReplay (Delta's exact semantics) and the fast ReverseLogReplay, on plain action lists."""

from __future__ import annotations

import random

import orjson
import pyarrow as pa
import pytest

from replay.log.log_replay import InMemoryLogReplay, ReverseLogReplay
from replay.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_from_dict,
)
from replay.protocol.arrow_actions import key_string

P1, P2 = Protocol(1, 2), Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
M1, M2 = Metadata(id="a"), Metadata(id="b")
DV1 = DeletionVectorDescriptor("u", "dv1", 1, 10, 1)
DV2 = DeletionVectorDescriptor("u", "dv2", None, 10, 2)


def add(path: str, mtime: int = 1, dv: DeletionVectorDescriptor | None = None) -> AddFile:
    return AddFile(path=path, size=1, modification_time=mtime, data_change=True, deletion_vector=dv)


def remove(path: str, ts: int | None = 100, dv: DeletionVectorDescriptor | None = None) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=ts, data_change=True, deletion_vector=dv)


def test_versions_must_be_consecutive() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(5, [P1])
    replay.append(6, [])
    with pytest.raises(AssertionError, match=r"^Attempted to replay version 8, but state is at 6$"):
        replay.append(8, [])
    with pytest.raises(AssertionError, match=r"^Attempted to replay version 6, but state is at 6$"):
        replay.append(6, [])


def test_checkpoint_order_and_data_change_off() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(
        0,
        [
            CommitInfo({"operation": "WRITE"}),
            P1,
            M1,
            add("c"),
            add("a"),
            SetTransaction("app", 1, 10),
            DomainMetadata("d1", "{}"),
            AddCDCFile(path="cdc"),
        ],
    )
    replay.append(1, [remove("b", ts=50), M2, P2, SetTransaction("app", 2, 20)])
    out = list(replay.checkpoint())
    assert out == [
        P2,
        M2,
        DomainMetadata("d1", "{}"),
        SetTransaction("app", 2, 20),
        AddFile(path="a", size=1, modification_time=1, data_change=False),
        RemoveFile(path="b", deletion_timestamp=50, data_change=False),
        AddFile(path="c", size=1, modification_time=1, data_change=False),
    ]


def test_re_add_after_remove_wins_with_latest_fields() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(0, [P1, M1, add("foo", mtime=1)])
    replay.append(1, [remove("foo")])
    replay.append(2, [add("foo", mtime=1700000000000)])
    replay.append(3, [add("bar")])
    files = {a.path: a for a in replay.all_files()}
    assert set(files) == {"foo", "bar"}
    assert files["foo"].modification_time == 1700000000000
    assert files["foo"].data_change is False
    assert replay.get_tombstones() == []


def test_dv_variants_are_distinct_files() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(0, [add("f")])
    replay.append(1, [remove("f"), add("f", dv=DV1)])
    replay.append(2, [remove("f", dv=DV1), add("f", dv=DV2)])
    assert [(a.path, a.deletion_vector) for a in replay.all_files()] == [("f", DV2)]
    assert sorted(str(r.unique_key) for r in replay.get_tombstones()) == sorted(
        [str(("f", None)), str(("f", "udv1@1"))]
    )
    assert [key for key in replay.active_files] == [("f", "udv2")]


def test_escaped_paths_compare_case_insensitively() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(0, [add("a%2fb")])
    replay.append(1, [remove("a%2Fb")])
    assert replay.all_files() == []


def test_tombstone_retention() -> None:
    replay = InMemoryLogReplay(min_file_retention_timestamp=100)
    replay.append(0, [add("live"), remove("old", ts=100), remove("new", ts=101), remove("none", ts=None)])
    assert [r.path for r in replay.get_tombstones()] == ["new"]
    keep_all = InMemoryLogReplay(None)
    keep_all.append(0, [remove("old", ts=100), remove("none", ts=None)])
    assert [r.path for r in keep_all.get_tombstones()] == ["old", "none"]


def test_transaction_retention() -> None:
    replay = InMemoryLogReplay(None, min_set_transaction_retention_timestamp=10)
    replay.append(0, [SetTransaction("old", 1, 10), SetTransaction("new", 1, 11), SetTransaction("never", 1)])
    assert [t.app_id for t in replay.get_transactions()] == ["new"]
    assert len(InMemoryLogReplay(None).transactions) == 0


def test_double_remove_emits_two_tombstones_like_delta() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(0, [add("x")])
    replay.append(1, [remove("x", ts=1)])
    replay.append(2, [remove("x", ts=2)])
    assert [r.deletion_timestamp for r in replay.get_tombstones()] == [1, 2]


def test_domain_metadata_removal() -> None:
    replay = InMemoryLogReplay(None)
    replay.append(0, [DomainMetadata("a", "1"), DomainMetadata("b", "2")])
    replay.append(1, [DomainMetadata("a", "1", removed=True)])
    assert replay.get_domain_metadatas() == [DomainMetadata("b", "2")]


# -- ReverseLogReplay equals InMemoryLogReplay -----------------------------------------------------


def _random_commits(rng: random.Random, versions: int) -> list[list[dict]]:
    paths = [f"p{i}" for i in range(8)] + ["a%2fb", "a%2Fb"]
    dvs = [None, DV1, DV2]
    commits = [[P1.to_dict(), M1.to_dict()]]
    for version in range(1, versions):
        lines = []
        used: set[tuple[str, str | None]] = set()
        for _ in range(rng.randint(0, 5)):
            path, dv = rng.choice(paths), rng.choice(dvs)
            key = (path.upper(), dv and dv.unique_id)
            if key in used:  # the protocol forbids two actions on one file in one commit
                continue
            used.add(key)
            action = (
                add(path, mtime=version, dv=dv) if rng.random() < 0.6 else remove(path, ts=version, dv=dv)
            )
            lines.append(action.to_dict())
        if rng.random() < 0.3:
            lines.append(SetTransaction(rng.choice(["x", "y"]), version).to_dict())
        if rng.random() < 0.1:
            lines.append(Metadata(id=f"m{version}").to_dict())
        commits.append(lines)
    return commits


@pytest.mark.parametrize("seed", range(30))
def test_reverse_replay_matches_in_memory_replay(seed: int) -> None:
    commits = _random_commits(random.Random(seed), 25)
    forward = InMemoryLogReplay(None)
    for version, lines in enumerate(commits):
        forward.append(version, [action_from_dict(line) for line in lines])
    reverse = ReverseLogReplay()
    for lines in reversed(commits):
        reverse.add_commit(lines)

    def encode(action: dict) -> bytes:
        return orjson.dumps(action, option=orjson.OPT_SORT_KEYS)

    expected = sorted(encode(a.inner_dict() | {"dataChange": True}) for a in forward.all_files())
    assert sorted(encode(a) for a in reverse.commit_adds) == expected
    expected_tombstones = {encode(r.inner_dict() | {"dataChange": True}) for r in forward.get_tombstones()}
    assert {encode(r) for r in reverse.commit_removes} <= expected_tombstones
    assert reverse.metadata == forward.get_metadata().inner_dict()
    assert {k: v["version"] for k, v in reverse.transactions.items()} == {
        t.app_id: t.version for t in forward.get_transactions()
    }


def test_reverse_replay_canonicalises_absolute_paths() -> None:
    reverse = ReverseLogReplay()
    reverse.add_commit([remove("file:///some/with%20space/p@%23h").to_dict()])
    reverse.add_commit([add("/some/with%20space/p@%23h").to_dict(), add("/other").to_dict()])
    assert [a["path"] for a in reverse.commit_adds] == ["/other"]


def test_reverse_replay_checkpoint_rows_are_shadowed_by_commits() -> None:
    reverse = ReverseLogReplay()
    reverse.add_commit([remove("b").to_dict(), add("c", dv=DV1).to_dict()])
    checkpoint_adds = pa.table(
        {
            "path": ["a", "b", "c", None],
            "size": [1, 2, 3, None],
            "deletionVector": pa.array(
                [None, None, {"storageType": "u", "pathOrInlineDv": "dv1", "offset": 1}, None],
                pa.struct(
                    [("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32())]
                ),
            ),
        }
    )
    reverse.add_checkpoint_actions([P1.to_dict(), M1.to_dict()])
    reverse.add_checkpoint_files(checkpoint_adds, None)
    assert reverse.checkpoint_adds[0].column("path").to_pylist() == ["a"]
    assert [a["path"] for a in reverse.commit_adds] == ["c"]
    assert [r["path"] for r in reverse.commit_removes] == ["b"]
    assert reverse.protocol == P1.inner_dict()
    assert key_string(("p", None)) == "p"
    assert key_string(("p", "udv")) == "p\x00udv"


def test_compaction_files_let_the_first_action_win() -> None:
    compacted = [remove("f").to_dict(), add("f").to_dict()]
    assert ReverseLogReplay().commit_adds == []
    kernel_style = ReverseLogReplay()
    kernel_style.add_commit(compacted, later_lines_win=False)
    assert kernel_style.commit_adds == []
    delta_style = ReverseLogReplay()
    delta_style.add_commit(compacted)
    assert [a["path"] for a in delta_style.commit_adds] == ["f"]
