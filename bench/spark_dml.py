"""Row-level changes on Spark: the Spark ``DeltaTable`` (local[1] and local[2]) against the Python
DML and delta-rs.

Run ``python bench/spark_dml.py``. The table is ``bench/dml_tables.py``'s (10 million rows in 100 files;
generated once under the work directory, copy-on-write; with ``--dv`` the deletion-vector one too).
Each measurement runs in a fresh interpreter on a fresh copy of the table:

* ``merge-100k``: 100 000 source rows, half matching random target rows, half new,
  ``whenMatchedUpdateAll`` / ``whenNotMatchedInsertAll`` (the Python API and delta-rs run the
  same MERGE);
* ``delete``: ``DELETE WHERE value < 0.01`` (1 % of the rows, in every file);
* ``update``: ``UPDATE SET amount = amount + 1 WHERE value < 0.01``.

A Spark measurement starts its session and runs a small DELETE first (Python workers started,
the library imported), then times the operation alone. The table printed (and written to
``bench/results/``) gives the wall time of each engine, the files the Spark operation read
against the files it changed (all 100 can match here: the source's keys and the deleted values
are spread over every file), the bytes it wrote, and the speed-up of local[2] over local[1]; and
the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

from bench.dml_tables import FILES, ROWS, generate, measured_copy, source_rows  # noqa: E402

OPERATIONS = ("merge-100k", "delete", "update")
SPARK_ENGINES = ("spark-local[2]", "spark-local[1]")
MERGE_ENGINES = ("python", "deltars")


# -- measurement (child side) -----------------------------------------------------------------------
class _FilesLog(logging.Handler):
    """Keeps the Spark operation's "read N of M files and changed K" line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.files: tuple[int, int, int] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "replay.spark.dml_jobs" and len(record.args or ()) == 5:
            _, _, read, total, changed = record.args  # type: ignore[misc]
            self.files = (int(read), int(total), int(changed))


def _warm_up(spark: Any, path: Path) -> None:
    """A small DELETE first: the Python workers are started and have imported the library."""
    import pyarrow as pa

    from replay import write_table
    from replay.spark import DeltaTable

    shutil.rmtree(path, ignore_errors=True)
    write_table(str(path), pa.table({"id": list(range(100))}), max_rows_per_file=10)
    DeltaTable.forPath(spark, str(path)).delete("id % 7 = 0")
    shutil.rmtree(path, ignore_errors=True)


def spark_child(engine: str, operation: str, uri: str) -> dict[str, Any]:
    from replay import DeltaLog
    from replay.spark import DeltaTable
    from replay.spark.session import local_session

    master = engine.removeprefix("spark-")
    spark = local_session(
        "bench-spark-dml", {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "8"}, master=master
    )
    files = _FilesLog()
    logging.getLogger("replay.spark.dml_jobs").setLevel(logging.INFO)
    logging.getLogger("replay.spark.dml_jobs").addHandler(files)
    _warm_up(spark, Path(uri).parent / "warm-up")
    table = DeltaTable.forPath(spark, uri)
    source = None
    if operation.startswith("merge"):
        source = spark.createDataFrame(source_rows(operation)).alias("s")

    def run() -> Any:
        if operation == "delete":
            return table.delete("value < 0.01")
        if operation == "update":
            return table.update("value < 0.01", {"amount": "amount + 1"})
        merger = table.alias("t").merge(source, "t.id = s.id")
        return merger.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    seconds, _, result = harness.timed(run)

    metrics = DeltaLog.for_table(uri).history(1)[0]["operationMetrics"]
    answer = {
        "seconds": seconds,
        "result": result.collect()[0].asDict(),
        "files": files.files,
        "metrics": metrics,
    }
    spark.stop()
    return answer


def python_child(engine: str, operation: str, uri: str) -> dict[str, Any]:
    source = source_rows(operation)
    if engine == "deltars":
        from deltalake import DeltaTable
    else:
        from replay import DeltaTable  # type: ignore[assignment]

    def run() -> dict[str, object]:
        merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        return dict(merger.when_matched_update_all().when_not_matched_insert_all().execute())

    seconds, _, metrics = harness.timed(run)
    return {"seconds": seconds, "metrics": metrics}


def child(engine: str, operation: str, uri: str) -> None:
    run = spark_child if engine.startswith("spark") else python_child
    harness.report(run(engine, operation, uri))


def run_child(engine: str, operation: str, template: Path, workdir: Path) -> dict[str, Any]:
    table = measured_copy(template, workdir / "measured-spark")
    try:
        return harness.run_child(__file__, [engine, operation, table], f"{engine} {operation}")
    finally:
        shutil.rmtree(table, ignore_errors=True)


# -- the table (parent side) -----------------------------------------------------------------------
def _written(metrics: dict[str, Any]) -> str:
    """The bytes an operation reports it wrote ("-" where its metrics do not say: delta-rs's)."""
    value = metrics.get("numAddedBytes", metrics.get("numTargetBytesAdded"))
    return "-" if value is None else f"{int(value) / 1e6:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-dml")
    parser.add_argument("--only", nargs="*", choices=OPERATIONS, help="the operations to measure")
    parser.add_argument(
        "--dv", action="store_true", help="also run Spark local[2] on the deletion-vector table"
    )
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "OPERATION", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    cow = generate(args.workdir, False)
    dv = generate(args.workdir, True) if args.dv else None
    header = (
        "operation",
        "table",
        "engine",
        "wall s",
        "files read / changed (of all)",
        "bytes written",
        "speed-up local[2] / local[1]",
    )
    print(harness.markdown_table(header, []), flush=True)
    rows: list[list[object]] = []
    results = []
    for operation in args.only or OPERATIONS:
        runs: dict[str, dict[str, Any]] = {}
        engines = [*SPARK_ENGINES, *(MERGE_ENGINES if operation.startswith("merge") else ())]
        for engine in engines:
            runs[engine] = run_child(engine, operation, cow, args.workdir)
        if dv is not None:
            runs["spark-local[2] dv"] = run_child("spark-local[2]", operation, dv, args.workdir)
        speedup = harness.ratio(runs["spark-local[1]"]["seconds"], runs["spark-local[2]"]["seconds"])
        for engine, run in runs.items():
            files = run.get("files")
            shown = f"{files[0]} / {files[2]} (of {files[1]})" if files else "-"
            table = "deletion vectors" if engine.endswith(" dv") else "copy-on-write"
            cell = f"{speedup:.2f}x" if engine == "spark-local[2]" else ""
            written = _written(run["metrics"])
            rows.append(
                [operation, table, engine.removesuffix(" dv"), f"{run['seconds']:.1f}", shown, written, cell]
            )
            print(harness.markdown_row(rows[-1]), flush=True)
        results.append({"operation": operation, "runs": runs})
    text = harness.markdown_table(header, rows) + f"\n\n{ROWS:,} rows in {FILES} files; {harness.load_note()}"
    harness.save_results("spark-dml", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
