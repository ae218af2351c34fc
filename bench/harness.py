"""What the benchmarks share: measuring one operation in a fresh process, and reporting the results.

A benchmark script runs itself as a child (``python bench/<script>.py --child ...``) for each
measurement, so that every run starts from a cold interpreter, as a user's job does. The child
does its imports, then times the operation alone with :func:`measure` (wall time, CPU seconds of
all threads, peak resident set) and prints one JSON line (:func:`report`); the parent runs it with
:func:`run_child`, repeats and interleaves the engines so that a change of load hits each alike,
takes medians (:func:`medians`) and prints a Markdown table with the ratio ours / delta-rs and the
load average (:func:`load_note`), and writes it under ``bench/results/`` (:func:`save_results`).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
T = TypeVar("T")


def use_repo_packages() -> None:
    """Import the repository's packages: ``bench/`` off ``sys.path`` (``bench/replay.py`` must not
    shadow the ``replay`` package), the repository root first."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    sys.path.insert(0, str(REPO_ROOT))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``; ``ru_maxrss`` would count the parent's, which
    a forked child inherits on Linux)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(function: Callable[[], T]) -> tuple[float, float, T]:
    """``(wall seconds, CPU seconds, result)`` of one call of ``function`` in this process."""
    cpu, started = cpu_seconds(), time.perf_counter()
    result = function()
    return time.perf_counter() - started, cpu_seconds() - cpu, result


def measure(function: Callable[[], T]) -> tuple[dict[str, float], T]:
    """Wall time, CPU seconds and peak RSS of one call of ``function``, and its result."""
    seconds, cpu, result = timed(function)
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": peak_rss_mb()}, result


def report(values: Mapping[str, object], *, hard_exit: bool = False) -> None:
    """Print a child's measurement as the one JSON line :func:`run_child` reads. With
    ``hard_exit`` the process ends at once (native libraries' exit handlers are not measured)."""
    print(json.dumps(dict(values), default=str))
    sys.stdout.flush()
    if hard_exit:
        os._exit(0)


def run_child(script: str, arguments: Sequence[object], what: str) -> dict[str, Any]:
    """Run ``script --child arguments`` in a fresh interpreter; its :func:`report` as a dict.
    Raises :class:`RuntimeError` with the child's error output (``what`` names the run)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    os.sync()  # the files a case copied or wrote before are on disk: their write-back is not measured
    result = subprocess.run(
        [sys.executable, script, "--child", *map(str, arguments)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def repeated(function: Callable[[], T], repeat: int) -> tuple[list[float], T]:
    """The wall seconds of each of ``repeat`` calls of ``function`` in this process, and the last
    result."""
    times: list[float] = []
    for _ in range(repeat):
        seconds, _, result = timed(function)
        times.append(seconds)
    return times, result


def median_best(samples: Sequence[float]) -> dict[str, float]:
    """``{"median_s": ..., "best_s": ...}`` of wall-time ``samples``."""
    return {"median_s": statistics.median(samples), "best_s": min(samples)}


def medians(runs: Sequence[Mapping[str, Any]], keys: Iterable[str] | None = None) -> dict[str, float]:
    """The median of each of ``keys`` (default: every numeric key of the first run) over ``runs``."""
    if keys is None:
        keys = [key for key, value in runs[0].items() if isinstance(value, int | float)]
    return {key: statistics.median(float(run[key]) for run in runs) for key in keys}


def interleaved(engines: Sequence[str], repeat: int, run: Callable[[str, int], T]) -> dict[str, list[T]]:
    """``run(engine, round)`` ``repeat`` times for each engine, rounds interleaving the engines so
    that a change of load on the machine hits each alike."""
    runs: dict[str, list[T]] = {engine: [] for engine in engines}
    for attempt in range(repeat):
        for engine in engines:
            runs[engine].append(run(engine, attempt))
    return runs


def ratio(ours: float, theirs: float) -> float:
    """``ours / theirs`` (``nan`` when ``theirs`` is 0)."""
    return ours / theirs if theirs else float("nan")


def seconds_cell(values: Mapping[str, float], *, digits: int = 2) -> str:
    """``wall s (CPU s)`` of one measurement."""
    return f"{values['seconds']:.{digits}f} ({values['cpu_seconds']:.2f})"


def markdown_row(row: Sequence[object]) -> str:
    """One row of a Markdown table (printed as soon as it is measured)."""
    return "| " + " | ".join(str(cell) for cell in row) + " |"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table of ``header`` and ``rows``."""
    lines = [markdown_row(header), markdown_row(["---"] * len(header))]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def load_note(repeat: int | None = None) -> str:
    """``repeat N, median; load average at the end: ...`` (the machine may be shared)."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    runs = f"repeat {repeat}, median; " if repeat is not None else ""
    return f"{runs}load average at the end: {load} ({os.cpu_count()} CPUs)"


def write_json(name: str, results: object) -> Path:
    """Write ``results`` as ``bench/results/<name>.json`` (replacing the last run's); its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return path


def save_results(name: str, results: object, text: str) -> None:
    """Print ``text``, and write ``results`` (JSON) and ``text`` (Markdown) as
    ``bench/results/<name>-<time>.*``."""
    print(text)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS_DIR / f"{name}-{stamp}.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS_DIR / f"{name}-{stamp}.md").write_text(text + "\n")
