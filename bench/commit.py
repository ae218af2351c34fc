"""Commit-latency benchmark: appending 3 rows to big tables, ours against delta-rs.

Run ``python bench/commit.py [--quick]``. Four tables are generated once under the work
directory (only ``_delta_log``, no data files), with ``delta.checkpointInterval`` set high so that
no measured append writes a checkpoint:

* ``json-100k`` / ``json-1m``: version 0 (protocol + metadata), then commits of 2 000 adds each,
  100 000 and 1 000 000 files, JSON only;
* ``checkpoint-100k`` / ``checkpoint-1m``: the same commits, a classic checkpoint, then 5 small
  commits.

Each measurement is one append of 3 rows in a fresh interpreter, given the table's URI, as a
user's job does it: ours is ``write_table(uri, rows)``, delta-rs ``write_deltalake(uri, rows,
mode="append")``. A third column is our idempotent append (``txn_app_id``/``txn_version``, what a
streaming sink's micro-batch commits). The table printed (and written to ``bench/results/``)
gives median wall time and CPU seconds (user + system, all threads) of each, and the ratio ours /
delta-rs. ``--quick`` generates the 100k tables only and runs each measurement once.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

from bench.replay import _checkpoint, _commit_bytes, _write_header  # noqa: E402

ADDS_PER_COMMIT = 2000
TAIL_COMMITS = 5


@dataclass(frozen=True)
class Shape:
    name: str
    files: int
    checkpoint: bool


def shapes(quick: bool) -> list[Shape]:
    sizes = [("100k", 100_000)] if quick else [("100k", 100_000), ("1m", 1_000_000)]
    return [
        Shape(f"{kind}-{label}", files, kind == "checkpoint")
        for label, files in sizes
        for kind in ("json", "checkpoint")
    ]


def generate(root: Path, shape: Shape) -> Path:
    """Create (once) the table of ``shape``; returns a fresh copy of its log to measure on."""
    template = root / f"template-{shape.name}"
    if not (template / ".complete").exists():
        shutil.rmtree(template, ignore_errors=True)
        log = template / "_delta_log"
        log.mkdir(parents=True)
        now = int(time.time() * 1000) - 10_000_000
        _write_header(log, now, configuration={"delta.checkpointInterval": "1000000"})
        commits = shape.files // ADDS_PER_COMMIT
        for version in range(1, commits + 1):
            (log / f"{version:020d}.json").write_bytes(_commit_bytes(version, ADDS_PER_COMMIT, now))
        if shape.checkpoint:
            _checkpoint(template)
            for version in range(commits + 1, commits + 1 + TAIL_COMMITS):
                (log / f"{version:020d}.json").write_bytes(_commit_bytes(version, 1, now))
        (template / ".complete").write_text("")
    table = root / f"measured-{shape.name}"
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(template, table)
    return table


# -- measurement (child side) -----------------------------------------------------------------
def child(engine: str, uri: str, batch: int) -> None:
    import pyarrow as pa

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "value": ["a", "b", "c"]})
    if engine == "deltars":
        from deltalake import write_deltalake

        def run() -> None:
            write_deltalake(uri, rows, mode="append")
    else:
        from replay import write_table

        pa.array([0]).to_pylist()

        def run() -> None:
            if engine == "ours-idempotent":
                write_table(uri, rows, txn_app_id="stream", txn_version=batch)
            else:
                write_table(uri, rows)

    measured, _ = harness.measure(run)
    harness.report(measured)


def run_child(engine: str, table: Path, batch: int) -> dict[str, float]:
    return harness.run_child(__file__, [engine, table, batch], f"{engine} on {table}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k tables only, one run per measurement")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-commit"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 5, quick 1)")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "PATH", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    repeat = args.repeat or (1 if args.quick else 5)
    args.workdir.mkdir(parents=True, exist_ok=True)
    engines = ("ours", "ours-idempotent", "deltars")
    header = (
        "| table | files | ours s (CPU s) | ours idempotent s (CPU s) | delta-rs s (CPU s) "
        "| ratio ours / delta-rs |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    lines = [header]
    results: list[dict[str, object]] = []
    for shape in shapes(args.quick):
        table = generate(args.workdir, shape)
        runs = harness.interleaved(
            engines, repeat, lambda engine, batch, table=table: run_child(engine, table, batch)
        )
        median = {
            engine: tuple(harness.medians(runs[engine], ("seconds", "cpu_seconds")).values())
            for engine in engines
        }
        ratio = harness.ratio(median["ours"][0], median["deltars"][0])
        cells = " | ".join(f"{median[e][0]:.3f} ({median[e][1]:.2f})" for e in engines)
        lines.append(f"| {shape.name} | {shape.files:,} | {cells} | {ratio:.2f} |")
        results.append(
            {"table": shape.name, "files": shape.files, **{e: median[e] for e in engines}, "ratio": ratio}
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + f"\n\n{harness.load_note(repeat)}"
    harness.save_results("commit", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
