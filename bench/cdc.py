"""Change data feed benchmark: ``replay.cdc.table_changes`` against delta-rs ``load_cdf``.

Run ``python bench/cdc.py [--quick]``. One CDF-enabled table is written with delta-rs under the
work directory: an initial write of ``--rows`` rows in ``--files`` files, then rounds of
append, DELETE, UPDATE and MERGE (so the feed mixes ``add``-inferred inserts with ``cdc`` files
of every change type). Both readers then read the whole feed (version 0 to latest) of the same
table in the same process into a fully materialised ``pyarrow.Table``, alternately, ``--repeat``
times; imports and a warm-up read of each happen before timing, and the warm-up results must hold
the same columns and the same multiset of rows (delta-rs's column types cast to ours; commit
file times are set to their ``commitInfo`` timestamps first, as delta-rs stamps rows with those).
The table printed (and written to ``bench/results/cdc.json``) gives the median and best wall
times, the median CPU time (user + system, all threads of the process, so the decoding threads
of both libraries count), change rows per second and the ratio of our throughput to delta-rs's
(from the medians, and from the best times, which other load on the machine disturbs least);
the load average before and after the timed reads is printed with it, since other work on the
machine slows wall times. ``--table PATH`` reuses a table this script wrote before instead of
writing a new one.
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


def people(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("name-", pc.cast(ids, pa.string()), ""),
            "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            "bucket": pc.cast(pc.bit_wise_and(ids, 15), pa.int32()),
        }
    )


def build_table(path: Path, rows: int, files: int, rounds: int) -> int:
    """Write the benchmark table with delta-rs; returns the number of commits."""
    from deltalake import DeltaTable, write_deltalake

    configuration = {"delta.enableChangeDataFeed": "true"}
    per_file = rows // files
    write_deltalake(str(path), people(0, per_file), configuration=configuration)
    for index in range(1, files):
        write_deltalake(str(path), people(index * per_file, per_file), mode="append")
    next_id = rows
    for round_index in range(rounds):
        write_deltalake(str(path), people(next_id, per_file), mode="append")
        next_id += per_file
        table = DeltaTable(str(path))
        table.delete(f"id % 97 = {round_index}")
        table.update(updates={"score": "score + 1"}, predicate=f"id % 89 = {round_index}")
        source = people(next_id - per_file // 2, per_file)
        (
            table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update(updates={"name": "s.name"})
            .when_not_matched_insert_all()
            .execute()
        )
        next_id += per_file // 2
    align_commit_times(path)
    return DeltaTable(str(path)).version() + 1


def align_commit_times(path: Path) -> None:
    """Set each commit file's modification time to its ``commitInfo`` timestamp."""
    from replay.delta_log import DeltaLog
    from replay.protocol.actions import CommitInfo

    for version, actions in DeltaLog.for_table(str(path)).get_changes(0):
        stamp = next(action.timestamp for action in actions if isinstance(action, CommitInfo)) / 1000
        os.utime(path / "_delta_log" / f"{version:020d}.json", (stamp, stamp))


def ours(path: Path) -> pa.Table:
    from replay.cdc import table_changes
    from replay.delta_log import DeltaLog

    return table_changes(DeltaLog.for_table(str(path)), starting_version=0)


def delta_rs(path: Path) -> pa.Table:
    from deltalake import DeltaTable

    return pa.table(DeltaTable(str(path)).load_cdf(starting_version=0).read_all())


def check_same_rows(mine: pa.Table, theirs: pa.Table) -> None:
    """Exit unless both tables hold the same columns and the same multiset of rows."""
    if sorted(mine.column_names) != sorted(theirs.column_names):
        raise SystemExit(
            f"the readers return different columns: {mine.column_names} vs {theirs.column_names}"
        )
    theirs = pa.table({f.name: theirs.column(f.name).cast(f.type) for f in mine.schema})
    keys = [(name, "ascending") for name in mine.column_names]
    if not mine.sort_by(keys).equals(theirs.sort_by(keys)):
        raise SystemExit("the readers return different change rows")


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the initial write")
    parser.add_argument("--files", type=int, default=20, help="files of the initial write")
    parser.add_argument("--rounds", type=int, default=5, help="append/delete/update/merge rounds")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads per reader")
    parser.add_argument("--table", type=Path, help="reuse this table (written by this script) instead")
    parser.add_argument("--quick", action="store_true", help="a tenth of the rows, one timed read")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeat = args.rows // 10, 1
    workdir = Path(tempfile.mkdtemp(prefix="cdc-bench-"))
    try:
        if args.table is not None:
            path = args.table
            from deltalake import DeltaTable

            commits = DeltaTable(str(path)).version() + 1
            print(f"table: {commits} commits at {path}")
        else:
            path = workdir / "table"
            started = time.perf_counter()
            commits = build_table(path, args.rows, args.files, args.rounds)
            print(f"table: {commits} commits written in {time.perf_counter() - started:.1f} s at {path}")
        readers = {"replay.cdc.table_changes": ours, "deltalake load_cdf": delta_rs}
        mine, theirs = ours(path), delta_rs(path)  # warm-up, and the check that both read the same
        check_same_rows(mine, theirs)
        rows = mine.num_rows
        del mine, theirs
        times: dict[str, list[float]] = {name: [] for name in readers}
        cpu: dict[str, list[float]] = {name: [] for name in readers}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for name, reader in readers.items():
                wall, cpu_time, _ = harness.timed(lambda reader=reader: reader(path))
                times[name].append(wall)
                cpu[name].append(cpu_time)
        load = (load_before, os.getloadavg()[0])
        result: dict[str, object] = {
            "rows": rows,
            "commits": commits,
            "repeat": args.repeat,
            "load_average_1min": load,
            "readers": {},
        }
        print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores")
        print(f"{'reader':<28}{'median s':>10}{'best s':>10}{'cpu s':>10}{'rows/s':>14}")
        for name, samples in times.items():
            summary = harness.median_best(samples)
            median, best, cpu_median = summary["median_s"], summary["best_s"], statistics.median(cpu[name])
            result["readers"][name] = {  # type: ignore[index]
                **summary,
                "cpu_median_s": cpu_median,
                "rows_per_s": rows / median,
            }
            print(f"{name:<28}{median:>10.3f}{best:>10.3f}{cpu_median:>10.3f}{rows / median:>14,.0f}")
        ours_times, theirs_times = times["replay.cdc.table_changes"], times["deltalake load_cdf"]
        ratio = harness.ratio(statistics.median(theirs_times), statistics.median(ours_times))
        best_ratio = harness.ratio(min(theirs_times), min(ours_times))
        result["throughput_ratio_ours_over_delta_rs"] = ratio
        result["best_time_ratio_ours_over_delta_rs"] = best_ratio
        print(
            f"change rows: {rows:,}; throughput ours / delta-rs = {ratio:.2f}x (median times), "
            f"{best_ratio:.2f}x (best times)"
        )
        harness.write_json("cdc", result)
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
