"""The streaming sink writes each micro-batch exactly once as Delta's sink does: the query's id (kept
in its checkpoint) names it, a restarted query skips what it committed, a new query is new."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from replay import DeltaLog, SetTransaction
from replay.spark import register
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.spark


@pytest.fixture
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def add_input(source: Path, name: str, ids: range) -> None:
    source.mkdir(exist_ok=True)
    (source / f"{name}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def run_stream(
    spark: Any, source: Path, table: str, checkpoint: str, files_per_batch: int | None = None
) -> None:
    reader = spark.readStream.schema("id long")
    if files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_batch)
    query = (
        reader.json(str(source))
        .writeStream.format("deltalog")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination(180)
    assert query.exception() is None


def ids(table: str) -> Counter[int]:
    return Counter(DeltaLog.for_table(table).update().to_arrow().column("id").to_pylist())


def app_ids(table: str) -> list[str]:
    log = DeltaLog.for_table(table)
    found = []
    for version in range(log.latest_version() + 1):
        found += [a.app_id for a in log.read_version(version) if isinstance(a, SetTransaction)]
    return list(dict.fromkeys(found))


def test_a_deleted_checkpoint_starts_a_new_query(deltalog: Any, tmp_path: Path) -> None:
    """Delta's sink: a new checkpoint is a new query id, so its batches 0, 1 ... are written
    (the source replays its input too); nothing it reads is skipped as someone else's batch."""
    source, table, checkpoint = tmp_path / "in", str(tmp_path / "t"), tmp_path / "ck"
    add_input(source, "a", range(0, 3))
    add_input(source, "b", range(3, 5))
    run_stream(deltalog, source, table, str(checkpoint), files_per_batch=1)  # batches 0 and 1
    shutil.rmtree(checkpoint)
    add_input(source, "c", range(5, 8))
    run_stream(deltalog, source, table, str(checkpoint))  # a new query: batch 0 reads a, b and c
    assert ids(table) == Counter({**dict.fromkeys(range(0, 5), 2), **dict.fromkeys(range(5, 8), 1)})
    assert len(app_ids(table)) == 2


def test_another_spelling_of_the_checkpoint_is_the_same_query(deltalog: Any, tmp_path: Path) -> None:
    """A batch the sink committed before Spark recorded it is skipped when the query restarts,
    however its checkpoint is spelled (``/x`` then ``file:/x``)."""
    source, table, checkpoint = tmp_path / "in", str(tmp_path / "t"), tmp_path / "ck"
    add_input(source, "a", range(0, 3))
    add_input(source, "b", range(3, 5))
    run_stream(deltalog, source, table, str(checkpoint), files_per_batch=1)
    for name in ("1", ".1.crc"):  # killed after the sink committed batch 1, before Spark recorded it
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run_stream(deltalog, source, table, f"file:{checkpoint}", files_per_batch=1)
    assert ids(table) == Counter(range(5))
    assert DeltaLog.for_table(table).latest_version() == 1
    assert len(app_ids(table)) == 1


def _leftovers(marker: str) -> list[int]:
    """Processes (of this test) still alive, found by the marker in their environment."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            alive.append(int(entry.name))
    return alive


@pytest.mark.own_spark
@pytest.mark.timeout(600)
def test_a_driver_killed_between_the_table_commit_and_the_spark_commit_log(tmp_path: Path) -> None:
    """A processing-time stream of several batches; the driver is SIGKILLed right after the sink
    committed a batch, before Spark's commit log has it. The restarted query re-runs that batch,
    the sink skips it: every input row is in the table once."""
    source, table, checkpoint = tmp_path / "in", str(tmp_path / "t"), str(tmp_path / "ck")
    for index in range(5):
        add_input(source, f"f{index}", range(index * 10, index * 10 + 10))
    marker = f"STREAM_DRIVER_TEST={tmp_path.name}"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), marker.split("=", maxsplit=1)[0]: marker.split("=")[1]}
    argv = [sys.executable, "-m", "tests.stream_driver", str(source), table, checkpoint, "50"]
    try:
        killed = subprocess.run(
            argv,
            env={**env, "KILL_AFTER_VERSION": "2"},
            cwd=REPO_ROOT,
            start_new_session=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        log = DeltaLog.for_table(table)
        assert log.latest_version() == 2  # batches 0, 1 and 2 are in the table ...
        assert not (Path(checkpoint) / "commits" / "2").exists()  # ... Spark recorded only 0 and 1
        restarted = subprocess.run(
            argv,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert restarted.returncode == 0, restarted.stderr[-3000:]
    finally:
        for pid in _leftovers(marker):
            os.kill(pid, signal.SIGKILL)
    assert ids(table) == Counter(range(50))
    assert log.update().version == 4  # batches 3 and 4; batch 2 was skipped, not written twice
    txns = [[a.version for a in log.read_version(v) if isinstance(a, SetTransaction)] for v in range(5)]
    assert txns == [[0], [1], [2], [3], [4]]
    assert len(app_ids(table)) == 1


def test_a_spark_write_whose_post_commit_hook_is_interrupted_keeps_its_files(
    deltalog: Any, tmp_path: Path
) -> None:
    """The commit landed, then the automatic checkpoint was interrupted: Spark aborts the write,
    and the abort finds the commit's txnId in the log and deletes nothing."""
    from replay import write_table

    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": [1]}), configuration={"delta.checkpointInterval": "1"})
    key = "spark.delta.logStore.file.impl"
    deltalog.conf.set(key, "tests.fault_stores.InterruptedCheckpointLogStore")
    try:
        with pytest.raises(Exception, match="interrupted while writing"):
            deltalog.range(2, 5).coalesce(1).write.format("deltalog").mode("append").save(table)
    finally:
        deltalog.conf.unset(key)
    snapshot = DeltaLog.for_table(table).update()
    assert snapshot.version == 1
    assert sorted(snapshot.to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]  # no file deleted


