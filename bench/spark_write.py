"""Spark write benchmark: ``df.write.format("deltalog")`` against ``df.write.parquet`` and delta-rs.

Run ``python bench/spark_write.py [--rows N] [--quick]``. One local SparkSession (``local[2]``)
writes the same DataFrame (``--rows`` rows of a few columns from ``spark.range`` in
``--partitions`` partitions, so ``--partitions`` tasks and files) as plain Parquet and as a new
Delta table through the ``deltalog`` data source, alternately, ``--repeat`` times; delta-rs
``write_deltalake`` writes the same values built as one Arrow table in this process. A warm-up
run of each comes first (Python workers start, code loads), and the Delta tables written are
checked to hold every row.

Where the time goes: a no-op Python data source that only receives the Arrow batches measures
what Spark's hand-over of the rows to Python costs (the floor of any Python writer); one task's
share of the rows, in Spark's 10,000-row Arrow batches, is written in this process with the
data writer (conform + statistics + Parquet) and with pyarrow's Parquet writer alone, and its
statistics are computed alone; planning (listing + snapshot) and the commit (with the post-commit
hook) of the driver are timed on their own. Results are printed and written to
``bench/results/spark_write.json``.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: E402

SPARK_BATCH_ROWS = 10_000
"""Rows per Arrow batch Spark hands a Python writer (``spark.sql.execution.arrow.maxRecordsPerBatch``)."""
COLUMNS_SQL = (
    "id",
    "id % 1000 AS k",
    "CAST(id AS DOUBLE) * 0.5 AS v",
    "concat('name-', CAST(id AS STRING)) AS s",
    "CAST(id % 8 AS INT) AS bucket",
)


def arrow_data(start: int, count: int) -> pa.Table:
    """The values of :data:`COLUMNS_SQL` for ids ``start .. start+count-1``, built in Arrow."""
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "k": pc.remainder(ids, 1000),
            "v": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "s": pc.binary_join_element_wise("name-", pc.cast(ids, pa.string()), ""),
            "bucket": pc.cast(pc.remainder(ids, 8), pa.int32()),
        }
    )


# -- a writer that only receives the rows ------------------------------------------------------------
class _Received(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _NoopWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Received:
        return _Received(sum(batch.num_rows for batch in iterator))


class NoopDataSource(DataSource):
    """``format("bench_noop")``: receives the Arrow batches and drops them."""

    @classmethod
    def name(cls) -> str:
        return "bench_noop"

    def writer(self, schema: Any, overwrite: bool) -> _NoopWriter:
        return _NoopWriter()


# -- timing -----------------------------------------------------------------------------------------
def timed(action: Callable[[], object]) -> float:
    """Wall seconds of one call of ``action``."""
    return harness.timed(action)[0]


def in_process_breakdown(workdir: Path, task_rows: int) -> dict[str, dict[str, float]]:
    """One task's share of the rows written in this process: where a task's time goes."""
    from replay.log.table_io import TableIO
    from replay.txn.data_writer import write_batches
    from replay.txn.statistics import StatisticsCollector
    from replay.txn.write import delta_schema
    from replay.txn.write_commit import commit_write
    from replay.txn.write_plan import WriteOptions, plan_write
    from replay.txn.write_spec import FileWriteSpec

    data = arrow_data(0, task_rows)
    batches = data.to_batches(max_chunksize=SPARK_BATCH_ROWS)
    spec = FileWriteSpec(str(workdir / "task"), data.schema)
    names = ("task: data writer", "task: parquet only", "task: statistics")
    results: dict[str, list[float]] = {name: [] for name in names}
    for index in range(3):
        shutil.rmtree(workdir / "task", ignore_errors=True)
        results["task: data writer"].append(timed(lambda: write_batches(spec, batches)))
        target = workdir / f"plain-{index}.parquet"
        plain = functools.partial(pq.write_table, data, target, compression="snappy", row_group_size=1 << 20)
        results["task: parquet only"].append(timed(plain))
        collector = StatisticsCollector(data.schema)
        results["task: statistics"].append(timed(lambda collector=collector: collector.add(data)))
    io = TableIO.for_table(str(workdir / "commit"))
    options = WriteOptions()
    plan = plan_write(io, None, delta_schema(data.schema), options)
    small = write_batches(plan.spec, [data.slice(0, 1000)]) * 8
    results["driver: commit + hooks"] = [timed(lambda: commit_write(io, plan, small))]
    from replay.state.loader import load_snapshot

    results["driver: plan (list + snapshot)"] = [
        timed(lambda: plan_write(io, load_snapshot(io), delta_schema(data.schema), options)) for _ in range(3)
    ]
    return {name: harness.median_best(samples) for name, samples in results.items()}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a twentieth of the rows, one timed run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeat = args.rows // 20, 1

    from deltalake import DeltaTable, write_deltalake

    from replay.delta_log import DeltaLog
    from replay.spark import register
    from replay.spark.session import local_session

    spark = local_session(
        "deltalog-write-bench",
        {"spark.driver.memory": "4g", "spark.executorEnv.PYTHONPATH": str(harness.REPO_ROOT)},
    )
    register(spark)
    spark.dataSource.register(NoopDataSource)
    frame = spark.range(0, args.rows, 1, args.partitions).selectExpr(*COLUMNS_SQL)
    workdir = Path(tempfile.mkdtemp(prefix="spark-write-bench-"))
    counter = iter(range(1_000_000))
    try:
        arrow = arrow_data(0, args.rows)

        def parquet() -> None:
            frame.write.mode("overwrite").parquet(str(workdir / f"parquet-{next(counter)}"))

        def deltalog() -> None:
            path = workdir / f"deltalog-{next(counter)}"
            frame.write.format("deltalog").mode("append").save(str(path))

        def noop() -> None:
            frame.write.format("bench_noop").mode("append").save(str(workdir / "noop"))

        def delta_rs() -> None:
            write_deltalake(str(workdir / f"deltars-{next(counter)}"), arrow)

        writers = {
            "spark df.write.parquet": parquet,
            "spark deltalog": deltalog,
            "spark -> python, no-op": noop,
            "delta-rs write_deltalake": delta_rs,
        }
        for writer in writers.values():  # warm-up
            writer()
        written = sorted(workdir.glob("deltalog-*"))[-1]
        if DeltaLog.for_table(str(written)).snapshot().files_table().num_rows != args.partitions:
            raise SystemExit("the deltalog table does not have one file per task")
        if len(DeltaTable(str(written)).to_pyarrow_table(columns=["id"])) != args.rows:
            raise SystemExit("the deltalog table does not hold every row")
        times: dict[str, list[float]] = {name: [] for name in writers}
        for _ in range(args.repeat):
            for name, writer in writers.items():
                times[name].append(timed(writer))
                shutil.rmtree(workdir / "noop", ignore_errors=True)
        breakdown = in_process_breakdown(workdir, args.rows // args.partitions)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    result: dict[str, Any] = {"rows": args.rows, "partitions": args.partitions, "repeat": args.repeat}
    result["writers"] = {name: harness.median_best(samples) for name, samples in times.items()}
    result["breakdown"] = breakdown
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    bests = {name: min(samples) for name, samples in times.items()}
    parquet_name, ours_name = "spark df.write.parquet", "spark deltalog"
    result["ratio_deltalog_over_parquet"] = harness.ratio(medians[ours_name], medians[parquet_name])
    result["ratio_deltalog_over_parquet_best"] = harness.ratio(bests[ours_name], bests[parquet_name])
    result["ratio_deltalog_over_delta_rs"] = harness.ratio(
        medians[ours_name], medians["delta-rs write_deltalake"]
    )
    print(f"{args.rows:,} rows, {args.partitions} partitions, {args.repeat} timed run(s)")
    print(f"{'writer':<34}{'median s':>10}{'best s':>10}{'rows/s':>14}")
    for name in writers:
        print(f"{name:<34}{medians[name]:>10.3f}{bests[name]:>10.3f}{args.rows / medians[name]:>14,.0f}")
    print(f"\n{'in-process part':<34}{'median s':>10}{'best s':>10}")
    for name, figures in breakdown.items():
        print(f"{name:<34}{figures['median_s']:>10.3f}{figures['best_s']:>10.3f}")
    print(
        f"\ndeltalog / parquet = {result['ratio_deltalog_over_parquet']:.2f}x (median), "
        f"{result['ratio_deltalog_over_parquet_best']:.2f}x (best); "
        f"deltalog / delta-rs = {result['ratio_deltalog_over_delta_rs']:.2f}x (median)"
    )
    print(harness.load_note(args.repeat))
    harness.write_json("spark_write", result)
    return result


if __name__ == "__main__":
    main()
