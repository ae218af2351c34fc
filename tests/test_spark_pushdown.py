"""Filter pushdown, session settings read at planning time, and one-line Delta errors in Spark.

Pruning is proven by deleting data files: a copy of a table loses every data file that holds no
row matching the query, and the query must still succeed with the right rows (opening a deleted
file fails the query). Queries run on a real local Spark through the ``deltalog`` source.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyspark.cloudpickle import dumps
from pyspark.errors import AnalysisException
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    In,
    IsNotNull,
    LessThan,
    Not,
    StringEndsWith,
    StringStartsWith,
)

from replay.delta_log import DeltaLog
from replay.spark import register
from replay.spark.batch_reader import DeltaLogBatchReader, DeltaLogPushdownReader
from replay.spark.schema import spark_schema
from replay.spark.session_conf import SessionLink
from replay.spark.settings import PUSHDOWN_KEY, ReadSettings
from replay.txn.write import write_table
from tests.paths import GOLDEN_ROOT

pytestmark = pytest.mark.spark

ROWS_PER_FILE = 25
COLUMN_MAPPING = GOLDEN_ROOT / "delta-rs/table_with_column_mapping/delta"


@pytest.fixture(scope="module")
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


@pytest.fixture
def pushdown(deltalog: Any) -> Iterator[Any]:
    """The session with filter pushdown turned on (``register`` leaves it off)."""
    deltalog.conf.set(PUSHDOWN_KEY, "true")
    try:
        yield deltalog
    finally:
        deltalog.conf.unset(PUSHDOWN_KEY)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 partitions (``part``) of 4 files each; ``id`` and ``name`` sorted and consecutive across files."""
    path = tmp_path_factory.mktemp("pushdown") / "table"
    for part in range(4):
        ids = list(range(part * 100, part * 100 + 100))
        rows = {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([part] * len(ids), pa.int32()),
            "name": [f"n{i:04d}" for i in ids],
        }
        write_table(str(path), pa.table(rows), partition_by=["part"], max_rows_per_file=ROWS_PER_FILE)
    return path


def data_files(path: Path) -> list[Path]:
    return [path / add.path for add in DeltaLog.for_table(str(path)).snapshot().files()]


def copy_without_unmatched(source: Path, target: Path, matches: Callable[[dict[str, Any]], bool]) -> int:
    """Copy a table and delete every data file holding no matching row; the number deleted."""
    shutil.copytree(source, target)
    snapshot = DeltaLog.for_table(str(target)).snapshot()
    partitions = {target / add.path: add.partition_values for add in snapshot.files()}
    deleted = 0
    for file, values in partitions.items():
        rows = [{**row, **_typed(values)} for row in pq.read_table(file).to_pylist()]
        if not any(matches(row) for row in rows):
            file.unlink()
            deleted += 1
    return deleted


def _typed(values: dict[str, str | None]) -> dict[str, Any]:
    return {key: int(value) if value and value.isdigit() else value for key, value in values.items()}


def rows_of(frame: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in frame.collect()), key=repr)


def spark_side_filters(frame: Any) -> str:
    """The conditions Spark still evaluates after the scan (the executed plan's Filter nodes)."""
    plan = frame._jdf.queryExecution().executedPlan().toString()
    return " ".join(line for line in plan.splitlines() if re.search(r"\bFilter \(", line))


