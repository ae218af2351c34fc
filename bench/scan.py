"""Pruned-scan benchmark: ``Snapshot.to_arrow(filter=...)`` against delta-rs ``to_pyarrow_table``.

Run ``python bench/scan.py [--quick] [--spark]``. One table is written under the work directory:
``--partitions`` partitions (20) of ``--files-per-partition`` files (100) each, ids sorted and
consecutive across files, so a narrow id range lives in one or two files. Three reads, each of
the whole path (loading the table, pruning, reading, filtering):

* (a) one partition: ``part = 7``;
* (b) a narrow id range that statistics isolate to a few files;
* (c) the whole table.

Both readers run in this process, alternately, ``--repeat`` times after a warm-up whose results
must hold the same rows. The table printed (and written to ``bench/results/scan.json``) gives
the median wall time and CPU time of each, the ratio ours / delta-rs, and the files each query
opens next to the files that can match (from the ids written). With ``--spark`` the (a) and (b)
queries also run through the ``deltalog`` Spark data source, with filter pushdown on and off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402


def write(path: Path, partitions: int, files_per_partition: int, rows_per_file: int) -> None:
    from replay import write_table

    per_partition = files_per_partition * rows_per_file
    for part in range(partitions):
        ids = pa.array(range(part * per_partition, (part + 1) * per_partition), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "part": pa.array([part] * len(ids), pa.int32()),
                "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                "name": pc.binary_join_element_wise("name-", pc.cast(ids, pa.string()), ""),
            }
        )
        write_table(str(path), table, partition_by=["part"], max_rows_per_file=rows_per_file)


def ours(path: Path, row_filter: list | None) -> tuple[pa.Table, int]:
    from replay import DeltaLog

    scan = DeltaLog.for_table(str(path)).snapshot().scan(row_filter)
    return scan.to_arrow(), scan.files().num_rows


def delta_rs(path: Path, row_filter: list | None) -> tuple[pa.Table, int | None]:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table(filters=row_filter), None


def same_rows(mine: pa.Table, theirs: pa.Table) -> bool:
    theirs = pa.table({f.name: theirs.column(f.name).cast(f.type) for f in mine.schema})
    keys = [("id", "ascending")]
    return mine.num_rows == theirs.num_rows and mine.sort_by(keys).equals(theirs.sort_by(keys))


def spark_times(path: Path, queries: dict[str, list], repeat: int) -> dict[str, dict[str, float]]:
    """Median wall time of ``count()`` of each query through the ``deltalog`` source, with filter
    pushdown on (files pruned before partitions are planned) and off (every file read)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(harness.REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    from replay.spark import register
    from replay.spark.session import local_session

    spark = local_session(
        "scan-bench", {"spark.driver.memory": "2g", "spark.executorEnv.PYTHONPATH": str(harness.REPO_ROOT)}
    )
    register(spark)
    out: dict[str, dict[str, float]] = {}
    for pushdown in ("true", "false"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
        for name, row_filter in queries.items():
            where = " and ".join(f"{c} {op} {v}" for c, op, v in row_filter)
            frame = spark.read.format("deltalog").load(str(path)).where(where)
            frame.count()  # warm-up (Python workers start)
            times, _ = harness.repeated(frame.count, repeat)
            out.setdefault(name, {})[f"pushdown {pushdown}"] = statistics.median(times)
    spark.stop()
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--files-per-partition", type=int, default=100)
    parser.add_argument("--rows-per-file", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a tenth of the files, one timed read")
    parser.add_argument("--spark", action="store_true", help="also time the Spark data source")
    parser.add_argument("--table", type=Path, help="reuse this table (written by this script)")
    args = parser.parse_args(argv)
    if args.quick:
        args.files_per_partition, args.repeat = max(1, args.files_per_partition // 10), 1
    workdir = Path(tempfile.mkdtemp(prefix="scan-bench-"))
    try:
        path = args.table or workdir / "table"
        if args.table is None:
            started = time.perf_counter()
            write(path, args.partitions, args.files_per_partition, args.rows_per_file)
            elapsed = time.perf_counter() - started
            print(f"table: {args.partitions * args.files_per_partition} files in {elapsed:.1f} s")
        per_partition = args.files_per_partition * args.rows_per_file
        low = 7 * per_partition + per_partition // 2 + args.rows_per_file // 2
        queries: dict[str, list | None] = {
            "(a) part = 7": [("part", "=", 7)],
            "(b) narrow id range": [("id", ">=", low), ("id", "<", low + args.rows_per_file // 4)],
            "(c) whole table": None,
        }
        can_match = {"(a) part = 7": args.files_per_partition, "(b) narrow id range": 1}
        can_match["(c) whole table"] = args.partitions * args.files_per_partition
        results: dict[str, object] = {}
        print(
            f"{'query':24s} {'ours s':>8s} {'rs s':>8s} {'ratio':>6s} {'ours cpu':>9s} {'rs cpu':>8s} "
            f"{'files opened':>12s} {'can match':>9s}"
        )
        for name, row_filter in queries.items():
            mine, opened = ours(path, row_filter)
            theirs, _ = delta_rs(path, row_filter)
            if not same_rows(mine, theirs):
                raise SystemExit(f"{name}: the readers return different rows")
            samples: dict[str, list[tuple[float, float]]] = {"ours": [], "delta-rs": []}
            for _ in range(args.repeat):
                samples["ours"].append(harness.timed(lambda f=row_filter: ours(path, f))[:2])
                samples["delta-rs"].append(harness.timed(lambda f=row_filter: delta_rs(path, f))[:2])
            wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
            cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
            ratio = harness.ratio(wall["ours"], wall["delta-rs"])
            results[name] = {
                "wall": wall,
                "cpu": cpu,
                "ratio": ratio,
                "files_opened": opened,
                "can_match": can_match[name],
                "rows": mine.num_rows,
            }
            print(
                f"{name:24s} {wall['ours']:8.3f} {wall['delta-rs']:8.3f} {ratio:6.2f} {cpu['ours']:9.3f} "
                f"{cpu['delta-rs']:8.3f} {opened:12d} {can_match[name]:9d}"
            )
        if args.spark:
            spark_queries = {k: v for k, v in queries.items() if v is not None}
            results["spark"] = spark_times(path, spark_queries, args.repeat)
            for name, times in results["spark"].items():
                print(f"spark {name}: " + ", ".join(f"{k} {v:.3f} s" for k, v in times.items()))
        print(harness.load_note(args.repeat))
        harness.write_json("scan", results)
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
