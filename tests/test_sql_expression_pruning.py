"""Pruning with SQL conditions is sound: a file is dropped only if no row of it makes the
condition true, for random files (statistics as this library's writer computes them, partition
values) and random conditions, also for MERGE conditions pruned by their target-only part."""

from __future__ import annotations

import datetime as dt
import decimal

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replay.protocol.actions import Metadata, Protocol
from replay.protocol.schema import StructType
from replay.protocol.sql import parse_expression
from replay.protocol.table_config import TableConfiguration
from replay.state.pruning import prune
from replay.txn.statistics import file_statistics

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        ("part", pa.string()),
        ("x", pa.int32()),
        ("y", pa.int64()),
        ("d", pa.date32()),
        ("s", pa.string()),
        ("m", pa.decimal128(7, 2)),
        ("f", pa.float64()),
        ("flag", pa.bool_()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
SOURCE = pa.schema([("k", pa.int64()), ("v", pa.string())])
METADATA = Metadata(id="t", schema_string=StructType.from_arrow(SCHEMA).to_json(), partition_columns=["part"])
CONFIG = TableConfiguration(Protocol(), METADATA)
BASE = dt.datetime(2024, 1, 1, tzinfo=UTC)

VALUES = {
    "x": st.integers(-4, 4) | st.sampled_from([2**31 - 1, -(2**31)]),
    "y": st.integers(-4, 4) | st.just(2**40),
    "d": st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 5)),
    "s": st.text(alphabet="ab", max_size=3),
    "m": st.integers(-300, 300).map(lambda cents: decimal.Decimal(cents).scaleb(-2)),
    "f": st.floats(-4, 4, allow_nan=False),
    "flag": st.booleans(),
    "ts": st.integers(0, 3_000_000).map(lambda us: BASE + dt.timedelta(microseconds=us)),
}
LITERALS = {
    "x": ["0", "2", "-3", "2.5", "-0.5", "'3'", "3L", "2147483647", "NULL", "1.0D"],
    "y": ["1", "-2", "2.5", "1e2", "'4'", "1099511627776L"],
    "d": [
        "DATE '2024-01-02'",
        "'2024-01-03'",
        "'2024-01'",
        "TIMESTAMP '2024-01-02 10:00:00'",
        "NULL",
        "DATE '2024-01-04' - INTERVAL 1 DAY",
        "DATE '2023-12-03' + INTERVAL 1 MONTH",
        "DATE '2024-01-03' - INTERVAL 12 HOURS",
    ],
    "s": ["'a'", "'ab'", "'b'", "''", "'ba'"],
    "m": ["1.5", "-2", "0.25", "1.005", "2.5D", "0"],
    "f": ["0.5", "-1", "2.5D", "0", "-0.0D"],
    "ts": [
        "TIMESTAMP '2024-01-01 00:00:01.5'",
        "'2024-01-01 00:00:02'",
        "DATE '2024-01-01'",
        "'2024-01-01T00:00:00.000001'",
        "TIMESTAMP '2024-01-01 00:00:03' - INTERVAL 1.5 SECONDS",
        "DATE '2023-12-01' + INTERVAL 1 MONTH",
    ],
    "part": ["'a'", "'b'", "'ab'", "NULL"],
}
OPAQUE = [
    "y + 1 > 2",
    "upper(s) = 'A'",
    "coalesce(x, 0) = 0",
    "CASE WHEN flag THEN y ELSE 0 END > 1",
    "x = source.k",
    "s = source.v",
    "source.k > 1",
    "y < source.k + x",
    "ts + INTERVAL 1 SECOND > TIMESTAMP '2024-01-01 00:00:02'",
    "d - INTERVAL 1 MONTH < DATE '2023-12-03'",
]


def _comparison(column: str) -> st.SearchStrategy[str]:
    literal = st.sampled_from(LITERALS[column])
    op = st.sampled_from(["=", "<=>", "!=", "<", "<=", ">", ">="])
    listed = st.lists(literal, min_size=1, max_size=3).map(", ".join)
    return st.one_of(
        st.builds(lambda o, v: f"{column} {o} {v}", op, literal),
        st.builds(lambda o, v: f"{v} {o} {column}", op, literal),
        st.builds(lambda n, v: f"{column} {n}IN ({v})", st.sampled_from(["", "NOT "]), listed),
        st.builds(
            lambda n, a, b: f"{column} {n}BETWEEN {a} AND {b}",
            st.sampled_from(["", "NOT "]),
            literal,
            literal,
        ),
        st.builds(lambda n: f"{column} IS {n}NULL", st.sampled_from(["", "NOT "])),
    )