@pytest.mark.parametrize(
    "case",
    [
        ("part = 2", lambda r: r["part"] == 2, None),
        ("part IN (1, 3) AND NOT part = 3", lambda r: r["part"] == 1, None),
        ("id >= 230 AND id < 240", lambda r: 230 <= r["id"] < 240, "id"),
        ("name LIKE 'n031%' AND part <=> 3", lambda r: r["name"].startswith("n031"), "name"),
        ("part != 0 AND id < 120 AND name IS NOT NULL", lambda r: r["part"] != 0 and r["id"] < 120, "id"),
    ],
)
def test_filters_prune_partitions_and_statistics(
    pushdown: Any, table: Path, tmp_path: Path, case: tuple[str, Callable[[dict[str, Any]], bool], str | None]
) -> None:
    where, matches, left_to_spark = case
    everything = DeltaLog.for_table(str(table)).snapshot().to_arrow().to_pylist()
    expected = sorted((tuple(row.values()) for row in everything if matches(row)), key=repr)
    copy = tmp_path / "copy"
    assert copy_without_unmatched(table, copy, matches) >= 12  # of 16 files
    frame = pushdown.read.format("deltalog").load(str(copy)).where(where)
    assert rows_of(frame) == expected and expected
    filters = spark_side_filters(frame)
    if left_to_spark is None:  # decided by partition values: Spark does not filter again
        assert "part" not in filters
    else:  # statistics only tell which files may match: the filter goes back to Spark
        assert left_to_spark in filters and "(part" not in filters


def test_a_query_no_file_can_match_reads_nothing(pushdown: Any, table: Path) -> None:
    frame = pushdown.read.format("deltalog").load(str(table))
    assert frame.where("part = 9").count() == 0  # no partition left: Spark plans one empty one
    assert frame.where("id > 1000").collect() == []


def test_column_mapping_partition_values_and_statistics_prune(pushdown: Any, tmp_path: Path) -> None:
    everything = DeltaLog.for_table(str(COLUMN_MAPPING)).snapshot().to_arrow().to_pylist()
    for index, (where, matches) in enumerate(
        [
            ("`Company Very Short` = 'BMS'", lambda r: r["Company Very Short"] == "BMS"),
            ("`Super Name` = 'Timothy Lamb'", lambda r: r["Super Name"] == "Timothy Lamb"),
        ]
    ):
        copy = tmp_path / f"copy{index}"
        shutil.copytree(COLUMN_MAPPING, copy)
        for add in DeltaLog.for_table(str(copy)).snapshot().files():
            [company] = add.partition_values.values()  # keyed by the physical name
            if not any(matches(row) for row in everything if row["Company Very Short"] == company):
                (copy / add.path).unlink()
        assert len(list(copy.rglob("*.parquet"))) == 1
        frame = pushdown.read.format("deltalog").load(str(copy)).where(where)
        expected = sorted((tuple(row.values()) for row in everything if matches(row)), key=repr)
        assert rows_of(frame) == expected and expected


def test_nan_satisfies_spark_comparisons_that_statistics_leave_out(pushdown: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "nan")
    write_deltalake(path, pa.table({"x": pa.array([1.0, math.nan, 3.0])}))  # statistics: max 3.0
    assert '"maxValues":{"x":3.0}' in (DeltaLog.for_table(path).snapshot().files()[0].stats or "")
    frame = pushdown.read.format("deltalog").load(path)
    assert [row.x for row in frame.where("x > 5").collect()] == [pytest.approx(math.nan, nan_ok=True)]
    assert sorted(row.x for row in frame.where("x < 2").collect()) == [1.0]


def test_push_filters_returns_what_partition_values_do_not_decide(table: Path) -> None:
    snapshot = DeltaLog.for_table(str(table)).snapshot()
    schema = spark_schema(snapshot.metadata.schema_string, change_feed=False)
    reader = DeltaLogPushdownReader(ReadSettings.from_options({"path": str(table)}, {}), schema)
    filters: list[Filter] = [
        Not(EqualTo(("part",), 0)),
        In(("part",), (1, 2, None)),  # true for 1 and 2, null otherwise: decided exactly
        IsNotNull(("part",)),
        EqualNullSafe(("part",), 2),
        GreaterThan(("id",), 205),  # statistics: may match, not exact
        LessThan(("id",), 215),
        StringStartsWith(("name",), "n02"),
        StringEndsWith(("name",), "9"),  # cannot prune
        EqualTo(("nope",), 1),  # not a column
    ]
    remaining = list(reader.pushFilters(filters))
    assert [id(f) for f in remaining] == [id(f) for f in filters[4:]]
    reads = reader.partitions()
    files = sorted(read.file.path for partition in reads for read in partition.reads)  # type: ignore[attr-defined]
    first = [
        add.path for add in snapshot.files() if orjson.loads(add.stats or "{}")["minValues"]["id"] == 200
    ]
    assert files == first  # the one file (ids 200..224) that may hold ids 206..214
    with_null = DeltaLogPushdownReader(ReadSettings.from_options({"path": str(table)}, {}), schema)
    assert list(with_null.pushFilters([Not(In(("part",), (1, None)))])) == []  # never true
    assert with_null.partitions() == []


