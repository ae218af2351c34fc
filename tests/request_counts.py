"""Counting the storage requests of log reads: a table of many small commits, the floor, the counts.

Used by ``tests/test_request_counts.py`` and ``bench/requests.py``. The table is written directly
through a store (no snapshot load per commit): version 0 holds the protocol, the metadata (change
data feed on) and one data file; every later version adds one small data file; a classic
checkpoint is written at :data:`CHECKPOINT_VERSION`.

A request seen by the recording proxy of ``tests.cloud_servers`` is one of ``GET`` (object
bytes), ``HEAD`` (object metadata: S3 and Azure ``HEAD``, a GCS JSON-API object ``GET`` without
``alt=media``), ``LIST`` (one page of a listing) or another method (writes). The *floor* of an
operation is one ``GET`` per log object it must read (two for a Parquet checkpoint: a footer and
a body read), one per data file, plus one ``LIST`` page per listing.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from logstores.base import FileStatus, LogStore
from replay.delta_log import DeltaLog
from tests.cloud_servers import ProxiedRequest

NUM_COMMITS = 120
"""Versions 0 .. NUM_COMMITS - 1."""
CHECKPOINT_VERSION = 99
TIME_TRAVEL_VERSION = 50
CHANGES_RANGE = (105, 114)
"""The versions a ``table_changes`` call reads (inclusive)."""
TIMESTAMP_0_MS = 1_700_000_000_000

SCHEMA_STRING = orjson.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
).decode()


# -- the table -------------------------------------------------------------------------------------
def data_file_name(version: int) -> str:
    return f"part-{version:05d}.parquet"


def data_file_bytes(version: int) -> bytes:
    """A one-row Parquet file (``id = version``)."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([version], pa.int64()), "value": [f"v{version}"]}), sink)
    return sink.getvalue()


def commit_actions(version: int, size: int) -> list[str]:
    """The actions of ``version``: commitInfo, (protocol and metadata at 0), one added file."""
    timestamp = TIMESTAMP_0_MS + version * 1000
    actions: list[dict[str, object]] = [
        {"commitInfo": {"timestamp": timestamp, "operation": "WRITE", "isBlindAppend": True}}
    ]
    if version == 0:
        actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}})
        actions.append(
            {
                "metaData": {
                    "id": "00000000-0000-0000-0000-000000000000",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": SCHEMA_STRING,
                    "partitionColumns": [],
                    "configuration": {"delta.enableChangeDataFeed": "true"},
                    "createdTime": TIMESTAMP_0_MS,
                }
            }
        )
    stats = orjson.dumps(
        {
            "numRecords": 1,
            "minValues": {"id": version, "value": f"v{version}"},
            "maxValues": {"id": version, "value": f"v{version}"},
            "nullCount": {"id": 0, "value": 0},
        }
    ).decode()
    actions.append(
        {
            "add": {
                "path": data_file_name(version),
                "partitionValues": {},
                "size": size,
                "modificationTime": timestamp,
                "dataChange": True,
                "stats": stats,
            }
        }
    )
    return [orjson.dumps(action).decode() for action in actions]


def write_table(store: LogStore, table_uri: str, conf: dict[str, str]) -> None:
    """Write the table at ``table_uri``: :data:`NUM_COMMITS` commits, a checkpoint at 99, data files."""
    table_uri = table_uri.rstrip("/")
    log = f"{table_uri}/_delta_log"
    for version in range(NUM_COMMITS):
        data = data_file_bytes(version)
        store.write_bytes(f"{table_uri}/{data_file_name(version)}", data, overwrite=True)
        store.write(f"{log}/{version:020d}.json", commit_actions(version, len(data)))
        if version == CHECKPOINT_VERSION:
            DeltaLog(table_uri, conf, store=store).checkpoint(CHECKPOINT_VERSION)


# -- requests --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """A proxied request as storage sees it: its kind and the object or prefix it names."""

    kind: str  # GET, HEAD, LIST or the HTTP method of anything else
    target: str


