"""Writing deletion vectors: the bitmap bytes Delta writes, DV files, unions, Delta's DML actions,
and tables that delta-rs and this library read the same way afterwards."""

from __future__ import annotations

import struct
import tempfile
import threading
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.cdc import table_changes
from replay.data.deletion_vector_errors import CorruptDeletionVectorError, DeletionVectorNotFoundError
from replay.data.deletion_vector_writer import (
    DeletionVectorWriter,
    DeletionVectorWriterClosedError,
    inline_descriptor,
    remove_rows,
    wide_bounds_stats,
)
from replay.data.deletion_vectors import (
    decode_inline,
    dv_file_path,
    read_deletion_vector,
    z85_decode_bytes,
)
from replay.data.roaring_bitmap import MAX_ROW_INDEX, deserialize_bitmap, serialize_bitmap
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, DeletionVectorDescriptor, parse_action
from replay.protocol.table_properties import InvalidTablePropertyError, random_prefix_length
from replay.txn.write import write_table
from tests.cloud_servers import running_fault_proxy, service_root, unique_name

DV_CDF = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}


# -- row sets -----------------------------------------------------------------------------------
@st.composite
def row_sets(draw: st.DrawFn) -> np.ndarray:
    """Sorted distinct row indexes mixing the shapes that pick each container kind.

    Scattered values (array containers), long ranges (run containers), dense random blocks
    (bitmap containers, with many runs or few) and values above 2**32 (more 32-bit bitmaps).
    """
    parts = [np.empty(0, dtype=np.uint64)]
    shapes = st.tuples(
        st.sampled_from(["scattered", "range", "dense", "single"]),
        st.integers(0, 2**22),  # the 65536-row block the part starts in: up to 2**38
        st.integers(1, 140_000),
        st.integers(0, 2**32 - 1),
    )
    for kind, block, length, seed in draw(st.lists(shapes, max_size=5)):
        base = block * 65_536
        rng = np.random.default_rng(seed)
        if kind == "range":
            part = np.arange(base, base + length)
        elif kind == "scattered":
            part = base + rng.integers(0, 2**34, size=min(length, 5000))
        elif kind == "dense":  # a share of one block, as random bits or as a few long runs
            share = length / 140_000
            bits = rng.random(65_536) < share
            if seed % 2:
                bits = np.repeat(bits[::1024], 1024)
            part = base + np.flatnonzero(bits)
        else:
            part = np.array([base + length])
        parts.append(part.astype(np.uint64))
    return np.unique(np.concatenate(parts))


def expected_size(values: np.ndarray) -> int:
    """The size of Delta's serialisation, from Roaring's container rules, worked out separately."""
    size = 12  # magic + count
    highs = values >> np.uint64(32)
    for high in range(int(highs[-1]) + 1 if values.size else 0):
        size += 4  # the key
        low = values[highs == high] & np.uint64(0xFFFF_FFFF)
        if low.size == 0:
            size += 8
            continue
        containers, has_run = [], False
        for key in np.unique(low >> np.uint64(16)):
            chunk = low[(low >> np.uint64(16)) == key]
            card = chunk.size
            runs = 1 + int(np.count_nonzero(np.diff(chunk) != 1))
            plain = 2 * card if card <= 4096 else 8192
            as_runs = 2 + 4 * runs
            has_run |= as_runs < plain
            containers.append(min(plain, as_runs))
        count = len(containers)
        if has_run:
            size += 4 + (count + 7) // 8 + 4 * count + (4 * count if count >= 4 else 0)
        else:
            size += 8 + 8 * count
        size += sum(containers)
    return size