def test_pushdown_turned_off_reads_without_it(pushdown: Any, table: Path) -> None:
    before = pushdown.read.format("deltalog").load(str(table))  # planned while pushdown is on
    expected = sorted(((i, 2, f"n{i:04d}") for i in range(200, 300)), key=repr)
    pushdown.conf.set(PUSHDOWN_KEY, "false")
    after = pushdown.read.format("deltalog").load(str(table)).where("part = 2")
    assert rows_of(after) == expected
    assert rows_of(before.where("part = 2")) == expected
    assert "part" in spark_side_filters(after)  # Spark filters every row itself


def test_register_leaves_pushdown_off_and_the_reader_follows_the_session(
    deltalog: Any, caplog: pytest.LogCaptureFixture
) -> None:
    deltalog.conf.unset(PUSHDOWN_KEY)
    try:
        with caplog.at_level("WARNING", logger="replay.spark"):
            source = register(deltalog)
        assert deltalog.conf.get(PUSHDOWN_KEY) == "false" and not caplog.records
        instance = source({"path": str(COLUMN_MAPPING)})
        schema = instance.schema()
        assert type(instance.reader(schema)) is DeltaLogBatchReader
        deltalog.conf.set(PUSHDOWN_KEY, "true")
        assert type(source({"path": str(COLUMN_MAPPING)}).reader(schema)) is DeltaLogPushdownReader
        with caplog.at_level("WARNING", logger="replay.spark"):
            register(deltalog)  # the user's choice stays, with a warning about what it costs
        assert deltalog.conf.get(PUSHDOWN_KEY) == "true"
        assert "later queries of that DataFrame" in caplog.text
    finally:
        deltalog.conf.unset(PUSHDOWN_KEY)
        register(deltalog)


def _queries_after_filtered_ones(spark: Any, table: Path) -> list[tuple[str, int, int]]:
    """``(query, rows read, rows expected)`` of a sequence of queries on one DataFrame, a fresh
    DataFrame and a view, each query following filtered ones (partition filters, statistics
    filters and both)."""
    everything = DeltaLog.for_table(str(table)).snapshot().to_arrow().to_pylist()
    total = len(everything)
    frame = spark.read.format("deltalog").load(str(table))
    results: list[tuple[str, int, int]] = []

    def check(name: str, query: Any, expected: int) -> None:
        results.append((name, len(query.collect()), expected))

    for where, matches in [
        ("part = 2", lambda r: r["part"] == 2),
        ("id < 30", lambda r: r["id"] < 30),
        ("part = 1 AND id >= 150", lambda r: r["part"] == 1 and r["id"] >= 150),
    ]:
        check(where, frame.where(where), sum(1 for row in everything if matches(row)))
        results.append((f"count after {where}", frame.count(), total))
        check(f"rows after {where}", frame, total)
        check(f"untranslatable filter after {where}", frame.where("id + 1 > 0"), total)
    fresh = spark.read.format("deltalog").load(str(table))
    results.append(("fresh load after a filtered query", fresh.count(), total))
    frame.createOrReplaceTempView("after_filters")
    check("filtered view", spark.sql("SELECT * FROM after_filters WHERE part = 3"), 100)
    results.append(("view after a filtered query", spark.table("after_filters").count(), total))
    spark.catalog.dropTempView("after_filters")
    return results


def test_every_query_after_filtered_ones_reads_its_own_rows(deltalog: Any, table: Path) -> None:
    """With ``register``'s settings, no query inherits the file pruning of an earlier one."""
    results = _queries_after_filtered_ones(deltalog, table)
    assert [(name, read) for name, read, _ in results] == [(name, expected) for name, _, expected in results]


