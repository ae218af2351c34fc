"""Rendering for the ``deltalog`` command: aligned tables for people, JSON for machines.

Human output goes through ``rich`` (installed with the ``cli`` extra) when it is available and
falls back to plain aligned text otherwise. Progress and status go to standard error, so standard
output stays clean for pipes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from replay import CheckpointResult, Snapshot, progress

try:
    from rich.console import Console
    from rich.table import Table
except ImportError:  # pragma: no cover - rich is part of the cli extra
    Console = None  # type: ignore[assignment,misc]
    Table = None  # type: ignore[assignment,misc]


def _console(stderr: bool = False) -> Any:
    if Console is None:
        return None
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # pipes and files: do not fold rows at 80 columns
        console = Console(stderr=stderr, highlight=False, width=200)
    return console


def human_size(size: int | None) -> str:
    """``1536`` -> ``1.5 KiB``."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_time(epoch_ms: int | None) -> str:
    """Milliseconds since the epoch as an ISO-8601 UTC time."""
    if epoch_ms is None:
        return "-"
    moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    return moment.replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds") + " UTC"


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, default=_json_default, ensure_ascii=False) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "as_py"):
        return value.as_py()
    return str(value)


@contextlib.contextmanager
def working(message: str) -> Iterator[None]:
    """Show progress on standard error while long work runs (only on a terminal).

    A spinner names ``message``; every task the library reports through
    :mod:`replay.progress` (reading commits, writing checkpoint parts) gets a progress bar.
    """
    console = _console(stderr=True)
    if console is None or not console.is_terminal:
        yield
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bars:
        bars.add_task(message, total=None)
        tasks: dict[str, Any] = {}

        def listener(task: str, completed: int, total: int | None) -> None:
            if task not in tasks:
                tasks[task] = bars.add_task(task, total=total)
            bars.update(tasks[task], completed=completed, total=total)

        with progress.listening(listener):
            yield


MIN_COLUMN_WIDTH = 23
"""Columns keep at least this width (a full ``2024-01-31 12:00:00.000`` time) before others shrink."""


def fit_widths(natural: Sequence[int], available: int) -> list[int]:
    """Column widths that fit ``available`` characters: the widest column shrinks first, never
    below :data:`MIN_COLUMN_WIDTH` (or its natural width); if that is not enough, the table is
    wider than ``available``."""
    widths = list(natural)
    while sum(widths) > available:
        widest = max(range(len(widths)), key=widths.__getitem__)
        floor = min(natural[widest], MIN_COLUMN_WIDTH)
        if widths[widest] <= floor:
            break
        second = max([floor, *(w for i, w in enumerate(widths) if i != widest)])
        widths[widest] = max(second, widths[widest] - (sum(widths) - available), floor)
        if widths[widest] == second and sum(widths) > available and second > floor:
            widths[widest] = max(floor, second - 1)
    return widths


