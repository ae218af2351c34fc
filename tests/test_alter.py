"""Changing a table's properties, protocol, columns and CHECK constraints (``DeltaTable.alter``), as
Delta commits them; the protocols checked against what Delta and Databricks wrote; write options
that would change a property."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable
from deltalake import TableFeatures
from deltalake.schema import Field, PrimitiveType

from replay import ConcurrentAppendException, DeltaLog, DeltaTable, Protocol, write_table
from replay.maintenance.alter_columns import ColumnChangeError
from replay.maintenance.alter_constraints import ConstraintError, add_constraint
from replay.maintenance.alter_properties import set_table_properties
from replay.protocol.errors import UnsupportedTableFeatureError
from replay.protocol.schema import PrimitiveType as DeltaPrimitive
from replay.protocol.schema import StructField, StructType
from replay.protocol.sql_predicate import PredicateError
from replay.protocol.table_features import InvalidTableFeatureError
from replay.protocol.table_properties import InvalidTablePropertyError, UnknownTablePropertyError
from replay.txn.write_plan import InvalidWriteOptionError

LEGACY = ["appendOnly", "invariants"]


def table_at(tmp_path: Path, rows: list[int] | None = None, **configuration: str) -> DeltaTable:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": rows or [1, 2, 3]}), configuration=configuration or None)
    return DeltaTable(uri)


def golden_prefix(golden_root: Path, name: str, tmp_path: Path, last_version: int) -> str:
    """A copy of golden table ``name`` with its commits up to ``last_version`` only."""
    target = tmp_path / name.replace("/", "_")
    shutil.copytree(golden_root / name / "delta", target)
    for file in (target / "_delta_log").iterdir():
        version = file.name.split(".")[0]
        if not version.isdigit() or int(version) > last_version:
            shutil.rmtree(file) if file.is_dir() else file.unlink()
    return str(target)


# -- properties -------------------------------------------------------------------------------------
def test_turning_on_the_change_feed_of_an_existing_table(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    table.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert table.version() == 1
    assert table.protocol() == Protocol(1, 4)
    assert table.metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    entry = table.history(1)[0]
    assert entry["operation"] == "SET TBLPROPERTIES"
    assert entry["operationParameters"] == {"properties": '{"delta.enableChangeDataFeed":"true"}'}
    assert entry["isBlindAppend"] is True and entry["isolationLevel"] == "Serializable"
    write_table(table.table_uri, pa.table({"a": [4]}))
    changes = table.load_cdf(1)
    assert changes["a"].to_pylist() == [4] and changes["_change_type"].to_pylist() == ["insert"]
    rust = RustTable(table.table_uri)  # delta-rs agrees on the protocol and reads the feed
    assert (rust.protocol().min_reader_version, rust.protocol().min_writer_version) == (1, 4)
    assert pa.table(rust.load_cdf(2).read_all())["a"].to_pylist() == [4]


def test_same_protocol_as_delta_rs(tmp_path: Path) -> None:
    # (enabling deletion vectors is checked against Delta's own commit below: deltalake 1.6.6 adds
    # variantType with it)
    for properties in ({"delta.enableChangeDataFeed": "true"}, {"delta.appendOnly": "true"}):
        ours = table_at(tmp_path / "ours" / str(len(str(properties))))
        theirs_path = tmp_path / "theirs" / str(len(str(properties)))
        shutil.copytree(Path(ours.table_uri.removeprefix("file://")), theirs_path)
        ours.alter.set_table_properties(properties)
        rust = RustTable(str(theirs_path))
        rust.alter.set_table_properties(properties)
        expected = rust.protocol()
        assert (ours.protocol().min_reader_version, ours.protocol().min_writer_version) == (
            expected.min_reader_version,
            expected.min_writer_version,
        )
        assert set(ours.protocol().reader_features or ()) == set(expected.reader_features or ())
        assert set(ours.protocol().writer_features or ()) >= set(expected.writer_features or ())


def test_protocols_match_what_delta_committed(golden_root: Path, tmp_path: Path) -> None:
    """Databricks' ALTERs of ``table_with_deletion_logs`` and Delta's ADD CONSTRAINT of
    ``check_constraints``, replayed on copies of their earlier versions."""
    name = "delta-rs/table_with_deletion_logs"
    expected = {v: DeltaLog.for_table(str(golden_root / name / "delta")).snapshot(v).protocol for v in (1, 2)}
    table = DeltaTable(golden_prefix(golden_root, name, tmp_path, 0))
    table.alter.set_table_properties({"delta.minReaderVersion": "3", "delta.minWriterVersion": "7"})
    assert table.protocol() == expected[1] == Protocol(3, 7, [], LEGACY)
    assert "delta.minReaderVersion" not in table.metadata().configuration
    table.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    assert table.protocol().reader_features == expected[2].reader_features == ["deletionVectors"]
    assert set(table.protocol().writer_features or ()) == set(expected[2].writer_features or ())

    name = "dat/check_constraints"
    golden = DeltaLog.for_table(str(golden_root / name / "delta")).snapshot(2)
    table = DeltaTable(golden_prefix(golden_root, name, tmp_path, 1))
    table.alter.add_constraint({"const1": "int > 0"})
    assert table.protocol() == golden.protocol
    assert table.metadata().configuration == golden.metadata.configuration
    entry = table.history(1)[0]
    assert entry["operationParameters"] == {"name": "const1", "expr": "int > 0"}
    assert (entry["isolationLevel"], entry["isBlindAppend"]) == ("Serializable", False)  # as Delta wrote
    with pytest.raises(ConstraintError, match=r"^\[DELTA_CONSTRAINT_ALREADY_EXISTS\] Constraint 'CONST1'"):
        table.alter.add_constraint({"CONST1": "int > 1"})


def test_keys_and_values_are_checked(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    with pytest.raises(
        UnknownTablePropertyError, match=r"^\[DELTA_UNKNOWN_CONFIGURATION\].*delta\.enableCDF"
    ):
        table.alter.set_table_properties({"delta.enableCDF": "true"})
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.checkpointInterval"):
        table.alter.set_table_properties({"delta.checkpointInterval": "-1"})
    with pytest.raises(InvalidTablePropertyError, match=r"^\[DELTA_ADD_CONSTRAINTS\]"):
        table.alter.set_table_properties({"delta.constraints.x": "a > 0"})
    with pytest.raises(UnsupportedTableFeatureError, match="from 'none' to 'id'"):
        table.alter.set_table_properties({"delta.columnMapping.mode": "id"})  # only "name" may be turned on
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.checkpointInterval"):  # before any backfill
        table.alter.set_table_properties({"delta.enableRowTracking": "true", "delta.checkpointInterval": "0"})
    assert table.version() == 0  # nothing was committed
    table.alter.set_table_properties({"delta.custom": "1"}, raise_if_not_exists=False)
    table.alter.set_table_properties({"delta.enablechangedatafeed": "true", "owner": "me", "comment": "hi"})
    assert table.metadata().configuration == {
        "delta.custom": "1",
        "delta.enableChangeDataFeed": "true",
        "owner": "me",
    }
    assert table.metadata().description == "hi"
    allowed = {"spark.databricks.delta.allowArbitraryProperties.enabled": "true"}
    DeltaTable(table.table_uri, conf=allowed).alter.set_table_properties({"delta.other": "2"})


def test_features_and_protocol_versions(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    with pytest.raises(InvalidTableFeatureError, match="allow_protocol_versions_increase=True"):
        table.alter.add_feature(TableFeatures.DeletionVectors)
    table.alter.add_feature(TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True)
    assert table.protocol() == Protocol(1, 7, None, [*LEGACY, "changeDataFeed"])
    assert table.history(1)[0]["operationParameters"] == {
        "properties": '{"delta.feature.changeDataFeed":"supported"}'
    }
    table.alter.add_feature("inCommitTimestamp")  # already at writer 7: no versions raised
    table.alter.add_feature(["deletionVectors", TableFeatures.TimestampWithoutTimezone], True)
    assert table.protocol() == Protocol(
        3,
        7,
        ["timestampNtz", "deletionVectors"],
        [*LEGACY, "changeDataFeed", "inCommitTimestamp", "timestampNtz", "deletionVectors"],
    )
    with pytest.raises(InvalidTableFeatureError, match="DELTA_UNSUPPORTED_FEATURE_STATUS"):
        table.alter.set_table_properties({"delta.feature.appendOnly": "disabled"})
    with pytest.raises(InvalidTableFeatureError, match="DELTA_INVALID_PROTOCOL_DOWNGRADE"):
        table.alter.set_table_properties({"delta.minWriterVersion": "4"})
    with pytest.raises(InvalidTableFeatureError, match="DELTA_PROTOCOL_PROPERTY_NOT_INT"):
        table.alter.set_table_properties({"delta.minWriterVersion": "seven"})
    legacy = table_at(tmp_path / "legacy")
    legacy.alter.upgrade_protocol(1, 4)
    assert legacy.protocol() == Protocol(1, 4)
    entry = legacy.history(1)[0]
    assert entry["operation"] == "UPGRADE PROTOCOL"
    assert entry["operationParameters"]["newProtocol"] == (
        '{"minReaderVersion":1,"minWriterVersion":4,"readerFeatures":null,"writerFeatures":null}'
    )


def test_unset(tmp_path: Path) -> None:
    table = table_at(tmp_path, **{"delta.appendOnly": "true", "owner": "me"})
    table.alter.unset_table_properties(["delta.appendonly"])
    assert table.metadata().configuration == {"owner": "me"}
    entry = table.history(1)[0]
    assert entry["operation"] == "UNSET TBLPROPERTIES"
    assert entry["operationParameters"] == {"properties": '["delta.appendonly"]', "ifExists": "false"}
    with pytest.raises(
        InvalidTablePropertyError, match=r"^\[DELTA_UNSET_NON_EXISTENT_PROPERTY\] .*'missing'"
    ):
        table.alter.unset_table_properties(["missing"])
    table.alter.unset_table_properties(["missing", "owner"], raise_if_not_exists=False)
    assert table.metadata().configuration == {}
    assert table.protocol() == Protocol(1, 2)  # never downgraded by unsetting


def test_in_commit_timestamps_start_where_they_are_enabled(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    write_table(table.table_uri, pa.table({"a": [4]}))
    table.alter.set_table_properties({"delta.enableInCommitTimestamps": "true"})
    configuration = table.metadata().configuration
    assert configuration["delta.inCommitTimestampEnablementVersion"] == "2"
    info = DeltaLog.for_table(table.table_uri).read_version(2)[0]
    assert configuration["delta.inCommitTimestampEnablementTimestamp"] == str(info.in_commit_timestamp)
    assert table.protocol() == Protocol(1, 7, None, [*LEGACY, "inCommitTimestamp"])
    write_table(table.table_uri, pa.table({"a": [5]}))
    log = DeltaLog.for_table(table.table_uri)
    assert log.read_version(3)[0].in_commit_timestamp is not None
    records = log.commit_records()
    assert [r.version for r in records] == [0, 1, 2, 3]
    assert records[2].timestamp == info.in_commit_timestamp
    assert sorted(RustTable(table.table_uri).to_pyarrow_table()["a"].to_pylist()) == [1, 2, 3, 4, 5]


# -- columns ------------------------------------------------------------------------------------------
def test_add_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1], "s": pa.array([{"x": 1}], pa.struct([("x", pa.int64())]))}))
    table = DeltaTable(uri)
    table.alter.add_columns(
        [
            Field("b", PrimitiveType("integer")),
            pa.field("t", pa.timestamp("us")),
            StructField("s", StructType([StructField("y", DeltaPrimitive("string"))])),
        ]
    )
    schema = table.schema()
    assert schema.field_names == ["a", "s", "b", "t"]
    assert schema.field("s").type == StructType(
        [StructField("x", DeltaPrimitive("long")), StructField("y", DeltaPrimitive("string"))]
    )
    assert table.protocol().reader_features == ["timestampNtz"]  # the timestamp_ntz column
    entry = table.history(1)[0]
    assert entry["operation"] == "ADD COLUMNS"
    assert '"name":"s.y","type":"string"' in entry["operationParameters"]["columns"]
    rows = table.to_pyarrow_table()
    assert rows["b"].to_pylist() == [None] and rows["s"].to_pylist() == [{"x": 1, "y": None}]
    write_table(uri, pa.table({"a": [2], "b": pa.array([7], pa.int32())}))
    assert sorted(DeltaTable(uri).to_pyarrow_table()["b"].to_pylist(), key=str) == [7, None]
    with pytest.raises(ColumnChangeError, match=r"^\[FIELD_ALREADY_EXISTS\] .*`B` already exists"):
        table.alter.add_columns(Field("B", PrimitiveType("long")))
    with pytest.raises(ColumnChangeError, match=r"NOT NULL in ALTER TABLE ADD COLUMNS.*column c"):
        table.alter.add_columns(pa.field("c", pa.int64(), nullable=False))
    assert sorted(RustTable(uri).to_pyarrow_table()["a"].to_pylist()) == [1, 2]


def test_column_metadata_name_and_description(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    table.alter.set_column_metadata("A", {"comment": "the value"})
    assert table.schema().field("a").metadata == {"comment": "the value"}
    assert table.history(1)[0]["operation"] == "CHANGE COLUMN"
    with pytest.raises(ColumnChangeError, match=r"^\[DELTA_COLUMN_NOT_FOUND\] .*`zz`"):
        table.alter.set_column_metadata("zz", {"comment": "x"})
    with pytest.raises(ColumnChangeError, match=r"delta\.identity\.start"):
        table.alter.set_column_metadata("a", {"delta.identity.start": 1})
    table.alter.set_table_name("numbers")
    table.alter.set_table_description("some numbers")
    assert (table.metadata().name, table.metadata().description) == ("numbers", "some numbers")
    rust = RustTable(table.table_uri).metadata()
    assert (rust.name, rust.description) == ("numbers", "some numbers")


# -- constraints ------------------------------------------------------------------------------------
def test_constraints(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1, 2, 3, None], "b": ["x", "y", "z", "w"]}))
    table = DeltaTable(uri)
    with pytest.raises(ConstraintError) as caught:
        table.alter.add_constraint({"big": "a > 1"})
    assert str(caught.value).startswith(
        f"[DELTA_NEW_CHECK_CONSTRAINT_VIOLATION] 2 rows in file://{uri} violate the new CHECK constraint "
        "(a > 1) (constraint big)"
    )  # a null is a violation too, as in Delta
    assert (caught.value.violations, caught.value.constraint) == (2, "big")
    with pytest.raises(PredicateError, match="'nope'"):
        table.alter.add_constraint({"c": "nope > 1"})
    assert table.version() == 0
    table.alter.add_constraint({"Pos": "a > 0 OR a IS NULL", "named": "b IN ('x', 'y', 'z', 'w')"})
    assert table.version() == 2
    assert table.protocol() == Protocol(1, 3)
    assert table.metadata().configuration == {
        "delta.constraints.pos": "a > 0 OR a IS NULL",
        "delta.constraints.named": "b IN ('x', 'y', 'z', 'w')",
    }
    table.alter.drop_constraint("POS")
    assert list(table.metadata().configuration) == ["delta.constraints.named"]
    assert table.history(1)[0]["operationParameters"] == {
        "name": "POS",
        "expr": "a > 0 OR a IS NULL",
        "existed": "true",
    }
    with pytest.raises(
        ConstraintError, match=r"^\[DELTA_CONSTRAINT_DOES_NOT_EXIST\] .*nonexistent constraint pos"
    ):
        table.alter.drop_constraint("pos")
    table.alter.drop_constraint("pos", raise_if_not_exists=False)
    assert table.history(1)[0]["operationParameters"] == {"name": "pos", "existed": "false"}


def test_a_constraint_conflicts_with_a_concurrent_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1, 2]}))
    log = DeltaLog.for_table(uri)
    stale = log.update()
    write_table(uri, pa.table({"a": [-1]}))  # would violate it, lands first
    with pytest.raises(ConcurrentAppendException):
        add_constraint(log.io, stale, "positive", "a > 0")
    # a property change reads no data: it commits after the append
    assert set_table_properties(log.io, stale, {"owner": "me"}) == 2


# -- write options ------------------------------------------------------------------------------------
def test_a_write_option_never_changes_an_existing_table_silently(tmp_path: Path) -> None:
    table = table_at(tmp_path)
    with pytest.raises(InvalidWriteOptionError) as caught:
        write_table(
            table.table_uri, pa.table({"a": [4]}), configuration={"delta.enableChangeDataFeed": "true"}
        )
    message = str(caught.value)
    assert message.startswith(
        f"Cannot change table property delta.enableChangeDataFeed of existing table {table.table_uri}"
    )
    assert "alter.set_table_properties({'delta.enableChangeDataFeed': 'true'})" in message
    assert DeltaTable(table.table_uri).version() == 0
    # the same values (or a property's default) change nothing, and are fine
    cdf = table_at(tmp_path / "cdf", **{"delta.enableChangeDataFeed": "true"})
    write_table(cdf.table_uri, pa.table({"a": [4]}), configuration={"delta.enablechangedatafeed": "TRUE"})
    write_table(cdf.table_uri, pa.table({"a": [5]}), configuration={"delta.appendOnly": "false"})
    assert DeltaTable(cdf.table_uri).version() == 2
