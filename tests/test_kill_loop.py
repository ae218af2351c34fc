"""kill -9 of writers at random moments loses and tears no commit, on local disk, S3 and S3+DynamoDB.

Writer processes (forked from a forkserver that preloaded :mod:`tests.crash_writers`) commit one
file per commit through ``DeltaLog.commit`` and acknowledge each commit in a file of their own.
Each is killed with SIGKILL a random time after its first acknowledgement; three run at a time.
Afterwards: the versions are contiguous, every commit file parses and holds one added file,
no file was committed twice, every acknowledged commit is there at the version acknowledged,
the temp files of the dead are removable, and a later writer continues at the next version.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from logstores import create_log_store
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile, Metadata, Protocol
from replay.txn.transaction import commit_actions as commit
from tests.cloud_servers import MotoServer, dynamodb_settings, s3_settings, unique_name
from tests.crash_writers import commit_until_killed

SCHEMA = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
CONCURRENT_WRITERS = 3
FIRST_COMMIT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class KillPlan:
    kills: int
    max_delay_s: float  # a writer is killed uniformly within this long after its first commit


PLANS = {"local": KillPlan(150, 0.06), "s3": KillPlan(40, 0.25), "s3_dynamodb": KillPlan(40, 0.4)}


@dataclass
class Writer:
    process: BaseProcess
    ack: Path
    kill_at: float | None = None


def _forkserver() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.crash_writers"])
    return context


def _acknowledged(ack: Path) -> list[tuple[int, str]]:
    if not ack.exists():
        return []
    lines = ack.read_text().split("\n")[:-1]  # a line without its newline was not acknowledged
    return [(int(version), path) for version, path in (line.split(" ") for line in lines)]


def _kill_writers(uri: str, conf: dict[str, str], plan: KillPlan, ack_dir: Path, seed: int) -> list[Path]:
    """Start writers three at a time and SIGKILL each at a random moment; the ack files."""
    context = _forkserver()
    rng = random.Random(seed)
    acks: list[Path] = []
    live: list[Writer] = []
    kills = 0
    while kills < plan.kills:
        while len(live) < CONCURRENT_WRITERS and kills + len(live) < plan.kills:
            ack = ack_dir / f"writer-{len(acks)}"
            acks.append(ack)
            args = (uri, conf, str(ack), f"w{len(acks)}")
            process = context.Process(target=commit_until_killed, args=args, daemon=True)
            process.start()
            live.append(Writer(process, ack))
        now = time.monotonic()
        for writer in list(live):
            assert writer.process.is_alive(), f"a writer exited on its own ({writer.process.exitcode})"
            if writer.kill_at is None and writer.ack.exists() and writer.ack.stat().st_size:
                writer.kill_at = now + rng.uniform(0, plan.max_delay_s)
            if writer.kill_at is not None and now >= writer.kill_at:
                os.kill(writer.process.pid, signal.SIGKILL)
                writer.process.join(10)
                live.remove(writer)
                kills += 1
        time.sleep(0.002)
    return acks


def _check_log(uri: str, conf: dict[str, str], acks: list[Path]) -> tuple[int, int]:
    """Every invariant of a crash-safe log; returns (latest version, acknowledged commits)."""
    log = DeltaLog(uri, conf)
    store = log.store
    removed = store.delete_stale_temp_files(log.log_path, older_than_s=0)
    names = [status.name for status in store.list_from(f"{log.log_path}/.") if not status.is_dir]
    latest = log.latest_version()
    commits = [name for name in names if name.endswith(".json")]  # checkpoints come from post-commit hooks
    assert commits == [f"{version:020d}.json" for version in range(latest + 1)], (removed, names)
    assert all(
        name.endswith((".json", ".checkpoint.parquet")) or name == "_last_checkpoint" for name in names
    )
    committed: dict[str, int] = {}
    per_version = Counter[int]()
    for version in range(1, latest + 1):  # read_version parses every line: a torn file raises
        adds = [action.path for action in log.read_version(version) if isinstance(action, AddFile)]
        assert len(adds) == 1, f"version {version}: {adds}"
        assert adds[0] not in committed, f"{adds[0]} committed twice: {committed[adds[0]]} and {version}"
        committed[adds[0]] = version
        per_version[version] += 1
    acknowledged = [entry for ack in acks for entry in _acknowledged(ack)]
    for version, path in acknowledged:
        assert committed.get(path) == version, (
            f"acknowledged {path} at {version}, found {committed.get(path)}"
        )
    assert sorted(add.path for add in log.snapshot().files()) == sorted(committed)
    later = log.commit([AddFile(path="later", size=1, modification_time=1, data_change=True)])
    assert later == latest + 1
    return latest, len(acknowledged)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("where", sorted(PLANS))
def test_writers_killed_at_random_moments_lose_and_tear_nothing(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "local":
        uri, conf = str(tmp_path / "table"), {}
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        uri = f"s3a://{moto.create_bucket()}/table"
        conf = s3_settings(moto) if where == "s3" else dynamodb_settings(moto, unique_name("kill"))
        if where == "s3_dynamodb":
            conf["spark.delta.logStore.s3a.impl"] = "io.delta.storage.S3DynamoDBLogStore"
    creator = DeltaLog(uri, conf, create_log_store(conf))
    metadata = Metadata(id=str(uuid.uuid4()), schema_string=SCHEMA, configuration={})
    commit(creator.io, [Protocol(1, 2), metadata], "CREATE TABLE", read_version=-1)
    ack_dir = tmp_path / "acks"
    ack_dir.mkdir()
    started = time.monotonic()
    acks = _kill_writers(uri, conf, PLANS[where], ack_dir, seed=sum(map(ord, where)))
    latest, acknowledged = _check_log(uri, conf, acks)
    print(
        f"{where}: {PLANS[where].kills} kills, {latest} commits ({acknowledged} acknowledged), "
        f"0 lost, 0 torn, {time.monotonic() - started:.1f} s"
    )
    assert acknowledged > PLANS[where].kills // 2
