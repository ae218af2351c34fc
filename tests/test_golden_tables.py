"""Every golden table loads (or fails) as its source expects; DAT metadata; expected rows.

Expectations come from the sources listed in SOURCES.md: kernel-rs marks the failing tables,
Delta's LogReplaySuite / DeltaLogSuite pin versions and file counts, DAT ships
``table_version_metadata.json``. Versions and live file sets are cross-checked with delta-rs.
"""

from __future__ import annotations

import math

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from replay.delta_log import DeltaLog
from replay.protocol.errors import (
    MissingProtocolOrMetadataError,
    MissingVersionsError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
from replay.protocol.paths import resolve_path
from tests.paths import GOLDEN_ROOT as GOLDEN

TABLES = sorted(str(p.parent.relative_to(GOLDEN)) for p in GOLDEN.glob("*/*/delta"))

EXPECTED_FAILURES: dict[str, tuple[type[Exception], str]] = {
    "delta-spark-golden/deltalog-invalid-protocol-version": (
        UnsupportedTableFeatureError,
        "reader version 99",
    ),
    "delta-rs/simple_table_features": (UnsupportedTableFeatureError, "reader version 5"),
    "delta-spark-golden/deltalog-state-reconstruction-without-protocol": (
        MissingProtocolOrMetadataError,
        "The protocol of your Delta table could not be recovered while Reconstructing\nversion: 0.",
    ),
    "delta-spark-golden/deltalog-state-reconstruction-without-metadata": (
        MissingProtocolOrMetadataError,
        "The metadata of your Delta table could not be recovered while Reconstructing\nversion: 0.",
    ),
    "delta-spark-golden/deltalog-state-reconstruction-from-checkpoint-missing-protocol": (
        MissingProtocolOrMetadataError,
        "The protocol of your Delta table could not be recovered while Reconstructing\nversion: 10.",
    ),
    "delta-spark-golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata": (
        MissingProtocolOrMetadataError,
        "The metadata of your Delta table could not be recovered while Reconstructing\nversion: 10.",
    ),
    # log-only table without a metaData action (delta-rs: "No table metadata found in delta log")
    "delta-spark-golden/data-reader-absolute-paths-escaped-chars": (
        MissingProtocolOrMetadataError,
        "metadata",
    ),
    "delta-spark-golden/no-delta-log-folder": (TableNotFoundError, "is not a Delta table"),
    "kernel-rs/crc-malformed": (TableNotFoundError, "is not a Delta table"),
    "delta-spark-golden/versions-not-contiguous": (
        MissingVersionsError,
        "Versions (0, 2) are not contiguous",
    ),
}

# (version, number of live files) pinned by Delta's own tests (reference section 7.7) or SOURCES.md
PINNED: dict[str, tuple[int, int]] = {
    "delta-spark-golden/checkpoint": (14, 1),
    "delta-spark-golden/snapshot-repartitioned": (5, 2),
    "delta-spark-golden/snapshot-vacuumed": (5, 2),
    "delta-spark-golden/log-replay-dv-key-cases": (3, 1),
    "delta-spark-golden/log-replay-special-characters-a": (1, 0),
    "delta-spark-golden/log-replay-special-characters-b": (0, 1),
    "delta-spark-golden/canonicalized-paths-normal-a": (1, 0),
    "delta-spark-golden/canonicalized-paths-normal-b": (1, 0),
    "delta-spark-golden/canonicalized-paths-special-a": (1, 0),
    "delta-spark-golden/canonicalized-paths-special-b": (1, 0),
    "delta-rs/delta-0.8-empty": (1, 0),
    "delta-rs/delta-live-table": (1, 0),
    "kernel-rs/compacted-log-files-table": (25, 2),
}
# Spark canonicalises `/x` and `file:/x` to one key (DeltaLogSuite); delta-rs and Kernel do not.
SPARK_ONLY_SEMANTICS = {name for name in PINNED if "canonicalized-paths" in name}


def _root(name: str) -> str:
    return str(GOLDEN / name / "delta")


@pytest.mark.parametrize("name", TABLES)
def test_golden_table_loads_like_its_source(name: str) -> None:
    log = DeltaLog.for_table(_root(name))
    if name in EXPECTED_FAILURES:
        error, text = EXPECTED_FAILURES[name]
        with pytest.raises(error) as info:
            log.snapshot()
        assert text in str(info.value)
        assert log.table_path in str(info.value)
        return
    snapshot = log.snapshot()
    if name in PINNED:
        assert (snapshot.version, snapshot.num_files) == PINNED[name]
    assert snapshot.files_table().num_rows == snapshot.num_files == len(snapshot.files())
    if name in SPARK_ONLY_SEMANTICS:
        return
    try:
        theirs = DeltaTable(_root(name))
    except Exception as exc:  # noqa: BLE001 - delta-rs cannot read a few tables (recorded below)
        assert name in {
            "delta-spark-golden/deltalog-commit-info",
            "delta-spark-golden/update-deleted-directory",
        }, exc
        return
    assert snapshot.version == theirs.version()
    ours = sorted(resolve_path(snapshot.table_path, p).removeprefix("file://") for p in snapshot.file_paths())
    assert ours == sorted(theirs.file_uris())
    protocol = theirs.protocol()
    assert (snapshot.protocol.min_reader_version, snapshot.protocol.min_writer_version) == (
        protocol.min_reader_version,
        protocol.min_writer_version,
    )
    metadata = theirs.metadata()
    assert snapshot.metadata.id == metadata.id
    assert snapshot.partition_columns == metadata.partition_columns
    assert snapshot.metadata.configuration == metadata.configuration


def test_known_replay_facts() -> None:
    files = DeltaLog.for_table(_root("delta-spark-golden/log-replay-special-characters-b")).snapshot().files()
    assert [f.path for f in files] == ["special%20p@%23h"]
    dv_files = DeltaLog.for_table(_root("delta-spark-golden/log-replay-dv-key-cases")).snapshot().files()
    assert [f.deletion_vector.cardinality for f in dv_files if f.deletion_vector] == [3]
    latest = DeltaLog.for_table(_root("delta-spark-golden/log-replay-latest-metadata-protocol")).snapshot()
    assert latest.schema.field_names == ["col1", "col2"]
    assert (latest.protocol.min_reader_version, latest.protocol.min_writer_version) == (3, 7)
    for table in ("kernel-rs/app-txn-checkpoint", "kernel-rs/app-txn-no-checkpoint"):
        assert DeltaLog.for_table(_root(table)).snapshot().set_transactions == {"my-app": 3, "my-app2": 2}
    # txns of app-txn-with-last-updated are older than its 1-day setTransactionRetentionDuration
    assert DeltaLog.for_table(_root("kernel-rs/app-txn-with-last-updated")).snapshot().set_transactions == {}
    clustering = DeltaLog.for_table(_root("delta-rs/table_with_liquid_clustering")).snapshot()
    assert set(clustering.domain_metadata) == {"delta.rowTracking", "delta.liquid"}


def test_checkpoint_tables_use_their_checkpoint() -> None:
    cases = {
        "delta-spark-golden/multi-part-checkpoint": 1,
        "delta-spark-golden/v2-checkpoint-json": 2,
        "delta-spark-golden/v2-checkpoint-parquet": 2,
        "kernel-rs/with_checkpoint_no_last_checkpoint": 2,
        "kernel-rs/v2-checkpoints-json-with-last-checkpoint": 0,
        "kernel-rs/v2-classic-checkpoint-parquet": 1,
        "delta-repo/kernel-pagination-multi-part-checkpoints": 0,
        "delta-repo/basic-dv-with-checkpoint": 40,
        "delta-rs/checkpoint-cdf-table": 3,
    }
    for name, checkpoint_version in cases.items():
        snapshot = DeltaLog.for_table(_root(name)).snapshot()
        assert snapshot.log_segment.checkpoint_version == checkpoint_version, name


def _dat_cases() -> list[tuple[str, str]]:
    return sorted(
        (case.name, expected.name)
        for case in (GOLDEN / "dat").iterdir()
        for expected in (case / "expected").iterdir()
        if (expected / "table_version_metadata.json").exists()
    )


@pytest.mark.parametrize(("case", "expected"), _dat_cases())
def test_dat_table_version_metadata(case: str, expected: str) -> None:
    meta = orjson.loads(
        (GOLDEN / "dat" / case / "expected" / expected / "table_version_metadata.json").read_bytes()
    )
    log = DeltaLog.for_table(_root(f"dat/{case}"))
    snapshot = log.snapshot(None if expected == "latest" else int(expected.removeprefix("v")))
    assert snapshot.version == meta["version"]
    assert snapshot.protocol.min_reader_version == meta["min_reader_version"]
    assert snapshot.protocol.min_writer_version == meta["min_writer_version"]
    assert snapshot.metadata.configuration == meta["properties"]


# -- expected rows (needs replay.data from the "cdc" helper) -------------------------------------------


def _canonical_rows(table: pa.Table) -> list[tuple]:
    table = table.select(sorted(table.column_names))
    rows = []
    for row in table.to_pylist():
        rows.append(tuple(_normalize(value) for value in row.values()))
    return sorted(rows, key=repr)


def _normalize(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return tuple(sorted((k, _normalize(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_normalize(v) for v in value)
    return value


def _expected_row_cases() -> list[tuple[str, str | None]]:
    cases: list[tuple[str, str | None]] = []
    for case in sorted((GOLDEN / "dat").iterdir()):
        for expected in sorted((case / "expected").iterdir()):
            if (expected / "table_content").is_dir():
                cases.append((f"dat/{case.name}", expected.name))
    for table in sorted((GOLDEN / "delta-spark-golden").iterdir()):
        if (table / "expected").is_dir() and table.name != "data-reader-partition-values":
            cases.append((f"delta-spark-golden/{table.name}", None))
    return cases


@pytest.mark.parametrize(("name", "expected"), _expected_row_cases())
def test_snapshot_rows_match_expected(name: str, expected: str | None) -> None:
    folder = GOLDEN / name / "expected"
    version = None
    if expected is not None:
        folder = folder / expected / "table_content"
        version = None if expected == "latest" else int(expected.removeprefix("v"))
    parts = sorted(folder.glob("*.parquet"))
    want = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else None
    got = DeltaLog.for_table(_root(name)).snapshot(version).to_arrow()
    if want is None:
        assert got.num_rows == 0
        return
    got = got.select(want.column_names)
    assert got.num_rows == want.num_rows
    assert _canonical_rows(got.cast(want.schema)) == _canonical_rows(want)
