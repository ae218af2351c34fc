"""``delta.dataSkippingStatsColumns``: file statistics cover exactly the columns a table names.

Every writer (appends, DML rewrites and spliced UPDATEs, OPTIMIZE) collects the same columns as
delta-rs does for the same table; under column mapping they are keyed by physical names; Z-order
on a column without statistics is Delta's error; a value that does not parse is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from replay import DeltaTable, write_table
from replay.maintenance.zorder import ZOrderColumnError
from replay.protocol.table_properties import InvalidTablePropertyError, parse_column_paths

DATA = pa.table(
    {
        "a": pa.array([1, 2, 3], pa.int64()),
        "b": ["x", "y", None],
        "s": pa.array([{"x": 1, "y": "p"}, {"x": 2, "y": None}, None]),
        "c": pa.array([1.5, 2.5, 3.5]),
    }
)
SETTINGS = {"delta.dataSkippingStatsColumns": "b,s.y, C"}


def stats_of(uri: str) -> list[dict[str, Any]]:
    return [orjson.loads(add.stats or "{}") for add in DeltaTable(uri).snapshot.files()]


def covered(stats: dict[str, Any]) -> dict[str, Any]:
    """The columns each figure names (nested ones as dicts of their fields)."""
    return {figure: stats.get(figure, {}) for figure in ("minValues", "maxValues", "nullCount")}


def test_the_named_columns_and_only_they_get_statistics(tmp_path: Path) -> None:
    """Flat columns as delta-rs collects them; nested paths and any spelling of a name as Delta
    resolves them (delta-rs leaves struct fields out and matches case-sensitively)."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    flat = {"delta.dataSkippingStatsColumns": "b, c"}
    write_table(ours, DATA, configuration=flat)
    write_deltalake(theirs, DATA, configuration=flat)
    [rust] = [orjson.loads(a["stats"]) for a in _rust_adds(theirs)]
    assert covered(stats_of(ours)[0]) == covered(rust)
    nested = str(tmp_path / "nested")
    write_table(nested, DATA, configuration=SETTINGS)
    [mine] = stats_of(nested)
    assert mine["nullCount"] == {"b": 1, "s": {"y": 2}, "c": 0}
    assert mine["minValues"] == {"b": "x", "s": {"y": "p"}, "c": 1.5}


def _rust_adds(uri: str) -> list[dict[str, Any]]:
    log = Path(uri, "_delta_log", f"{0:020d}.json").read_bytes().splitlines()
    return [orjson.loads(line)["add"] for line in log if b'"add"' in line]


def test_every_writer_keeps_to_the_named_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration=SETTINGS)
    expected = set(stats_of(uri)[0]["nullCount"])
    DeltaTable(uri).update({"c": "c + 1"}, predicate="a = 1")  # a spliced UPDATE of one column
    DeltaTable(uri).delete("a = 2")  # a copy-on-write rewrite
    write_table(uri, DATA, mode="append")
    assert all(set(stats["nullCount"]) == expected for stats in stats_of(uri))
    DeltaTable(uri).optimize.compact()
    [compacted] = stats_of(uri)
    assert set(compacted["nullCount"]) == expected and compacted["numRecords"] == 5


def test_under_column_mapping_the_statistics_use_physical_names(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration={**SETTINGS, "delta.columnMapping.mode": "name"})
    schema = DeltaTable(uri).snapshot.schema
    s = schema.field("s")
    y = s.type.fields[1]  # type: ignore[union-attr]
    [stats] = stats_of(uri)
    assert set(stats["nullCount"]) == {schema.field(n).physical_name for n in ("b", "s", "c")}
    assert set(stats["nullCount"][s.physical_name]) == {y.physical_name}


def test_zorder_needs_statistics_on_its_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, DATA, configuration=SETTINGS)
    write_table(uri, DATA, mode="append")
    with pytest.raises(ZOrderColumnError, match=r"^\[DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS\] .*\[a\]"):
        DeltaTable(uri).optimize.z_order(["a"])
    DeltaTable(uri).optimize.z_order(["c"])


def test_the_property_is_parsed_and_checked() -> None:
    assert parse_column_paths(" a, `b,c`.d ,, `e``f` ") == (("a",), ("b,c", "d"), ("e`f",))
    with pytest.raises(InvalidTablePropertyError, match=r"delta\.dataSkippingStatsColumns.*`b"):
        write_table("memory://bad-stats", DATA, configuration={"delta.dataSkippingStatsColumns": "a,`b"})