@settings(max_examples=60, deadline=None)
@given(row_sets(), row_sets())
def test_any_row_set_round_trips_through_a_dv_file(first: np.ndarray, second: np.ndarray) -> None:
    data = serialize_bitmap(first)
    assert len(data) == expected_size(first)
    assert np.array_equal(deserialize_bitmap(data), first)
    # Roaring weighs each container alone: with many containers the run format's flag bytes can
    # cost more than its runs save, so the optimised bytes are not always fewer (Delta's too).
    assert np.array_equal(deserialize_bitmap(serialize_bitmap(first, run_optimize=False)), first)
    if first.size == 0 or second.size == 0:
        return
    with tempfile.TemporaryDirectory() as table:
        with DeletionVectorWriter(table) as writer:
            one = writer.add(first[::-1])  # any order
            two = writer.add(np.concatenate([second, second]))  # duplicates count once
        assert (one.storage_type, one.offset, one.cardinality) == ("u", 1, first.size)
        assert one.size_in_bytes == len(data)
        assert one.path_or_inline_dv == two.path_or_inline_dv  # both in one file
        assert two.offset == 1 + 4 + one.size_in_bytes + 4
        assert two.cardinality == second.size
        assert np.array_equal(read_deletion_vector(one, table), first)
        assert np.array_equal(read_deletion_vector(two, table), second)
        path = dv_file_path(two, table)
        assert path is not None
        assert Path(path).stat().st_size == two.offset + 4 + two.size_in_bytes + 4
        assert Path(path).read_bytes()[:1] == b"\x01"


def test_serialisation_is_byte_for_byte_what_delta_wrote(golden_root: Path) -> None:
    """Every DV of the golden tables (Delta 2.4 to 3.x, kernel-rs, delta-rs) comes out the same."""
    seen: set[tuple[str, str]] = set()
    for log in sorted(golden_root.rglob("_delta_log")):
        table = log.parent
        for commit in sorted(log.glob("*.json")):
            if commit.name.count(".") != 1:
                continue
            for line in commit.read_bytes().splitlines():
                entry = orjson.loads(line) if line.strip() else {}
                for kind in ("add", "remove"):
                    dv = (entry.get(kind) or {}).get("deletionVector")
                    if not dv or (str(table), str(dv)) in seen:
                        continue
                    seen.add((str(table), str(dv)))
                    descriptor = DeletionVectorDescriptor.from_dict(dv)
                    stored = _bitmap_bytes(descriptor, table)
                    if stored is not None:
                        assert serialize_bitmap(deserialize_bitmap(stored)) == stored, (table, dv)
    assert len(seen) > 50


def _bitmap_bytes(descriptor: DeletionVectorDescriptor, table: Path) -> bytes | None:
    if descriptor.storage_type == "i":
        return z85_decode_bytes(descriptor.path_or_inline_dv, descriptor.size_in_bytes)
    path = dv_file_path(descriptor, str(table))
    if path is None or not Path(path).exists():
        return None
    raw = Path(path).read_bytes()
    offset = descriptor.offset or 1
    (size,) = struct.unpack_from(">i", raw, offset)
    return raw[offset + 4 : offset + 4 + size]


def test_run_containers_and_dense_keys_as_delta_lays_them_out() -> None:
    data = serialize_bitmap(np.arange(10, 5000, dtype=np.uint64))  # one run: 2 + 4 bytes
    assert struct.unpack_from("<iqI", data) == (1681511377, 1, 0)
    assert struct.unpack_from("<IB", data, 16) == (12347, 1)  # run cookie, container 0 is a run
    assert data[-6:] == struct.pack("<HHH", 1, 10, 4989)
    high = serialize_bitmap([(2 << 32) + 1])  # keys 0 and 1 are written, empty
    assert struct.unpack_from("<iqI", high) == (1681511377, 3, 0)
    assert high[16:24] == struct.pack("<II", 12346, 0)
    assert deserialize_bitmap(high).tolist() == [(2 << 32) + 1]
    with pytest.raises(ValueError, match="above the largest"):
        serialize_bitmap([MAX_ROW_INDEX + 1])
    with pytest.raises(ValueError, match="must not be negative"):
        serialize_bitmap(np.array([3, -1]))


