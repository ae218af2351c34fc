"""Pruned scans: ``Snapshot.scan``/``to_arrow``/``to_pandas`` with DNF and pyarrow filters.

The central property: pruning never drops a file that could hold a matching row, and the rows
returned are exactly those of an unpruned read filtered by the same expression. It is checked
on randomized tables and filters, on tables written by this library and by delta-rs, with long
strings (truncated statistics), sub-millisecond timestamps, nulls, escaped partition values and
column mapping. Other tests delete the files a filter excludes: a query that still succeeds
proves the files were never opened.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake
from orjson import loads as orjson_loads

from replay import DeltaLog, write_table
from replay.protocol.paths import resolve_path
from replay.protocol.predicate_expressions import from_expression
from replay.protocol.predicates import (
    And,
    Compare,
    In,
    InvalidFilterError,
    IsNull,
    Not,
    Opaque,
    Or,
    StartsWith,
    from_dnf,
    to_expression,
)
from replay.protocol.table_config import TableConfiguration
from replay.state.pruning import may_match
from tests.paths import GOLDEN_ROOT

UTC = dt.UTC
LONG = "x" * 40


def random_table(rng: random.Random, rows: int, start: int) -> pa.Table:
    ids = list(range(start, start + rows))
    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([rng.choice(["a", "b/c", "d=e", "ä ö", None]) for _ in ids], pa.string()),
            "day": pa.array([dt.date(2024, 1, 1 + rng.randrange(3)) for _ in ids], pa.date32()),
            "score": pa.array(
                [None if rng.random() < 0.1 else rng.uniform(-5, 5) for _ in ids], pa.float64()
            ),
            "name": pa.array(
                [rng.choice([None, "", "alpha", LONG + str(rng.randrange(9)), LONG]) for _ in ids],
                pa.string(),
            ),
            "ts": pa.array(
                [base + dt.timedelta(microseconds=rng.randrange(5_000_000)) for _ in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array(
                [decimal.Decimal(rng.randrange(-999, 999)) / 100 for _ in ids], pa.decimal128(7, 2)
            ),
            "flag": pa.array([rng.random() < 0.5 for _ in ids], pa.bool_()),
        }
    )


def random_term(rng: random.Random, table: pa.Table) -> tuple[str, str, object]:
    column = rng.choice(["id", "part", "day", "score", "name", "ts", "amount", "flag"])
    values = [v for v in table.column(column).to_pylist() if v is not None]
    value = rng.choice(values) if values else None
    if column == "id" and rng.random() < 0.3:
        value = rng.randrange(-10, 400)
    if column == "ts" and value is not None and rng.random() < 0.5:
        value = value + dt.timedelta(microseconds=rng.choice([-1, 1, 500, -999]))
    if column == "name" and rng.random() < 0.3:
        value = LONG + rng.choice(["", "0", "9", "~"])
    op = rng.choice(["=", "!=", "<", "<=", ">", ">=", "in", "not in"] if value is not None else ["=", "!="])
    if op in ("in", "not in"):
        return column, op, list({v for v in rng.sample(values, min(3, len(values)))})
    return column, op, value


def random_filter(rng: random.Random, table: pa.Table) -> list:
    conjunctions = [
        [random_term(rng, table) for _ in range(rng.randint(1, 2))] for _ in range(rng.randint(1, 2))
    ]
    return conjunctions[0] if len(conjunctions) == 1 and rng.random() < 0.5 else conjunctions


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(str(v) for v in row.values()) for row in table.to_pylist())


def check_scan(snapshot, row_filter) -> int:
    """Pruning keeps every file with a matching row; the rows equal an unpruned filtered read."""
    scan = snapshot.scan(row_filter)
    everything = snapshot.to_arrow()
    expected = everything.filter(scan.expression)
    assert rows(scan.to_arrow()) == rows(expected), row_filter
    kept = set(scan.files().column("path").to_pylist())
    for path in snapshot.files_table().column("path").to_pylist():
        if path in kept:
            continue
        single = snapshot.scan(row_filter)
        single._files = snapshot.files_table().filter(pc.equal(snapshot.files_table().column("path"), path))
        assert single.to_arrow().num_rows == 0, f"{path} was pruned but holds rows matching {row_filter}"
    return len(kept)


@pytest.fixture(scope="module")
def written_table(tmp_path_factory: pytest.TempPathFactory) -> DeltaLog:
    rng = random.Random(7)
    path = str(tmp_path_factory.mktemp("scan") / "t")
    for batch in range(6):
        write_table(path, random_table(rng, 60, batch * 60), partition_by=["part"], max_rows_per_file=20)
    return DeltaLog.for_table(path)


def test_random_dnf_filters_never_drop_a_matching_file(written_table: DeltaLog) -> None:
    rng = random.Random(11)
    snapshot = written_table.snapshot()
    sample = snapshot.to_arrow()
    pruned = 0
    for _ in range(60):
        kept = check_scan(snapshot, random_filter(rng, sample))
        pruned += snapshot.num_files - kept
    assert pruned > 0  # the filters above do prune


def test_random_expression_filters_never_drop_a_matching_file(written_table: DeltaLog) -> None:
    rng = random.Random(13)
    snapshot = written_table.snapshot()
    sample = snapshot.to_arrow()
    schema = snapshot.metadata.arrow_schema
    for _ in range(40):
        predicate = from_dnf(random_filter(rng, sample))
        expression = to_expression(predicate, schema)
        if rng.random() < 0.3:
            expression = ~expression
        check_scan(snapshot, expression)


def test_tables_written_by_delta_rs(tmp_path: Path) -> None:
    rng = random.Random(3)
    path = str(tmp_path / "rs")
    for batch in range(4):
        data = random_table(rng, 50, batch * 50)
        write_deltalake(path, data, mode="append", partition_by=["part"])
    snapshot = DeltaLog.for_table(path).snapshot()
    sample = snapshot.to_arrow()
    for _ in range(30):
        check_scan(snapshot, random_filter(rng, sample))


def test_excluded_files_are_never_opened(written_table: DeltaLog, tmp_path: Path) -> None:
    source = Path(written_table.table_path.removeprefix("file://"))
    for row_filter in ([("part", "=", "b/c")], [("id", ">=", 100), ("id", "<", 110)]):
        expected = rows(written_table.snapshot().to_arrow(filter=row_filter))
        copy = tmp_path / f"copy-{len(row_filter)}"
        shutil.copytree(source, copy)
        snapshot = DeltaLog.for_table(str(copy)).snapshot()
        kept = {
            resolve_path(snapshot.table_path, p)
            for p in snapshot.scan(row_filter).files().column("path").to_pylist()
        }
        assert 0 < len(kept) < snapshot.num_files
        for uri in snapshot.file_uris():
            if uri not in kept:
                Path(uri.removeprefix("file://")).unlink()
        again = DeltaLog.for_table(str(copy)).snapshot()
        assert rows(again.to_arrow(filter=row_filter)) == expected
        assert sum(batch.num_rows for batch in again.scan(row_filter).to_batches()) == len(expected)


def test_sub_millisecond_timestamps_and_truncated_strings(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    base = dt.datetime(2024, 5, 1, 12, 0, 0, 999, tzinfo=UTC)  # .000999: statistics say .000
    write_table(
        path,
        pa.table(
            {"ts": pa.array([base], pa.timestamp("us", tz="UTC")), "s": pa.array([LONG + "zz"], pa.string())}
        ),
    )
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.to_arrow(filter=[("ts", "=", base)]).num_rows == 1
    assert snapshot.to_arrow(filter=[("ts", ">", base - dt.timedelta(microseconds=1))]).num_rows == 1
    assert snapshot.to_arrow(filter=[("s", "=", LONG + "zz")]).num_rows == 1
    assert snapshot.to_arrow(filter=[("s", ">", LONG + "z")]).num_rows == 1
    assert snapshot.scan([("s", ">", "y")]).files().num_rows == 0


def test_string_maxima_shorter_than_the_tables_prefix_length_are_exact(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    configuration = {"delta.dataSkippingStringPrefixLength": "64"}
    write_table(path, pa.table({"s": pa.array([LONG], pa.string())}), configuration=configuration)
    snapshot = DeltaLog.for_table(path).snapshot()
    assert snapshot.scan([("s", ">", LONG)]).files().num_rows == 0  # 40 < 64: not a prefix
    assert snapshot.scan([("s", "=", LONG)]).files().num_rows == 1
    short = str(tmp_path / "short")
    write_table(short, pa.table({"s": [LONG]}), configuration={"delta.dataSkippingStringPrefixLength": "8"})
    snapshot = DeltaLog.for_table(short).snapshot()
    assert snapshot.to_arrow(filter=[("s", "=", LONG)]).num_rows == 1
    assert snapshot.to_arrow(filter=[("s", ">", "x" * 9)]).num_rows == 1  # the maximum is a prefix
    assert snapshot.scan([("s", ">", "y")]).files().num_rows == 0


def test_files_without_statistics_are_kept(tmp_path: Path) -> None:
    table = GOLDEN_ROOT / "dat" / "no_stats" / "delta"
    snapshot = DeltaLog.for_table(str(table)).snapshot()
    columns = snapshot.metadata.arrow_schema.names
    data = snapshot.to_arrow()
    column = next(name for name in columns if pa.types.is_integer(data.schema.field(name).type))
    value = data.column(column).drop_null()[0].as_py()
    scan = snapshot.scan([(column, "=", value)])
    assert scan.files().num_rows == snapshot.num_files
    assert scan.to_arrow().num_rows == pc.sum(pc.equal(data.column(column), value)).as_py()


@pytest.mark.parametrize(
    "name",
    ["table-with-columnmapping-mode-name", "table-with-columnmapping-mode-id", "dv-with-columnmapping"],
)
def test_column_mapping_tables(name: str) -> None:
    snapshot = DeltaLog.for_table(str(GOLDEN_ROOT / "delta-spark-golden" / name / "delta")).snapshot()
    data = snapshot.to_arrow()
    rng = random.Random(5)
    for _ in range(15):
        column = rng.choice([f.name for f in data.schema if not pa.types.is_nested(f.type)])
        values = [v for v in data.column(column).to_pylist() if v is not None]
        if not values:
            continue
        check_scan(snapshot, [(column, rng.choice(["=", "<", ">="]), rng.choice(values))])


def test_partition_value_types_and_nulls() -> None:
    snapshot = DeltaLog.for_table(
        str(GOLDEN_ROOT / "delta-rs" / "partition-type-primitives" / "delta")
    ).snapshot()
    data = snapshot.to_arrow()
    for column in snapshot.partition_columns:
        for value in data.column(column).unique().to_pylist():
            check_scan(snapshot, [(column, "=", value)] if value is not None else [(column, "=", None)])
            if value is not None:
                check_scan(snapshot, [(column, "!=", value)])


def test_scan_api_shapes(written_table: DeltaLog) -> None:
    snapshot = written_table.snapshot()
    scan = snapshot.scan([("id", "<", 30)], columns=["name", "id"])
    table = scan.to_arrow()
    assert table.column_names == ["name", "id"]
    assert sorted(table.column("id").to_pylist()) == list(range(30))
    assert scan.files().schema == snapshot.files_table().schema
    batches = list(scan.to_batches())
    assert sum(batch.num_rows for batch in batches) == 30
    assert all(batch.schema.names == ["name", "id"] for batch in batches)
    frame = snapshot.to_pandas(columns=["id"], filter=pc.field("id") == 5)
    assert frame["id"].tolist() == [5]
    assert snapshot.to_arrow(columns=["id"]).num_rows == snapshot.to_arrow().num_rows


def test_bad_filters_name_the_problem(written_table: DeltaLog) -> None:
    snapshot = written_table.snapshot()
    with pytest.raises(InvalidFilterError, match="unknown operator '~'"):
        snapshot.scan([("id", "~", 3)])
    with pytest.raises(InvalidFilterError, match="nope is not a column"):
        snapshot.scan([("nope", "=", 3)])
    with pytest.raises(InvalidFilterError, match=r"columns \['nope'\] are not columns"):
        snapshot.scan(columns=["nope"])
    with pytest.raises(InvalidFilterError, match="must be a list of values"):
        snapshot.scan([("id", "in", 3)])
    with pytest.raises(InvalidFilterError, match="not str"):
        snapshot.scan("id = 3")  # type: ignore[arg-type]


SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("s", pa.string()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("n", pa.timestamp("us")),
        ("d", pa.date32()),
        ("f", pa.float64()),
        ("st", pa.struct([("x", pa.int32())])),
        ("b", pa.binary()),
        ("my col", pa.int64()),
    ]
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (pc.field("a") == 3, Compare(("a",), "=", pa.scalar(3))),
        (pc.scalar(3) < pc.field("a"), Compare(("a",), ">", pa.scalar(3))),
        (pc.field("my col") >= 1, Compare(("my col",), ">=", pa.scalar(1))),
        (pc.field("s") == 'q"x and y', Compare(("s",), "=", pa.scalar('q"x and y'))),
        (pc.field("a").isin([1, 2]), In(("a",), (pa.scalar(1), pa.scalar(2)))),
        (pc.field("s").isin(["p", "q r"]), In(("s",), (pa.scalar("p"), pa.scalar("q r")))),
        (pc.field("a").is_null(), IsNull(("a",))),
        (pc.field("a").is_valid(), IsNull(("a",), negated=True)),
        (~(pc.field("a") > 1), Not(Compare(("a",), ">", pa.scalar(1)))),
        (pc.starts_with(pc.field("s"), "ab"), StartsWith(("s",), "ab")),
        (pc.field("st", "x") == 1, Compare(("st", "x"), "=", pa.scalar(1, pa.int32()))),
        (
            (pc.field("a") < 1) | (pc.field("a") > 5),
            Or((Compare(("a",), "<", pa.scalar(1)), Compare(("a",), ">", pa.scalar(5)))),
        ),
        (
            (pc.field("d") == dt.date(2024, 1, 2)) & (pc.field("f") > 0.5),
            And((Compare(("d",), "=", pa.scalar(dt.date(2024, 1, 2))), Compare(("f",), ">", pa.scalar(0.5)))),
        ),
    ],
)
def test_expressions_read_with_certainty(expression: pc.Expression, expected: object) -> None:
    assert from_expression(expression, SCHEMA) == expected


def test_timestamps_read_exactly() -> None:
    moment = dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=UTC)
    predicate = from_expression(pc.field("t") > pc.scalar(moment), SCHEMA)
    assert isinstance(predicate, Compare)
    assert predicate.value.cast(pa.timestamp("us", tz="UTC")).as_py() == moment
    naive = from_expression(pc.field("n") <= pc.scalar(moment.replace(tzinfo=None)), SCHEMA)
    assert (
        isinstance(naive, Compare)
        and naive.value.as_py() == pa.scalar(moment.replace(tzinfo=None)).cast(pa.timestamp("ns")).as_py()
    )


@pytest.mark.parametrize(
    "expression",
    [
        pc.field("a") == pc.field("my col"),  # two fields
        pc.field("a") + 1 > 3,  # arithmetic
        pc.field("f") == pc.scalar(math.nan),
        pc.field("b") == b"\x00",  # binary literals print ambiguously
        pc.field("a").isin(list(range(40))),  # a truncated value set
        pc.field("s").isin(['a"b']),  # an unescaped quote in a value set
        pc.field("zzz") == 1,  # not a column
    ],
)
def test_uncertain_expressions_are_opaque(expression: pc.Expression) -> None:
    predicate = from_expression(expression, SCHEMA)
    assert isinstance(predicate, Opaque) or (
        isinstance(predicate, Compare | In | And | Or | Not) and "Opaque" in repr(predicate)
    )


def test_ambiguous_column_names_make_every_expression_opaque() -> None:
    schema = pa.schema([("a", pa.int64()), ("a and b", pa.int64())])
    assert isinstance(from_expression(pc.field("a") == 1, schema), Opaque)


def test_pruning_of_partition_only_predicates_reads_no_statistics(written_table: DeltaLog) -> None:
    snapshot = written_table.snapshot()
    files = snapshot.files_table()
    broken = files.set_column(
        files.schema.get_field_index("stats"), "stats", pa.array(["{broken"] * files.num_rows, pa.string())
    )
    config = TableConfiguration(snapshot.protocol, snapshot.metadata)
    mask = may_match(broken, from_dnf([("part", "=", "a")]), config)
    assert (
        pc.sum(mask).as_py()
        == pc.sum(pc.equal(pc.map_lookup(files.column("partition_values"), "part", "first"), "a")).as_py()
    )
    # unreadable statistics prune nothing
    assert pc.all(may_match(broken, from_dnf([("id", "=", -5)]), config)).as_py()


def test_checkpoint_statistics_written_as_a_struct_prune(tmp_path: Path) -> None:
    """Delta's writeStatsAsStruct: checkpoint rows carry ``stats_parsed`` and no JSON ``stats``."""
    import pyarrow.parquet as pq

    path = tmp_path / "t"
    rng = random.Random(9)
    for batch in range(3):
        write_table(str(path), random_table(rng, 40, batch * 40), max_rows_per_file=10)
    log = DeltaLog.for_table(str(path))
    expected = log.snapshot()
    log.checkpoint()
    checkpoint = next((path / "_delta_log").glob("*.checkpoint.parquet"))
    table = pq.read_table(checkpoint)
    add = table.column("add").combine_chunks()
    stats = [orjson_loads(text) if text else None for text in pc.struct_field(add, "stats").to_pylist()]
    for row in stats:
        if row:
            for kind in ("minValues", "maxValues"):
                for name in ("ts",):
                    if name in row[kind]:
                        row[kind][name] = dt.datetime.fromisoformat(row[kind][name].replace("Z", "+00:00"))
                for name in ("day",):
                    if name in row[kind]:
                        row[kind][name] = dt.date.fromisoformat(row[kind][name])
    parsed_type = pa.struct(
        [
            ("numRecords", pa.int64()),
            (
                "minValues",
                pa.struct([("id", pa.int64()), ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))]),
            ),
            (
                "maxValues",
                pa.struct([("id", pa.int64()), ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))]),
            ),
            ("nullCount", pa.struct([("id", pa.int64()), ("day", pa.int64()), ("ts", pa.int64())])),
        ]
    )
    children = {f.name: add.field(f.name) for f in add.type if f.name != "stats"}
    children["stats_parsed"] = pa.array(stats, parsed_type)
    new_add = pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=add.is_null())
    pq.write_table(table.set_column(table.schema.get_field_index("add"), "add", new_add), checkpoint)
    snapshot = DeltaLog.for_table(str(path)).snapshot()
    assert snapshot.log_segment.checkpoint is not None and not snapshot.log_segment.deltas
    assert rows(snapshot.to_arrow()) == rows(expected.to_arrow())
    scan = snapshot.scan([("id", ">=", 50), ("id", "<", 55)])
    assert scan.files().num_rows == 1
    assert sorted(scan.to_arrow().column("id").to_pylist()) == list(range(50, 55))
    check_scan(snapshot, [("day", "=", dt.date(2024, 1, 2))])
    check_scan(snapshot, [("ts", ">", dt.datetime(2024, 1, 1, 0, 0, 3, tzinfo=UTC))])
