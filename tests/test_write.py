"""``replay.write``: data files, statistics, partition layout, table creation, overwrite and delete."""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.metadata
import json
import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol, RemoveFile, parse_actions
from replay.protocol.errors import (
    AppendOnlyTableError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
from replay.protocol.identity_columns import IdentityColumnError
from replay.protocol.table_config import check_writable
from replay.protocol.table_properties import InvalidTablePropertyError
from replay.txn.partition_paths import (
    encode_log_path,
    escape_partition_value,
    partition_directory,
    partition_value_string,
)
from replay.txn.schema_merge import SchemaMismatchError
from replay.txn.statistics import file_statistics
from replay.txn.write import delete_files, new_table_protocol, write_table


def commit_lines(table: Path, version: int) -> list[dict]:
    return [
        orjson.loads(line)
        for line in (table / "_delta_log" / f"{version:020d}.json").read_bytes().splitlines()
    ]


# -- statistics ------------------------------------------------------------------------------------
def test_statistics_of_every_supported_type() -> None:
    table = pa.table(
        {
            "i": [3, 1, None],
            "s": ["b", "a", None],
            "ts": pa.array(
                [dt.datetime(2020, 1, 1, 1, 2, 3, 456789), None, None], pa.timestamp("us", tz="UTC")
            ),
            "ntz": pa.array([dt.datetime(2021, 5, 6, 7, 8, 9), None, None], pa.timestamp("us")),
            "d": pa.array([dt.date(2020, 1, 2), dt.date(2019, 12, 31), None]),
            "dec": pa.array([decimal.Decimal("1.23"), decimal.Decimal("-4.50"), None], pa.decimal128(5, 2)),
            "b": [True, False, None],
            "st": [{"x": 1}, None, {"x": None}],
            "l": [[1], None, [2]],
            "bin": [b"a", b"b", None],
        }
    )
    assert json.loads(file_statistics(table)) == {
        "numRecords": 3,
        "minValues": {
            "i": 1,
            "s": "a",
            "ts": "2020-01-01T01:02:03.456Z",
            "ntz": "2021-05-06T07:08:09.000",
            "d": "2019-12-31",
            "dec": -4.5,
            "b": False,
            "st": {"x": 1},
        },
        "maxValues": {
            "i": 3,
            "s": "b",
            "ts": "2020-01-01T01:02:03.456Z",
            "ntz": "2021-05-06T07:08:09.000",
            "d": "2020-01-02",
            "dec": 1.23,
            "b": True,
            "st": {"x": 1},
        },
        "nullCount": {
            "i": 1,
            "s": 1,
            "ts": 2,
            "ntz": 2,
            "d": 1,
            "dec": 1,
            "b": 1,
            "st": {"x": 2},
            "l": 1,
            "bin": 1,
        },
    }


def test_statistics_truncate_long_strings_and_skip_nan() -> None:
    long = "z" * 40
    stats = json.loads(file_statistics(pa.table({"s": [long, "a" * 33], "f": [1.0, float("nan")]})))
    assert stats["minValues"] == {"s": "a" * 32}
    assert stats["maxValues"] == {"s": "z" * 32 + "\U0010ffff"}
    assert stats["nullCount"] == {"s": 0, "f": 0}


def test_the_table_property_sets_the_string_prefix_length(tmp_path: Path) -> None:
    value = "m" * 20 + "z" * 20
    for length, minimum, maximum in ((8, "m" * 8, "m" * 8 + "\U0010ffff"), (64, value, value)):
        path = tmp_path / f"t{length}"
        configuration = {"delta.dataSkippingStringPrefixLength": str(length)}
        write_table(str(path), pa.table({"s": [value]}), configuration=configuration)
        stats = json.loads(next(a for a in commit_lines(path, 0) if "add" in a)["add"]["stats"])
        assert (stats["minValues"]["s"], stats["maxValues"]["s"]) == (minimum, maximum)
        write_table(str(path), pa.table({"s": [value]}))  # later writes read it from the table
        stats = json.loads(next(a for a in commit_lines(path, 1) if "add" in a)["add"]["stats"])
        assert stats["maxValues"]["s"] == maximum
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.dataSkippingStringPrefixLength"):
        write_table(
            str(tmp_path / "bad"),
            pa.table({"s": ["a"]}),
            configuration={"delta.dataSkippingStringPrefixLength": "-1"},
        )


def test_statistics_only_for_the_first_indexed_leaf_columns() -> None:
    table = pa.table({"a": [1], "st": [{"x": 2, "y": 3}], "c": [4]})
    stats = json.loads(file_statistics(table, num_indexed_cols=2))
    assert stats["nullCount"] == {"a": 0, "st": {"x": 0}}
    assert stats["maxValues"] == {"a": 1, "st": {"x": 2}}
    assert json.loads(file_statistics(table, num_indexed_cols=-1))["nullCount"] == {
        "a": 0,
        "st": {"x": 0, "y": 0},
        "c": 0,
    }


# -- partition layout --------------------------------------------------------------------------------
def test_partition_directories_escape_like_hive() -> None:
    assert escape_partition_value("a b/c%d=e:f") == "a b%2Fc%25d%3De%3Af"
    assert partition_directory(["p", "q"], {"p": "x/y", "q": None}) == "p=x%2Fy/q=__HIVE_DEFAULT_PARTITION__"
    assert encode_log_path("p=a b%2Fü/part-0.parquet") == "p=a%20b%252Fü/part-0.parquet"


def test_partition_value_strings() -> None:
    assert partition_value_string(None, pa.string()) is None
    assert partition_value_string("", pa.string()) is None
    assert partition_value_string(True, pa.bool_()) == "true"
    assert partition_value_string(12, pa.int64()) == "12"
    assert partition_value_string(dt.date(2020, 2, 3), pa.date32()) == "2020-02-03"
    utc = dt.datetime(2020, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    assert partition_value_string(utc, pa.timestamp("us", "UTC")) == "2020-02-03 04:05:06"
    plus_two = dt.datetime(2020, 2, 3, 6, 5, 6, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert partition_value_string(plus_two, pa.timestamp("us", "UTC")) == "2020-02-03 04:05:06.123000"


# -- protocol ------------------------------------------------------------------------------------------
def test_new_table_protocols() -> None:
    plain = '{"type":"struct","fields":[]}'
    ntz = '{"type":"struct","fields":[{"name":"t","type":"timestamp_ntz","nullable":true,"metadata":{}}]}'
    assert new_table_protocol({}, plain) == Protocol(1, 2)
    assert new_table_protocol({"delta.enableChangeDataFeed": "true"}, plain) == Protocol(1, 4)
    assert new_table_protocol({"delta.enableInCommitTimestamps": "true"}, plain) == Protocol(
        1, 7, None, ["appendOnly", "invariants", "inCommitTimestamp"]
    )
    assert new_table_protocol({}, ntz) == Protocol(
        3, 7, ["timestampNtz"], ["appendOnly", "invariants", "timestampNtz"]
    )


def test_tables_with_unsupported_writer_features_are_refused() -> None:
    plain = Metadata(id="m", schema_string='{"type":"struct","fields":[]}')
    with pytest.raises(UnsupportedTableFeatureError, match="futureWriterFeature") as caught:
        check_writable(Protocol(3, 7, [], ["appendOnly", "futureWriterFeature"]), plain, "file:///t")
    assert caught.value.features == ["futureWriterFeature"]
    mapped = Metadata(id="m", schema_string="{}", configuration={"delta.columnMapping.mode": "name"})
    check_writable(Protocol(2, 5), mapped, "file:///t")  # written with physical names
    identity = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":'
    identity += '{"delta.identity.start":1,"delta.identity.step":1}}]}'
    check_writable(Protocol(1, 6), Metadata(id="m", schema_string=identity), "file:///t")  # generated
    broken = identity.replace('"delta.identity.step":1', '"delta.identity.step":0')
    with pytest.raises(IdentityColumnError, match="DELTA_IDENTITY_COLUMNS_ILLEGAL_STEP") as caught:
        check_writable(Protocol(1, 6), Metadata(id="m", schema_string=broken), "file:///t")
    assert caught.value.column == "x"
    # invariants, CHECK constraints and generated columns are enforced by the writer
    invariant = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":'
    invariant += '{"delta.invariants":"{\\"expression\\":{\\"expression\\":\\"x > 3\\"}}"}}]}'
    check_writable(Protocol(1, 2), Metadata(id="m", schema_string=invariant), "file:///t")
    constrained = Metadata(id="m", schema_string="{}", configuration={"delta.constraints.positive": "x > 0"})
    check_writable(Protocol(1, 3), constrained, "file:///t")
    check_writable(
        Protocol(3, 7, [], ["checkConstraints", "generatedColumns", "invariants"]), constrained, "t"
    )
    # features that are declared but not used, or that need nothing from a writer, are fine
    check_writable(Protocol(1, 4), plain, "file:///t")
    check_writable(Protocol(2, 5), plain, "file:///t")
    check_writable(
        Protocol(3, 7, ["deletionVectors"], ["deletionVectors", "columnMapping", "checkConstraints"]),
        plain,
        "t",
    )


# -- writing tables -------------------------------------------------------------------------------------
def test_first_write_creates_the_table(tmp_path: Path) -> None:
    data = pa.table({"id": [1, 2, 3], "p": ["x", "y", "x"]})
    version = write_table(
        str(tmp_path), data, partition_by=["p"], configuration={"delta.appendOnly": "false"}
    )
    assert version == 0
    lines = commit_lines(tmp_path, 0)
    info = lines[0]["commitInfo"]
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": '["p"]'}
    assert info["isBlindAppend"] is True
    assert info["engineInfo"] == f"delta-logstores/{importlib.metadata.version('delta-logstores')}"
    assert info["operationMetrics"]["numFiles"] == "2"
    assert info["operationMetrics"]["numOutputRows"] == "3"
    actions = parse_actions(
        line.decode() for line in (tmp_path / "_delta_log" / f"{0:020d}.json").read_bytes().splitlines()
    )
    protocol, metadata, *adds = actions[1:]
    assert protocol == Protocol(1, 2)
    assert isinstance(metadata, Metadata)
    assert metadata.partition_columns == ["p"]
    assert metadata.configuration == {"delta.appendOnly": "false"}
    assert [field.name for field in metadata.schema.fields] == ["id", "p"]
    assert sorted(add.partition_values["p"] for add in adds if isinstance(add, AddFile)) == ["x", "y"]
    for add in adds:
        assert isinstance(add, AddFile) and add.data_change
        written = pq.read_table(tmp_path / add.path)
        assert written.column_names == ["id"]  # partition columns are not in the data files
        assert json.loads(add.stats)["numRecords"] == written.num_rows
        assert add.size == (tmp_path / add.path).stat().st_size


def test_append_casts_to_the_table_schema_and_checks_columns(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": pa.array([1], pa.int64()), "s": ["a"]}))
    # columns match case-insensitively and in any order; values are cast to the table's types
    assert write_table(path, pa.table({"s": ["b"], "ID": pa.array([2], pa.int32())})) == 1
    add = next(a for a in DeltaLog.for_table(path).read_version(1) if isinstance(a, AddFile))
    assert pq.read_schema(tmp_path / add.path).names == ["id", "s"]
    assert pq.read_schema(tmp_path / add.path).field("id").type == pa.int64()
    assert write_table(path, pa.table({"id": [3]})) == 2  # a missing column is written as nulls
    rows = DeltaLog.for_table(path).snapshot().to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}, {"id": 3, "s": None}]
    with pytest.raises(SchemaMismatchError) as mismatch:
        write_table(path, pa.table({"id": [3], "t": ["c"]}))
    message = str(mismatch.value)
    assert message.startswith(
        "[_LEGACY_ERROR_TEMP_DELTA_0007] A schema mismatch detected when writing to the Delta table "
        "(Table ID: "
    )
    assert (
        "Table schema:\nroot\n |-- id: long (nullable = true)\n |-- s: string (nullable = true)\n" in message
    )
    assert (
        "Data schema:\nroot\n |-- id: long (nullable = true)\n |-- t: string (nullable = true)\n" in message
    )
    with pytest.raises(
        SchemaMismatchError,
        match=r"Partition columns do not match the partition columns of the table.\nGiven: \[s\]",
    ):
        write_table(path, pa.table({"id": [3], "s": ["c"]}), partition_by=["s"])
    with pytest.raises(ValueError, match="mode must be one of error, append, overwrite, ignore"):
        write_table(path, pa.table({"id": [3], "s": ["c"]}), mode="upsert")
    assert DeltaLog.for_table(path).latest_version() == 2


def test_overwrite_removes_every_current_file(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    before = {add.path for add in DeltaLog.for_table(path).snapshot().files()}
    assert write_table(path, pa.table({"id": [3], "p": ["c"]}), mode="overwrite") == 1
    actions = DeltaLog.for_table(path).read_version(1)
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    assert {r.path for r in removes} == before
    assert all(r.data_change and r.extended_file_metadata and r.deletion_timestamp for r in removes)
    info = commit_lines(tmp_path, 1)[0]["commitInfo"]
    assert info["operationParameters"]["mode"] == "Overwrite"
    assert info["isBlindAppend"] is False
    assert info["readVersion"] == 0
    snapshot = DeltaLog.for_table(path).snapshot()
    assert [add.partition_values for add in snapshot.files()] == [{"p": "c"}]


def test_delete_files_removes_whole_files(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1, 2, 3], "p": ["a", "b", "c"]}), partition_by=["p"])
    files = {add.partition_values["p"]: add for add in DeltaLog.for_table(path).snapshot().files()}
    absolute = f"file://{tmp_path}/{files['b'].path}"
    assert delete_files(path, [files["a"].path, absolute]) == 1
    remaining = DeltaLog.for_table(path).snapshot().files()
    assert [add.partition_values["p"] for add in remaining] == ["c"]
    info = commit_lines(tmp_path, 1)[0]["commitInfo"]
    assert info["operation"] == "DELETE"
    assert info["operationMetrics"] == {"numRemovedFiles": "2"}
    with pytest.raises(
        ValueError, match=r"Not active files of table .* at version 1: \['p=a/nope.parquet'\]"
    ):
        delete_files(path, ["p=a/nope.parquet"])
    with pytest.raises(TableNotFoundError):
        delete_files(str(tmp_path / "missing"), ["x"])


