"""``deltalog vacuum``, ``deltalog restore`` and ``deltalog alter``: the maintenance commands that
delete old files, go back to an earlier version, and change a table's properties and constraints.

They run through the public :class:`replay.DeltaTable`; like Delta's SQL, ``vacuum`` deletes unless
``--dry-run`` is given, and its retention check is turned off with Delta's own setting
(``--conf spark.databricks.delta.retentionDurationCheck.enabled=false``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from replay.cli.arguments import add_version_or_timestamp, hours, pair


def cmd_vacuum(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    table = DeltaTable(args.uri, conf=conf)
    action = "Listing files to vacuum in" if args.dry_run else "Vacuuming"
    with output.working(f"{action} {args.uri}"):
        files = table.vacuum(retention_hours=args.retain_hours, dry_run=args.dry_run, full=not args.lite)
    if args.json:
        output.print_json({"dry_run": args.dry_run, "files": files, "version": table.version()})
        return 0
    for path in files:
        print(path)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"vacuum {verb} {len(files)} files (table at version {table.version()})")
    return 0


def cmd_restore(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    table = DeltaTable(args.uri, conf=conf)
    target: Any = args.version if args.version is not None else args.timestamp
    with output.working(f"Restoring {args.uri}"):
        metrics = table.restore(target, ignore_missing_files=args.ignore_missing_files)
    shown = {"version": table.version(), **{k: v for k, v in metrics.items() if not k.endswith("File")}}
    output.emit_mapping(shown, as_json=args.json, title="RESTORE")
    return 0


def cmd_alter(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaTable
    from replay.cli import output

    changes = (args.set, args.unset, args.add_constraint, args.drop_constraint, args.add_feature)
    column_changes = (args.rename_column, args.drop_column, args.column_type)
    if not any(changes) and not any(column_changes) and args.cluster_by is None:
        args.usage_error(
            "nothing to change: give --set, --unset, --add-feature, --add-constraint, --drop-constraint, "
            "--rename-column, --drop-column, --column-type or --cluster-by"
        )
    table = DeltaTable(args.uri, conf=conf)
    alter = table.alter
    with output.working(f"Altering {args.uri}"):
        if args.set:
            alter.set_table_properties(dict(args.set))
        if args.unset:
            alter.unset_table_properties(args.unset, raise_if_not_exists=not args.if_exists)
        for name in args.add_feature:
            alter.add_feature(name, allow_protocol_versions_increase=True)
        for name, expression in args.add_constraint:
            alter.add_constraint({name: expression})
        for name in args.drop_constraint:
            alter.drop_constraint(name, raise_if_not_exists=not args.if_exists)
        for column, new_name in args.rename_column:
            alter.rename_column(column, new_name)
        if args.drop_column:
            alter.drop_columns(args.drop_column, raise_if_not_exists=not args.if_exists)
        for column, data_type in args.column_type:
            alter.change_column_type(column, data_type)
        if args.cluster_by is not None:
            columns = [c.strip() for c in args.cluster_by.split(",") if c.strip()]
            alter.cluster_by(None if [c.lower() for c in columns] == ["none"] else columns)
    protocol = table.protocol()
    shown: dict[str, Any] = {
        "version": table.version(),
        "protocol": f"{protocol.min_reader_version},{protocol.min_writer_version}",
        "reader_features": protocol.reader_features,
        "writer_features": protocol.writer_features,
        "properties": table.metadata().configuration,
    }
    output.emit_mapping(shown, as_json=args.json, title="ALTER")
    return 0


def configure_parsers(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the three commands with ``command(name, handler, help)`` (the CLI's subcommand factory)."""
    vacuum = command("vacuum", cmd_vacuum, "Delete files no version within the retention needs.")
    vacuum.add_argument("uri")
    vacuum.add_argument(
        "--retain-hours",
        type=hours,
        metavar="N",
        help="keep files removed less than N hours ago (default: delta.deletedFileRetentionDuration)",
    )
    vacuum.add_argument("--dry-run", action="store_true", help="only list the files that would go")
    vacuum.add_argument(
        "--lite", action="store_true", help="only the files of expired tombstones (Delta's VACUUM LITE)"
    )
    vacuum.add_argument("--json", action="store_true")

    restore = command("restore", cmd_restore, "Restore a table to an earlier version in one commit.")
    restore.add_argument("uri")
    add_version_or_timestamp(restore, required=True, version_type=int, timestamp_help=None)
    restore.add_argument("--ignore-missing-files", action="store_true")
    restore.add_argument("--json", action="store_true")

    alter = command(
        "alter",
        cmd_alter,
        "Change a table's properties, features, CHECK constraints, (mapped) columns and clustering.",
    )
    alter.add_argument("uri")
    alter.add_argument("--set", action="append", type=pair, default=[], metavar="KEY=VALUE")
    alter.add_argument("--unset", action="append", default=[], metavar="KEY")
    alter.add_argument("--add-feature", action="append", default=[], metavar="NAME")
    alter.add_argument("--add-constraint", action="append", type=pair, default=[], metavar="NAME=EXPR")
    alter.add_argument("--drop-constraint", action="append", default=[], metavar="NAME")
    alter.add_argument("--rename-column", action="append", type=pair, default=[], metavar="COLUMN=NEW_NAME")
    alter.add_argument("--drop-column", action="append", default=[], metavar="COLUMN")
    alter.add_argument(
        "--column-type",
        action="append",
        type=pair,
        default=[],
        metavar="COLUMN=TYPE",
        help="widen a column's type, e.g. n=bigint (type widening: ALTER COLUMN ... TYPE)",
    )
    alter.add_argument(
        "--cluster-by",
        metavar="A,B",
        help="the clustering columns (none: CLUSTER BY NONE); OPTIMIZE clusters",
    )
    alter.add_argument(
        "--if-exists", action="store_true", help="--unset/--drop-constraint/--drop-column: missing is fine"
    )
    alter.add_argument("--json", action="store_true")
    alter.set_defaults(usage_error=alter.error)
