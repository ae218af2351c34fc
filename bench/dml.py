"""Row-level change benchmark: DELETE, UPDATE and MERGE, ours against delta-rs.

Run ``python bench/dml.py [--quick]``. A table of 10 million rows in 100 files of 100 000 rows
(``id``: 0..N-1 sorted, so statistics prune by it; ``value``: uniform in [0, 1); ``cat``: one of
50 strings; ``amount``: an integer) is generated once under the work directory, twice: plain
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

Ours runs on both tables, delta-rs (which cannot write deletion vectors) on the plain one. The
table printed (and written to ``bench/results/``) gives the median wall time, CPU seconds (user +
system, all threads) and peak RSS of the process, the ratios ours / delta-rs for copy-on-write,
and how much faster deletion vectors are than our copy-on-write. ``--quick`` runs each
measurement once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
# bench/replay.py must not shadow the replay package
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

ROWS = 10_000_000
FILES = 100
ROWS_PER_FILE = ROWS // FILES
OPERATIONS = ("delete", "update", "merge-100k", "merge-1k")
ENGINES = ("ours", "deltars", "ours-dv")


# -- the table (generated once) ---------------------------------------------------------------
def generate(root: Path, deletion_vectors: bool) -> Path:
    """The template table (generated on first use) of the given kind."""
    name = "template-dv" if deletion_vectors else "template-cow"
    template = root / name
    if (template / ".complete").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, __file__, "--generate", str(template), "dv" if deletion_vectors else "cow"]
    subprocess.run(command, check=True, env=env)
    (template / ".complete").write_text("")
    return template


def write_template(path: str, kind: str) -> None:
    import numpy as np
    import pyarrow as pa

    from replay import write_table

    rng = np.random.default_rng(1)
    categories = np.array([f"category-{i:02d}" for i in range(50)], dtype=object)

    def batches() -> object:
        for index in range(FILES):
            ids = np.arange(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE, dtype=np.int64)
            yield pa.record_batch(
                {
                    "id": ids,
                    "value": rng.random(ROWS_PER_FILE),
                    "cat": pa.array(categories[ids % 50], pa.string()),
                    "amount": rng.integers(0, 1000, ROWS_PER_FILE),
                }
            )

    first = next(iter(batches()))  # type: ignore[call-overload]
    reader = pa.RecordBatchReader.from_batches(first.schema, batches())  # type: ignore[arg-type]
    configuration = {"delta.enableDeletionVectors": "true"} if kind == "dv" else {}
    write_table(path, reader, configuration=configuration, max_rows_per_file=ROWS_PER_FILE)


# -- measurement (child side) -------------------------------------------------------------------
def _arrow(values: object, arrow_type: object) -> object:
    """A NumPy array as an Arrow array, built from its buffer: ``pa.array`` would make pyarrow
    import pandas, charging the harness's memory to the engine measured."""
    import numpy as np
    import pyarrow as pa

    array = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(array), [None, pa.py_buffer(array)])


def _repeated(text: str, count: int) -> object:
    """``count`` times the string ``text``, built from buffers (see :func:`_arrow`)."""
    import numpy as np
    import pyarrow as pa

    encoded = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * count)]
    )


def source_rows(operation: str) -> object:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(2)
    if operation == "merge-100k":
        matching = rng.choice(ROWS, 50_000, replace=False).astype(np.int64)
        ids = np.concatenate([matching, np.arange(ROWS, ROWS + 50_000, dtype=np.int64)])
    else:
        start = 50 * ROWS_PER_FILE
        ids = np.concatenate(
            [np.arange(start, start + 500, dtype=np.int64), np.arange(ROWS, ROWS + 500, dtype=np.int64)]
        )
    count = len(ids)
    columns = [
        _arrow(ids, pa.int64()),
        _arrow(rng.random(count), pa.float64()),
        _repeated("merged", count),
        _arrow(rng.integers(0, 1000, count).astype(np.int64), pa.int64()),
    ]
    return pa.Table.from_arrays(columns, names=["id", "value", "cat", "amount"])


def child(engine: str, operation: str, uri: str) -> None:
    import resource

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

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    metrics = run()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss_mb = after.ru_maxrss / 1024
    print(
        json.dumps(
            {"seconds": seconds, "cpu_seconds": cpu, "rss_mb": rss_mb, "metrics": metrics}, default=str
        )
    )


def run_child(engine: str, operation: str, template: Path, workdir: Path) -> dict[str, float]:
    table = workdir / "measured"
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
        raise RuntimeError(f"{engine} {operation} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per measurement")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-dml")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 3, quick 1)")
    parser.add_argument("--only", nargs="*", choices=OPERATIONS, help="the operations to measure")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "OPERATION", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--generate", nargs=2, metavar=("PATH", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate:
        write_template(args.generate[0], args.generate[1])
        return 0
    if args.child:
        child(*args.child)
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    templates = {"ours": generate(args.workdir, False), "deltars": generate(args.workdir, False)}
    templates["ours-dv"] = generate(args.workdir, True)
    header = (
        "| operation | ours copy-on-write s (CPU s, RSS MB) | delta-rs s (CPU s, RSS MB) "
        "| ours deletion vectors s (CPU s, RSS MB) | time ours / delta-rs | RSS ours / delta-rs "
        "| DV speed-up over our copy-on-write |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [header]
    results: list[dict[str, object]] = []
    for operation in args.only or OPERATIONS:
        runs: dict[str, list[dict[str, float]]] = {engine: [] for engine in ENGINES}
        for _ in range(repeat):  # interleaved, so that load hits every engine alike
            for engine in ENGINES:
                runs[engine].append(run_child(engine, operation, templates[engine], args.workdir))
        median = {
            engine: {
                key: statistics.median(float(run[key]) for run in runs[engine])
                for key in ("seconds", "cpu_seconds", "rss_mb")
            }
            for engine in ENGINES
        }
        cells = " | ".join(
            f"{median[e]['seconds']:.2f} ({median[e]['cpu_seconds']:.2f}, {median[e]['rss_mb']:.0f})"
            for e in ENGINES
        )
        time_ratio = median["ours"]["seconds"] / median["deltars"]["seconds"]
        rss_ratio = median["ours"]["rss_mb"] / median["deltars"]["rss_mb"]
        speedup = median["ours"]["seconds"] / median["ours-dv"]["seconds"]
        lines.append(f"| {operation} | {cells} | {time_ratio:.2f} | {rss_ratio:.2f} | {speedup:.1f}x |")
        results.append(
            {"operation": operation, **median, "metrics": {e: runs[e][-1]["metrics"] for e in ENGINES}}
        )
        print(lines[-1], flush=True)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    text = (
        "\n".join(lines)
        + f"\n\n{ROWS:,} rows in {FILES} files; repeat {repeat}, median; "
        + f"load average at the end: {load} ({os.cpu_count()} CPUs)"
    )
    print(text)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS_DIR / f"dml-{stamp}.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS_DIR / f"dml-{stamp}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
