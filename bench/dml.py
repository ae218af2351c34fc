"""Row-level change benchmark: DELETE, UPDATE and MERGE, ours against delta-rs.

Run ``python bench/dml.py [--quick]``. The table of ``bench/dml_tables.py`` (10 million rows in
100 files of 100 000 rows, ``id`` sorted) is generated once under the work directory, twice: plain
(copy-on-write) and with ``delta.enableDeletionVectors``. Each measurement runs in a fresh
interpreter on a fresh copy of the table:

* ``delete``: ``DELETE WHERE value < 0.01`` (1 % of the rows, in every file);
* ``update``: ``UPDATE SET amount = amount + 1 WHERE value < 0.01``;
* ``merge-100k``: 100 000 source rows, half of them matching random target rows, half new, with
  ``WHEN MATCHED UPDATE *`` / ``WHEN NOT MATCHED INSERT *``;
* ``merge-1k``: 1 000 source rows, 500 matching rows of one file and 500 new.

The engine is imported first, then the MERGE source is built from NumPy buffers (not with
``pa.array``, which makes pyarrow import pandas): the process holds what the engine loads, nothing
the harness would add.

Ours runs on both tables, delta-rs (which cannot write deletion vectors) on the plain one, and
for ``delete`` and ``update`` pyarrow alone does the Parquet work of a copy-on-write rewrite
(``bench/floors.py``: read every file, change its rows, write it; no log). The table printed (and
written to ``bench/results/``) gives the median wall time, CPU seconds (user + system, all
threads) and peak RSS of the process, the ratios ours / delta-rs for copy-on-write, and how much
faster deletion vectors are than our copy-on-write. ``--quick`` runs each measurement once.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

from bench.dml_tables import FILES, ROWS, generate, measured_copy, source_rows  # noqa: E402

OPERATIONS = ("delete", "update", "merge-100k", "merge-1k")
ENGINES = ("ours", "deltars", "ours-dv", "pyarrow")
FLOORED = ("delete", "update")
"""The operations pyarrow alone is measured for (``bench/floors.py``)."""
MEASURED = ("seconds", "cpu_seconds", "peak_rss_mb")


# -- measurement (child side) -------------------------------------------------------------------
def child(engine: str, operation: str, uri: str) -> None:
    if engine == "pyarrow":
        from bench.floors import rewrite_files

        measured, metrics = harness.measure(lambda: rewrite_files(uri, operation))
        harness.report({**measured, "metrics": metrics})
        return
    if engine == "deltars":
        from deltalake import DeltaTable
    else:
        from replay import DeltaTable  # type: ignore[assignment]
    source = source_rows(operation) if operation.startswith("merge") else None

    def run() -> dict[str, object]:
        table = DeltaTable(uri)
        if operation == "delete":
            return dict(table.delete("value < 0.01"))
        if operation == "update":
            return dict(table.update({"amount": "amount + 1"}, predicate="value < 0.01"))
        merger = table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        return dict(merger.when_matched_update_all().when_not_matched_insert_all().execute())

    measured, metrics = harness.measure(run)
    harness.report({**measured, "metrics": metrics})


def run_child(engine: str, operation: str, template: Path, workdir: Path) -> dict[str, object]:
    table = measured_copy(template, workdir / "measured")
    try:
        return harness.run_child(__file__, [engine, operation, table], f"{engine} {operation}")
    finally:
        shutil.rmtree(table, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per measurement")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-dml")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 3, quick 1)")
    parser.add_argument("--only", nargs="*", choices=OPERATIONS, help="the operations to measure")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "OPERATION", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    templates = {"ours": generate(args.workdir, False), "deltars": generate(args.workdir, False)}
    templates["ours-dv"] = generate(args.workdir, True)
    templates["pyarrow"] = templates["ours"]
    header = (
        "operation",
        "ours copy-on-write s (CPU s, RSS MB)",
        "delta-rs s (CPU s, RSS MB)",
        "ours deletion vectors s (CPU s, RSS MB)",
        "pyarrow alone s (CPU s, RSS MB)",
        "time ours / delta-rs",
        "RSS ours / delta-rs",
        "DV speed-up over our copy-on-write",
    )
    print(harness.markdown_table(header, []), flush=True)
    rows: list[list[object]] = []
    results: list[dict[str, object]] = []
    for operation in args.only or OPERATIONS:

        def run(engine: str, _: int, operation: str = operation) -> dict[str, object]:
            return run_child(engine, operation, templates[engine], args.workdir)

        engines = [e for e in ENGINES if e != "pyarrow" or operation in FLOORED]
        runs = harness.interleaved(engines, repeat, run)
        median = {engine: harness.medians(runs[engine], MEASURED) for engine in engines}
        cells = [
            f"{median[e]['seconds']:.2f} ({median[e]['cpu_seconds']:.2f}, {median[e]['peak_rss_mb']:.0f})"
            if e in median
            else "-"
            for e in ENGINES
        ]
        time_ratio = harness.ratio(median["ours"]["seconds"], median["deltars"]["seconds"])
        rss_ratio = harness.ratio(median["ours"]["peak_rss_mb"], median["deltars"]["peak_rss_mb"])
        speedup = harness.ratio(median["ours"]["seconds"], median["ours-dv"]["seconds"])
        rows.append([operation, *cells, f"{time_ratio:.2f}", f"{rss_ratio:.2f}", f"{speedup:.1f}x"])
        results.append(
            {"operation": operation, **median, "metrics": {e: runs[e][-1]["metrics"] for e in engines}}
        )
        print(harness.markdown_row(rows[-1]), flush=True)
    note = f"{ROWS:,} rows in {FILES} files; {harness.load_note(repeat)}"
    text = harness.markdown_table(header, rows) + f"\n\n{note}"
    harness.save_results("dml", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
