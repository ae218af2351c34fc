"""Storage requests of log reads, ours against delta-rs, counted by a proxy in front of emulators.

Run ``python bench/requests.py [--services s3,azure,gcs]``. The table of ``tests/request_counts.py``
(120 small commits, one data file each, a checkpoint at 99) is written on each emulator (moto,
Azurite, fake-gcs-server), then read through a recording HTTP proxy:

* ``latest``: load the latest snapshot and its file list (ours ``DeltaLog(uri).update().files_table()``,
  delta-rs ``DeltaTable(uri).file_uris()``);
* ``version 50``: the same at version 50;
* ``changes``: the change feed of versions 105..114 (ours ``table_changes``, delta-rs ``load_cdf``).

Each measurement runs in a fresh interpreter, so nothing is cached and delta-rs, which holds the
GIL while it waits on HTTP, cannot stall the in-process proxy. A request is a ``GET`` (object
bytes), ``HEAD`` (object metadata, including a GCS JSON-API object ``GET``), ``LIST`` (a listing
page) or other. The floor is one ``GET`` per object read (two for a Parquet checkpoint: footer and
body), one per data file, plus one ``LIST`` page. delta-rs cannot talk to fake-gcs-server (see the
environment notes), so GCS has our counts only. The table is printed and written to
``bench/results/requests.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import harness

harness.use_repo_packages()
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

from logstores.testing.servers import (  # noqa: E402
    AWS_TEST_KEY,
    AWS_TEST_SECRET,
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    running_azurite,
    running_fake_gcs,
    running_moto,
    unique_name,
)
from tests import request_counts as rc  # noqa: E402
from tests.cloud_servers import FaultProxy, running_fault_proxy  # noqa: E402

OPERATIONS = ("latest", "version 50", "changes")
KINDS = ("GET", "HEAD", "LIST")


# -- what a child process runs -----------------------------------------------------------------------
def run_child(side: str, operation: str, uri: str, options: dict[str, str]) -> None:
    first, last = rc.CHANGES_RANGE
    version = rc.TIME_TRAVEL_VERSION
    if side == "ours":
        from replay.cdc import table_changes
        from replay.delta_log import DeltaLog

        log = DeltaLog(uri, options)
        if operation == "latest":
            log.update().files_table()
        elif operation == "version 50":
            log.snapshot(version).files_table()
        else:
            table_changes(log, first, last)
        harness.report({})
        return
    import pyarrow as pa
    from deltalake import DeltaTable

    if operation == "latest":
        DeltaTable(uri, storage_options=options).file_uris()
    elif operation == "version 50":
        DeltaTable(uri, version=version, storage_options=options).file_uris()
    else:
        table = DeltaTable(uri, storage_options=options)
        pa.table(table.load_cdf(starting_version=first, ending_version=last).read_all())
    harness.report({})


# -- services ----------------------------------------------------------------------------------------
class Service:
    """An emulator, a table on it, and the options each side uses to reach an endpoint."""

    name: str

    def running(self) -> contextlib.AbstractContextManager[None]:
        """The service's emulator, running for the duration of the ``with`` block."""
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def root(self) -> str:
        raise NotImplementedError

    def ours(self, endpoint: str) -> dict[str, str]:
        raise NotImplementedError

    def delta_rs(self, endpoint: str) -> dict[str, str] | None:
        return None

    def delta_rs_uri(self, uri: str) -> str:
        return uri


class S3(Service):
    name = "s3"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with running_moto() as self.moto:
            yield

    @property
    def endpoint(self) -> str:
        return self.moto.endpoint

    def root(self) -> str:
        return f"s3a://{self.moto.create_bucket()}"

    def ours(self, endpoint: str) -> dict[str, str]:
        return self.moto.s3a_conf(endpoint)

    def delta_rs(self, endpoint: str) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": AWS_TEST_KEY,
            "AWS_SECRET_ACCESS_KEY": AWS_TEST_SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def delta_rs_uri(self, uri: str) -> str:
        return "s3://" + uri.split("://", 1)[1]


class Azure(Service):
    name = "azure"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with running_azurite([harness.REPO_ROOT]) as self.azurite:
            yield

    @property
    def endpoint(self) -> str:
        return self.azurite.endpoint

    def root(self) -> str:
        return f"abfs://{self.azurite.create_container()}"

    def ours(self, endpoint: str) -> dict[str, str]:
        return self.azurite.conf(endpoint)

    def delta_rs(self, endpoint: str) -> dict[str, str]:
        return {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "allow_http": "true",
            "azure_storage_endpoint": f"{endpoint}/{AZURITE_ACCOUNT}",
        }

    def delta_rs_uri(self, uri: str) -> str:
        return "az://" + uri.split("://", 1)[1]


