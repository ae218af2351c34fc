"""deltalake's ``DeltaTable`` methods beyond reads and row changes (``create``,
``get_add_actions``, ``partitions``, ``count``, ``transaction_version``) give what delta-rs gives
on the same table: written by delta-rs, by this library, with column mapping and with deletion
vectors."""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable
from deltalake import write_deltalake as rust_write

from replay import DeltaTable, TableAlreadyExistsError, write_deltalake, write_table

UTC = dt.UTC
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, None], pa.int64()),
        "n": pa.array([3, 4, 3, 4], pa.int32()),
        "s": pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": None}, None, {"a": 4, "b": "z"}]),
        "d": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 1), dt.date(2024, 1, 2)]),
        "ts": pa.array(
            [
                dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=UTC),
                None,
                None,
                dt.datetime(1999, 1, 1, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "name": ["x", "y", None, "w"],
    }
)


def by_path(table: object) -> pa.Table:
    return pa.table(table).sort_by("path")


@pytest.mark.parametrize("flatten", [False, True])
@pytest.mark.parametrize("writer", ["delta-rs", "ours"])
def test_add_actions_are_delta_rs_add_actions(tmp_path: Path, writer: str, flatten: bool) -> None:
    uri = str(tmp_path / "t")
    if writer == "delta-rs":
        rust_write(uri, ROWS, partition_by=["n", "d"])
    else:
        write_table(uri, ROWS, partition_by=["n", "d"], max_rows_per_file=1)
    ours = DeltaTable(uri).get_add_actions(flatten=flatten)
    assert by_path(ours).equals(by_path(RustTable(uri).get_add_actions(flatten=flatten)))
    assert ours.num_rows == len(DeltaTable(uri).files())


def test_add_actions_of_a_column_mapped_table_name_the_columns(tmp_path: Path) -> None:
    """delta-rs names the statistics of a column-mapped table by the physical names (col-<uuid>);
    the logical names are the table's, and the values are those of the same rows unmapped."""
    plain, mapped = str(tmp_path / "plain"), str(tmp_path / "mapped")
    write_table(plain, ROWS, partition_by=["n", "d"], max_rows_per_file=1)
    write_table(
        mapped,
        ROWS,
        partition_by=["n", "d"],
        max_rows_per_file=1,
        configuration={"delta.columnMapping.mode": "name"},
    )

    def content(uri: str) -> pa.Table:
        actions = (
            DeltaTable(uri)
            .get_add_actions(flatten=True)
            .drop_columns(["path", "size_bytes", "modification_time"])
        )
        return actions.sort_by([(name, "ascending") for name in actions.column_names])

    assert content(mapped).equals(content(plain))
    assert "min.s.b" in content(mapped).column_names


def test_partitions_count_and_transaction_versions_are_delta_rs_ones(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["n", "d"], txn_app_id="nightly", txn_version=7)
    ours, theirs = DeltaTable(uri), RustTable(uri)

    def as_set(partitions: list[dict[str, str | None]]) -> set[tuple[tuple[str, str | None], ...]]:
        return {tuple(sorted(p.items())) for p in partitions}

    assert as_set(ours.partitions()) == as_set(theirs.partitions())
    assert len(ours.partitions()) == 3
    assert as_set(ours.partitions([("n", "=", 3)])) == {(("d", "2024-01-01"), ("n", "3"))}
    assert ours.count() == theirs.count() == 4
    assert ours.transaction_version("nightly") == theirs.transaction_version("nightly") == 7
    assert ours.transaction_version("other") is theirs.transaction_version("other") is None


def test_count_takes_deletion_vectors_and_files_without_statistics(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, configuration={"delta.enableDeletionVectors": "true"}, max_rows_per_file=2)
    DeltaTable(uri).delete("id = 1 OR id IS NULL")
    assert DeltaTable(uri).count() == len(DeltaTable(uri).to_pyarrow_table()) == 2
    assert DeltaTable(uri).get_add_actions().column("num_records").to_pylist() == [2, 2]  # physical rows
    unstated = tmp_path / "unstated"
    write_table(str(unstated), ROWS, max_rows_per_file=3)
    first = unstated / "_delta_log" / "00000000000000000000.json"
    lines = [orjson.loads(line) for line in first.read_bytes().splitlines()]
    for line in lines:  # as writers that keep no statistics leave them
        line.get("add", {}).pop("stats", None)
    first.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    assert DeltaTable(str(unstated)).get_add_actions().column("num_records").null_count == 2
    assert DeltaTable(str(unstated)).count() == 4


