"""Row-level changes on Spark: the Spark ``DeltaTable`` (local[1] and local[2]) against the Python
DML and delta-rs.

Run ``python bench/spark_dml.py``. The table is ``bench/dml.py``'s (10 million rows in 100 files;
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
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

OPERATIONS = ("merge-100k", "delete", "update")
SPARK_ENGINES = ("spark-local[2]", "spark-local[1]")
MERGE_ENGINES = ("python", "deltars")


def _dml_bench() -> Any:
    """``bench/dml.py`` (its table and its MERGE source), loaded by path."""
    spec = importlib.util.spec_from_file_location("bench_dml", REPO_ROOT / "bench" / "dml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        source = spark.createDataFrame(_dml_bench().source_rows(operation)).alias("s")
    started = time.perf_counter()
    if operation == "delete":
        result = table.delete("value < 0.01")
    elif operation == "update":
        result = table.update("value < 0.01", {"amount": "amount + 1"})
    else:
        result = (
            table.alias("t")
            .merge(source, "t.id = s.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    seconds = time.perf_counter() - started

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
    source = _dml_bench().source_rows(operation)
    if engine == "deltars":
        from deltalake import DeltaTable
    else:
        from replay import DeltaTable  # type: ignore[assignment]
    started = time.perf_counter()
    merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    metrics = dict(merger.when_matched_update_all().when_not_matched_insert_all().execute())
    return {"seconds": time.perf_counter() - started, "metrics": metrics}


def child(engine: str, operation: str, uri: str) -> None:
    run = spark_child if engine.startswith("spark") else python_child
    print(json.dumps(run(engine, operation, uri), default=str))


def run_child(engine: str, operation: str, template: Path, workdir: Path) -> dict[str, Any]:
    table = workdir / "measured-spark"
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(template, table, ignore=shutil.ignore_patterns(".complete"))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, __file__, "--child", engine, operation, str(table)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    shutil.rmtree(table, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"{engine} {operation} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- the table (parent side) -----------------------------------------------------------------------
def _written(metrics: dict[str, Any]) -> int:
    return int(metrics.get("numAddedBytes", metrics.get("numTargetBytesAdded", 0)) or 0)


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
    dml = _dml_bench()
    args.workdir.mkdir(parents=True, exist_ok=True)
    cow = dml.generate(args.workdir, False)
    dv = dml.generate(args.workdir, True) if args.dv else None
    header = (
        "| operation | table | engine | wall s | files read / changed (of all) | bytes written | "
        "speed-up local[2] / local[1] |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [header]
    results = []
    for operation in args.only or OPERATIONS:
        runs: dict[str, dict[str, Any]] = {}
        engines = [*SPARK_ENGINES, *(MERGE_ENGINES if operation.startswith("merge") else ())]
        for engine in engines:
            runs[engine] = run_child(engine, operation, cow, args.workdir)
        if dv is not None:
            runs["spark-local[2] dv"] = run_child("spark-local[2]", operation, dv, args.workdir)
        speedup = runs["spark-local[1]"]["seconds"] / runs["spark-local[2]"]["seconds"]
        for engine, run in runs.items():
            files = run.get("files")
            shown = f"{files[0]} / {files[2]} (of {files[1]})" if files else "-"
            table = "deletion vectors" if engine.endswith(" dv") else "copy-on-write"
            cell = f"{speedup:.2f}x" if engine == "spark-local[2]" else ""
            lines.append(
                f"| {operation} | {table} | {engine.removesuffix(' dv')} | {run['seconds']:.1f} | {shown} "
                f"| {_written(run['metrics']) / 1e6:.0f} MB | {cell} |"
            )
            print(lines[-1], flush=True)
        results.append({"operation": operation, "runs": runs})
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    text = (
        "\n".join(lines)
        + f"\n\n10,000,000 rows in 100 files; load average at the end: {load} ({os.cpu_count()} CPUs)"
    )
    print(text)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS_DIR / f"spark-dml-{stamp}.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS_DIR / f"spark-dml-{stamp}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
