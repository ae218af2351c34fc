"""Snapshots of tables written by delta-rs, corrupt input, checkpoint fallback, other stores."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay.delta_log import DeltaLog
from replay.log import commit_files as commit_reader
from replay.log.commit_files import parse_commit_arrow
from replay.protocol import filenames
from replay.protocol.actions import AddFile
from replay.protocol.arrow_actions import FILES_SCHEMA
from replay.protocol.errors import CorruptLogError, MissingVersionsError, TableNotFoundError
from replay.protocol.paths import resolve_path
from replay.protocol.table_properties import parse_interval_ms


def _data(start: int, count: int = 3) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + count), pa.int64()), "part": ["a", "b", "a"][:count]}
    )


def _ours_vs_theirs(path: Path) -> None:
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    theirs = DeltaTable(str(path))
    assert snapshot.version == theirs.version()
    assert sorted(
        resolve_path(snapshot.table_path, p).removeprefix("file://") for p in snapshot.file_paths()
    ) == sorted(theirs.file_uris())
    assert snapshot.protocol.min_reader_version == theirs.protocol().min_reader_version
    assert snapshot.protocol.min_writer_version == theirs.protocol().min_writer_version
    assert snapshot.metadata.id == theirs.metadata().id
    assert snapshot.partition_columns == theirs.metadata().partition_columns


def test_delta_rs_operations_and_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(0), partition_by=["part"])
    _ours_vs_theirs(path)
    write_deltalake(str(path), _data(3), mode="append")
    write_deltalake(str(path), _data(6), mode="append")
    _ours_vs_theirs(path)
    DeltaTable(str(path)).delete("id = 1")
    _ours_vs_theirs(path)
    DeltaTable(str(path)).update(updates={"id": "id + 100"}, predicate="id > 6")
    _ours_vs_theirs(path)
    DeltaTable(str(path)).create_checkpoint()
    _ours_vs_theirs(path)
    source = pa.table({"id": pa.array([0, 50], pa.int64()), "part": ["a", "b"]})
    (
        DeltaTable(str(path))
        .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    _ours_vs_theirs(path)
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    assert snapshot.log_segment.checkpoint_version == 4
    assert [filenames.delta_version(s.name) for s in snapshot.log_segment.deltas] == [5]
    write_deltalake(str(path), _data(1000), mode="overwrite")
    _ours_vs_theirs(path)
    latest = DeltaLog.for_table(str(path)).snapshot()
    assert {r.path for r in latest.tombstones()} >= {f.path for f in snapshot.files()}
    assert sorted(latest.tombstones_table().column("path").to_pylist()) == sorted(
        r.path for r in latest.tombstones()
    )
    assert all(r.data_change is False for r in latest.tombstones())


def test_files_table_and_files_agree(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for start in range(0, 12, 3):
        write_deltalake(str(path), _data(start), mode="append", partition_by=["part"])
    DeltaTable(str(path)).create_checkpoint()
    write_deltalake(str(path), _data(100), mode="append", partition_by=["part"])
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    table = snapshot.files_table()
    assert table.schema == FILES_SCHEMA
    files = snapshot.files()
    assert all(isinstance(f, AddFile) and f.data_change is False for f in files)
    assert sorted(table.column("path").to_pylist()) == sorted(f.path for f in files)
    by_path = {f.path: f for f in files}
    for row in table.to_pylist(maps_as_pydicts="strict"):
        add = by_path[row["path"]]
        assert (row["size"], row["modification_time"], row["stats"]) == (
            add.size,
            add.modification_time,
            add.stats,
        )
        assert row["partition_values"] == add.partition_values
        assert row["data_change"] is False
    assert snapshot.num_files == 10


def _commit_lines(path: Path, version: int) -> list[str]:
    return (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()


def test_malformed_commit_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(0))
    write_deltalake(str(path), _data(3), mode="append")
    commit = path / "_delta_log" / f"{1:020d}.json"
    lines = _commit_lines(path, 1)
    lines[1] = lines[1][: len(lines[1]) // 2]  # truncated line
    commit.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptLogError) as info:
        DeltaLog.for_table(str(path)).snapshot()
    assert info.value.line == 2
    assert info.value.path is not None and info.value.path.endswith("00000000000000000001.json")
    assert "00000000000000000001.json line 2" in str(info.value)
    commit.write_bytes(b'{"commitInfo":{"a":"\xff\xfe"}}\n')
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json line 1"):
        DeltaLog.for_table(str(path)).snapshot()
    commit.write_bytes(b"[1,2]\n")
    with pytest.raises(CorruptLogError, match="line 1: not a JSON object"):
        DeltaLog.for_table(str(path)).snapshot()
    commit.write_bytes(b'{"add":{"path":"x","partitionValues":{},"size":"big","modificationTime":1}}\n')
    with pytest.raises(
        CorruptLogError, match=r"malformed add action: .* in .*00000000000000000001\.json"
    ) as info:
        DeltaLog.for_table(str(path)).snapshot()
    assert info.value.path is not None and info.value.path.endswith("00000000000000000001.json")


def test_blank_lines_and_unknown_actions_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(0))
    commit = path / "_delta_log" / f"{0:020d}.json"
    commit.write_text(commit.read_text() + '\n\n{"someFutureAction":{"x":1}}\n')
    assert DeltaLog.for_table(str(path)).snapshot().num_files == 1


def _checkpointed_table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(0))
    write_deltalake(str(path), _data(3), mode="append")
    DeltaTable(str(path)).create_checkpoint()
    write_deltalake(str(path), _data(6), mode="append")
    DeltaTable(str(path)).create_checkpoint()
    return path


def test_corrupt_checkpoint_falls_back_to_older_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _checkpointed_table(tmp_path)
    newest = path / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    newest.write_bytes(b"this is not parquet")
    with caplog.at_level(logging.WARNING, logger="replay.snapshot"):
        snapshot = DeltaLog.for_table(str(path)).snapshot()
    assert (snapshot.version, snapshot.num_files, snapshot.log_segment.checkpoint_version) == (2, 3, 1)
    assert any(
        "checkpoint 2" in r.getMessage() and "checkpoint 1 instead" in r.getMessage() for r in caplog.records
    )


def test_corrupt_checkpoint_without_alternative_raises(tmp_path: Path) -> None:
    path = _checkpointed_table(tmp_path)
    (path / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"garbage")
    (path / "_delta_log" / f"{1:020d}.checkpoint.parquet").unlink()
    (path / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(
        CorruptLogError, match=r"cannot read checkpoint file .*00000000000000000002\.checkpoint"
    ):
        DeltaLog.for_table(str(path)).snapshot()


def test_zero_byte_checkpoint_is_ignored(tmp_path: Path) -> None:
    path = _checkpointed_table(tmp_path)
    (path / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"")
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    assert (snapshot.version, snapshot.log_segment.checkpoint_version) == (2, 1)
    (path / "_delta_log" / f"{1:020d}.checkpoint.parquet").unlink()
    (path / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(
        MissingVersionsError, match="Couldn't find all part files of the checkpoint version: 2"
    ):
        DeltaLog.for_table(str(path)).snapshot()


@pytest.mark.parametrize("content", [b"", b"garbage", b'{"version": 99, "size": 3}', b'{"size": 1}'])
def test_last_checkpoint_is_only_a_hint(tmp_path: Path, content: bytes) -> None:
    path = _checkpointed_table(tmp_path)
    (path / "_delta_log" / "_last_checkpoint").write_bytes(content)
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    assert (snapshot.version, snapshot.num_files, snapshot.log_segment.checkpoint_version) == (2, 3, 2)


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="is not a Delta table") as info:
        DeltaLog.for_table(str(tmp_path / "nothing")).snapshot()
    assert info.value.table == f"file://{tmp_path}/nothing"
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    assert not DeltaLog.for_table(str(tmp_path / "empty")).table_exists()


def test_memory_store_table(tmp_path: Path) -> None:
    import fsspec

    source = _checkpointed_table(tmp_path)
    fs = fsspec.filesystem("memory")
    for file in (source / "_delta_log").iterdir():
        fs.pipe_file(f"/rr-snapshot/t/_delta_log/{file.name}", file.read_bytes())
    try:
        snapshot = DeltaLog.for_table("memory://rr-snapshot/t").snapshot()
        local = DeltaLog.for_table(str(source)).snapshot()
        assert (snapshot.version, sorted(snapshot.file_paths())) == (
            local.version,
            sorted(local.file_paths()),
        )
        assert snapshot.table_path == "memory://rr-snapshot/t"
    finally:
        fs.rm("/rr-snapshot", recursive=True)


def test_cached_snapshot_is_reused_until_the_log_moves(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(0))
    log = DeltaLog.for_table(str(path))
    first = log.update()
    assert log.update() is first
    write_deltalake(str(path), _data(3), mode="append")
    second = log.update()
    assert (second.version, second.num_files) == (1, 2)
    assert log.latest_version() == 1


def test_table_paths_are_normalised(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "foo", exist_ok=True)
    expected = f"file://{tmp_path}/foo"
    for spelling in (
        str(tmp_path / "foo"),
        f"{tmp_path}/foo/",
        f"file:{tmp_path}/foo",
        f"file://{tmp_path}/foo",
    ):
        log = DeltaLog.for_table(spelling)
        assert (log.table_path, log.log_path) == (expected, f"{expected}/_delta_log")


def test_interval_parsing() -> None:
    assert parse_interval_ms("interval 1 week") == 7 * 86_400_000
    assert parse_interval_ms("interval 2 days 3 hours") == 2 * 86_400_000 + 3 * 3_600_000
    assert parse_interval_ms("1 second") == 1000
    with pytest.raises(ValueError, match="not an interval: 'soon'"):
        parse_interval_ms("soon")


def test_golden_checkpoint_table_from_a_copy(golden_root: Path, tmp_path: Path) -> None:
    """DeltaLogSuite: deleting the newest commits falls back to older versions."""
    shutil.copytree(golden_root / "delta-spark-golden" / "checkpoint" / "delta", tmp_path / "t")
    log_dir = tmp_path / "t" / "_delta_log"
    assert DeltaLog.for_table(str(tmp_path / "t")).snapshot().version == 14
    for version in (13, 14):
        (log_dir / f"{version:020d}.json").unlink()
    snapshot = DeltaLog.for_table(str(tmp_path / "t")).snapshot()
    assert (snapshot.version, snapshot.num_files) == (12, 1)


# -- the pyarrow fast path for large append commits ------------------------------------------------


def _write_log(root: Path, commits: list[list[dict]]) -> None:
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    for version, lines in enumerate(commits):
        (log_dir / f"{version:020d}.json").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def _add(path: str, **extra: object) -> dict:
    stats = '{"numRecords":10,"minValues":{"id":1},"maxValues":{"id":10},"nullCount":{"id":0}}'
    return {
        "add": {"path": path, "partitionValues": {}, "size": 100, "modificationTime": 7, "dataChange": True}
        | {"stats": stats}
        | extra
    }


HEADER = [
    {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"]}},
    {
        "metaData": {
            "id": "t",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,'
            '"metadata":{}}]}',
            "partitionColumns": [],
            "configuration": {},
        }
    },
]


def _big_commit(prefix: str, count: int = 600) -> list[dict]:
    return [{"commitInfo": {"operation": "WRITE"}}] + [
        _add(f"{prefix}-{i:05d}.parquet") for i in range(count)
    ]


def _state(path: Path) -> list[tuple]:
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    rows = snapshot.files_table().to_pylist(maps_as_pydicts="strict")
    return sorted(tuple(sorted((k, repr(v)) for k, v in row.items())) for row in rows)


def test_large_append_commits_use_the_arrow_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dv = {
        "storageType": "u",
        "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    second = _big_commit("b")
    second.insert(5, {"remove": {"path": "a-00003.parquet", "deletionTimestamp": 5, "dataChange": True}})
    second.append({"remove": {"path": "b-00007.parquet", "deletionTimestamp": 5, "dataChange": True}})
    third = [*_big_commit("c"), _add("a-00004.parquet", deletionVector=dv)]
    third.append({"remove": {"path": "a-00004.parquet", "deletionTimestamp": 6, "dataChange": True}})
    fourth = [*_big_commit("d"), _add("b-00009.parquet", tags={"k": "v"})]
    _write_log(tmp_path / "t", [HEADER, _big_commit("a"), second, third, fourth])
    raws = [(tmp_path / "t" / "_delta_log" / f"{v:020d}.json").read_bytes() for v in range(5)]
    arrow = [parse_commit_arrow(raw) is not None for raw in raws]
    assert arrow == [False, True, True, True, True]
    fast = _state(tmp_path / "t")
    monkeypatch.setattr(commit_reader, "ARROW_COMMIT_MIN_BYTES", 1 << 40)
    assert _state(tmp_path / "t") == fast
    snapshot = DeltaLog.for_table(str(tmp_path / "t")).snapshot()
    live = {f.path for f in snapshot.files()}
    assert len(live) == len(fast)
    assert "a-00003.parquet" not in live
    assert "b-00007.parquet" not in live  # a remove after the add in the same commit wins
    dv_variants = [f.deletion_vector for f in snapshot.files() if f.path == "a-00004.parquet"]
    assert [d.cardinality if d else None for d in dv_variants] == [2]
    assert snapshot.num_files == 4 * 600 - 2
    assert next(f for f in snapshot.files() if f.path == "b-00009.parquet").tags == {"k": "v"}


def test_malformed_line_in_a_large_commit_names_the_line(tmp_path: Path) -> None:
    _write_log(tmp_path / "t", [HEADER, _big_commit("a")])
    commit = tmp_path / "t" / "_delta_log" / f"{1:020d}.json"
    lines = commit.read_bytes().split(b"\n")
    lines[300] = lines[300][:40]
    commit.write_bytes(b"\n".join(lines))
    assert parse_commit_arrow(commit.read_bytes()) is None
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json line 301"):
        DeltaLog.for_table(str(tmp_path / "t")).snapshot()


# -- protocol and metadata without the file state -------------------------------------------------------
def _description_table(path: Path) -> DeltaLog:
    """Versions 0..7: protocol and metadata at 0, a new schema at 2, a checkpoint at 3, a protocol
    upgrade at 4, a new configuration at 6; every other version adds a file."""

    def metadata(fields: int, configuration: dict[str, str]) -> dict[str, object]:
        schema = {
            "type": "struct",
            "fields": [
                {"name": f"c{i}", "type": "long", "nullable": True, "metadata": {}} for i in range(fields)
            ],
        }
        return {
            "metaData": {
                "id": "d",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": orjson.dumps(schema).decode(),
                "partitionColumns": [],
                "configuration": configuration,
            }
        }

    changes: dict[int, list[dict[str, object]]] = {
        0: [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, metadata(1, {})],
        2: [metadata(2, {})],
        4: [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}}],
        6: [metadata(2, {"delta.enableChangeDataFeed": "true"})],
    }
    log = DeltaLog(str(path))
    (path / "_delta_log").mkdir(parents=True)
    for version in range(8):
        actions = changes.get(version) or [
            {
                "add": {
                    "path": f"f{version}",
                    "partitionValues": {},
                    "size": 1,
                    "modificationTime": 1,
                    "dataChange": True,
                }
            }
        ]
        log.store.write(f"{log.log_path}/{version:020d}.json", [orjson.dumps(a).decode() for a in actions])
        if version == 3:
            log.checkpoint(3)
    return log


def test_table_configuration_alone_equals_the_snapshots(tmp_path: Path) -> None:
    from replay.log.log_segment import load_log_segment
    from replay.state.loader import KnownDescription, load_snapshot, load_table_configuration

    log = _description_table(tmp_path / "t")
    snapshots = [log.snapshot(version) for version in range(8)]
    for version, snapshot in enumerate(snapshots):
        segment = load_log_segment(log.io, version)
        assert load_table_configuration(log.io, segment) == snapshot.config
        newest = commit_reader.read_commit(log.io, version)
        assert load_table_configuration(log.io, segment, newest_actions=newest) == snapshot.config
        for earlier in snapshots[: version + 1]:  # known before the checkpoint: ignored
            known = KnownDescription(earlier.version, earlier.protocol, earlier.metadata)
            assert load_table_configuration(log.io, segment, known=known) == snapshot.config
        assert load_snapshot(log.io, segment).config == snapshot.config