def test_append_only_tables_refuse_removals(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1]}), configuration={"delta.appendOnly": "true"})
    add = DeltaLog.for_table(path).snapshot().files()[0]
    with pytest.raises(AppendOnlyTableError) as info:
        delete_files(path, [add.path])
    assert str(info.value) == (
        "[DELTA_CANNOT_MODIFY_APPEND_ONLY] This table is configured to only allow appends. If you would like "
        f"to permit updates or deletes, use 'ALTER TABLE file://{path} SET TBLPROPERTIES "
        "(delta.appendOnly=false)'."
    )
    with pytest.raises(AppendOnlyTableError, match="only allow appends"):
        write_table(path, pa.table({"id": [2]}), mode="overwrite")
    assert [p.name for p in tmp_path.glob("*.parquet")] == [add.path]  # refused before writing data


def test_change_data_feed_configuration(tmp_path: Path) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1]}), configuration={"delta.enableChangeDataFeed": "true"})
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.metadata.configuration == {"delta.enableChangeDataFeed": "true"}
    assert snapshot.protocol == Protocol(1, 4)


def test_write_to_memory_store() -> None:
    path = f"memory://write-{uuid.uuid4().hex}/t"
    assert write_table(path, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"]) == 0
    assert write_table(path, pa.table({"id": [3], "p": ["a"]})) == 1
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.version == 1
    assert sorted(add.partition_values["p"] for add in snapshot.files()) == ["a", "a", "b"]


def test_max_rows_per_file_splits_data(tmp_path: Path) -> None:
    write_table(str(tmp_path), pa.table({"id": list(range(10))}), max_rows_per_file=4)
    files = DeltaLog.for_table(str(tmp_path)).snapshot().files()
    assert sorted(json.loads(add.stats)["numRecords"] for add in files) == [2, 4, 4]