# -- the writer ---------------------------------------------------------------------------------
def test_files_are_written_at_close_and_packed_up_to_the_target_size(tmp_path: Path) -> None:
    writer = DeletionVectorWriter(str(tmp_path), target_file_size=100)
    descriptors = [writer.add(range(i, i + 40, 2)) for i in range(5)]  # 72-byte bitmaps
    assert len(writer.written_files) == 4  # each file is written once the next DV would overflow it
    files = writer.close()
    assert writer.close() == files and len(files) == 5
    assert {d.offset for d in descriptors} == {1}
    for i, descriptor in enumerate(descriptors):
        assert read_deletion_vector(descriptor, str(tmp_path)).tolist() == list(range(i, i + 40, 2))
    with pytest.raises(DeletionVectorWriterClosedError):
        writer.add([1])
    writer.discard()
    assert not list(tmp_path.glob("deletion_vector_*.bin"))


def test_a_failure_inside_the_block_leaves_no_file(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        DeletionVectorWriter(str(tmp_path), target_file_size=1) as w,
    ):
        w.add([1, 2])
        w.add([3])  # writes the first file
        assert len(w.written_files) == 1
        raise RuntimeError("boom")
    assert not list(tmp_path.iterdir())


def test_random_prefixes_follow_the_table_properties(tmp_path: Path) -> None:
    assert random_prefix_length({"delta.randomPrefixLength": "5"}) == 0
    assert random_prefix_length({"delta.randomizeFilePrefixes": "true"}) == 2
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.randomPrefixLength"):
        random_prefix_length({"delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "0"})
    configuration = {"delta.randomizeFilePrefixes": "true", "delta.randomPrefixLength": "3"}
    with DeletionVectorWriter.for_table(str(tmp_path), configuration) as writer:
        descriptor = writer.add([7])
    assert len(descriptor.path_or_inline_dv) == 23
    prefix = descriptor.path_or_inline_dv[:3]
    assert prefix.isalnum()
    assert [p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.bin")] == [prefix]
    assert read_deletion_vector(descriptor, str(tmp_path)).tolist() == [7]


def test_concurrent_adds(tmp_path: Path) -> None:
    results: dict[int, DeletionVectorDescriptor] = {}
    with DeletionVectorWriter(str(tmp_path), target_file_size=4096) as writer:

        def work(i: int) -> None:
            results[i] = writer.add(np.arange(i, 3000 + i, 3))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for i, descriptor in results.items():
        assert np.array_equal(read_deletion_vector(descriptor, str(tmp_path)), np.arange(i, 3000 + i, 3))


def test_row_indexes_are_checked_against_the_file(tmp_path: Path) -> None:
    with DeletionVectorWriter(str(tmp_path)) as writer:
        with pytest.raises(
            CorruptDeletionVectorError, match=r"INVALID_ROW_INDEX.*marks row 10 of data file f.parquet"
        ):
            writer.add([1, 10], num_records=10, data_file="f.parquet")
        with pytest.raises(ValueError, match="at least one row"):
            writer.add([])
        file = _add("f.parquet", num_records=10)
        with pytest.raises(
            CorruptDeletionVectorError, match=r"rows to delete marks row 12 of data file f\.parquet"
        ):
            writer.update(file, [12])
    assert not list(tmp_path.iterdir())


def test_update_unites_with_the_current_dv(tmp_path: Path) -> None:
    table = str(tmp_path)
    with DeletionVectorWriter(table) as writer:
        first = writer.update(_add("f.parquet", num_records=10), [4, 2])
    assert first.descriptor is not None and first.newly_deleted == 2 and first.changed
    file = _add("f.parquet", num_records=10, dv=first.descriptor)
    with DeletionVectorWriter(table) as writer:  # a later operation, once the first DV is committed
        second = writer.update(file, [2, 3])
        same = writer.update(file, [2, 4])
        everything = writer.update(file, range(10))
    assert second.descriptor is not None and second.newly_deleted == 1
    assert read_deletion_vector(second.descriptor, table).tolist() == [2, 3, 4]
    assert (same.descriptor, same.newly_deleted, same.actions()) == (first.descriptor, 0, [])
    assert everything.all_deleted and everything.descriptor is None and everything.newly_deleted == 8
    (remove,) = everything.actions(deletion_timestamp=5)
    assert remove.to_dict() == {
        "remove": {
            "path": "f.parquet",
            "deletionTimestamp": 5,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": 100,
            "stats": '{"numRecords":10}',
            "deletionVector": first.descriptor.inner_dict(),
        }
    }


def test_a_file_without_statistics_needs_its_row_count(tmp_path: Path) -> None:
    file = AddFile(path="f.parquet", size=100, modification_time=1)
    with DeletionVectorWriter(str(tmp_path)) as writer:
        update = writer.update(file, [1], num_records=4)
        unknown = writer.update(file, [2])
    add, remove = update.actions(deletion_timestamp=9)
    assert (add.stats, remove.stats) == ('{"numRecords":4,"tightBounds":false}', "{}")
    assert unknown.num_records is None and not unknown.all_deleted
    with pytest.raises(ValueError, match=r"f\.parquet has no numRecords statistic"):
        unknown.actions()


def _add(path: str, num_records: int, dv: DeletionVectorDescriptor | None = None) -> AddFile:
    stats = orjson.dumps({"numRecords": num_records, "nullCount": {"a": 0}, "tightBounds": True}).decode()
    return AddFile(path=path, size=100, modification_time=1, stats=stats, deletion_vector=dv)


def test_inline_descriptor_is_delta_inline_encoding() -> None:
    descriptor = inline_descriptor([5, 1, 3])
    assert (descriptor.storage_type, descriptor.offset, descriptor.cardinality) == ("i", None, 3)
    assert decode_inline(descriptor).tolist() == [1, 3, 5]


# -- the actions of a DV update -------------------------------------------------------------------
def test_actions_are_the_ones_delta_committed(golden_root: Path) -> None:
    """Replaying the DELETEs of ``log-replay-dv-key-cases`` gives Delta's add and remove lines."""
    log = golden_root / "delta-spark-golden/log-replay-dv-key-cases/delta/_delta_log"

    def lines(version: int) -> list[bytes]:
        return (log / f"{version:020d}.json").read_bytes().splitlines()

    def entry(version: int, kind: str) -> dict:
        return next(orjson.loads(line) for line in lines(version) if line.startswith(b'{"' + kind.encode()))

    previous = parse_action(next(line for line in lines(0) if line.startswith(b'{"add"')))
    for version in (1, 2, 3):
        golden_add, golden_remove = entry(version, "add"), entry(version, "remove")
        descriptor = DeletionVectorDescriptor.from_dict(golden_add["add"]["deletionVector"])
        assert isinstance(previous, AddFile)
        add, remove = remove_rows(
            previous, descriptor, deletion_timestamp=golden_remove["remove"]["deletionTimestamp"]
        )
        assert add.to_dict() == golden_add
        assert remove.to_dict() == golden_remove
        previous = add


def test_wide_bounds_stats() -> None:
    tight = (
        '{"numRecords":50,"minValues":{"a":1,"s":{"b":null}},"nullCount":{"a":48,"s":{"b":0}},'
        '"tightBounds":true}'
    )
    # 48 nulls in 48 live rows (2 deleted): an all-null column, whose physical null count is 50
    assert wide_bounds_stats(tight, 2) == (
        '{"numRecords":50,"minValues":{"a":1,"s":{}},"nullCount":{"a":50,"s":{"b":0}},"tightBounds":false}'
    )
    wide = tight.replace('"tightBounds":true', '"tightBounds":false')
    assert '"nullCount":{"a":48' in str(wide_bounds_stats(wide, 2))
    assert wide_bounds_stats('{"numRecords":5,"nullCount":{"a":5}}', 0) == (
        '{"numRecords":5,"nullCount":{"a":5},"tightBounds":false}'
    )
    assert wide_bounds_stats(None, 0) is None
    assert wide_bounds_stats(None, 0, num_records=7) == '{"numRecords":7,"tightBounds":false}'
    with pytest.raises(ValueError, match="no numRecords statistic"):
        remove_rows(AddFile(path="x", size=1), inline_descriptor([0]))
    with pytest.raises(ValueError, match="fewer than"):
        remove_rows(_add("x", 9, dv=inline_descriptor([1, 2])), inline_descriptor([1]))


# -- tables read by delta-rs and by this library --------------------------------------------------
def rust_ids(uri: str) -> list[int]:
    reader = QueryBuilder().register("t", DeltaTable(uri)).execute("select id from t")
    return sorted(pa.table(reader.read_all())["id"].to_pylist())


def rust_changes(uri: str, start: int) -> list[tuple[int, str, int]]:
    table = pa.table(DeltaTable(uri).load_cdf(starting_version=start).read_all())
    return sorted(
        zip(
            table["id"].to_pylist(),
            table["_change_type"].cast(pa.string()).to_pylist(),
            table["_commit_version"].cast(pa.int64()).to_pylist(),
            strict=True,
        )
    )


def our_changes(delta_log: DeltaLog, start: int) -> list[tuple[int, str, int]]:
    table = table_changes(delta_log, starting_version=start)
    return sorted(
        zip(
            table["id"].to_pylist(),
            table["_change_type"].to_pylist(),
            table["_commit_version"].to_pylist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("configuration", [DV_CDF, {**DV_CDF, "delta.randomizeFilePrefixes": "true"}])
def test_deletes_with_dvs_read_the_same_in_delta_rs(tmp_path: Path, configuration: dict[str, str]) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(120), pa.int64()), "p": [i % 2 for i in range(120)]})
    write_table(uri, data, partition_by=["p"], configuration=configuration, max_rows_per_file=30)
    delta_log = DeltaLog.for_table(uri)
    assert delta_log.update().protocol.reader_features == ["deletionVectors"]
    expected = set(range(120))
    deleted: dict[int, set[int]] = {}
    deleted_per_version = {1: lambda ids: ids[::7], 2: lambda ids: ids[::5], 3: lambda ids: ids}
    for version, choose in deleted_per_version.items():
        snapshot = delta_log.update()
        actions = []
        before = set(expected)
        with DeletionVectorWriter.for_table(uri, snapshot.metadata.configuration) as writer:
            for file in sorted(snapshot.files(), key=lambda f: f.path)[:3]:
                ids = pq.read_table(tmp_path / "t" / file.path)["id"].to_pylist()
                rows = [i for i, value in enumerate(ids) if value in set(choose(ids))]
                update = writer.update(file, rows)
                expected -= {ids[i] for i in rows}
                actions += update.actions()
        deleted[version] = before - expected
        assert delta_log.commit(actions, operation="DELETE", read_version=snapshot.version) == version
        assert rust_ids(uri) == sorted(expected)
        assert sorted(delta_log.update().to_arrow()["id"].to_pylist()) == sorted(expected)
    # Version 3 removes the three files (every row deleted): a remove with a DV. Delta's change feed
    # reads it with its DV applied (rows deleted before are not deleted again); delta-rs 1.6.6
    # reports the DV's rows instead, so it is compared on the DV updates of versions 1 and 2 only.
    ours = our_changes(delta_log, 1)
    assert [c for c in ours if c[2] < 3] == [c for c in rust_changes(uri, 1) if c[2] < 3]
    assert ours == sorted((i, "delete", v) for v, ids in deleted.items() for i in ids)


# -- object stores ----------------------------------------------------------------------------------
@pytest.mark.cloud
@pytest.mark.parametrize("service", ["s3", "gcs", "azure"])
def test_one_put_per_dv_file_on_object_stores(request: pytest.FixtureRequest, service: str) -> None:
    """Through the storage settings of the table, a DV file is one upload; reads and discard work."""
    root, upstream, conf_for = service_root(request, service)
    table = f"{root}/{unique_name('table')}"
    with running_fault_proxy(upstream) as proxy:
        conf = conf_for(proxy.endpoint)
        with DeletionVectorWriter.for_table(table, {"delta.randomizeFilePrefixes": "true"}, conf) as writer:
            descriptors = [writer.add(np.arange(i, 70_000, 3)) for i in range(3)]
        uploads = [r for r in proxy.requests if r.method in ("PUT", "POST")]
        assert len(uploads) == 1, [(r.method, r.path) for r in proxy.requests]
        for i, descriptor in enumerate(descriptors):
            assert np.array_equal(read_deletion_vector(descriptor, table, conf), np.arange(i, 70_000, 3))
        writer.discard()
        with pytest.raises(DeletionVectorNotFoundError):
            read_deletion_vector(descriptors[0], table, conf)
