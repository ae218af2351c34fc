"""SQL expression evaluation benchmark: the grammar's evaluator against hand-written pyarrow compute.

Run ``python bench/sql_expression.py [--rows N] [--repeat K] [--batches B]``. A table of ``--rows``
rows (``a``, ``b`` BIGINT, ``s`` STRING, 10% nulls each, ``--batches`` record batches) is built in
memory; then, alternately, ``--repeat`` times each:

* ``parse_expression("a + b * 2 > 10 AND s LIKE 'x%'").bind(schema).evaluate(table)`` (bound once,
  outside the timing; the ANSI evaluator uses overflow-checked arithmetic);
* the same computed by hand with ``pyarrow.compute``: ``and_kleene(greater(add_checked(a,
  multiply_checked(b, 2)), 10), starts_with(s, "x"))`` (and with unchecked ``add``/``multiply``).

Both results must be equal. Printed: median and best wall time of each and the ratios (grammar
over hand-written); also written to ``bench/results/sql_expression.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from replay.protocol.sql import parse_expression  # noqa: E402

TEXT = "a + b * 2 > 10 AND s LIKE 'x%'"


def make_table(rows: int, batches: int) -> pa.Table:
    import random

    rng = random.Random(5)
    size = rows // batches
    parts = []
    words = [None, "xa", "xyz", "ab", "", "x", "yx"]
    for _ in range(batches):
        a = pc.cast(pc.floor(pc.multiply(pc.random(size), 100)), pa.int64())
        b = pc.cast(pc.floor(pc.multiply(pc.random(size), 20)), pa.int64())
        nulls = pc.less(pc.random(size), 0.1)
        a = pc.if_else(nulls, pa.scalar(None, pa.int64()), a)
        b = pc.if_else(pc.less(pc.random(size), 0.1), pa.scalar(None, pa.int64()), b)
        pool = pa.array([rng.choice(words) for _ in range(4096)])
        s = pool.take(pc.cast(pc.floor(pc.multiply(pc.random(size), 4095)), pa.int64()))
        parts.append(pa.table({"a": a, "b": b, "s": s}))
    return pa.concat_tables(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    table = make_table(args.rows, args.batches)
    bound = parse_expression(TEXT).bind(table.schema)

    def grammar() -> pa.ChunkedArray:
        result = bound.evaluate(table)
        assert isinstance(result, pa.ChunkedArray)
        return result

    def by_hand(checked: bool) -> Callable[[], pa.ChunkedArray]:
        add, multiply = (pc.add_checked, pc.multiply_checked) if checked else (pc.add, pc.multiply)
        return lambda: pc.and_kleene(
            pc.greater(add(table["a"], multiply(table["b"], 2)), 10), pc.starts_with(table["s"], "x")
        )

    results: dict[str, list[float]] = {}
    outputs = {}
    for name, function in (("grammar", grammar), ("checked", by_hand(True)), ("unchecked", by_hand(False))):
        function()  # warm-up
        results[name], outputs[name] = harness.repeated(function, args.repeat)
    assert outputs["grammar"].to_pylist() == outputs["checked"].to_pylist()
    summary = {name: harness.median_best(times) for name, times in results.items()}
    for other in ("checked", "unchecked"):
        summary[f"ratio_vs_{other}"] = {
            "median": harness.ratio(summary["grammar"]["median_s"], summary[other]["median_s"]),
            "best": harness.ratio(summary["grammar"]["best_s"], summary[other]["best_s"]),
        }
    print(f"{args.rows} rows in {args.batches} batches, {TEXT}")
    for name in ("grammar", "checked", "unchecked"):
        print(f"  {name:10s} median {summary[name]['median_s']:.3f} s  best {summary[name]['best_s']:.3f} s")
    for other in ("checked", "unchecked"):
        ratio = summary[f"ratio_vs_{other}"]
        print(f"  grammar / {other}: median {ratio['median']:.2f}x  best {ratio['best']:.2f}x")
    print(f"  {harness.load_note(args.repeat)}")
    harness.write_json(
        "sql_expression", {"rows": args.rows, "batches": args.batches, "text": TEXT, **summary}
    )


if __name__ == "__main__":
    main()
