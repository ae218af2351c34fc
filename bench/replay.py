"""Snapshot-load benchmark: our log replay against delta-rs on synthetic logs.

Run ``python bench/replay.py [--quick]``. Three log shapes are generated once under the work
directory (no data files, only ``_delta_log``):

* ``json``: version 0 (protocol + metadata) and 500 commits x 2 000 adds (1M files);
* ``checkpoint``: the same 500 commits, a classic checkpoint at version 500, then 100 commits
  x 10 adds;
* ``small``: 1 000 commits x 10 adds.

Each measurement runs in a fresh interpreter (so peak RSS via ``resource.getrusage`` is the
measurement's own). Both sides do the same work: delta-rs is ``DeltaTable(p).file_uris()``,
which loads the full add state (stats included) and lists the URIs; ours is
``DeltaLog.for_table(p).snapshot()``, then ``files_table()`` (the full Arrow add state a user
gets, stats included; the child checks the stats are there) and ``file_uris()`` (the URIs as a
Python list). Imports happen before the clock starts (for ours including pyarrow's lazy pandas
import). The table printed (and written to ``bench/results/``) gives the median wall time, peak
RSS, the ratios ours / delta-rs, and the CPU time (user + system, all threads) of each side,
which is less sensitive than wall time to other load on the machine.
``--quick`` divides the shapes by 10 and runs each measurement once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Run as a script, this file's name would shadow the ``replay`` package: see harness.use_repo_packages.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


@dataclass(frozen=True)
class Shape:
    """``commits`` x ``adds``, optionally a checkpoint and then ``tail`` x ``tail_adds``."""

    name: str
    commits: int
    adds: int
    checkpoint: bool = False
    tail: int = 0
    tail_adds: int = 0

    @property
    def num_files(self) -> int:
        return self.commits * self.adds + self.tail * self.tail_adds

    def describe(self) -> str:
        text = f"{self.commits} x {self.adds} adds"
        if self.checkpoint:
            text += f" + checkpoint + {self.tail} x {self.tail_adds}"
        return text


def shapes(quick: bool) -> list[Shape]:
    scale = 10 if quick else 1
    return [
        Shape("json", 500 // scale, 2000),
        Shape("checkpoint", 500 // scale, 2000, checkpoint=True, tail=100, tail_adds=10),
        Shape("small", 1000 // scale, 10),
    ]


# -- log generation ---------------------------------------------------------------------------
def _commit_bytes(version: int, adds: int, now: int) -> bytes:
    lines = [
        json.dumps(
            {
                "commitInfo": {
                    "timestamp": now + version,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append", "partitionBy": "[]"},
                    "isBlindAppend": True,
                }
            }
        )
    ]
    file_stats = {"numRecords": 100, "minValues": {"id": 0}, "maxValues": {"id": 99}, "nullCount": {"id": 0}}
    stats = json.dumps(json.dumps(file_stats))
    prefix = uuid.uuid4().hex[:16]
    for index in range(adds):
        lines.append(
            f'{{"add":{{"path":"part-{version:05d}-{index:05d}-{prefix}-c000.snappy.parquet",'
            f'"partitionValues":{{}},"size":{1000 + index},"modificationTime":{now + version},'
            f'"dataChange":true,"stats":{stats}}}}}'
        )
    return ("\n".join(lines) + "\n").encode()


def _write_header(
    log: Path,
    now: int,
    *,
    schema: str = SCHEMA_STRING,
    partition_columns: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
    commit_info: bool = False,
) -> None:
    """Version 0 of a generated table: protocol (1, 2) and metadata (with a ``CREATE TABLE``
    ``commitInfo`` first if ``commit_info``)."""
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    metadata = {
        "metaData": {
            "id": str(uuid.uuid4()),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema,
            "partitionColumns": list(partition_columns),
            "configuration": dict(configuration or {}),
            "createdTime": now,
        }
    }
    info = {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": {}}}
    actions = [info, protocol, metadata] if commit_info else [protocol, metadata]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(action) for action in actions) + "\n")


def generate(root: Path, shape: Shape) -> Path:
    """Create (once) the table of ``shape`` under ``root``; returns the table directory."""
    table = root / f"{shape.name}-{shape.commits}x{shape.adds}"
    done = table / ".complete"
    if done.exists():
        return table
    shutil.rmtree(table, ignore_errors=True)
    log = table / "_delta_log"
    log.mkdir(parents=True)
    now = int(time.time() * 1000) - 10_000_000
    started = time.perf_counter()
    _write_header(log, now)
    for version in range(1, shape.commits + 1):
        (log / f"{version:020d}.json").write_bytes(_commit_bytes(version, shape.adds, now))
    if shape.checkpoint:
        _checkpoint(table)
        for version in range(shape.commits + 1, shape.commits + 1 + shape.tail):
            (log / f"{version:020d}.json").write_bytes(_commit_bytes(version, shape.tail_adds, now))
    done.write_text("")
    print(f"generated {shape.name} ({shape.describe()}) in {time.perf_counter() - started:.1f} s", flush=True)
    return table


def _checkpoint(table: Path) -> None:
    """Checkpoint the latest version with our writer (in a child process, to keep this one small)."""
    code = (
        "import sys; from replay.delta_log import DeltaLog; "
        "log = DeltaLog.for_table(sys.argv[1]); log.checkpoint()"
    )
    subprocess.run([sys.executable, "-c", code, str(table)], check=True, cwd=harness.REPO_ROOT)


# -- measurement (child side) -----------------------------------------------------------------
def measure_ours(path: str) -> int:
    from replay.delta_log import DeltaLog

    snapshot = DeltaLog.for_table(path).snapshot()
    table = snapshot.files_table()  # the full add state as the user gets it, stats included
    assert table.column("stats").null_count == 0
    uris = snapshot.file_uris()
    assert uris[0].startswith("file://") and len(uris) == table.num_rows
    return len(uris)


def measure_deltars(path: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(path).file_uris())


def child(engine: str, path: str) -> None:
    # Imports are not part of the measurement. pyarrow imports pandas lazily on its first
    # conversion of Python objects (~0.3 s here); that import is paid before the clock starts.
    if engine == "ours":
        import pyarrow
        import pyarrow.compute

        import replay.delta_log  # noqa: F401

        pyarrow.array([0])
    else:
        import deltalake  # noqa: F401
    measure_one = measure_ours if engine == "ours" else measure_deltars
    measured, count = harness.measure(lambda: measure_one(path))
    harness.report({**measured, "files": count})


# -- driver -----------------------------------------------------------------------------------
def run_child(engine: str, table: Path) -> dict[str, float]:
    return harness.run_child(__file__, [engine, table], f"{engine} on {table}")


def measure(engine: str, table: Path, repeat: int) -> dict[str, float]:
    runs = [run_child(engine, table) for _ in range(repeat)]
    counts = {int(run["files"]) for run in runs}
    return {
        **harness.medians(runs, ("seconds", "cpu_seconds", "peak_rss_mb")),
        "files": counts.pop() if len(counts) == 1 else -1,
    }


def render(rows: list[dict[str, object]]) -> str:
    header = (
        "| shape | files | ours s | delta-rs s | time ratio | ours MB | delta-rs MB | RSS ratio "
        "| ours CPU s | delta-rs CPU s |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [header]
    for row in rows:
        lines.append(
            f"| {row['shape']} ({row['describe']}) | {row['files']} | {row['ours_s']:.3f} | "
            f"{row['deltars_s']:.3f} | {row['time_ratio']:.2f} | {row['ours_mb']:.0f} | "
            f"{row['deltars_mb']:.0f} | {row['rss_ratio']:.2f} | {row['ours_cpu_s']:.2f} | "
            f"{row['deltars_cpu_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shapes / 10, one run per measurement")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "delta-logstores-bench")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 3, quick 1)")
    parser.add_argument("--only", choices=["json", "checkpoint", "small"], action="append")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    repeat = args.repeat or (1 if args.quick else 3)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for shape in shapes(args.quick):
        if args.only and shape.name not in args.only:
            continue
        table = generate(args.workdir, shape)
        ours = measure("ours", table, repeat)
        theirs = measure("deltars", table, repeat)
        if ours["files"] != theirs["files"] or ours["files"] != shape.num_files:
            counts = f"ours {ours['files']}, delta-rs {theirs['files']}, expected {shape.num_files}"
            print(f"WARNING {shape.name}: file counts differ: {counts}")
        rows.append(
            {
                "shape": shape.name,
                "describe": shape.describe(),
                "files": int(ours["files"]),
                "ours_s": ours["seconds"],
                "deltars_s": theirs["seconds"],
                "time_ratio": harness.ratio(ours["seconds"], theirs["seconds"]),
                "ours_mb": ours["peak_rss_mb"],
                "deltars_mb": theirs["peak_rss_mb"],
                "rss_ratio": harness.ratio(ours["peak_rss_mb"], theirs["peak_rss_mb"]),
                "ours_cpu_s": ours["cpu_seconds"],
                "deltars_cpu_s": theirs["cpu_seconds"],
            }
        )
        print(render(rows[-1:]).splitlines()[-1], flush=True)
    table_text = render(rows)
    table_text += f"\n\n{harness.load_note(repeat)}"
    harness.save_results("replay-quick" if args.quick else "replay", rows, table_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