def test_create_is_delta_rs_create(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", str(tmp_path / "theirs")
    schema = ROWS.schema
    shape: dict[str, Any] = {
        "partition_by": "n",
        "name": "t",
        "description": "d",
        "configuration": {"delta.logRetentionDuration": "interval 7 days"},
    }
    table = DeltaTable.create(ours, schema, **shape)
    RustTable.create(theirs, schema, **shape)
    assert table.version() == 0 and table.count() == 0
    for left, right in ((DeltaTable(ours), RustTable(str(ours))), (DeltaTable(theirs), RustTable(theirs))):
        assert left.history()[0]["operation"] == right.history()[0]["operation"] == "CREATE TABLE"
        assert (left.metadata().name, left.metadata().description) == ("t", "d")
        assert left.metadata().configuration == {"delta.logRetentionDuration": "interval 7 days"}
        assert left.partition_columns() == right.metadata().partition_columns == ["n"]
        assert left.to_pyarrow_table().schema == pa.table(right.to_pyarrow_table()).schema
    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.create(ours, schema)
    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.create(ours, schema, mode="append")
    assert DeltaTable.create(ours, schema, mode="ignore").version() == 0
    write_deltalake(ours, ROWS, mode="append")
    replaced = DeltaTable.create(ours, pa.schema([("id", pa.int64())]), mode="overwrite", name="again")
    assert replaced.history()[0]["operation"] == "CREATE OR REPLACE TABLE"
    assert replaced.to_pyarrow_table().num_rows == 0
    assert (replaced.metadata().name, replaced.schema().to_arrow().names) == ("again", ["id"])
    assert pa.table(RustTable(str(ours)).to_pyarrow_table()).num_rows == 0


def test_the_pyarrow_dataset_is_delta_rs_dataset(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["n", "d"], max_rows_per_file=1)
    ours, theirs = DeltaTable(uri).to_pyarrow_dataset(), RustTable(uri).to_pyarrow_dataset()
    assert ours.schema == theirs.schema
    assert ours.to_table().sort_by("id").equals(theirs.to_table().sort_by("id"))
    # partition values are the fragments' expressions: a filter on them skips files
    assert len(list(ours.get_fragments(filter=ds.field("n") == 4))) == 2
    assert ours.to_table(filter=ds.field("d").is_null()).column("id").to_pylist() == [2]
    assert DeltaTable(uri).to_pyarrow_dataset([("n", "=", 3)]).count_rows() == 2


@pytest.mark.parametrize(
    ("configuration", "named"),
    [
        ({"delta.enableDeletionVectors": "true"}, "deletion vectors"),
        ({"delta.columnMapping.mode": "name"}, "column mapping"),
    ],
)
def test_a_dataset_of_a_table_it_cannot_express_is_refused(
    tmp_path: Path, configuration: dict[str, str], named: str
) -> None:
    from replay import UnsupportedTableFeatureError

    uri = str(tmp_path / "t")
    write_table(uri, ROWS, configuration=configuration)
    DeltaTable(uri).delete("id = 1")
    with pytest.raises(UnsupportedTableFeatureError, match=named):
        DeltaTable(uri).to_pyarrow_dataset()
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 3


def test_deltalakes_read_arguments_select_what_delta_rs_selects(tmp_path: Path) -> None:
    import pandas as pd

    from tests.dml_cases import normalised

    uri = str(tmp_path / "t")
    write_table(uri, ROWS, partition_by=["n", "d"], configuration={"delta.enableChangeDataFeed": "true"})
    DeltaTable(uri).update({"name": "'changed'"}, predicate="id >= 2")
    ours, theirs = DeltaTable(uri), RustTable(uri)
    part = [("n", "=", 4)]
    with warnings.catch_warnings():  # delta-rs deprecates the arguments its older code passes
        warnings.simplefilter("ignore", DeprecationWarning)
        their_rows = pa.table(theirs.to_pyarrow_table(partitions=part))
        their_uris = sorted(theirs.file_uris([("n", "=", 3)]))
    assert normalised(ours.to_pyarrow_table(partitions=part)) == normalised(their_rows)
    both = ours.to_pyarrow_table(partitions=part, filters=[("id", "=", 2)])
    assert both.column("id").to_pylist() == [2]
    frame = ours.to_pandas(partitions=part, columns=["id"], types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    assert str(frame["id"].dtype) == "Int64" and sorted(frame["id"].dropna()) == [2]
    local = sorted(uri.removeprefix("file://") for uri in ours.file_uris([("n", "=", 3)]))
    assert local == their_uris  # delta-rs spells local files as paths
    assert len(local) == 1
    changes = ours.load_cdf(starting_version=1, predicate="_change_type = 'update_postimage' AND id > 2")
    rust_changes = pa.table(
        theirs.load_cdf(
            starting_version=1, predicate="_change_type = 'update_postimage' AND id > 2"
        ).read_all()
    )
    assert normalised(changes) == normalised(rust_changes)
    assert changes.column("id").to_pylist() == [3]


def test_deltalakes_engine_arguments_are_accepted_or_refused_by_name(tmp_path: Path) -> None:
    from replay.protocol.deltalake_options import UnsupportedOptionError

    uri = str(tmp_path / "t")
    write_table(uri, ROWS)
    table = DeltaTable(uri)
    table.delete("id = 1", writer_properties=None, commit_properties=None, post_commithook_properties=None)
    table.update({"name": "'x'"}, predicate="id = 2", error_on_type_mismatch=True, writer_properties=None)
    merged = table.merge(ROWS, "target.id = source.id", streamed_exec=True, max_spill_size=1 << 30)
    merged.when_matched_update_all().execute()
    assert table.vacuum(full=True, keep_versions=None) == []
    with pytest.raises(UnsupportedOptionError, match="vacuum: keep_versions not supported"):
        table.vacuum(keep_versions=[1])
    with pytest.raises(UnsupportedOptionError, match=r"delete: writer_properties not supported"):
        table.delete("id = 3", writer_properties=object())
    with pytest.raises(UnsupportedOptionError, match="to_pyarrow_table: filesystem not supported"):
        table.to_pyarrow_table(filesystem=object())
    with pytest.raises(UnsupportedOptionError, match="restore: typo_argument not supported"):
        table.restore(0, typo_argument=1)
    assert DeltaTable(uri).count() == 3


def test_optimize_takes_deltalakes_engine_arguments(tmp_path: Path) -> None:
    from replay.protocol.deltalake_options import UnsupportedOptionError

    uri = str(tmp_path / "t")
    write_table(uri, ROWS, max_rows_per_file=1)
    metrics = DeltaTable(uri).optimize.compact(max_spill_size=1 << 30, max_temp_directory_size=None)
    assert metrics["numFilesRemoved"] == 4
    with pytest.raises(UnsupportedOptionError, match="z_order: writer_properties not supported"):
        DeltaTable(uri).optimize.z_order(["id"], writer_properties=object())


def test_deltalakes_exception_names_catch_what_delta_rs_raises_them_for(tmp_path: Path) -> None:
    from replay import exceptions

    with pytest.raises(exceptions.TableNotFoundError):
        DeltaTable(tmp_path / "missing")
    uri = str(tmp_path / "t")
    write_table(uri, ROWS, configuration={"delta.appendOnly": "true"})
    with pytest.raises(exceptions.CommitFailedError):  # delta-rs: CommitFailedError too
        DeltaTable(uri).delete("id = 1")
    with pytest.raises(exceptions.SchemaMismatchError):
        write_deltalake(uri, pa.table({"other": [1]}), mode="append")
    DeltaTable(uri).alter.add_constraint({"positive": "id IS NULL OR id > 0"})
    with pytest.raises(exceptions.DeltaProtocolError):
        write_deltalake(uri, ROWS.slice(0, 1).set_column(0, "id", pa.array([-1], pa.int64())), mode="append")
    assert all(
        issubclass(error, exceptions.DeltaError)
        for error in (*exceptions.CommitFailedError, *exceptions.DeltaProtocolError)
    )


def test_commit_properties_reach_every_commit_of_an_operation(tmp_path: Path) -> None:
    """deltalake's CommitProperties (its class or this library's): custom metadata in commitInfo,
    as delta-rs writes it, on writes, row changes and maintenance; an application transaction
    makes write_deltalake idempotent; a field of Delta's own is refused."""
    from deltalake import CommitProperties as RustCommitProperties
    from deltalake.transaction import Transaction as RustTransaction

    from replay import CommitProperties, commit_properties
    from replay.protocol.deltalake_options import UnsupportedOptionError

    uri = str(tmp_path / "t")
    tagged = RustCommitProperties(custom_metadata={"run": "r1"}, app_transactions=[RustTransaction("job", 3)])
    write_deltalake(uri, ROWS, commit_properties=tagged)
    write_deltalake(uri, ROWS, mode="append", commit_properties=tagged)  # version 3 of "job": skipped
    table = DeltaTable(uri)
    assert table.version() == 0 and table.transaction_version("job") == 3
    table.delete("id = 1", commit_properties=CommitProperties(custom_metadata={"run": "r2"}))
    table.merge(
        ROWS, "target.id = source.id", commit_properties=RustCommitProperties(custom_metadata={"run": "r3"})
    ).when_matched_update_all().execute()
    with commit_properties(CommitProperties(custom_metadata={"run": "r4"}, user_metadata="nightly")):
        table.alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    history = DeltaTable(uri).history()
    assert [(h["operation"], h.get("run")) for h in history] == [
        ("SET TBLPROPERTIES", "r4"),
        ("MERGE", "r3"),
        ("DELETE", "r2"),
        ("WRITE", "r1"),
    ]
    assert history[0]["userMetadata"] == "nightly"
    assert [h.get("run") for h in RustTable(uri).history()] == ["r4", "r3", "r2", "r1"]
    with pytest.raises(ValueError, match=r"\['operation'\] would replace fields Delta writes"):
        CommitProperties(custom_metadata={"operation": "x"})
    with pytest.raises(UnsupportedOptionError, match=r"delete: commit_properties\.app_transactions"):
        table.delete("id = 2", commit_properties=tagged)
    block = commit_properties(CommitProperties(app_transactions=[RustTransaction("job", 4)]))
    with pytest.raises(UnsupportedOptionError, match="app_transactions not supported for a block"), block:
        table.delete("id = 2")
    assert DeltaTable(uri).version() == table.version()