def test_with_pushdown_on_spark_reuses_a_pushed_read_for_later_queries(pushdown: Any, table: Path) -> None:
    """Why pushdown stays off: PySpark 4.3 stores the read planned with a query's pushed filters on
    the relation, and a later query of the same DataFrame that pushes no filter reuses it without
    asking the reader. Should this fail after a PySpark upgrade, Spark no longer shares pushed
    reads between queries, and ``register`` may turn pushdown on again."""
    frame = pushdown.read.format("deltalog").load(str(table))
    assert frame.where("part = 2").count() == 100
    assert frame.count() == 100  # not 400: the files the filter pruned are missing
    assert pushdown.read.format("deltalog").load(str(table)).count() == 400  # a new relation


def test_the_session_link_stays_on_the_driver(deltalog: Any) -> None:
    link = SessionLink.of(deltalog)
    assert link is not None and link.secret and link.secret not in repr(link)
    deltalog.conf.set("spark.hadoop.fs.s3a.endpoint.region", "eu-north-1")
    try:
        assert (link.settings() or {}).get("spark.hadoop.fs.s3a.endpoint.region") == "eu-north-1"
    finally:
        deltalog.conf.unset("spark.hadoop.fs.s3a.endpoint.region")
    source = register(deltalog)
    instance = source({"path": str(COLUMN_MAPPING)})
    reader = instance.reader(instance.schema())
    secret = link.secret.encode()
    assert secret not in dumps(instance) and secret not in dumps(reader)


def test_the_session_time_zone_is_read_when_a_query_is_planned(deltalog: Any) -> None:
    source = register(deltalog)
    options = {"path": str(COLUMN_MAPPING), "timestampAsOf": "2024-01-01 00:00:00"}
    deltalog.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        when = source(options).settings.timestamp_as_of
        assert when is not None and when.utcoffset() == dt.timedelta(hours=-8)
    finally:
        deltalog.conf.set("spark.sql.session.timeZone", "UTC")
    assert source(options).settings.timestamp_as_of.utcoffset() == dt.timedelta(0)


def test_storage_settings_set_after_register_apply_to_the_next_query(deltalog: Any, moto_server: Any) -> None:
    bucket = moto_server.create_bucket()
    uri = f"s3a://{bucket}/table"
    conf = moto_server.s3a_conf()
    rows = pa.table({"id": pa.array(range(10), pa.int64()), "p": [i % 2 for i in range(10)]})
    write_table(uri, rows, conf=conf, partition_by=["p"])
    for key, value in conf.items():
        deltalog.conf.set(key, value)
    try:
        frame = deltalog.read.format("deltalog").load(uri).where("p = 1 AND id > 2")
        assert sorted(row.id for row in frame.collect()) == [3, 5, 7, 9]
    finally:
        for key in conf:
            deltalog.conf.unset(key)


@pytest.mark.parametrize(
    "case",
    [
        ({"versionAsOf": "99"}, "table", r"VersionNotFoundError: \[DELTA_VERSION_NOT_FOUND\] Cannot time"),
        ({}, "missing", r"TableNotFoundError: \[DELTA_MISSING_DELTA_TABLE\] file://\S+/missing is not"),
        ({"readChangeFeed": "yes"}, "table", r"InvalidOptionError: \[DELTA_ILLEGAL_OPTION\] Invalid value"),
    ],
)
def test_delta_errors_are_the_first_line_spark_shows(
    deltalog: Any, table: Path, tmp_path: Path, case: tuple[dict[str, str], str, str]
) -> None:
    options, path, error = case
    location = table if path == "table" else tmp_path / path
    with pytest.raises(AnalysisException) as info:
        deltalog.read.format("deltalog").options(**options).load(str(location)).collect()
    message = str(info.value)
    first_line = message.splitlines()[0]
    prefix = r"\[PYTHON_DATA_SOURCE_ERROR\] Failed to create Python data source instance: replay\.[\w.]+"
    assert re.match(prefix + error, first_line), message
    assert "Traceback" not in message
