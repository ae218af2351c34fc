"""The fast snapshot-loading paths give exactly what line-by-line replay gives.

Large commits are parsed by pyarrow (``parse_commit_arrow``) and resolved in Arrow; raising
``ARROW_COMMIT_MIN_BYTES`` forces every commit through orjson, the reference behaviour.
Checkpoints are read one row group at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstores import create_log_store
from logstores.base import FileStatus
from replay.delta_log import DeltaLog
from replay.log import commit_files as commit_reader
from replay.log.checkpoints import read_parquet_checkpoint
from replay.log.commit_files import parse_commit_arrow
from replay.protocol.arrow_actions import (
    ADD_ARROW_TYPE,
    REMOVE_ARROW_TYPE,
    arrow_file_keys,
    may_need_canonical_form,
    struct_to_map,
)
from replay.protocol.paths import resolve_path

STATS = '{"numRecords":10,"minValues":{"id":1},"maxValues":{"id":10},"nullCount":{"id":0}}'
DV = {
    "storageType": "u",
    "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
    "offset": 1,
    "sizeInBytes": 36,
    "cardinality": 2,
}


def _header(partition_columns: list[str]) -> list[dict[str, Any]]:
    fields = [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]
    fields += [
        {"name": name, "type": "string", "nullable": True, "metadata": {}} for name in partition_columns
    ]
    features = ["deletionVectors"]
    return [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features}},
        {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": orjson.dumps({"type": "struct", "fields": fields}).decode(),
                "partitionColumns": partition_columns,
                "configuration": {},
            }
        },
    ]


def _add(path: str, partition: dict[str, str | None] | None = None, **extra: Any) -> dict[str, Any]:
    action = {
        "path": path,
        "partitionValues": partition or {},
        "size": 100,
        "modificationTime": 7,
        "dataChange": True,
        "stats": STATS,
    }
    return {"add": action | extra}


def _remove(path: str, **extra: Any) -> dict[str, Any]:
    return {"remove": {"path": path, "deletionTimestamp": 2**62, "dataChange": True} | extra}


def _write(root: Path, commits: list[list[dict[str, Any]]]) -> list[bytes]:
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    raws = []
    for version, lines in enumerate(commits):
        raw = b"".join(orjson.dumps(line) + b"\n" for line in lines)
        (log_dir / f"{version:020d}.json").write_bytes(raw)
        raws.append(raw)
    return raws


def _state(root: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[str], int]:
    snapshot = DeltaLog.for_table(str(root)).snapshot()
    files = snapshot.files_table().to_pylist(maps_as_pydicts="strict")
    tombstones = snapshot.tombstones_table().to_pylist(maps_as_pydicts="strict")
    return (
        sorted(tuple(sorted((k, repr(v)) for k, v in row.items())) for row in files),
        sorted(tuple(sorted((k, repr(v)) for k, v in row.items())) for row in tombstones),
        sorted(snapshot.file_uris()),
        snapshot.num_files,
    )


def _commit(prefix: str, count: int = 600, **extra: Any) -> list[dict[str, Any]]:
    return [{"commitInfo": {"operation": "WRITE"}}] + [
        _add(f"{prefix}-{i:05d}.parquet", **extra) for i in range(count)
    ]


def _partitioned_log() -> tuple[list[list[dict[str, Any]]], list[bool]]:
    """Commits of a partitioned table with DVs, row tracking, tags, removes and re-adds."""
    part = {"country": "FR", "city": "Paris"}
    first = [{"commitInfo": {"operation": "WRITE"}}] + [
        _add(f"country=FR/city=Paris/a-{i:05d}.parquet", part, baseRowId=i * 10, defaultRowCommitVersion=1)
        for i in range(600)
    ]
    second = [
        _add(f"country=DE/city=K%C3%B6ln/b-{i:05d}.parquet", {"country": "DE", "city": "Köln"})
        for i in range(600)
    ]
    second.insert(3, _remove("country=FR/city=Paris/a-00003.parquet", partitionValues=part))
    second.append(_remove("country=DE/city=K%C3%B6ln/b-00007.parquet"))  # removes the add above it
    third = _commit("c", partition=part, tags={"k": "v", "z": "w"})
    third.append(_add("country=FR/city=Paris/a-00004.parquet", part, deletionVector=DV))
    third.append(_remove("country=FR/city=Paris/a-00004.parquet", partitionValues=part))
    third.append({"txn": {"appId": "app", "version": 3, "lastUpdated": 2**62}})
    fourth = _commit("d", partition={"country": "US", "city": None})  # null partition value: orjson
    fifth = _commit("e", partition={"country": "2020-01-01", "city": "x"})  # inferred as timestamp: orjson
    sixth = [_add("country=FR/city=Paris/a-00003.parquet", part, clusteringProvider="liquid")]
    sixth += [_add(f"/abs/dir/f-{i:05d}.parquet", part) for i in range(600)]
    expected_arrow = [False, True, True, True, False, False, True]
    return [_header(["country", "city"]), first, second, third, fourth, fifth, sixth], expected_arrow


def test_arrow_parsed_commits_replay_like_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits, expected_arrow = _partitioned_log()
    raws = _write(tmp_path / "t", commits)
    assert [parse_commit_arrow(raw) is not None for raw in raws] == expected_arrow
    fast = _state(tmp_path / "t")
    monkeypatch.setattr(commit_reader, "ARROW_COMMIT_MIN_BYTES", 1 << 40)
    reference = _state(tmp_path / "t")
    assert fast == reference
    files, tombstones, uris, count = fast
    # removed: a-00003 (re-added later), b-00007, a-00004 without DV; added: a-00004 with a DV
    assert count == 6 * 600 + 1 - 3 + 1
    assert len(files) == count
    paths = [dict(row)["path"] for row in files]
    assert "'country=DE/city=K%C3%B6ln/b-00007.parquet'" not in paths
    assert paths.count("'country=FR/city=Paris/a-00003.parquet'") == 1
    assert paths.count("'country=FR/city=Paris/a-00004.parquet'") == 1  # the DV variant
    survivor = next(
        dict(row) for row in files if dict(row)["path"] == "'country=FR/city=Paris/a-00004.parquet'"
    )
    assert "'cardinality': 2" in survivor["deletion_vector"]
    assert len(tombstones) == 2  # a-00004 without DV and b-00007 (a-00003 was re-added)
    assert any(uri.endswith("/t/country=DE/city=Köln/b-00001.parquet") for uri in uris)
    assert "file:///abs/dir/f-00001.parquet" in uris


def test_arrow_parsed_commit_keeps_every_add_field(tmp_path: Path) -> None:
    commits, _ = _partitioned_log()
    raws = _write(tmp_path / "t", commits)
    parsed = parse_commit_arrow(raws[3])
    assert parsed is not None and parsed.adds.schema == pa.schema(ADD_ARROW_TYPE)
    assert parsed.num_lines == 604
    assert [number for number, _ in parsed.others] == [0, 603]  # commitInfo and txn
    assert parsed.remove_lines.to_pylist() == [602]
    assert parsed.removes.schema == pa.schema(REMOVE_ARROW_TYPE)
    assert parsed.removes.to_pylist(maps_as_pydicts="strict")[0] | {"partitionValues": None} == {
        field.name: None for field in REMOVE_ARROW_TYPE
    } | {"path": "country=FR/city=Paris/a-00004.parquet", "deletionTimestamp": 2**62, "dataChange": True}
    rows = parsed.adds.to_pylist(maps_as_pydicts="strict")
    assert rows[0]["tags"] == {"k": "v", "z": "w"}
    assert rows[0]["partitionValues"] == {"country": "FR", "city": "Paris"}
    assert rows[-1]["deletionVector"] == DV | {"maxRowIndex": None}
    first = parse_commit_arrow(raws[1])
    assert first is not None
    assert first.adds.column("baseRowId").to_pylist()[:3] == [0, 10, 20]


def test_remove_heavy_commits_and_shared_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _commit("a", count=2400)
    delete = [{"commitInfo": {"operation": "DELETE"}}]
    delete += [_remove(f"a-{i:05d}.parquet", size=100) for i in range(0, 2400, 2)]
    delete.append(_remove("a-00001.parquet") | {"txn": {"appId": "x", "version": 1}})  # the remove wins
    delete.append({"txn": {"appId": "y", "version": 2}} | _remove("a-00003.parquet"))  # the txn wins
    raws = _write(tmp_path / "t", [_header([]), first, delete])
    parsed = parse_commit_arrow(raws[2])
    assert parsed is not None
    assert (parsed.adds.num_rows, parsed.removes.num_rows, len(parsed.others)) == (0, 1200, 3)
    fast = _state(tmp_path / "t")
    monkeypatch.setattr(commit_reader, "ARROW_COMMIT_MIN_BYTES", 1 << 40)
    assert _state(tmp_path / "t") == fast
    _, tombstones, _, count = fast
    assert count == 2400 - 1200 - 1
    assert len(tombstones) == 1201
    snapshot = DeltaLog.for_table(str(tmp_path / "t")).snapshot()
    assert snapshot.set_transactions == {"y": 2}  # a line applies only its first known action
    assert "a-00003.parquet" in {f.path for f in snapshot.files()}


def test_fallback_on_wrong_types_gives_the_line_by_line_error(tmp_path: Path) -> None:
    bad = _commit("a")
    bad[10]["add"]["size"] = "big"
    raws = _write(tmp_path / "t", [_header([]), bad])
    assert parse_commit_arrow(raws[1]) is None
    with pytest.raises(Exception, match=r"00000000000000000001\.json"):
        DeltaLog.for_table(str(tmp_path / "t")).snapshot()


def test_struct_to_map_is_exact_or_declines() -> None:
    struct_type = pa.struct([("a", pa.string()), ("b", pa.string())])
    values = pa.array([{"a": "1", "b": "2"}, None, {"a": "3", "b": "4"}], struct_type)
    assert struct_to_map(values).to_pylist() == [[("a", "1"), ("b", "2")], None, [("a", "3"), ("b", "4")]]
    single = pa.array([{"a": "x"}, {"a": "y"}], pa.struct([("a", pa.string())]))
    assert struct_to_map(single).to_pylist() == [[("a", "x")], [("a", "y")]]
    empty = pa.array([{}, None], pa.struct([]))
    assert struct_to_map(empty).to_pylist() == [[], None]
    assert struct_to_map(pa.array([{"a": "1", "b": None}], struct_type)) is None  # missing or null?
    assert struct_to_map(pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))) is None


def test_checkpoint_is_read_row_group_by_row_group(tmp_path: Path) -> None:
    add_type = pa.struct([("path", pa.string()), ("size", pa.int64()), ("stats", pa.string())])
    remove_type = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64())])
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    rows: list[dict[str, Any]] = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}]
    for i in range(250):
        rows.append({"add": {"path": f"f{i}", "size": i, "stats": None if i % 3 else STATS}})
        if i % 50 == 7:
            rows.append({"remove": {"path": f"r{i}", "deletionTimestamp": i}})
    rows.append({"txn": {"appId": "a", "version": 1}})
    schema = pa.schema(
        [
            ("protocol", protocol_type),
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
            ("add", add_type),
            ("remove", remove_type),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    path = tmp_path / "00000000000000000010.checkpoint.parquet"
    pq.write_table(table, path, row_group_size=64)
    assert pq.ParquetFile(path).num_row_groups > 3
    status = FileStatus(path.as_uri(), path.stat().st_size, 0)
    data = read_parquet_checkpoint(create_log_store({}), status)
    adds = pa.concat_tables(data.adds)
    assert adds.column("path").to_pylist() == [f"f{i}" for i in range(250)]
    assert adds.column("stats").to_pylist() == [None if i % 3 else STATS for i in range(250)]
    removes = pa.concat_tables(data.removes)
    assert removes.to_pylist() == [{"path": f"r{i}", "deletionTimestamp": i} for i in range(7, 250, 50)]
    assert data.actions == [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"txn": {"appId": "a", "version": 1}},
    ]


def test_file_uris_resolve_every_path_form(tmp_path: Path) -> None:
    lines = [_add(f"p{i}.parquet") for i in range(3)]
    lines += [_add("a%20b.parquet"), _add("/abs/x.parquet"), _add("s3://bucket/k%3Dv/y.parquet")]
    _write(tmp_path / "t", [_header([]), lines])
    snapshot = DeltaLog.for_table(str(tmp_path / "t")).snapshot()
    paths = snapshot.files_table().column("path").to_pylist()
    expected = [resolve_path(snapshot.table_path, path) for path in paths]
    assert snapshot.file_uris() == expected
    assert snapshot.file_uris(chunk_rows=2) == expected
    assert f"{snapshot.table_path}/a b.parquet" in expected


def test_path_scan_is_conservative_and_exact_when_it_says_no() -> None:
    plain = pa.array(["a.parquet", "b/c.parquet"])
    assert not may_need_canonical_form(plain, (b"%", b"file:"))
    assert may_need_canonical_form(pa.array(["a.parquet", "/x"]), (b"%",))
    assert may_need_canonical_form(pa.array(["a%20b"]), (b"%",))
    assert may_need_canonical_form(plain.slice(1), (b".p",))  # the whole buffer is scanned: a false alarm
    views = pa.array(["/x", "y"], pa.string_view())
    assert may_need_canonical_form(views, (b"%",))
    table = pa.table({"path": pa.array(["file:///t/a%2fb", "/t/a%2Fb", "c"], pa.string_view())})
    assert arrow_file_keys(table).to_pylist() == ["file:/t/a%2Fb", "file:/t/a%2Fb", "c"]
