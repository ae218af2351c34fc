"""The process-wide pyarrow settings of ``import replay``: the library never makes pyarrow import
pandas (nor anything import pyspark), pyarrow treats pandas objects as before once the process
imports pandas itself; Arrow's default pool is jemalloc unless the application chose one.

Each case runs in a fresh interpreter: the test process has pandas imported already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, environment: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``code`` in a new interpreter (the worktree's library first on the path, ``environment``
    added to the environment); it prints one JSON object last."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        env={**env, **(environment or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_row_level_changes_and_writes_import_neither_pandas_nor_pyspark(tmp_path: Path) -> None:
    found = run_fresh(
        f"""
        import json, sys
        import numpy as np
        import pyarrow as pa
        from replay import DeltaTable, write_table

        path = {str(tmp_path / "t")!r}
        rows = pa.table({{"id": np.arange(100), "value": np.linspace(0, 1, 100)}})
        write_table(path, rows, max_rows_per_file=30)
        write_table(path, rows.slice(0, 10), mode="append")
        table = DeltaTable(path)
        table.delete("value < 0.1")
        table.update({{"value": "value + 1"}}, predicate="id = 50")
        source = pa.table({{"id": np.array([1, 2, 500]), "value": np.array([0.5, 0.5, 0.5])}})
        (
            table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        rows_left = DeltaTable(path).to_pyarrow_table().num_rows
        print(json.dumps({{"modules": sorted(m for m in ("pandas", "pyspark") if m in sys.modules),
                          "rows": rows_left}}))
        """
    )
    assert found == {"modules": [], "rows": 93}


def test_pyarrow_takes_pandas_up_when_the_process_imports_it() -> None:
    found = run_fresh(
        """
        import json, sys
        import replay
        import numpy as np
        import pyarrow as pa
        pa.array(np.arange(3)); pa.scalar(1)
        before = "pandas" in sys.modules
        import importlib.util
        assert importlib.util.find_spec("pandas") is not None  # a lookup alone changes nothing
        import pandas as pd
        categorical = pa.array(pd.Series(["a", "b", "a"], dtype="category"))
        frame = pa.table(pd.DataFrame({"a": [1, 2]}))
        nanos = pa.scalar(np.datetime64(1, "ns")).as_py()
        print(json.dumps({"before": before, "categorical": str(categorical.type),
                          "frame": frame.num_rows, "nanos": type(nanos).__name__}))
        """
    )
    assert found == {
        "before": False,
        "categorical": "dictionary<values=string, indices=int8, ordered=0>",
        "frame": 2,
        "nanos": "Timestamp",
    }


def test_nothing_changes_when_pandas_comes_first() -> None:
    found = run_fresh(
        """
        import json, sys
        import pandas as pd
        import pyarrow as pa
        import replay
        print(json.dumps({"series": str(pa.array(pd.Series([1, None], dtype="Int64")).type),
                          "finders": [type(f).__name__ for f in sys.meta_path
                                      if "Pandas" in type(f).__name__]}))
        """
    )
    assert found == {"series": "int64", "finders": []}


POOL = """
import json, os, sys
{before}
import replay
import pyarrow as pa
import pyarrow.parquet as pq
sink = pa.BufferOutputStream()
pq.write_table(pa.table({{"a": list(range(100_000))}}), sink)
pq.read_table(pa.BufferReader(sink.getvalue()))
print(json.dumps({{"pool": pa.default_memory_pool().backend_name,
                  "mimalloc used": pa.mimalloc_memory_pool().max_memory() > 0,
                  "variable": os.environ.get("ARROW_DEFAULT_MEMORY_POOL")}}))
"""


def test_arrow_buffers_come_from_jemalloc() -> None:
    """Arrow's C++ code too (the Parquet writer's pages) allocates from jemalloc, and the variable
    that chose it is gone again."""
    found = run_fresh(POOL.format(before=""))
    assert found == {"pool": "jemalloc", "mimalloc used": False, "variable": None}


def test_pyarrow_imported_before_gets_jemalloc_as_its_default() -> None:
    found = run_fresh(POOL.format(before="import pyarrow"))
    assert found["pool"] == "jemalloc"


def test_a_pool_the_application_chose_stays() -> None:
    named = run_fresh(POOL.format(before=""), {"ARROW_DEFAULT_MEMORY_POOL": "system"})
    assert named == {"pool": "system", "mimalloc used": False, "variable": "system"}
    chosen = "import pyarrow as pa; pa.set_memory_pool(pa.system_memory_pool())"
    assert run_fresh(POOL.format(before=chosen))["pool"] == "system"
