"""Table maintenance benchmark: compaction of a table of small files, ours against delta-rs.

Run ``python bench/maintenance.py [--quick] [--repeat N]``. One table is generated once under
the work directory: :data:`FILES` small Parquet files (``--quick``: a fifth of them) in
:data:`PARTITIONS` partitions, written in one commit. Every measurement runs in a fresh
interpreter on a fresh copy of its input table and reports wall time and CPU seconds (user +
system, all threads) of the operation alone, and the peak RSS of the process.

The measurements are a list of :class:`Case` s run one by one, in order; a case names the module
that defines its operation (:data:`OPERATIONS`, filled by :func:`operation`), the engine, and the
table it runs on: the generated table (``small-files``) or the output of an earlier case (so
``scan-after`` reads what ``compact-ours`` wrote). Another file adds its cases by importing this
module, registering operations and calling :func:`run_cases` with its own list.

The cases here: compaction to one file per partition (``target_size`` 256 MiB) by ours and by
deltalake; and a full scan of the table (ours) before and after our compaction.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

FILES = 5000
PARTITIONS = 20
ROWS_PER_FILE = int(os.environ.get("BENCH_ROWS_PER_FILE", "2000"))
TARGET_SIZE = 256 * 1024 * 1024
SMALL_FILES = "small-files"

Operation = Callable[[str], object]
OPERATIONS: dict[str, Operation] = {}
"""Operations by name (``<engine>:<what>``), run in the child process on a table URI."""


def operation(name: str) -> Callable[[Operation], Operation]:
    """Register the decorated function as operation ``name``."""

    def register(function: Operation) -> Operation:
        OPERATIONS[name] = function
        return function

    return register


@dataclass(frozen=True)
class Case:
    """One measurement: ``operation`` (defined in ``module``) on the table ``table``."""

    name: str
    operation: str
    table: str = SMALL_FILES
    module: str = "bench.maintenance"
    copies_table: bool = True
    """Run on a fresh copy (operations that change the table); reads use the table as it is."""


# -- the operations (child side) -------------------------------------------------------------------
@operation("ours:compact")
def _compact_ours(uri: str) -> object:
    from replay import DeltaTable

    return DeltaTable(uri).optimize.compact(target_size=TARGET_SIZE)


@operation("deltars:compact")
def _compact_deltars(uri: str) -> object:
    from deltalake import DeltaTable

    return DeltaTable(uri).optimize.compact(target_size=TARGET_SIZE)


@operation("ours:scan")
def _scan_ours(uri: str) -> object:
    from replay import DeltaTable

    table = DeltaTable(uri).to_pyarrow_table()
    return {"rows": table.num_rows}


CASES = [
    Case("compact-ours", "ours:compact"),
    Case("compact-deltars", "deltars:compact"),
    Case("scan-before", "ours:scan", copies_table=False),
    Case("scan-after", "ours:scan", table="compact-ours", copies_table=False),
]


# -- the table ------------------------------------------------------------------------------------------
def generate(root: Path, files: int) -> Path:
    """Create (once) the table of ``files`` small files in :data:`PARTITIONS` partitions."""
    template = root / f"template-{files}x{ROWS_PER_FILE}"
    if (template / ".complete").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    import numpy as np
    import pyarrow as pa

    from replay import write_table

    rows = files * ROWS_PER_FILE
    rng = np.random.default_rng(1)
    ids = np.arange(rows, dtype=np.int64)
    table = pa.table(
        {
            "part": (ids // ROWS_PER_FILE) % PARTITIONS,
            "id": ids,
            "value": rng.random(rows),
            "label": pa.array([f"label-{i % 977}" for i in range(rows)]),
            "ts": pa.array(1_700_000_000_000_000 + ids * 1000, pa.timestamp("us", "UTC")),
        }
    )
    # one file per ROWS_PER_FILE rows: rows are grouped so that each partition gets its share
    order = np.argsort(table["part"].to_numpy(), kind="stable")
    write_table(
        str(template), table.take(pa.array(order)), partition_by=["part"], max_rows_per_file=ROWS_PER_FILE
    )
    (template / ".complete").write_text("")
    return template


# -- measurement ----------------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``; ``ru_maxrss`` would count the parent's, which
    a forked child inherits on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(module: str, name: str, uri: str) -> None:
    import resource

    importlib.import_module(module)  # registers its operations in this module's registry
    function = importlib.import_module("bench.maintenance").OPERATIONS[name]
    import pyarrow as pa

    pa.array([0]).to_pylist()  # pyarrow's lazy initialisation is not the operation's cost
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = function(uri)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        json.dumps(
            {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": peak_rss_mb(), "result": result},
            default=str,
        )
    )
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: native libraries' exit handlers are not measured


def run_child(case: Case, uri: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, __file__, "--child", case.module, case.operation, str(uri)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{case.name} failed on {uri}:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_cases(
    cases: Sequence[Case], tables: dict[str, Path], workdir: Path, repeat: int
) -> list[dict[str, object]]:
    """Run ``cases`` in order, the whole list ``repeat`` times (rounds interleave the cases, so that
    a change of load on the machine hits every case alike); median per case. ``tables`` maps table
    names to their paths and gets, under the case's name, the output of each case that copies its
    table (the latest round's)."""
    runs: dict[str, list[dict[str, object]]] = {case.name: [] for case in cases}
    for attempt in range(repeat):
        for case in cases:
            target = tables[case.table]
            if case.copies_table:
                target = workdir / f"run-{case.name}-{attempt}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(tables[case.table], target)
            run = run_child(case, target)
            runs[case.name].append(run)
            print(
                f"round {attempt + 1}, {case.name}: {run['seconds']:.2f} s, {run['cpu_seconds']:.2f} CPU s",
                flush=True,
            )
            if case.copies_table:
                previous = tables.get(case.name)
                tables[case.name] = target
                if previous is not None and previous != target:
                    shutil.rmtree(previous, ignore_errors=True)
    results = []
    for case in cases:
        done = runs[case.name]
        results.append(
            {
                "case": case.name,
                "seconds": statistics.median(float(r["seconds"]) for r in done),  # type: ignore[arg-type]
                "cpu_seconds": statistics.median(float(r["cpu_seconds"]) for r in done),  # type: ignore[arg-type]
                "peak_rss_mb": max(float(r["peak_rss_mb"]) for r in done),  # type: ignore[arg-type]
                "result": done[-1]["result"],
                "rounds": [[r["seconds"], r["cpu_seconds"]] for r in done],
            }
        )
    return results


def table_text(results: list[dict[str, object]]) -> str:
    by_case = {str(r["case"]): r for r in results}
    lines = ["| case | wall s | CPU s | peak RSS MB |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {r['case']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['peak_rss_mb']:.0f} |"
        for r in results
    ]
    notes = []
    if {"compact-ours", "compact-deltars"} <= set(by_case):
        ratio = float(by_case["compact-ours"]["seconds"]) / float(by_case["compact-deltars"]["seconds"])  # type: ignore[arg-type]
        notes.append(f"compaction ours / delta-rs: {ratio:.2f}x the time")
    if {"scan-before", "scan-after"} <= set(by_case):
        speedup = float(by_case["scan-before"]["seconds"]) / float(by_case["scan-after"]["seconds"])  # type: ignore[arg-type]
        notes.append(f"full scan after compaction: {speedup:.1f}x faster than before")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{FILES // 5} files, one run per case")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-maintenance"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per case (default 3, quick 1)")
    parser.add_argument("--child", nargs=3, metavar=("MODULE", "OPERATION", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    files = FILES // 5 if args.quick else FILES
    tables = {SMALL_FILES: generate(args.workdir, files)}
    results = run_cases(CASES, tables, args.workdir, repeat)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    text = (
        f"{files:,} files in {PARTITIONS} partitions, {files * ROWS_PER_FILE:,} rows; median of {repeat}\n\n"
        + table_text(results)
        + f"\n\nload average at the end: {load} ({os.cpu_count()} CPUs)"
    )
    print(text)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS_DIR / f"maintenance-{stamp}.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS_DIR / f"maintenance-{stamp}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