def change_table_once(directory: str, value: int) -> int:
    """Runs in a Spark task: the first call overwrites the table named in ``directory`` with a new
    schema and partitioning, while the micro-batch's tasks are writing."""
    from replay import write_table

    try:
        os.close(os.open(Path(directory) / "changed", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return value
    table = (Path(directory) / "table").read_text()
    write_table(
        table,
        pa.table({"id": [-1], "part": ["x"]}),
        mode="overwrite",
        overwrite_schema=True,
        partition_by=["part"],
    )
    return value


def test_a_micro_batch_commits_from_the_version_it_was_planned_against(deltalog: Any, tmp_path: Path) -> None:
    """A schema and partitioning change committed while a batch's tasks write is a conflict
    (Delta's MetadataChangedException), not a commit of the batch's files under the new layout."""
    from pyspark.sql.functions import udf

    source, table, checkpoint = tmp_path / "in", str(tmp_path / "t"), tmp_path / "ck"
    add_input(source, "a", range(0, 3))
    from replay import write_table

    write_table(table, pa.table({"id": pa.array([100], pa.int64())}))
    race = tmp_path / "race"
    race.mkdir()
    (race / "table").write_text(table)
    directory = str(race)
    changing = udf(lambda value: change_table_once(directory, value), "long")
    frame = deltalog.readStream.schema("id long").json(str(source)).select(changing("id").alias("id"))
    query = (
        frame.writeStream.format("deltalog")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(table)
    )
    with pytest.raises(Exception, match="MetadataChangedException"):
        query.awaitTermination(180)
    snapshot = DeltaLog.for_table(table).update()
    assert snapshot.version == 1  # the concurrent overwrite; the batch committed nothing
    assert snapshot.partition_columns == ["part"]
    assert snapshot.to_arrow().column("id").to_pylist() == [-1]


CHECKPOINT_ROOT_KEY = "spark.sql.streaming.checkpointLocation"


def run_stream_under_session_root(
    spark: Any, source: Path, table: str, root: Path, name: str | None = None
) -> str:
    """A run of a query whose checkpoint comes from the session's root (named or not); its id."""
    spark.conf.set(CHECKPOINT_ROOT_KEY, str(root))
    try:
        writer = (
            spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(source)).writeStream
        )
        if name is not None:
            writer = writer.queryName(name)
        query = writer.format("deltalog").trigger(availableNow=True).start(table)
        query.awaitTermination(180)
    finally:
        spark.conf.unset(CHECKPOINT_ROOT_KEY)
    assert query.exception() is None
    return str(query.id)


def test_a_named_query_under_the_session_checkpoint_root_is_exactly_once(
    deltalog: Any, tmp_path: Path
) -> None:
    """Spark puts a named query's checkpoint at ``<root>/<queryName>``: the sink finds the query's id
    there, so a batch it committed before Spark recorded it is skipped after a restart."""
    source, table, root = tmp_path / "in", str(tmp_path / "t"), tmp_path / "checkpoints"
    add_input(source, "a", range(0, 3))
    add_input(source, "b", range(3, 5))
    first = run_stream_under_session_root(deltalog, source, table, root, "events")
    for name in ("1", ".1.crc"):  # killed after the sink committed batch 1, before Spark recorded it
        (root / "events" / "commits" / name).unlink(missing_ok=True)
    second = run_stream_under_session_root(deltalog, source, table, root, "events")
    assert ids(table) == Counter(range(5))
    assert DeltaLog.for_table(table).latest_version() == 1
    query_id = json.loads((root / "events" / "metadata").read_text().splitlines()[0])["id"]
    assert app_ids(table) == [query_id] == [first] == [second]


def test_an_unnamed_query_under_the_session_checkpoint_root_is_identified_by_its_tasks(
    deltalog: Any, tmp_path: Path
) -> None:
    """An unnamed query gets ``<root>/<random uuid>`` from Spark, which the sink is not told: each
    start is a new query, and its batches carry the query's id from its tasks."""
    source, table, root = tmp_path / "in", str(tmp_path / "t"), tmp_path / "checkpoints"
    add_input(source, "a", range(0, 3))
    add_input(source, "b", range(3, 5))
    query_id = run_stream_under_session_root(deltalog, source, table, root)
    assert ids(table) == Counter(range(5))
    log = DeltaLog.for_table(table)
    assert log.latest_version() == 1  # one commit per batch
    assert app_ids(table) == [query_id]
    assert [json.loads((d / "metadata").read_text())["id"] for d in root.iterdir()] == [query_id]
    assert log.update().set_transactions == {query_id: 1}
