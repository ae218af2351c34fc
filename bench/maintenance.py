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

The cases here: compaction to one file per partition (``target_size`` 256 MiB) by ours, by
deltalake and by pyarrow alone (``bench/floors.py``: the files read and written, no log); and a
full scan of the table (ours) before and after our compaction.

The ``retention`` section (``--section retention``; both sections run by default) times VACUUM and
RESTORE against delta-rs on two generated tables whose data files are a few bytes (neither
operation reads them): ``vacuum-100k``, 100 000 files in 100 partitions of which 50 000 were
removed 30 days ago (the full vacuum, Delta's, and the lite one, deltalake's default, by each
engine, each on a hard-linked copy, deleting for real); ``restore-100``, 10 000 files at version
0 then 100 commits each replacing 100 of them, restored to the version before them. Its table
gives each engine's median wall time, CPU seconds, peak RSS and, on our rows, the ratio to
delta-rs's run of the same mode;
``--quick`` makes these tables 10x smaller.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

from bench.replay import _write_header  # noqa: E402

FILES = 5000
PARTITIONS = 20
ROWS_PER_FILE = int(os.environ.get("BENCH_ROWS_PER_FILE", "2000"))
TARGET_SIZE = 256 * 1024 * 1024
SMALL_FILES = "small-files"
SECTIONS = ("compaction", "retention")

Operation = Callable[[str], object]
OPERATIONS: dict[str, Operation] = {}
"""Operations by name (``<engine>:<what>``), run in the child process on a table URI."""


ENGINES = {"ours": "replay", "deltars": "deltalake", "pyarrow": "bench.floors"}
"""The package each engine's operations use (``<engine>:<what>``), imported before measuring."""


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


@operation("pyarrow:compact")
def _compact_pyarrow(uri: str) -> object:
    from bench.floors import compact_partitions

    return compact_partitions(uri)


@operation("ours:scan")
def _scan_ours(uri: str) -> object:
    from replay import DeltaTable

    table = DeltaTable(uri).to_pyarrow_table()
    return {"rows": table.num_rows}


CASES = [
    Case("compact-ours", "ours:compact"),
    Case("compact-deltars", "deltars:compact"),
    Case("compact-pyarrow", "pyarrow:compact"),
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
def child(module: str, name: str, uri: str) -> None:
    importlib.import_module(module)  # registers its operations in this module's registry
    function = importlib.import_module("bench.maintenance").OPERATIONS[name]
    engine = name.split(":", maxsplit=1)[0]
    importlib.import_module(ENGINES[engine])  # loaded before the clock starts, as in bench/dml.py
    import pyarrow as pa

    pa.array([0]).to_pylist()  # pyarrow's lazy initialisation is not the operation's cost
    measured, result = harness.measure(lambda: function(uri))
    harness.report({**measured, "result": result}, hard_exit=True)


def run_child(case: Case, uri: Path) -> dict[str, object]:
    return harness.run_child(
        __file__, ["compaction", case.module, case.operation, uri], f"{case.name} on {uri}"
    )


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
        ratio = harness.ratio(
            float(by_case["compact-ours"]["seconds"]), float(by_case["compact-deltars"]["seconds"])
        )  # type: ignore[arg-type]
        notes.append(f"compaction ours / delta-rs: {ratio:.2f}x the time")
    if {"compact-ours", "compact-pyarrow"} <= set(by_case):
        floor = harness.ratio(
            float(by_case["compact-ours"]["seconds"]), float(by_case["compact-pyarrow"]["seconds"])
        )  # type: ignore[arg-type]
        notes.append(f"compaction ours / pyarrow alone: {floor:.2f}x the time")
    if {"scan-before", "scan-after"} <= set(by_case):
        speedup = float(by_case["scan-before"]["seconds"]) / float(by_case["scan-after"]["seconds"])  # type: ignore[arg-type]
        notes.append(f"full scan after compaction: {speedup:.1f}x faster than before")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")


# -- VACUUM and RESTORE ----------------------------------------------------------------------------
RETENTION_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)
ADDS_PER_COMMIT = 2000
RETENTION_PARTITIONS = 100
DAY_MS = 86_400_000