class GCS(Service):
    name = "gcs"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with running_fake_gcs() as self.gcs:
            yield

    @property
    def endpoint(self) -> str:
        return self.gcs.endpoint

    def root(self) -> str:
        return f"gs://{self.gcs.create_bucket()}"

    def ours(self, endpoint: str) -> dict[str, str]:
        return self.gcs.conf(endpoint)


SERVICES: dict[str, type[Service]] = {"s3": S3, "azure": Azure, "gcs": GCS}


# -- measuring -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counter:
    """Runs measurements against one service through its recording proxy."""

    service: Service
    proxy: FaultProxy
    verbose: bool = False

    def measure(self, side: str, operation: str, uri: str, options: dict[str, str]) -> dict:
        """Requests per kind sent by one ``operation`` of ``side`` in a fresh interpreter."""
        with self.proxy._lock:
            self.proxy.requests.clear()
        name = self.service.name
        arguments = [side, operation, uri, json.dumps(options)]
        try:
            elapsed, _, _ = harness.timed(
                lambda: harness.run_child(__file__, arguments, f"{name} {side} {operation}")
            )
        except RuntimeError as failure:
            error = (str(failure).strip().splitlines() or ["no output"])[-1]
            print(f"{name} {side} {operation} failed: {error}", file=sys.stderr)
            return {"error": error}
        with self.proxy._lock:
            requests = [rc.classify(request, name) for request in self.proxy.requests]
        if self.verbose:
            for request in requests:
                print(f"  {name} {side} {operation}: {request.kind} {request.target}")
        counts: dict[str, float] = {kind: sum(r.kind == kind for r in requests) for kind in KINDS}
        counts["other"] = len(requests) - sum(counts.values())
        counts["total"] = len(requests)
        counts["seconds"] = round(elapsed, 2)
        return counts


def floors(listing: list) -> dict[str, int]:
    first, last = rc.CHANGES_RANGE
    return {
        "latest": rc.snapshot_floor(listing, rc.NUM_COMMITS - 1).total,
        "version 50": rc.snapshot_floor(listing, rc.TIME_TRAVEL_VERSION).total,
        "changes": rc.changes_floor(listing, first, last).total,
    }


def run_service(service: Service, verbose: bool = False) -> dict:
    from logstores import create_log_store

    with service.running():
        uri = f"{service.root()}/{unique_name('table')}"
        direct = service.ours(service.endpoint)
        store = create_log_store(direct)
        rc.write_table(store, uri, direct)
        listing = list(store.list_from(f"{uri}/_delta_log/0"))
        result: dict = {"floor": floors(listing), "ours": {}, "delta-rs": {}}
        with running_fault_proxy(service.endpoint) as proxy:
            counter = Counter(service, proxy, verbose)
            for operation in OPERATIONS:
                result["ours"][operation] = counter.measure(
                    "ours", operation, uri, service.ours(proxy.endpoint)
                )
                theirs = service.delta_rs(proxy.endpoint)
                if theirs is not None:
                    result["delta-rs"][operation] = counter.measure(
                        "delta-rs", operation, service.delta_rs_uri(uri), theirs
                    )
        return result


def cell(counts: dict | None) -> str:
    if counts is None:
        return "-"
    if "error" in counts:
        return "failed"
    parts = [f"{counts[kind]} {kind}" for kind in KINDS if counts[kind]]
    if counts["other"]:
        parts.append(f"{counts['other']} other")
    return f"{counts['total']} ({', '.join(parts)})"


def print_table(results: dict[str, dict]) -> None:
    columns = f"{'service':<7} | {'operation':<10} | {'floor':>5} | {'ours':<28} | {'x floor':>7}"
    print(f"| {columns} | {'delta-rs':<28} |")
    print("| --- | --- | ---: | --- | ---: | --- |")
    for name, result in results.items():
        for operation in OPERATIONS:
            floor = result["floor"][operation]
            ours = result["ours"][operation]
            theirs = result["delta-rs"].get(operation)
            print(
                f"| {name:<7} | {operation:<10} | {floor:>5} | {cell(ours):<28} | "
                f"{ours['total'] / floor:>7.2f} | {cell(theirs):<28} |"
            )


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", default="s3,azure,gcs", help="comma-separated: s3, azure, gcs")
    parser.add_argument(
        "--child", nargs=4, metavar=("SIDE", "OPERATION", "URI", "OPTIONS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--verbose", action="store_true", help="print every request")
    args = parser.parse_args(argv)
    if args.child:
        side, operation, uri, options = args.child
        run_child(side, operation, uri, json.loads(options))
        return {}
    results = {name: run_service(SERVICES[name](), args.verbose) for name in args.services.split(",")}
    print_table(results)
    harness.write_json("requests", results)
    return results


if __name__ == "__main__":
    main()
