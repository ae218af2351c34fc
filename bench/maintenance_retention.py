"""VACUUM and RESTORE benchmark: ours against delta-rs, each run in a fresh process.

Run ``python bench/maintenance_retention.py [--quick]``. Two tables are generated once under the
work directory, with data files of a few bytes (neither operation reads them):

* ``vacuum-100k``: 100 000 files in 100 partition directories, committed 2 000 per commit; then
  50 000 of them removed with a deletion time 30 days ago. Half the files are expired tombstones
  the default retention (7 days) lets VACUUM delete; every file is a month old. Each run vacuums
  a hard-linked copy for real (``dry_run=False``): ours with Delta's full vacuum (listing,
  ``VACUUM START``/``END`` commits), delta-rs with its default (lite) vacuum and with ``full=True``;
* ``restore-100``: 10 000 files at version 0, then 100 commits each removing 100 of them and
  adding 100 new ones; each run restores a copy of the latest version to the one before the 100 commits
  (10 000 files re-added, 10 000 removed, every restored file checked to exist).

Printed (and written to ``bench/results/``): median wall time, CPU seconds (user + system, all
threads) and peak RSS of the child process, and the ratio ours / delta-rs. ``--quick`` makes the
tables 10x smaller and runs each measurement once.
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
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)
ADDS_PER_COMMIT = 2000
PARTITIONS = 100
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Case:
    name: str
    operation: str
    files: int

    @property
    def target(self) -> int:
        """The version a restore goes back to: the last of the commits that added the files."""
        return -(-self.files // ADDS_PER_COMMIT)


def cases(quick: bool) -> list[Case]:
    scale = 10 if quick else 1
    return [Case("vacuum-100k", "vacuum", 100_000 // scale), Case("restore-100", "restore", 10_000 // scale)]


# -- tables ---------------------------------------------------------------------------------------
def _header(log: Path, now: int) -> None:
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    metadata = {
        "metaData": {
            "id": str(uuid.uuid4()),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": SCHEMA,
            "partitionColumns": ["p"],
            "configuration": {"delta.checkpointInterval": "1000000"},
            "createdTime": now,
        }
    }
    info = {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": {}}}
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in (info, protocol, metadata)) + "\n")


def _file(index: int, tag: str) -> tuple[str, int]:
    partition = index % PARTITIONS
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
    for partition in range(PARTITIONS):
        (table / f"p={partition}").mkdir(parents=True, exist_ok=True)
    for path in paths:
        full = table / path
        full.write_bytes(b"0123456789")
        os.utime(full, (mtime, mtime))


def generate(root: Path, case: Case) -> Path:
    """Create (once) the table of ``case``; returns it (a template: runs work on copies)."""
    template = root / f"template-{case.name}"
    if (template / ".complete").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    log = template / "_delta_log"
    log.mkdir(parents=True)
    month_ago = int(time.time() * 1000) - 30 * DAY_MS
    _header(log, month_ago)
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
def child(engine: str, operation: str, uri: str, target: int) -> None:
    """One run of ``operation`` by ``engine`` (restores go back to version ``target``)."""
    import resource

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
                return len(table.vacuum(dry_run=False))
            return int(table.restore(target)["numRestoredFiles"])

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    count = run()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        json.dumps(
            {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": after.ru_maxrss / 1024, "files": count}
        )
    )


def run_child(engine: str, case: Case, table: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, __file__, "--child", engine, case.operation, str(table), str(case.target)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{engine} failed on {table}:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller tables, one run per measurement")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-maintenance-retention"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 3, quick 1)")
    parser.add_argument(
        "--child", nargs=4, metavar=("ENGINE", "OPERATION", "PATH", "TARGET"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    lines = [
        "| case | files | engine | wall s | CPU s | peak RSS MB | files changed | ratio to delta-rs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    results: list[dict[str, object]] = []
    for case in cases(args.quick):
        template = generate(args.workdir, case)
        engines = ["ours", "deltars", "deltars-full"] if case.operation == "vacuum" else ["ours", "deltars"]
        runs: dict[str, list[dict[str, float]]] = {engine: [] for engine in engines}
        for _ in range(repeat):  # interleaved, so that load hits every engine alike
            for engine in engines:
                runs[engine].append(run_child(engine, case, fresh_copy(template, args.workdir)))
        median = {
            engine: {key: statistics.median(run[key] for run in runs[engine]) for key in runs[engine][0]}
            for engine in engines
        }
        for engine in engines:
            ratio = median["ours"]["seconds"] / median[engine]["seconds"] if engine != "ours" else None
            m = median[engine]
            lines.append(
                f"| {case.name} | {case.files:,} | {engine} | {m['seconds']:.2f} | {m['cpu_seconds']:.2f} | "
                f"{m['peak_rss_mb']:.0f} | {int(m['files']):,} | {'' if ratio is None else f'{ratio:.2f}'} |"
            )
            print(lines[-1], flush=True)
        results.append({"case": case.name, "files": case.files, **median})
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    text = (
        "\n".join(lines)
        + f"\n\nrepeat {repeat}, median; load average at the end: {load} ({os.cpu_count()} CPUs)"
    )
    print(text)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS_DIR / f"maintenance-retention-{stamp}.json").write_text(json.dumps(results, indent=2))
    (RESULTS_DIR / f"maintenance-retention-{stamp}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