def _print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    rows = [[_cell(value) for value in row] for row in rows]
    console = _console()
    if console is not None:
        table = Table(title=title, title_justify="left", show_lines=False)
        natural = [
            max([len(column), *(max(map(len, row[index].splitlines() or [""])) for row in rows)])
            for index, column in enumerate(columns)
        ]
        # one line per row (--json has every value whole): the widest columns give way first
        widths = fit_widths(natural, console.width - 3 * len(columns) - 1)
        for column, width in zip(columns, widths, strict=True):
            table.add_column(column, no_wrap=True, overflow="ellipsis", width=width)
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    widths = [max([len(column), *(len(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    if title:
        print(title)
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds")
    if isinstance(value, Mapping | list):
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(value)


def emit_mapping(values: Mapping[str, Any], *, as_json: bool, title: str | None = None) -> None:
    """A key/value listing."""
    if as_json:
        print_json(dict(values))
    else:
        _print_table(title, ["field", "value"], values.items())


def snapshot_summary(snapshot: Snapshot, *, with_files: bool = False) -> dict[str, Any]:
    """The fields ``deltalog snapshot`` shows, keyed by the names of ``snapshot --json``."""
    protocol, metadata = snapshot.protocol, snapshot.metadata
    files = snapshot.files_table()
    summary: dict[str, Any] = {
        "table": snapshot.table_path,
        "version": snapshot.version,
        "timestamp": snapshot.timestamp,
        "protocol": {
            "min_reader_version": protocol.min_reader_version,
            "min_writer_version": protocol.min_writer_version,
            "reader_features": sorted(protocol.reader_features or []),
            "writer_features": sorted(protocol.writer_features or []),
        },
        "table_id": metadata.id,
        "name": metadata.name,
        "description": metadata.description,
        "schema": snapshot.schema.to_json_value(),
        "partition_columns": list(metadata.partition_columns),
        "properties": dict(metadata.configuration),
        "num_files": snapshot.num_files,
        "size_bytes": int(pa.compute.sum(files["size"]).as_py() or 0) if files.num_rows else 0,
        "set_transactions": dict(snapshot.set_transactions),
    }
    if with_files:
        columns = files.select(["path", "size", "modification_time", "partition_values"]).to_pylist()
        summary["files"] = [
            {**row, "partition_values": dict(row["partition_values"] or [])} for row in columns
        ]
    return summary


def emit_snapshot(snapshot: Snapshot, *, as_json: bool, with_files: bool) -> None:
    summary = snapshot_summary(snapshot, with_files=with_files)
    if as_json:
        print_json(summary)
        return
    protocol = summary["protocol"]
    features = [*protocol["reader_features"], *protocol["writer_features"]]
    fields = {
        "table": summary["table"],
        "version": summary["version"],
        "timestamp": human_time(summary["timestamp"]),
        "protocol": f"reader {protocol['min_reader_version']}, writer {protocol['min_writer_version']}"
        + (f" ({', '.join(sorted(set(features)))})" if features else ""),
        "partition columns": ", ".join(summary["partition_columns"]) or "-",
        "files": f"{summary['num_files']} ({human_size(summary['size_bytes'])})",
        "properties": summary["properties"] or "-",
        "set transactions": summary["set_transactions"] or "-",
    }
    _print_table(f"Snapshot of {summary['table']}", ["field", "value"], fields.items())
    schema_rows = [
        (
            field["name"],
            field["type"] if isinstance(field["type"], str) else json.dumps(field["type"]),
            field.get("nullable", True),
        )
        for field in summary["schema"].get("fields", [])
    ]
    _print_table("Schema", ["column", "type", "nullable"], schema_rows)
    if with_files:
        _print_table(
            "Active files",
            ["path", "size", "modified", "partition values"],
            [
                (f["path"], human_size(f["size"]), human_time(f["modification_time"]), f["partition_values"])
                for f in summary["files"]
            ],
        )


def history_rows(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """History entries (commitInfo fields plus version and timestamp) as ``history --json`` objects."""
    return [
        {
            "version": entry["version"],
            "timestamp": entry["timestamp"],
            "operation": entry.get("operation"),
            "operation_parameters": dict(entry.get("operationParameters") or {}),
            "operation_metrics": dict(entry.get("operationMetrics") or {}),
            "engine_info": entry.get("engineInfo"),
            "commit_info": {
                key: value for key, value in entry.items() if key not in ("version", "timestamp")
            },
        }
        for entry in entries
    ]


def emit_history(
    entries: Iterable[Mapping[str, Any]], *, as_json: bool, title: str | None = "History"
) -> None:
    rows = history_rows(entries)
    if as_json:
        print_json(rows)
        return
    _print_table(
        title,
        ["version", "timestamp", "operation", "parameters", "metrics"],
        [
            (
                r["version"],
                human_time(r["timestamp"]),
                r["operation"],
                r["operation_parameters"] or "-",
                r["operation_metrics"] or "-",
            )
            for r in rows
        ],
    )


def emit_changes(rows: pa.Table, *, as_json: bool, header: bool = True) -> None:
    """Change rows: one JSON object per line, or a table."""
    records = rows.to_pylist()
    if as_json:
        for record in records:
            print_json(record)
        sys.stdout.flush()
        return
    if not records:
        if header:
            print("no changes")
        return
    columns = rows.column_names
    if Console is None or not header:
        for record in records:
            print("  ".join(_cell(record[c]) for c in columns))
        sys.stdout.flush()
        return
    _print_table(None, columns, [[record[c] for c in columns] for record in records])


def emit_rows(rows: pa.Table, *, as_json: bool) -> None:
    """Table rows: one JSON object per line, or a table (``no rows`` when there are none)."""
    if as_json:
        for record in rows.to_pylist():
            print_json(record)
        sys.stdout.flush()
        return
    if rows.num_rows == 0:
        print("no rows")
        return
    columns = rows.column_names
    _print_table(None, columns, [[record[c] for c in columns] for record in rows.to_pylist()])


def emit_checkpoint(written: CheckpointResult, *, as_json: bool) -> None:
    """What a checkpoint wrote."""
    values: dict[str, object] = {
        "version": written.version,
        "parts": written.parts or 1,
        "actions": written.size,
        "num_of_add_files": written.num_of_add_files,
        "size_in_bytes": written.size_in_bytes,
        "paths": list(written.paths),
    }
    if as_json:
        print_json(values)
        return
    values["size_in_bytes"] = human_size(written.size_in_bytes)
    values["paths"] = "\n".join(written.paths)
    emit_mapping(values, as_json=False, title="Checkpoint written")