@dataclass(frozen=True)
class RetentionCase:
    name: str
    operation: str
    files: int

    @property
    def target(self) -> int:
        """The version a restore goes back to: the last of the commits that added the files."""
        return -(-self.files // ADDS_PER_COMMIT)


def retention_cases(quick: bool) -> list[RetentionCase]:
    scale = 10 if quick else 1
    return [
        RetentionCase("vacuum-100k", "vacuum", 100_000 // scale),
        RetentionCase("restore-100", "restore", 10_000 // scale),
    ]


# -- tables ---------------------------------------------------------------------------------------
def _file(index: int, tag: str) -> tuple[str, int]:
    partition = index % RETENTION_PARTITIONS
    return f"p={partition}/part-{index:06d}-{tag}-c000.snappy.parquet", partition


def _add(path: str, partition: int, now: int) -> str:
    return json.dumps(
        {
            "add": {
                "path": path,
                "partitionValues": {"p": str(partition)},
                "size": 10,
                "modificationTime": now,
                "dataChange": True,
                "stats": '{"numRecords":1}',
            }
        }
    )


def _remove(path: str, partition: int, deleted: int) -> str:
    return json.dumps(
        {
            "remove": {
                "path": path,
                "deletionTimestamp": deleted,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {"p": str(partition)},
                "size": 10,
            }
        }
    )


def _commit(log: Path, version: int, now: int, lines: list[str]) -> None:
    info = json.dumps(
        {"commitInfo": {"timestamp": now + version, "operation": "WRITE", "operationParameters": {}}}
    )
    (log / f"{version:020d}.json").write_text("\n".join([info, *lines]) + "\n")


def _data_files(table: Path, paths: list[str], mtime: float) -> None:
    for partition in range(RETENTION_PARTITIONS):
        (table / f"p={partition}").mkdir(parents=True, exist_ok=True)
    for path in paths:
        full = table / path
        full.write_bytes(b"0123456789")
        os.utime(full, (mtime, mtime))


def generate_retention(root: Path, case: RetentionCase) -> Path:
    """Create (once) the table of ``case``; returns it (a template: runs work on copies)."""
    template = root / f"template-{case.name}"
    if (template / ".complete").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    log = template / "_delta_log"
    log.mkdir(parents=True)
    month_ago = int(time.time() * 1000) - 30 * DAY_MS
    _write_header(
        log,
        month_ago,
        schema=RETENTION_SCHEMA,
        partition_columns=["p"],
        configuration={"delta.checkpointInterval": "1000000"},
        commit_info=True,
    )
    files = [_file(i, "a") for i in range(case.files)]
    version = 0
    for start in range(0, len(files), ADDS_PER_COMMIT):
        version += 1
        _commit(
            log,
            version,
            month_ago,
            [_add(p, q, month_ago) for p, q in files[start : start + ADDS_PER_COMMIT]],
        )
    paths = [p for p, _ in files]
    if case.operation == "vacuum":  # half the files removed a month ago
        removed = files[::2]
        for start in range(0, len(removed), ADDS_PER_COMMIT):
            version += 1
            chunk = removed[start : start + ADDS_PER_COMMIT]
            _commit(log, version, month_ago, [_remove(p, q, month_ago) for p, q in chunk])
    else:  # 100 commits, each replacing 100 files (or 1% of the table)
        per_commit = max(1, case.files // 100)
        for step in range(100):
            version += 1
            gone = files[step * per_commit : (step + 1) * per_commit]
            new = [_file(case.files + step * per_commit + i, "b") for i in range(per_commit)]
            paths += [p for p, _ in new]
            lines = [_remove(p, q, int(time.time() * 1000)) for p, q in gone]
            _commit(log, version, month_ago, [*lines, *(_add(p, q, month_ago) for p, q in new)])
    _data_files(template, paths, month_ago / 1000)
    (template / ".complete").write_text("")
    return template


def fresh_copy(template: Path, root: Path) -> Path:
    """A copy of ``template`` whose data files are hard links (cheap; deleting them in the copy
    leaves the template alone) and whose log is copied (commits are added)."""
    table = root / f"measured-{template.name.removeprefix('template-')}"
    shutil.rmtree(table, ignore_errors=True)
    subprocess.run(["cp", "-al", str(template), str(table)], check=True)
    shutil.rmtree(table / "_delta_log")
    shutil.copytree(template / "_delta_log", table / "_delta_log")
    return table


# -- measurement (child side) -------------------------------------------------------------------
def retention_child(engine: str, operation: str, uri: str, target: int) -> None:
    """One run of ``operation`` by ``engine`` (restores go back to version ``target``)."""
    if engine.startswith("deltars"):
        from deltalake import DeltaTable as RustTable

        def run() -> int:
            table = RustTable(uri)
            if operation == "vacuum":
                return len(table.vacuum(dry_run=False, full=engine == "deltars-full"))
            return int(table.restore(target)["numRestoredFile"])
    else:
        from replay import DeltaTable

        def run() -> int:
            table = DeltaTable(uri)
            if operation == "vacuum":
                return len(table.vacuum(dry_run=False, full=engine != "ours-lite"))
            return int(table.restore(target)["numRestoredFiles"])

    measured, count = harness.measure(run)
    harness.report({**measured, "files": count})


def run_retention_child(engine: str, case: RetentionCase, table: Path) -> dict[str, float]:
    return harness.run_child(
        __file__, ["retention", engine, case.operation, table, case.target], f"{engine} on {table}"
    )


def run_retention(workdir: Path, quick: bool, repeat: int) -> tuple[str, list[dict[str, object]]]:
    """VACUUM and RESTORE, ours against delta-rs: the table printed and the results."""
    lines = [
        "| case | files | engine | wall s | CPU s | peak RSS MB | files changed | ours / delta-rs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    results: list[dict[str, object]] = []
    for case in retention_cases(quick):
        template = generate_retention(workdir, case)
        vacuum = case.operation == "vacuum"
        engines = ["ours", "deltars-full", "ours-lite", "deltars"] if vacuum else ["ours", "deltars"]
        peers = {"ours": "deltars-full" if vacuum else "deltars", "ours-lite": "deltars"}  # same mode
        runs = harness.interleaved(
            engines,
            repeat,
            lambda engine, _, case=case, template=template: run_retention_child(
                engine, case, fresh_copy(template, workdir)
            ),
        )
        median = {engine: harness.medians(runs[engine]) for engine in engines}
        for engine in engines:
            peer = peers.get(engine)
            ratio = harness.ratio(median[engine]["seconds"], median[peer]["seconds"]) if peer else None
            m = median[engine]
            lines.append(
                f"| {case.name} | {case.files:,} | {engine} | {m['seconds']:.2f} | {m['cpu_seconds']:.2f} | "
                f"{m['peak_rss_mb']:.0f} | {int(m['files']):,} | {'' if ratio is None else f'{ratio:.2f}'} |"
            )
            print(lines[-1], flush=True)
        results.append({"case": case.name, "files": case.files, **median})
    return "\n".join(lines), results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller tables, one run per case")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-maintenance"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per case (default 3, quick 1)")
    parser.add_argument(
        "--section",
        choices=SECTIONS,
        action="append",
        help="the part to run: compaction (and scans), retention (VACUUM, RESTORE); default both",
    )
    parser.add_argument("--child", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child[0] == "retention":
            engine, operation, path, target = args.child[1:]
            retention_child(engine, operation, path, int(target))
        else:
            child(*args.child[1:])
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    sections = args.section or list(SECTIONS)
    parts: list[str] = []
    results: dict[str, object] = {}
    if "compaction" in sections:
        files = FILES // 5 if args.quick else FILES
        tables = {SMALL_FILES: generate(args.workdir, files)}
        compaction = run_cases(CASES, tables, args.workdir, repeat)
        parts.append(
            f"{files:,} files in {PARTITIONS} partitions, {files * ROWS_PER_FILE:,} rows; "
            f"median of {repeat}\n\n" + table_text(compaction)
        )
        results["compaction"] = compaction
    if "retention" in sections:
        text, retention = run_retention(args.workdir, args.quick, repeat)
        parts.append(text)
        results["retention"] = retention
    text = "\n\n".join(parts) + f"\n\n{harness.load_note(repeat)}"
    harness.save_results("maintenance", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
