"""Deletion vector writing benchmark: serialising, writing and reading back large DVs.

Run ``python bench/dv_write.py [--repeat N]``. For each row set (1M random rows of a 10M-row file,
given sorted and unsorted, and 1M contiguous rows) it prints the best of ``--repeat`` wall times
of :func:`replay.data.roaring_bitmap.serialize_bitmap`, of
:func:`~replay.data.roaring_bitmap.deserialize_bitmap`, and of a local DV file written with
:class:`~replay.data.deletion_vector_writer.DeletionVectorWriter` and read back with
:func:`~replay.data.deletion_vectors.read_deletion_vector`; then the time of
:meth:`~replay.data.deletion_vector_writer.DeletionVectorWriter.update` uniting a 1M-row DV with
1M more rows. Every result is checked against the input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from replay.data.deletion_vector_writer import DeletionVectorWriter  # noqa: E402
from replay.data.deletion_vectors import read_deletion_vector  # noqa: E402
from replay.data.roaring_bitmap import deserialize_bitmap, serialize_bitmap  # noqa: E402
from replay.protocol.actions import AddFile  # noqa: E402

T = TypeVar("T")
FILE_ROWS = 10_000_000


def best(function: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The shortest wall time of ``repeat`` calls, and the last result."""
    times, result = harness.repeated(function, repeat)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    random_rows = rng.choice(FILE_ROWS, 1_000_000, replace=False).astype(np.uint64)
    cases = {
        "1M random of 10M, sorted": np.sort(random_rows),
        "1M random of 10M, unsorted": random_rows,
        "1M contiguous": np.arange(5_000_000, 6_000_000, dtype=np.uint64),
    }
    with tempfile.TemporaryDirectory() as table:
        for name, rows in cases.items():
            expected = np.unique(rows)
            serialise_s, data = best(lambda rows=rows: serialize_bitmap(rows), args.repeat)
            read_s, back = best(lambda data=data: deserialize_bitmap(data), args.repeat)
            assert np.array_equal(back, expected)

            def file_round_trip(rows: np.ndarray = rows) -> np.ndarray:
                with DeletionVectorWriter(table) as writer:
                    descriptor = writer.add(rows)
                return read_deletion_vector(descriptor, table)

            file_s, back = best(file_round_trip, args.repeat)
            assert np.array_equal(back, expected)
            print(
                f"{name:28} serialise {serialise_s * 1000:7.1f} ms ({len(data):>9,} bytes), "
                f"deserialise {read_s * 1000:6.1f} ms, write + read a DV file {file_s * 1000:7.1f} ms"
            )
        stats = orjson.dumps({"numRecords": FILE_ROWS}).decode()
        with DeletionVectorWriter(table) as writer:
            first = writer.update(AddFile(path="f.parquet", size=1, stats=stats), random_rows)
        file = AddFile(path="f.parquet", size=1, stats=stats, deletion_vector=first.descriptor)
        more = rng.choice(FILE_ROWS, 1_000_000, replace=False)

        def unite() -> int:
            with DeletionVectorWriter(table) as writer:
                return writer.update(file, more).newly_deleted

        update_s, added = best(unite, args.repeat)
        assert added == np.setdiff1d(more, random_rows).size
        print(f"{'update: 1M-row DV + 1M rows':28} {update_s * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
