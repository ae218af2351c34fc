"""The table and the MERGE sources of the row-level change benchmarks (``bench/dml.py`` and
``bench/spark_dml.py``).

The table holds :data:`ROWS` rows in :data:`FILES` files of :data:`ROWS_PER_FILE` rows (``id``:
0..N-1 sorted, so statistics prune by it; ``value``: uniform in [0, 1); ``cat``: one of 50
strings; ``amount``: an integer); ``BENCH_DML_ROWS`` in the environment makes it smaller for a
trial run. It is generated once under a work directory, plain (copy-on-write) or with
``delta.enableDeletionVectors``, in a separate process (``python -m bench.dml_tables PATH KIND``)
so that the benchmark's own process stays small; each measurement runs on a fresh copy of it
(:func:`measured_copy`).

Nothing here imports NumPy or pyarrow at module level: a measured child imports its engine first,
then builds the MERGE source (:func:`source_rows`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from bench import harness

ROWS = int(os.environ.get("BENCH_DML_ROWS", "10000000"))
"""Rows of the table (``BENCH_DML_ROWS`` sets fewer for a trial run; at least 100 000)."""
FILES = 100
ROWS_PER_FILE = ROWS // FILES
KINDS = ("cow", "dv")


def generate(root: Path, deletion_vectors: bool) -> Path:
    """The template table (generated on first use) of the given kind."""
    kind = "dv" if deletion_vectors else "cow"
    template = root / (f"template-{kind}" if ROWS == 10_000_000 else f"template-{kind}-{ROWS}")
    if (template / ".complete").exists():
        return template
    shutil.rmtree(template, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(harness.REPO_ROOT))
    command = [sys.executable, "-m", "bench.dml_tables", str(template), kind]
    subprocess.run(command, check=True, env=env, cwd=harness.REPO_ROOT)
    (template / ".complete").write_text("")
    return template


def measured_copy(template: Path, table: Path) -> Path:
    """A fresh copy of ``template`` at ``table`` (the one a measurement changes)."""
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(template, table, ignore=shutil.ignore_patterns(".complete"))
    return table


def write_template(path: str, kind: str) -> None:
    """Write the table of ``kind`` (``cow`` or ``dv``) at ``path``."""
    import numpy as np
    import pyarrow as pa

    from replay import write_table

    rng = np.random.default_rng(1)
    categories = np.array([f"category-{i:02d}" for i in range(50)], dtype=object)

    def batches() -> Iterator[pa.RecordBatch]:
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

    first = next(iter(batches()))
    reader = pa.RecordBatchReader.from_batches(first.schema, batches())
    configuration = {"delta.enableDeletionVectors": "true"} if kind == "dv" else {}
    write_table(path, reader, configuration=configuration, max_rows_per_file=ROWS_PER_FILE)


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
    """The MERGE source of ``operation``: ``merge-100k`` (50 000 random target ids and 50 000 new
    ones) or ``merge-1k`` (500 ids of one file and 500 new)."""
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


if __name__ == "__main__":
    harness.use_repo_packages()
    write_template(sys.argv[1], sys.argv[2])
