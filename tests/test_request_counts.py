"""Log reads on object stores send the requests they need and no more.

A table of 120 small commits with a checkpoint at 99 is read through a recording proxy in front
of each emulator (moto, fake-gcs-server, Azurite). Loading the latest snapshot, time travel to
version 50 and a ``table_changes`` call each read every object they need exactly once with a GET
(a Parquet checkpoint at most twice: footer and body), send no HEAD or other metadata request, list
the log once, and stay within 1.1 times the floor computed from the listing
(``tests/request_counts.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from logstores import create_log_store, object_store
from logstores.base import FileStatus
from replay.cdc import table_changes
from replay.delta_log import DeltaLog
from tests import request_counts as rc
from tests.cloud_servers import FaultProxy, ProxiedRequest, running_fault_proxy, service_root, unique_name

pytestmark = pytest.mark.cloud

logger = logging.getLogger(__name__)

MAX_RATIO = 1.1


@dataclass(frozen=True)
class CountedTable:
    """The table of :mod:`tests.request_counts` on one service, and a proxy recording its requests."""

    service: str
    uri: str
    conf: dict[str, str]  # reaches the service through the proxy
    proxy: FaultProxy
    listing: list[FileStatus]

    def measure(self, operation: Callable[[DeltaLog], object]) -> list[rc.Request]:
        """The requests ``operation`` sends on a fresh ``DeltaLog`` (nothing cached), classified."""
        return [rc.classify(request, self.service) for request in self.record(operation)]

    def record(self, operation: Callable[[DeltaLog], object]) -> list[ProxiedRequest]:
        """The requests ``operation`` sends on a fresh ``DeltaLog``, as the proxy saw them."""
        delta_log = DeltaLog(self.uri, self.conf)
        with self.proxy._lock:
            self.proxy.requests.clear()
        operation(delta_log)
        with self.proxy._lock:
            return list(self.proxy.requests)


@pytest.fixture(scope="module", params=["s3", "gcs", "azure"])
def counted_table(request: pytest.FixtureRequest) -> Iterator[CountedTable]:
    service = request.param
    root, upstream, conf_for = service_root(request, service)
    uri = f"{root}/{unique_name('table')}"
    direct = conf_for(upstream)
    store = create_log_store(direct)
    rc.write_table(store, uri, direct)
    listing = list(store.list_from(f"{uri}/_delta_log/0"))
    with running_fault_proxy(upstream) as proxy:
        yield CountedTable(service, uri, conf_for(proxy.endpoint), proxy, listing)


def _check(table: CountedTable, requests: list[rc.Request], floor: rc.Floor, what: str) -> None:
    kinds = {kind: sum(r.kind == kind for r in requests) for kind in ("GET", "HEAD", "LIST")}
    gets = [r.target.rsplit("/", 1)[-1] for r in requests if r.kind == "GET"]
    logger.info("%s on %s: %s, floor %d", what, table.service, kinds, floor.total)
    assert len(requests) == sum(kinds.values()), [r for r in requests if r.kind not in kinds]
    assert kinds["HEAD"] == 0, [r.target for r in requests if r.kind == "HEAD"]
    assert kinds["LIST"] == floor.list_pages
    assert set(gets) == floor.names
    repeated = {name: gets.count(name) for name in set(gets) if gets.count(name) > 1}
    assert set(repeated) <= set(floor.parquet_objects) and max(repeated.values(), default=0) <= 2, repeated
    assert len(requests) <= MAX_RATIO * floor.total, (kinds, floor)


def test_latest_snapshot_load(counted_table: CountedTable) -> None:
    requests = counted_table.measure(lambda log: log.update().num_files)
    floor = rc.snapshot_floor(counted_table.listing, rc.NUM_COMMITS - 1)
    assert len(floor.parquet_objects) == 1 and len(floor.text_objects) == 1 + 20
    _check(counted_table, requests, floor, "latest snapshot")


def test_time_travel(counted_table: CountedTable) -> None:
    version = rc.TIME_TRAVEL_VERSION
    requests = counted_table.measure(lambda log: log.snapshot(version).num_files)
    floor = rc.snapshot_floor(counted_table.listing, version)
    _check(counted_table, requests, floor, f"snapshot at {version}")


def test_table_changes(counted_table: CountedTable) -> None:
    first, last = rc.CHANGES_RANGE
    changes = []
    requests = counted_table.measure(lambda log: changes.append(table_changes(log, first, last)))
    assert sorted(changes[0].column("id").to_pylist()) == list(range(first, last + 1))
    floor = rc.changes_floor(counted_table.listing, first, last)
    _check(counted_table, requests, floor, f"table_changes({first}, {last})")


def test_large_checkpoint_is_read_in_ranges_without_head(
    counted_table: CountedTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint above the single-GET limit is read with ranged GETs of its listed size."""
    monkeypatch.setattr(object_store, "SINGLE_GET_LIMIT", 0)
    checkpoint = next(s for s in counted_table.listing if s.name.endswith(".checkpoint.parquet"))
    snapshots = []
    requests = counted_table.record(lambda log: snapshots.append(log.update()))
    assert snapshots[0].num_files == rc.NUM_COMMITS
    kinds = [rc.classify(request, counted_table.service) for request in requests]
    assert [r for r in kinds if r.kind not in ("GET", "LIST")] == []
    reads = [r for r, kind in zip(requests, kinds, strict=True) if kind.target.endswith(checkpoint.name)]
    assert reads
    for read in reads:  # ranges sized from the listing: the object's size was never asked for
        [ranged] = [value for key, value in read.headers.items() if key.lower() in ("range", "x-ms-range")]
        first, last = (int(bound) for bound in ranged.removeprefix("bytes=").split("-"))
        assert 0 <= first <= last < checkpoint.size
