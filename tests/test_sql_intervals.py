"""INTERVAL literals in the SQL grammar: month arithmetic against the calendar for any date and
time, and intervals in DELETE and UPDATE (a predicate with an interval prunes and deletes as its
computed literal does; an UPDATE's month arithmetic is delta-rs's). Spark's results for constant
interval expressions are in ``tests/sql_spark_cases.py``, checked against Spark itself."""

from __future__ import annotations

import calendar
import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable as RustTable
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import DeltaTable, write_table
from replay.protocol.sql import parse_expression
from tests.dml_cases import our_rows, rust_rows

UTC = dt.UTC


def plus_months(day: dt.date, months: int) -> dt.date:
    """The calendar's answer: the same day of the month, or the new month's last day."""
    year, month = divmod(day.year * 12 + day.month - 1 + months, 12)
    return dt.date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.none() | st.dates(dt.date(1001, 1, 1), dt.date(8999, 12, 31)), min_size=1, max_size=12),
    st.integers(-12_000, 12_000),
    st.times(),
)
def test_adding_months_keeps_the_day_or_takes_the_last_one(
    dates: list[dt.date | None], months: int, time_of_day: dt.time
) -> None:
    moments = [None if d is None else dt.datetime.combine(d, time_of_day, UTC) for d in dates]
    table = pa.table(
        {"d": pa.array(dates, pa.date32()), "ts": pa.array(moments, pa.timestamp("us", tz="UTC"))}
    )

    def evaluate(text: str) -> list[object]:
        return parse_expression(text).bind(table.schema).evaluate(table).to_pylist()

    expected = [None if d is None else plus_months(d, months) for d in dates]
    assert evaluate(f"d + INTERVAL '{months}' MONTH") == expected
    assert evaluate(f"d - INTERVAL '{-months}' MONTH") == expected
    assert evaluate(f"ts + INTERVAL {months} MONTHS") == [
        None if d is None else dt.datetime.combine(d, time_of_day, UTC) for d in expected
    ]


def events(days: int) -> pa.Table:
    """Four rows a day from 2024-01-01, sorted by time (so each file holds a range of days)."""
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)
    moments = [start + dt.timedelta(hours=6 * i) for i in range(4 * days)]
    return pa.table(
        {
            "id": pa.array(range(len(moments)), pa.int64()),
            "ts": pa.array(moments, pa.timestamp("us", tz="UTC")),
            "day": pa.array([m.date() for m in moments], pa.date32()),
        }
    )


def test_a_delete_by_an_interval_prunes_and_deletes_what_its_literal_does(tmp_path: Path) -> None:
    by_interval, by_literal = str(tmp_path / "interval"), str(tmp_path / "literal")
    write_table(by_interval, events(8), max_rows_per_file=8)  # 4 files of 2 days
    shutil.copytree(by_interval, by_literal)
    interval = DeltaTable(by_interval).delete(
        "ts < TIMESTAMP '2024-01-10 00:00:00' - INTERVAL '6 days 12 hours'"
    )
    literal = DeltaTable(by_literal).delete("ts < TIMESTAMP '2024-01-03 12:00:00'")
    assert our_rows(by_interval) == our_rows(by_literal)
    assert len(our_rows(by_interval)) == 32 - 10
    counted = ("numDeletedRows", "numRemovedFiles", "numAddedFiles", "numCopiedRows")
    assert {key: interval[key] for key in counted} == {key: literal[key] for key in counted}
    assert interval["numRemovedFiles"] == 2  # the two files after 2024-01-05 were not touched
    assert interval["numCopiedRows"] == 6


def test_an_update_adds_months_as_delta_rs_does(tmp_path: Path) -> None:
    ours, rust = str(tmp_path / "ours"), str(tmp_path / "rust")
    rows = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "day": pa.array(
                [dt.date(2024, 1, 31), dt.date(2023, 1, 31), dt.date(2024, 3, 31), None,
                 dt.date(1969, 12, 31), dt.date(2024, 2, 29)],
                pa.date32(),
            ),
            "ts": pa.array(
                [dt.datetime(2024, 1, 31, 23, 59, 59, 999999, tzinfo=UTC), None,
                 dt.datetime(1969, 12, 31, 12, tzinfo=UTC), dt.datetime(2024, 5, 31, tzinfo=UTC),
                 dt.datetime(2024, 8, 31, 1, tzinfo=UTC), dt.datetime(2023, 10, 31, tzinfo=UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )  # fmt: skip
    write_table(ours, rows)
    shutil.copytree(ours, rust)
    metrics = DeltaTable(ours).update(
        {"day": "day + INTERVAL 1 MONTH", "ts": "ts + INTERVAL '1' MONTH"}, predicate="id < 5"
    )
    RustTable(rust).update(
        {"day": "day + INTERVAL '1 month'", "ts": "ts + INTERVAL '1 month'"}, predicate="id < 5"
    )
    assert metrics["numUpdatedRows"] == 5
    assert our_rows(ours) == rust_rows(rust) == rust_rows(ours)
    assert {row["id"]: row["day"] for row in our_rows(ours)} == {
        0: dt.date(2024, 2, 29),
        1: dt.date(2023, 2, 28),
        2: dt.date(2024, 4, 30),
        3: None,
        4: dt.date(1970, 1, 31),
        5: dt.date(2024, 2, 29),  # not updated
    }
