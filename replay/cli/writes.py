"""``deltalog delete``, ``update``, ``optimize`` and ``checkpoint``: the commands that write to a table.

Row-level changes and OPTIMIZE run through the public :class:`replay.DeltaTable` and print the
version they committed (none when nothing changed) with Delta's metrics; ``checkpoint`` writes a
checkpoint of the latest version through :class:`replay.DeltaLog`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from replay.cli.arguments import UsageError, byte_size, positive


def cmd_checkpoint(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaLog
    from replay.cli import output

    log = DeltaLog.for_table(args.uri, conf)
    with output.working(f"Writing a checkpoint of {args.uri}"):
        written = log.checkpoint()
    output.emit_checkpoint(written, as_json=args.json)
    return 0


def cmd_delete(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    table = DeltaTable(args.uri, conf=conf)
    read = table.version()
    with output.working(f"Deleting rows of {args.uri}"):
        metrics = table.delete(args.where)
    _emit_change("DELETE", table.version() if table.version() != read else None, metrics, as_json=args.json)
    return 0


def cmd_update(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    updates: dict[str, str] = {}
    for assignment in args.set:
        column, separator, expression = assignment.partition("=")
        if not separator or not column.strip() or not expression.strip():
            raise UsageError(f"deltalog update: --set {assignment!r} is not of the form COLUMN=EXPRESSION")
        updates[column.strip()] = expression.strip()
    table = DeltaTable(args.uri, conf=conf)
    read = table.version()
    with output.working(f"Updating rows of {args.uri}"):
        metrics = table.update(updates, predicate=args.where)
    _emit_change("UPDATE", table.version() if table.version() != read else None, metrics, as_json=args.json)
    return 0


def _emit_change(operation: str, committed: int | None, metrics: Mapping[str, int], *, as_json: bool) -> None:
    """The version a row-level change committed (``null``: it changed nothing) and its metrics."""
    from replay.cli import output

    title = (
        f"{operation} committed version {committed}" if committed is not None else f"{operation}: no change"
    )
    output.emit_mapping({"version": committed, **metrics}, as_json=as_json, title=title)


def cmd_optimize(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    table = DeltaTable(args.uri, conf=conf)
    options = {
        "partition_filters": args.where,
        "target_size": args.target_size,
        "max_concurrent_tasks": args.max_concurrent_tasks,
        "min_commit_interval": args.min_commit_interval,
    }
    started = table.version()
    with output.working(f"Optimizing {args.uri}"):
        if args.zorder_by:
            columns = [name.strip() for name in args.zorder_by.split(",") if name.strip()]
            metrics = table.optimize.z_order(columns, **options)
        elif args.purge:
            metrics = table.optimize.purge_deletion_vectors(**options)
        else:
            metrics = table.optimize.compact(**options, full=args.full)
    result = {"version": table.version() if table.version() != started else None, **metrics}
    output.emit_mapping(
        result,
        as_json=args.json,
        title="Optimized" if result["version"] is not None else "Nothing to optimize",
    )
    return 0


def configure_parsers(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the four commands with ``command(name, handler, help)`` (the CLI's subcommand factory)."""
    delete = command("delete", cmd_delete, "Delete the rows matching a predicate; prints Delta's metrics.")
    delete.add_argument("uri")
    delete.add_argument(
        "--where",
        required=True,
        metavar="EXPR",
        help="the rows to delete, e.g. \"day < '2024-01-01'\" (true: all)",
    )
    delete.add_argument("--json", action="store_true")

    update = command(
        "update", cmd_update, "Set columns of the rows matching a predicate; prints Delta's metrics."
    )
    update.add_argument("uri")
    update.add_argument(
        "--set",
        action="append",
        required=True,
        metavar="COLUMN=EXPR",
        help="a column and its new value as a SQL expression, e.g. \"status='done'\" (repeatable)",
    )
    update.add_argument("--where", metavar="EXPR", help="the rows to update (all rows without it)")
    update.add_argument("--json", action="store_true")

    checkpoint = command("checkpoint", cmd_checkpoint, "Write a checkpoint of the latest version.")
    checkpoint.add_argument("uri")
    checkpoint.add_argument("--json", action="store_true")

    optimize = command(
        "optimize",
        cmd_optimize,
        "Compact small files, or cluster a clustered table (or Z-order, or purge deletion vectors).",
    )
    optimize.add_argument("uri")
    optimize.add_argument(
        "--where", metavar="EXPR", help="partitions to optimize, e.g. \"date >= '2024-01-01'\""
    )
    optimize.add_argument(
        "--target-size", type=byte_size, metavar="SIZE", help="file size to aim at, e.g. 256mb"
    )
    how = optimize.add_mutually_exclusive_group()
    how.add_argument("--zorder-by", metavar="A,B", help="Z-order the partitions by these columns")
    how.add_argument(
        "--purge", action="store_true", help="rewrite the files with deleted rows (REORG ... PURGE)"
    )
    how.add_argument(
        "--full", action="store_true", help="recluster every file of a clustered table (OPTIMIZE ... FULL)"
    )
    optimize.add_argument(
        "--max-concurrent-tasks", type=positive, metavar="N", help="files rewritten at once"
    )
    optimize.add_argument(
        "--min-commit-interval",
        type=float,
        metavar="SECONDS",
        help="commit finished work at least this often",
    )
    optimize.add_argument("--json", action="store_true")
