"""Reading table data: golden tables' expected rows, partition values, column mapping, DVs, errors."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.data import (
    CorruptDataFileError,
    DataFileNotFoundError,
    TableReader,
    conform_column,
    constant_array,
    parse_partition_value,
    partition_value_array,
    read_files,
)
from replay.data.columns import FieldFinder
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata
from replay.protocol.predicates import InvalidFilterError
from replay.protocol.schema import PrimitiveType, StructField, parse_schema
from replay.txn.write import write_table
from tests.paths import GOLDEN_ROOT as GOLDEN

DAT_CASES = sorted(
    (case.name, version.name)
    for case in (GOLDEN / "dat").iterdir()
    if (case / "expected").is_dir()
    for version in (case / "expected").iterdir()
)
SPARK_GOLDEN_CASES = sorted(
    case.name for case in (GOLDEN / "delta-spark-golden").iterdir() if (case / "expected").is_dir()
)
TIMESTAMP_DISPUTED = "data-reader-partition-values"
"""Spark wrote its ``as_timestamp`` partition value in the writer's local time zone; the protocol
(and this library, like Delta Kernel) reads a zone-less partition timestamp as UTC."""


def rows(table: pa.Table, columns: list[str] | None = None) -> list[str]:
    """The rows of ``table`` as a sorted list of reprs (an order-free multiset)."""
    names = columns if columns is not None else sorted(table.column_names)
    return sorted(repr(row) for row in table.select(names).to_pylist(maps_as_pydicts="strict"))


def expected_table(folder: Path, schema: pa.Schema) -> pa.Table:
    parts = [pq.read_table(part) for part in sorted(folder.glob("*.parquet"))]
    table = pa.concat_tables(parts, promote_options="permissive")
    return pa.table({name: table.column(name).cast(schema.field(name).type) for name in schema.names})


@pytest.mark.parametrize(("case", "version"), DAT_CASES, ids=[f"{c}-{v}" for c, v in DAT_CASES])
def test_dat_table_content(case: str, version: str) -> None:
    delta_log = DeltaLog.for_table(str(GOLDEN / "dat" / case / "delta"))
    snapshot = delta_log.snapshot(None if version == "latest" else int(version[1:]))
    got = snapshot.to_arrow()
    expected = expected_table(GOLDEN / "dat" / case / "expected" / version / "table_content", got.schema)
    assert got.schema.names == snapshot.schema.field_names
    assert rows(got) == rows(expected)


@pytest.mark.parametrize("case", SPARK_GOLDEN_CASES)
def test_spark_golden_table_content(case: str) -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN / "delta-spark-golden" / case / "delta")).snapshot()
    got = snapshot.to_arrow()
    expected = expected_table(GOLDEN / "delta-spark-golden" / case / "expected", got.schema)
    if case == TIMESTAMP_DISPUTED:
        utc = dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)
        assert [value for value in got.column("as_timestamp").to_pylist() if value] == [utc, utc]
        kept = [name for name in got.column_names if name != "as_timestamp"]
        assert rows(got, sorted(kept)) == rows(expected, sorted(kept))
        return
    assert rows(got) == rows(expected)


def test_columns_are_selected_in_the_order_asked() -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN / "dat/basic_partitioned/delta")).snapshot()
    got = snapshot.to_arrow(columns=["number", "letter"])
    assert got.column_names == ["number", "letter"]
    assert sorted(got.to_pylist(), key=lambda r: r["number"]) == [
        {"number": n, "letter": letter}
        for n, letter in [(1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "e"), (6, "f")]
    ]
    with pytest.raises(InvalidFilterError, match=r"columns \['nope'\] are not columns"):
        snapshot.to_arrow(columns=["nope"])


def test_deletion_vectors_are_applied() -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN / "dat/deletion_vectors/delta")).snapshot()
    (add,) = snapshot.files()
    reader = TableReader.for_metadata(snapshot.table_path, snapshot.metadata, snapshot.protocol)
    everything = reader.read_file(add, row_filter=False)
    assert everything.num_rows == 5
    assert reader.read_file(add).to_pylist() == [everything.to_pylist()[1]]


def test_column_mapping_id_mode_matches_parquet_field_ids(tmp_path: Path) -> None:
    schema_string = (
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":'
        '{"delta.columnMapping.id":5,"delta.columnMapping.physicalName":"col-a"}}]}'
    )
    field = pa.field("renamed-in-file", pa.int64(), metadata={b"PARQUET:field_id": b"5"})
    pq.write_table(pa.table({"renamed-in-file": [1, 2]}, schema=pa.schema([field])), tmp_path / "f.parquet")
    add = AddFile(path="f.parquet", size=1)
    for mode, expected in (("id", [1, 2]), ("name", [None, None])):
        metadata = Metadata(
            id="t", schema_string=schema_string, configuration={"delta.columnMapping.mode": mode}
        )
        got = read_files([add], table_path=str(tmp_path), metadata=metadata)
        assert got.column("a").to_pylist() == expected


def test_missing_data_file_names_the_file(tmp_path: Path) -> None:
    table = tmp_path / "t"
    shutil.copytree(GOLDEN / "dat/basic_append/delta", table)
    snapshot = DeltaLog.for_table(str(table)).snapshot()
    victim = snapshot.files()[0]
    (table / victim.path).unlink()
    with pytest.raises(DataFileNotFoundError, match=f"Data file file://{table}/{victim.path} of table"):
        snapshot.to_arrow()
    reader = TableReader.for_metadata(snapshot.table_path, snapshot.metadata)
    assert reader.read_files([victim], ignore_missing=True).num_rows == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated", "damaged-pages"])
def test_unreadable_data_file_is_a_typed_error_naming_it(tmp_path: Path, damage: str) -> None:
    table = tmp_path / "t"
    rows = pa.table({"id": list(range(20000)), "s": [f"value-{i}" for i in range(20000)]})
    write_table(str(table), rows, max_rows_per_file=10000)
    snapshot = DeltaLog.for_table(str(table)).snapshot()
    assert len(snapshot.files()) == 2  # local files are scanned together as one dataset
    victim = table / snapshot.files()[0].path
    data = bytearray(victim.read_bytes())
    if damage == "garbage":
        data = bytearray(b"not a parquet file at all")
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:  # the footer is intact, the first page is not: the failure comes while decoding
        data[20:400] = b"\xab" * 380
    victim.write_bytes(bytes(data))
    message = f"Data file file://{victim} of table file://{table} cannot be read as Parquet: "
    with pytest.raises(CorruptDataFileError, match=re.escape(message)) as info:
        snapshot.to_arrow()
    assert info.value.path == f"file://{victim}"
    reader = TableReader.for_metadata(snapshot.table_path, snapshot.metadata)
    with pytest.raises(CorruptDataFileError, match=re.escape(message)):
        reader.read_file(snapshot.files()[0])


def test_reads_through_a_non_local_filesystem() -> None:
    """``memory://`` goes through fsspec's byte path (the one object stores use)."""
    memory = fsspec.filesystem("memory")
    root = "/data-test-table"
    memory.put(str(GOLDEN / "dat/multi_partitioned/delta"), root, recursive=True)
    try:
        snapshot = DeltaLog.for_table(f"memory://{root}").snapshot()
        expected = DeltaLog.for_table(str(GOLDEN / "dat/multi_partitioned/delta")).snapshot().to_arrow()
        assert rows(snapshot.to_arrow()) == rows(expected)
    finally:
        memory.rm(root, recursive=True)


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        ("42", "integer", 42),
        ("-7", "long", -7),
        ("3", "byte", 3),
        ("1.5", "double", 1.5),
        ("true", "boolean", True),
        ("FALSE", "boolean", False),
        ("2021-09-08", "date", dt.date(2021, 9, 8)),
        ("2021-09-08 11:11:11", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)),
        ("2024-01-01T10:00:00.000000Z", "timestamp", dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)),
        ("2021-09-08 11:11:11.123456", "timestamp_ntz", dt.datetime(2021, 9, 8, 11, 11, 11, 123456)),
        ("1.23", "decimal(5,2)", Decimal("1.23")),
        ("abc", "binary", b"abc"),
        ("", "string", ""),
        ("", "integer", None),
        (None, "string", None),
    ],
)
def test_partition_value_parsing(value: str | None, type_name: str, expected: Any) -> None:
    assert parse_partition_value(value, PrimitiveType(type_name)) == expected


