"""``write_table`` takes what deltalake's ``write_deltalake`` takes, with its modes and type rules.

pandas DataFrames and ``RecordBatchReader`` streams, the modes ``error`` and ``ignore``, and
unsigned integers (stored as the signed type of the same width), each checked against deltalake.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from replay import ConcurrentModificationError, DeltaLog, TableAlreadyExistsError, write_table
from replay.txn import write
from replay.txn.write_plan import InvalidWriteOptionError


def rows(uri: str) -> pa.Table:
    return DeltaLog(uri).snapshot().to_arrow()


def delta_rs_schema(path: Path) -> pa.Schema:
    return pa.schema(DeltaTable(str(path)).schema().to_arrow())


def our_schema(path: Path) -> pa.Schema:
    return DeltaLog(str(path)).snapshot().metadata.schema.to_arrow()


# -- inputs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame({"x": [1, 2, 3], "s": ["a", "b", None]}),  # RangeIndex: dropped
        pd.DataFrame({"x": [1, 2, 3], "s": ["a", "b", None]}, index=[10, 20, 30]),  # becomes a column
        pd.DataFrame({"x": [1, 2, 3], "s": ["a", "b", None]}).set_index("s"),  # named index: a column
    ],
    ids=["range-index", "unnamed-index", "named-index"],
)
def test_a_pandas_dataframe_is_written_as_deltalake_writes_it(tmp_path: Path, frame: pd.DataFrame) -> None:
    write_deltalake(str(tmp_path / "theirs"), frame)
    assert write_table(str(tmp_path / "ours"), frame) == 0
    assert our_schema(tmp_path / "ours").names == delta_rs_schema(tmp_path / "theirs").names
    ours = rows(str(tmp_path / "ours")).sort_by("x")
    theirs = pa.table(DeltaTable(str(tmp_path / "theirs")).to_pyarrow_table()).sort_by("x")
    assert ours.to_pylist() == theirs.cast(ours.schema).to_pylist()


def test_a_record_batch_reader_is_streamed_into_one_commit(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    consumed: list[int] = []

    def batches():  # a generator: the reader never holds the data whole
        for index in range(5):
            consumed.append(index)
            yield pa.record_batch([[index * 10, index * 10 + 1], ["a", "b"]], schema=schema)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    assert write_table(str(tmp_path), reader, partition_by=["part"]) == 0
    assert consumed == [0, 1, 2, 3, 4]
    assert sorted(rows(str(tmp_path)).column("id").to_pylist()) == [0, 1, 10, 11, 20, 21, 30, 31, 40, 41]
    assert DeltaLog(str(tmp_path)).snapshot().num_files == 2
    assert sorted(pa.table(DeltaTable(str(tmp_path)).to_pyarrow_table()).column("id").to_pylist()) == [
        0,
        1,
        10,
        11,
        20,
        21,
        30,
        31,
        40,
        41,
    ]


def test_a_record_batch_and_an_arrow_stream_object(tmp_path: Path) -> None:
    batch = pa.record_batch([[1, 2]], names=["id"])

    class ArrowStream:  # any producer of the Arrow C stream interface (polars, DuckDB, ...)
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return pa.table({"id": [3]}).__arrow_c_stream__(requested_schema)

    write_table(str(tmp_path), batch)
    write_table(str(tmp_path), ArrowStream())
    assert sorted(rows(str(tmp_path)).column("id").to_pylist()) == [1, 2, 3]


def test_other_inputs_are_refused_naming_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError, match=r"pyarrow Table, RecordBatch or RecordBatchReader.*not builtins\.dict"
    ):
        write_table(str(tmp_path), {"id": [1]})
    assert not (tmp_path / "_delta_log").exists()


# -- modes -----------------------------------------------------------------------------------------
def test_mode_error_creates_then_refuses_like_delta(tmp_path: Path) -> None:
    data = pa.table({"id": [1]})
    assert write_table(str(tmp_path), data, mode="error") == 0
    with pytest.raises(TableAlreadyExistsError) as caught:
        write_table(str(tmp_path), data, mode="error")
    assert str(caught.value) == (
        f"[DELTA_PATH_EXISTS] Cannot write to already existent path file://{tmp_path} without setting "
        "OVERWRITE = 'true'."
    )
    assert DeltaLog(str(tmp_path)).snapshot().version == 0
    assert len(list(tmp_path.glob("*.parquet"))) == 1  # no orphan data file
    with pytest.raises(Exception, match="already exists"):  # deltalake refuses too (its default mode)
        write_deltalake(str(tmp_path), data)


def test_mode_ignore_writes_only_a_new_table(tmp_path: Path) -> None:
    assert write_table(str(tmp_path), pa.table({"id": [1]}), mode="ignore") == 0
    assert write_table(str(tmp_path), pa.table({"id": [2]}), mode="ignore") is None
    assert rows(str(tmp_path)).column("id").to_pylist() == [1]
    write_deltalake(str(tmp_path), pa.table({"id": [3]}), mode="ignore")  # deltalake agrees
    assert DeltaLog(str(tmp_path)).snapshot().version == 0


def test_mode_ignore_loses_a_creation_race_quietly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_table(str(tmp_path), pa.table({"id": [1]}))  # the winner
    # A writer that looked before the winner committed: it sees no table and tries to create one.
    monkeypatch.setattr(write, "latest_snapshot", lambda io: None)
    assert write_table(str(tmp_path), pa.table({"id": [2]}), mode="ignore") is None
    with pytest.raises(ConcurrentModificationError, match="ProtocolChangedException"):
        write_table(str(tmp_path), pa.table({"id": [3]}), mode="error")  # Delta's error for "error"
    assert rows(str(tmp_path)).column("id").to_pylist() == [1]
    assert len(list(tmp_path.glob("*.parquet"))) == 1  # the losers removed their data files


def test_an_unknown_mode_lists_the_four(tmp_path: Path) -> None:
    with pytest.raises(InvalidWriteOptionError, match="mode must be one of error, append, overwrite, ignore"):
        write_table(str(tmp_path), pa.table({"id": [1]}), mode="upsert")


# -- unsigned integers -----------------------------------------------------------------------------
def test_unsigned_integers_are_stored_as_deltalake_stores_them(tmp_path: Path) -> None:
    data = pa.table(
        {
            "u8": pa.array([1, 127], pa.uint8()),
            "u16": pa.array([1, 2**15 - 1], pa.uint16()),
            "u32": pa.array([1, 2**31 - 1], pa.uint32()),
            "u64": pa.array([1, 2**63 - 1], pa.uint64()),
            "nested": pa.array([[1], [2, 3]], pa.list_(pa.uint8())),
            "struct": pa.array([{"n": 1}, {"n": 2}], pa.struct([("n", pa.uint16())])),
        }
    )
    write_deltalake(str(tmp_path / "theirs"), data)
    write_table(str(tmp_path / "ours"), data)
    theirs = delta_rs_schema(tmp_path / "theirs")
    ours = our_schema(tmp_path / "ours")
    for name in ("u8", "u16", "u32", "u64"):
        assert ours.field(name).type == theirs.field(name).type, name
    assert ours.field("nested").type.value_type == pa.int8()
    assert ours.field("struct").type.field("n").type == pa.int16()
    assert rows(str(tmp_path / "ours")).column("u64").to_pylist() == [1, 2**63 - 1]


def test_an_unsigned_value_out_of_range_fails_naming_the_column(tmp_path: Path) -> None:
    data = pa.table({"fine": [1, 2], "big": pa.array([1, 200], pa.uint8())})
    with pytest.raises(ValueError, match=r"Column big cannot be written .* as int8"):
        write_table(str(tmp_path / "ours"), data)
    assert not list(tmp_path.rglob("*.parquet"))
    with pytest.raises(Exception, match="Can't cast value 200 to type Int8"):  # deltalake fails too
        write_deltalake(str(tmp_path / "theirs"), data)


def test_a_type_delta_lacks_fails_naming_the_column(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Column t \(time64\[us\]\) cannot be written to a Delta table"):
        write_table(str(tmp_path), pa.table({"id": [1], "t": pa.array([1], pa.time64("us"))}))