atoms = st.one_of(
    st.sampled_from(list(LITERALS)).flatmap(_comparison),
    st.sampled_from(["flag", "NOT flag", "flag IS NOT TRUE", "flag IS FALSE", "x = y", "x < y"]),
    st.builds(
        lambda c, n, p: f"{c} {n}LIKE {p}",
        st.sampled_from(["s", "part"]),
        st.sampled_from(["", "NOT "]),
        st.sampled_from(["'a%'", "'ab'", "'%b'", "'a_'", "''"]),
    ),
    st.sampled_from(OPAQUE),
)
conditions = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.builds(lambda a, o, b: f"({a}) {o} ({b})", inner, st.sampled_from(["AND", "OR"]), inner),
        inner.map(lambda a: f"NOT ({a})"),
    ),
    max_leaves=4,
)


def _rows(n: int) -> st.SearchStrategy[dict[str, list[object]]]:
    return st.fixed_dictionaries(
        {name: st.lists(st.none() | values, min_size=n, max_size=n) for name, values in VALUES.items()}
    )


files = st.lists(
    st.tuples(st.none() | st.sampled_from(["a", "b", "ab"]), st.integers(0, 4).flatmap(_rows)),
    min_size=1,
    max_size=4,
)
sources = st.integers(1, 3).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            "k": st.lists(st.none() | st.integers(-3, 3), min_size=n, max_size=n),
            "v": st.lists(st.none() | st.text(alphabet="ab", max_size=2), min_size=n, max_size=n),
        }
    )
)


def _file_table(part: str | None, columns: dict[str, list[object]]) -> pa.Table:
    count = len(columns["x"])
    data = {"part": pa.array([part] * count, pa.string())}
    data.update({name: pa.array(values, SCHEMA.field(name).type) for name, values in columns.items()})
    return pa.table(data, schema=SCHEMA)


def _files(parts: list[tuple[str | None, dict[str, list[object]]]]) -> tuple[pa.Table, list[pa.Table]]:
    tables = [_file_table(part, columns) for part, columns in parts]
    stats = [file_statistics(table.drop_columns(["part"])) for table in tables]
    listing = pa.table(
        {
            "path": [f"f{i}" for i in range(len(tables))],
            "partition_values": pa.array(
                [[("part", part)] for part, _ in parts], pa.map_(pa.string(), pa.string())
            ),
            "stats": stats,
        }
    )
    return listing, tables


def _cross(table: pa.Table, source: pa.Table) -> pa.Table:
    """Every (target row, source row) pair, the source's columns renamed ``source_*``."""
    picks = [i for i in range(table.num_rows) for _ in range(source.num_rows)]
    right = [j for _ in range(table.num_rows) for j in range(source.num_rows)]
    joined = table.take(pa.array(picks, pa.int64()))
    for name in source.column_names:
        joined = joined.append_column(f"source_{name}", source.column(name).take(pa.array(right, pa.int64())))
    return joined


NAMES = {("source", "k"): "source_k", ("source", "v"): "source_v"}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(conditions, files, sources)
def test_pruning_never_drops_a_file_with_a_matching_row(
    text: str,
    parts: list[tuple[str | None, dict[str, list[object]]]],
    source_columns: dict[str, list[object]],
) -> None:
    bound = parse_expression(text).bind({"target": SCHEMA, "source": SOURCE}, unqualified=["target"])
    predicate = bound.to_predicate(scope="target")
    listing, tables = _files(parts)
    kept = set(prune(listing, predicate, CONFIG).column("path").to_pylist())
    source = pa.table(source_columns, schema=SOURCE)
    for index, table in enumerate(tables):
        if f"f{index}" in kept:
            continue
        event("a file was pruned")
        names = {**NAMES, **{("target", name): name for name in SCHEMA.names}}
        matches = bound.matches(_cross(table, source), names)
        assert not pc.any(matches).as_py(), (
            text,
            predicate,
            orjson.loads(listing["stats"][index].as_py()),
            table.to_pylist(),
        )


def test_conditions_prune_files_by_statistics_and_partition_values() -> None:
    parts: list[tuple[str | None, dict[str, list[object]]]] = [
        ("a", {**{name: [None] for name in VALUES}, "x": [1], "d": [dt.date(2024, 1, 1)], "s": ["a"]}),
        ("b", {**{name: [None] for name in VALUES}, "x": [4], "d": [dt.date(2024, 1, 5)], "s": ["bb"]}),
    ]
    listing, _ = _files(parts)
    for text, kept in [
        ("x > 2", ["f1"]),
        ("x = 2.5", []),
        ("d < '2024-01-03'", ["f0"]),
        ("s LIKE 'b%' OR part = 'a'", ["f0", "f1"]),
        ("part <=> 'b' AND source.k = x", ["f1"]),
        ("x IN (1, NULL) AND NOT (s IS NULL)", ["f0"]),
    ]:
        bound = parse_expression(text).bind({"target": SCHEMA, "source": SOURCE}, unqualified=["target"])
        paths = prune(listing, bound.to_predicate(scope="target"), CONFIG).column("path").to_pylist()
        assert paths == kept, text