def test_invalid_partition_value_names_value_and_type() -> None:
    with pytest.raises(ValueError, match="Cannot parse partition value 'x1' as integer"):
        parse_partition_value("x1", PrimitiveType("integer"))
    with pytest.raises(ValueError, match="Cannot parse partition value 'yes' as boolean"):
        parse_partition_value("yes", PrimitiveType("boolean"))


def test_partition_value_array_types() -> None:
    array = partition_value_array("2021-09-08 11:11:11", PrimitiveType("timestamp"), 2)
    assert array.type == pa.timestamp("us", tz="UTC")
    assert array.to_pylist() == [dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)] * 2
    assert partition_value_array(None, PrimitiveType("long"), 3).to_pylist() == [None, None, None]


def test_nested_physical_names_are_renamed() -> None:
    schema = parse_schema(
        '{"type":"struct","fields":[{"name":"s","nullable":true,"metadata":'
        '{"delta.columnMapping.physicalName":"col-1"},"type":{"type":"struct","fields":['
        '{"name":"x","type":"long","nullable":true,"metadata":{"delta.columnMapping.physicalName":"col-2"}},'
        '{"name":"gone","type":"string","nullable":true,"metadata":{"delta.columnMapping.physicalName":"col-3"}}'
        "]}}]}"
    )
    physical = pa.array([{"col-2": 1}, None, {"col-2": 3}], pa.struct([pa.field("col-2", pa.int32())]))
    got = conform_column(physical, schema.fields[0].type, "name")
    assert got.to_pylist() == [{"x": 1, "gone": None}, None, {"x": 3, "gone": None}]
    assert got.type == pa.struct([pa.field("x", pa.int64()), pa.field("gone", pa.string())])