def classify(request: ProxiedRequest, service: str) -> Request:
    """What ``request`` asks ``service`` (``s3``, ``gcs`` or ``azure``) for."""
    url = urlsplit(request.path)
    query = parse_qs(url.query)
    path = unquote(url.path)
    if service == "gcs":
        if request.method == "GET" and "/o/" in path:
            name = path.split("/o/", 1)[1]
            return Request("GET" if query.get("alt") == ["media"] else "HEAD", name)
        if request.method == "GET" and path.rstrip("/").endswith("/o"):
            return Request("LIST", query.get("prefix", [""])[0])
        return Request(request.method, path)
    if request.method == "GET" and ("list-type" in query or query.get("comp") == ["list"]):
        return Request("LIST", query.get("prefix", [""])[0])
    return Request(request.method, path)


def counts(requests: Iterable[ProxiedRequest], service: str) -> Counter[str]:
    """Requests per kind (``GET``, ``HEAD``, ``LIST``, ...)."""
    return Counter(classify(request, service).kind for request in requests)


def object_gets(requests: Iterable[ProxiedRequest], service: str) -> Counter[str]:
    """GETs per object name (its last path segment)."""
    return Counter(
        request.target.rsplit("/", 1)[-1]
        for request in (classify(r, service) for r in requests)
        if request.kind == "GET"
    )


@dataclass(frozen=True)
class Floor:
    """The requests an operation cannot do without: the objects it reads and its listing pages."""

    text_objects: tuple[str, ...]  # one GET each
    parquet_objects: tuple[str, ...]  # a footer and a body read each
    list_pages: int = 1

    @property
    def gets(self) -> int:
        return len(self.text_objects) + 2 * len(self.parquet_objects)

    @property
    def total(self) -> int:
        return self.gets + self.list_pages

    @property
    def names(self) -> set[str]:
        return set(self.text_objects) | set(self.parquet_objects)


def _commit_names(listing: Sequence[FileStatus], first: int, last: int) -> list[str]:
    names = []
    for status in listing:
        stem = status.name.removesuffix(".json")
        if stem != status.name and stem.isdigit() and first <= int(stem) <= last:
            names.append(status.name)
    return names


def snapshot_floor(listing: Sequence[FileStatus], version: int) -> Floor:
    """What loading ``version`` must read, from a listing of the log: ``_last_checkpoint`` (if
    present), the newest checkpoint at or before ``version`` and the commits after it."""
    names = {status.name for status in listing}
    checkpoints = sorted(
        (int(status.name.split(".", 1)[0]), status.name)
        for status in listing
        if status.name.endswith(".checkpoint.parquet") and int(status.name.split(".", 1)[0]) <= version
    )
    start = checkpoints[-1][0] + 1 if checkpoints else 0
    text = [name for name in ("_last_checkpoint",) if name in names]
    text += _commit_names(listing, start, version)
    parquet = [checkpoints[-1][1]] if checkpoints else []
    return Floor(tuple(text), tuple(parquet))


def changes_floor(listing: Sequence[FileStatus], first: int, last: int) -> Floor:
    """What ``table_changes(first, last)`` must read when commit ``first`` carries neither protocol nor
    metadata: for the description at ``first``, the newest checkpoint before it and the commits
    after that checkpoint; the commits of the range; for the latest description (the read schema),
    the commits after ``last``; and the data file each commit of the range adds (one GET: its size
    is in the log). No ``_last_checkpoint``: the call lists the log from before ``first``."""
    latest = max(int(s.name[:20]) for s in listing if s.name.endswith(".json") and s.name[:20].isdigit())
    start = snapshot_floor(listing, first)
    commits = _commit_names(listing, first, latest)
    text = [name for name in start.text_objects if name != "_last_checkpoint"]
    text += [name for name in commits if name not in text]
    data = [data_file_name(int(name[:20])) for name in _commit_names(listing, first, last)]
    return Floor((*text, *data), start.parquet_objects)
