"""``deltalog``: inspect and follow Delta tables on any storage from a terminal.

Exit codes: 0 success, 1 usage error, 2 table, storage or configuration error (with or without
``--debug``). Errors print one line naming the table, version, path or key; ``--debug`` prints
the traceback before it. Nothing printed carries a credential of the configuration: values are
redacted (:mod:`logstores.redaction`) and every log record, error line and traceback is scrubbed
of the configuration's secrets.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from logstores import LogStoreConfError, __version__, explain_log_store
from logstores.conf import parse_spark_defaults
from logstores.redaction import SecretFilter, redact, redact_url, scrub, secret_values
from replay.cli.arguments import (
    UsageError,
    add_version_or_timestamp,
    non_negative,
    positive,
    timestamp_value,
)
from replay.cli.emulator import EMULATOR_HELP, cmd_emulator
from replay.cli.emulator import configure_parser as configure_emulator
from replay.cli.retention import configure_parsers as configure_retention
from replay.cli.writes import configure_parsers as configure_writes

if TYPE_CHECKING:  # pyarrow is imported by the commands that read tables
    from pyarrow import RecordBatch, Table

EXIT_OK, EXIT_USAGE, EXIT_FAILURE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


# -- configuration ----------------------------------------------------------------------------
def load_conf(
    conf_file: str | None, pairs: Sequence[str], environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """Spark settings as Spark would see them: ``$SPARK_CONF_DIR/spark-defaults.conf``, then
    ``--conf-file``, then each ``--conf KEY=VALUE`` (later wins)."""
    settings: dict[str, str] = {}
    conf_dir = environ.get("SPARK_CONF_DIR")
    defaults = Path(conf_dir, "spark-defaults.conf") if conf_dir else None
    for path in (defaults, Path(conf_file) if conf_file else None):
        if path is None or (path is defaults and not path.is_file()):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise LogStoreConfError(f"cannot read conf file {path}: {exc.strerror or exc}") from None
        try:
            settings.update(parse_spark_defaults(text))
        except LogStoreConfError as exc:
            raise LogStoreConfError(f"{path}: {exc}") from None
    for number, pair in enumerate(pairs, start=1):
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():  # never echoed: the text may be a credential
            raise LogStoreConfError(
                f"--conf number {number} is not of the form KEY=VALUE (its text is not shown)"
            )
        settings[key.strip()] = value
    return settings


# -- commands -----------------------------------------------------------------------------------
def cmd_store(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay.cli import output

    choice = explain_log_store(args.uri, conf)
    store = choice.store_class(conf)  # built but not connected: this command stays offline
    details = {
        "uri": redact_url(args.uri),
        "store": choice.class_name,
        "chosen_by": choice.reason,
        "partial_writes_visible": store.is_partial_write_visible(args.uri),
        "conf": redact({key: value for key, value in conf.items() if _storage_key(key)}),
    }
    output.emit_mapping(details, as_json=args.json, title="LogStore")
    return EXIT_OK


def _storage_key(key: str) -> bool:
    return key.startswith(
        ("spark.delta.logStore", "delta.logStore", "spark.hadoop.fs.", "fs.", "spark.io.delta", "io.delta")
    )


def cmd_snapshot(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaLog
    from replay.cli import output

    log = DeltaLog.for_table(args.uri, conf)
    with output.working(f"Replaying the log of {args.uri}"):
        snapshot = log.snapshot(version=args.version, timestamp=timestamp_value(args.timestamp))
    output.emit_snapshot(snapshot, as_json=args.json, with_files=args.files)
    return EXIT_OK


def cmd_history(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaLog
    from replay.cli import output

    log = DeltaLog.for_table(args.uri, conf)
    with output.working(f"Reading the history of {args.uri}"):
        entries = log.history(limit=args.limit)
    output.emit_history(entries, as_json=args.json)
    return EXIT_OK


def cmd_changes(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaLog, table_changes
    from replay.cli import output

    log = DeltaLog.for_table(args.uri, conf)
    printed = 0
    start, end = args.start, args.end
    while True:
        latest = log.latest_version()
        stop = latest if end is None else min(end, latest)
        if start <= stop or not args.follow:  # outside --follow, table_changes judges the range
            with output.working(f"Reading changes {start}..{stop} of {args.uri}"):
                rows = table_changes(log, starting_version=start, ending_version=stop)
            if args.limit is not None:
                rows = rows.slice(0, max(args.limit - printed, 0))
            output.emit_changes(rows, as_json=args.json, header=printed == 0 and not args.follow)
            printed += rows.num_rows
            start = stop + 1
        if not args.follow or (args.limit is not None and printed >= args.limit):
            return EXIT_OK
        if end is not None and start > end:
            return EXIT_OK
        time.sleep(args.interval)


def cmd_read(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay import DeltaLog
    from replay.cli import output
    from replay.protocol.predicates import InvalidFilterError
    from replay.protocol.sql_predicate import parse_predicate

    columns = [name.strip() for name in args.columns.split(",") if name.strip()] if args.columns else None
    log = DeltaLog.for_table(args.uri, conf)
    with output.working(f"Reading {args.uri}"):
        snapshot = log.snapshot(version=args.version, timestamp=timestamp_value(args.timestamp))
        try:
            scan = snapshot.scan(parse_predicate(args.filter).tree if args.filter else None, columns)
        except InvalidFilterError as exc:
            raise UsageError(f"deltalog read: {exc}") from None
        rows = _first_rows(scan.to_batches(), args.limit)
    output.emit_rows(rows, as_json=args.json)
    return EXIT_OK


def _first_rows(batches: Iterator[RecordBatch], limit: int | None) -> Table:
    """The first ``limit`` rows of ``batches`` (all without a limit), reading no further."""
    import pyarrow as pa

    taken: list[RecordBatch] = []
    count = 0
    schema = None
    for batch in batches:
        schema = batch.schema
        if limit is not None and count + batch.num_rows >= limit:
            taken.append(batch.slice(0, limit - count))
            count = limit
            break
        taken.append(batch)
        count += batch.num_rows
    if schema is None:
        return pa.table({})
    return pa.Table.from_batches(taken, schema=schema)


def cmd_demo(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from replay.cli.demo import run_demo

    run_demo(args.directory, conf, with_spark=not args.no_spark)
    return EXIT_OK


# -- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    common.add_argument("--conf-file", metavar="FILE", help="settings in spark-defaults.conf format")
    common.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")

    parser = _Parser(prog="deltalog", description="Inspect and follow Delta tables on any storage.")
    parser.add_argument("--version", action="version", version=f"deltalog (delta-logstores) {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, handler: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    store = command("store", cmd_store, "Which LogStore serves a URI, and which setting chose it.")
    store.add_argument("uri")
    store.add_argument("--json", action="store_true")

    snapshot = command("snapshot", cmd_snapshot, "Show a table's state at a version or time.")
    snapshot.add_argument("uri")
    add_version_or_timestamp(snapshot)
    snapshot.add_argument("--files", action="store_true", help="list the active files")
    snapshot.add_argument("--json", action="store_true")

    history = command("history", cmd_history, "List a table's commits, newest first.")
    history.add_argument("uri")
    history.add_argument("--limit", type=positive, metavar="N")
    history.add_argument("--json", action="store_true")

    changes = command("changes", cmd_changes, "Print the change data feed between two versions.")
    changes.add_argument("uri")
    changes.add_argument("--from", dest="start", type=non_negative, required=True, metavar="V")
    changes.add_argument("--to", dest="end", type=non_negative, metavar="V")
    changes.add_argument("--limit", type=positive, metavar="N")
    changes.add_argument("--json", action="store_true", help="one JSON object per change row")
    changes.add_argument("--follow", action="store_true", help="keep printing changes as commits land")
    changes.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="poll interval")

    read = command("read", cmd_read, "Print a table's rows, pruned and filtered.")
    read.add_argument("uri")
    read.add_argument(
        "--filter",
        metavar="EXPR",
        help="rows to keep, e.g. \"part = 3 and id > 10\" or \"city in ('Oslo', 'Lima') or x is null\"",
    )
    read.add_argument("--columns", metavar="A,B", help="the columns to print (all by default)")
    read.add_argument("--limit", type=positive, metavar="N", help="print at most N rows")
    add_version_or_timestamp(read)
    read.add_argument("--json", action="store_true", help="one JSON object per row")

    configure_writes(command)

    demo = command("demo", cmd_demo, "Build a small table and show every feature on it.")
    demo.add_argument("directory", nargs="?", default="demo-table")
    demo.add_argument("--no-spark", action="store_true", help="skip the PySpark part")

    configure_retention(command)
    configure_emulator(command("emulator", cmd_emulator, EMULATOR_HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``deltalog`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    secrets: set[str] = set()
    try:
        args = build_parser().parse_args(argv)
        conf = load_conf(args.conf_file, args.conf)
        secrets = secret_values(conf)
        _scrub_logs(secrets)
        return args.handler(args, conf)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure becomes one scrubbed line and exit code 2
        if debug:
            print(scrub("".join(traceback.format_exception(exc)), secrets), file=sys.stderr, end="")
        print(f"deltalog: error: {scrub(_describe(exc), secrets)}", file=sys.stderr)
        return EXIT_FAILURE


def _scrub_logs(secrets: set[str]) -> None:
    """Scrub every record the root handlers print (third-party SDKs log request details at DEBUG)."""
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, SecretFilter)]:
            handler.removeFilter(old)
        handler.addFilter(SecretFilter(secrets))


def _describe(exc: BaseException) -> str:
    """The whole error message on one line (Delta's messages span several), with its type."""
    text = " ".join(str(exc).split())
    if isinstance(exc, FileNotFoundError) and exc.filename and exc.filename not in text:
        text = f"{text}: {exc.filename}" if text else f"no such file or directory: {exc.filename}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def json_dumps(value: Any) -> str:
    """Stable JSON for machine output."""
    return json.dumps(value, default=str, ensure_ascii=False)


if __name__ == "__main__":
    sys.exit(main())