def test_fields_are_found_by_id_then_physical_name_first_match_first() -> None:
    def mapped(name: str, field_id: int, physical: str) -> StructField:
        metadata = {"delta.columnMapping.id": field_id, "delta.columnMapping.physicalName": physical}
        return StructField(name, PrimitiveType("long"), True, metadata)

    def with_id(name: str, field_id: int | None) -> pa.Field:
        metadata = {b"PARQUET:field_id": str(field_id).encode()} if field_id is not None else None
        return pa.field(name, pa.int64(), metadata=metadata)

    file_schema = pa.schema(
        [with_id("col-a", 7), with_id("col-b", None), with_id("col-b", 9), with_id("x", 3)]
    )
    by_id, by_name, plain = (FieldFinder(file_schema, mode) for mode in ("id", "name", "none"))
    assert by_id.index(mapped("a", 3, "col-a")) == 3  # the id wins over the physical name
    assert by_id.index(mapped("b", 42, "col-b")) == 1  # an unknown id: the first of that name
    assert by_name.index(mapped("a", 3, "col-a")) == 0
    assert by_name.index(mapped("z", 1, "col-z")) is None
    assert plain.index(StructField("x", PrimitiveType("long"))) == 3
    assert plain.index(mapped("x", 7, "col-a")) == 3  # without mapping, the logical name


def test_read_files_of_an_empty_list_has_the_schema() -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN / "dat/basic_partitioned/delta")).snapshot()
    empty = read_files([], table_path=snapshot.table_path, metadata=snapshot.metadata)
    assert empty.num_rows == 0
    assert empty.schema.names == ["letter", "number", "a_float"]


