"""The driver / per-file split: plans are picklable and their per-file work runs in another process
(what a Spark executor does), giving what the local run gives."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from replay import DeltaLog, write_table
from replay.dml import plan_delete, plan_merge, plan_update
from replay.dml.context import candidate_files
from replay.dml.merge_clauses import MATCHED, NOT_MATCHED, ClauseSpec
from replay.dml.outputs import Sinks
from replay.protocol.arrow_actions import add_actions
from tests.dml_cases import DV_CDF

DATA = pa.table({"id": pa.array(range(20), pa.int64()), "v": pa.array(range(20), pa.int64())})


def executor_task(payload: bytes) -> tuple[list[tuple[str, int, int]], int, int]:
    """What an executor does with a pickled plan and its files: work on each, close the sinks."""
    plan, files = pickle.loads(payload)
    sinks = Sinks(plan.table)
    changes = [plan.process_file(file, sinks) for file in files]
    shared = sinks.close()
    summary = [(c.file.path, c.changed_rows, len(c.actions(0))) for c in changes]
    return summary, len(shared.data), len(shared.changes)


def _plans(uri: str) -> list[tuple[Any, Any]]:
    snapshot = DeltaLog.for_table(uri).update()
    delete, delete_pruning = plan_delete(snapshot, "v % 3 = 0")
    update, update_pruning = plan_update(snapshot, {"v": "v * 10"}, predicate="id > 12")
    specs = [ClauseSpec(MATCHED, "update", None, None), ClauseSpec(NOT_MATCHED, "insert", None, None)]
    source = pa.table({"id": pa.array([3, 4, 99], pa.int64()), "v": pa.array([0, 0, 0], pa.int64())})
    merge = plan_merge(snapshot, source, "t.id = s.id", specs, source_alias="s", target_alias="t")
    return [
        (delete, candidate_files(snapshot, delete_pruning)),
        (update, candidate_files(snapshot, update_pruning)),
        (merge.plan, candidate_files(snapshot, merge.pruning)),
    ]


def test_plans_run_their_per_file_work_in_another_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration=DV_CDF, max_rows_per_file=5)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        for plan, candidates in _plans(uri):
            files = add_actions(candidates)
            remote = pool.submit(executor_task, pickle.dumps((plan, files))).result()
            local = executor_task(pickle.dumps((plan, files)))
            assert remote[0] == local[0] and remote[1:] == local[1:]
            assert any(changed for _, changed, _ in remote[0])