def test_partition_values_keyed_by_physical_name() -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN / "delta-rs/table_with_column_mapping/delta")).snapshot()
    column = "Company Very Short"
    physical = snapshot.schema.field(column).physical_name
    assert physical != column
    add = snapshot.files()[0]
    assert physical in add.partition_values
    got = read_files([add], table_path=snapshot.table_path, metadata=snapshot.metadata, columns=[column])
    assert set(got.column(column).to_pylist()) == {add.partition_values[physical]}


def test_nanosecond_timestamps_are_truncated_to_microseconds() -> None:
    nanos = pa.array([1_000_000_001_999], pa.timestamp("ns"))
    got = conform_column(nanos, PrimitiveType("timestamp_ntz"))
    assert got.type == pa.timestamp("us")
    assert got.cast(pa.int64()).to_pylist() == [1_000_000_001]


@pytest.mark.parametrize(
    ("value", "data_type"),
    [
        ("insert", pa.string()),
        ("", pa.string()),
        ("é", pa.string()),
        (b"\x00b", pa.binary()),
        (-7, pa.int8()),
        (2**40, pa.int64()),
        (1.5, pa.float32()),
        (True, pa.bool_()),
        (dt.date(2020, 1, 2), pa.date32()),
        (1_600_000_000_000_000, pa.timestamp("us", tz="UTC")),
        (Decimal("1.23"), pa.decimal128(5, 2)),
    ],
)
def test_constant_array_equals_repeat(value: Any, data_type: pa.DataType) -> None:
    for length in (0, 1, 5):
        got = constant_array(value, data_type, length)
        got.validate(full=True)
        assert got.equals(pa.repeat(pa.scalar(value, data_type), length)), (value, length)
    assert constant_array(None, data_type, 2).equals(pa.nulls(2, data_type))


def test_read_unfiltered_equals_file_by_file_reads(tmp_path: Path) -> None:
    """Files of several physical schemas, one read twice, one missing: same tables as ``read_file``."""
    pq.write_table(
        pa.table({"a": pa.array([1, 2], pa.int32()), "s": ["x", "y"]}), tmp_path / "narrow.parquet"
    )
    wide = pa.table({"a": pa.array([3], pa.int64()), "s": pa.array(["z"], pa.string_view())})
    pq.write_table(wide, tmp_path / "views.parquet")
    pq.write_table(pa.table({"a": pa.array([4, 5, 6], pa.int64())}), tmp_path / "no-s.parquet")
    cdc = pa.table({"a": pa.array([7, 8], pa.int64()), "s": ["p", "q"], "_change_type": ["delete", "insert"]})
    pq.write_table(cdc, tmp_path / "cdc.parquet")
    schema_string = (
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}},'
        '{"name":"s","type":"string","nullable":true,"metadata":{}}]}'
    )
    reader = TableReader.for_metadata(str(tmp_path), Metadata(id="t", schema_string=schema_string))
    names = ["narrow", "views", "narrow", "no-s", "cdc", "gone"]
    files = [AddFile(path=f"{name}.parquet", size=1) for name in names]
    extra = [pa.field("_change_type", pa.string())]
    got = reader.read_unfiltered(files, extra_columns=extra, ignore_missing=True)
    expected = [
        reader.read_file(f, row_filter=False, extra_columns=extra, ignore_missing=True) for f in files
    ]
    assert [table.to_pylist() for table in got] == [table.to_pylist() for table in expected]
    assert all(table.schema == expected[0].schema for table in got)
    assert pa.concat_tables(got).to_pydict() == {
        "a": [1, 2, 3, 1, 2, 4, 5, 6, 7, 8],
        "s": ["x", "y", "z", "x", "y", None, None, None, "p", "q"],
        "_change_type": [None] * 8 + ["delete", "insert"],
    }
    with pytest.raises(DataFileNotFoundError, match=f"Data file {tmp_path}/gone.parquet of table"):
        reader.read_unfiltered(files)
