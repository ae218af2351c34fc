"""ALTER TABLE RENAME COLUMN and DROP COLUMNS: metadata-only changes that need column mapping.

Under column mapping a column is found in data files by its physical name (or id), so renaming or
dropping it changes only the schema: no file is read or rewritten, as in Delta. Without column
mapping Delta refuses both (``DELTA_UNSUPPORTED_RENAME_COLUMN``, ``DELTA_UNSUPPORTED_DROP_COLUMN``),
advising to turn it on (``delta.columnMapping.mode`` = ``name``). A column is named by its path
(``a``, or ``s.f`` for a field of a struct), case-insensitively. Also refused, as Delta refuses
them: a name that already exists beside the renamed column, dropping a partition column
(``DELTA_UNSUPPORTED_DROP_PARTITION_COLUMN``), every column of a struct or every data column, and
renaming or dropping a column a CHECK constraint, a column invariant or a generated column
reads. A renamed partition
column stays the partition column under its new name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from replay.log.table_io import TableIO
from replay.maintenance.alter_columns import ColumnChangeError, replace_field, resolve_column, struct_at
from replay.maintenance.alter_commit import commit_alter
from replay.protocol.constraints import check_constraints, table_constraints
from replay.protocol.schema import StructField
from replay.protocol.sql import parse_expression
from replay.protocol.sql.syntax import quote_if_needed
from replay.protocol.table_properties import DATA_SKIPPING_STATS_COLUMNS
from replay.state.snapshot import Snapshot

ADVICE = (
    "Please enable Column Mapping on your Delta table with mapping mode 'name': "
    "ALTER TABLE table_name SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name') "
    "(DeltaTable(uri).alter.set_table_properties({'delta.columnMapping.mode': 'name'}))."
)


def rename_column(io: TableIO, snapshot: Snapshot, column: str, new_name: str) -> int:
    """Rename ``column`` (a path, ``s.f`` for a struct field) to ``new_name``; returns the
    committed version. Raises :class:`ColumnChangeError` (see the module docstring) and Delta's
    conflict exceptions."""
    table = io.shown_path
    _require_column_mapping(snapshot, "DELTA_UNSUPPORTED_RENAME_COLUMN", "Column rename", table)
    schema = snapshot.schema
    path = resolve_column(schema, column, table)
    if len(new_name) > 1 and new_name.startswith("`") and new_name.endswith("`"):
        new_name = new_name[1:-1].replace("``", "`")
    if not new_name:
        raise ColumnChangeError(
            f"Cannot rename column {column} of table {table} to an empty name", table=table
        )
    _check_not_referenced(snapshot, path, "rename", table)
    siblings = struct_at(schema, path[:-1])
    if any(f.name.lower() == new_name.lower() and f.name != path[-1] for f in siblings.fields):
        raise ColumnChangeError(
            f"[FIELD_ALREADY_EXISTS] Cannot rename column {'.'.join(path)} of table {table}: a column "
            f"{new_name} already exists.",
            table=table,
        )
    renamed = replace_field(schema, path, lambda f: [StructField(new_name, f.type, f.nullable, f.metadata)])
    partitions = list(snapshot.partition_columns)
    if len(path) == 1 and path[0] in partitions:
        partitions[partitions.index(path[0])] = new_name
    new_path = (*path[:-1], new_name)
    configuration = _stats_columns_after(
        snapshot, lambda p: (*new_path, *p[len(path) :]) if _under(p, path) else p
    )
    metadata = snapshot.metadata.with_schema(
        renamed, partition_columns=partitions, configuration=configuration
    )
    parameters = {"oldColumnPath": ".".join(path), "newColumnPath": ".".join(new_path)}
    return commit_alter(io, snapshot, "RENAME COLUMN", parameters, metadata)


def drop_columns(
    io: TableIO, snapshot: Snapshot, columns: Iterable[str], *, if_exists: bool = False
) -> int | None:
    """Drop ``columns`` (paths); returns the committed version (``None`` when ``if_exists`` and
    none of them exists: nothing is committed). Raises :class:`ColumnChangeError` (see the module
    docstring) and Delta's conflict exceptions."""
    table = io.shown_path
    given = list(columns)
    _require_column_mapping(snapshot, "DELTA_UNSUPPORTED_DROP_COLUMN", "DROP COLUMN", table)
    schema = snapshot.schema
    paths: list[list[str]] = []
    for column in given:
        try:
            paths.append(resolve_column(schema, column, table))
        except ColumnChangeError:
            if not if_exists:
                raise
    paths = _outermost(paths)
    if not paths:
        return None
    partitions = [p for p in paths if len(p) == 1 and p[0] in snapshot.partition_columns]
    if partitions:
        names = ",".join(p[0] for p in partitions)
        raise ColumnChangeError(
            f"[DELTA_UNSUPPORTED_DROP_PARTITION_COLUMN] Dropping partition columns ({names}) is not "
            f"allowed (table {table}).",
            table=table,
        )
    dropped = schema
    for path in paths:
        _check_not_referenced(snapshot, path, "drop", table)
        dropped = replace_field(dropped, path, lambda f: [])
        if not struct_at(dropped, path[:-1]).fields:
            where = f"struct {'.'.join(path[:-1])}" if len(path) > 1 else "table"
            raise ColumnChangeError(
                f"Cannot drop column {'.'.join(path)} of table {table}: it is the last column of its "
                f"{where}.",
                table=table,
            )
    if all(f.name in snapshot.partition_columns for f in dropped.fields):
        raise ColumnChangeError(
            f"Cannot drop columns {', '.join('.'.join(p) for p in paths)} of table {table}: every column "
            "left would be a partition column, and a Delta table needs a data column.",
            table=table,
        )
    configuration = _stats_columns_after(
        snapshot, lambda p: None if any(_under(p, dropped_path) for dropped_path in paths) else p
    )
    metadata = snapshot.metadata.with_schema(dropped, configuration=configuration)
    parameters = {"columns": [".".join(path) for path in paths]}
    return commit_alter(io, snapshot, "DROP COLUMNS", parameters, metadata)


def _outermost(paths: list[list[str]]) -> list[list[str]]:
    """``paths`` once each, without those inside another of them (dropped with it), in order."""
    kept: list[list[str]] = []
    for path in paths:
        if any(_under(path, other) for other in kept):
            continue
        kept = [other for other in kept if not _under(other, path)]
        kept.append(path)
    return kept


def _under(path: Sequence[str], column: Sequence[str]) -> bool:
    """Whether ``path`` is ``column`` or a field inside it (case-insensitively)."""
    return [part.lower() for part in path[: len(column)]] == [part.lower() for part in column]


def _stats_columns_after(
    snapshot: Snapshot, change: Callable[[tuple[str, ...]], tuple[str, ...] | None]
) -> dict[str, str]:
    """The table's configuration with ``delta.dataSkippingStatsColumns`` following a rename or a
    drop (``change`` maps each listed path to its new one, ``None``: gone), as Delta keeps it."""
    configuration = dict(snapshot.metadata.configuration)
    listed = snapshot.config.stats_columns
    if listed is None:
        return configuration
    kept = [changed for changed in map(change, listed) if changed is not None]
    if kept != list(listed):
        text = ",".join(".".join(quote_if_needed(part) for part in path) for path in kept)
        configuration[DATA_SKIPPING_STATS_COLUMNS.key] = text
    return configuration


def _require_column_mapping(snapshot: Snapshot, error_class: str, what: str, table: str) -> None:
    """Delta's refusal of a rename or drop on a table without column mapping."""
    if snapshot.metadata.column_mapping_mode == "none":
        raise ColumnChangeError(
            f"[{error_class}] {what} is not supported for your Delta table {table}. {ADVICE}", table=table
        )


def _check_not_referenced(snapshot: Snapshot, path: Sequence[str], action: str, table: str) -> None:
    """Delta's ``DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE`` (or its generated-column twin) for a
    column a CHECK constraint or a generated column reads."""
    lowered = [part.lower() for part in path]
    rules = table_constraints(snapshot.protocol, snapshot.metadata)
    checks = [(c.name, c.expression) for c in (*check_constraints(snapshot.metadata), *rules.invariants)]
    generated = [(g.column, g.expression) for g in rules.generated]
    name = ".".join(path)
    for kind, error, found in (
        ("check constraint", "DELTA_CONSTRAINT_DEPENDENT_COLUMN_CHANGE", checks),
        ("generated column", "DELTA_GENERATED_COLUMNS_DEPENDENT_COLUMN_CHANGE", generated),
    ):
        readers = [f"{owner} -> {text}" for owner, text in found if _reads(text, lowered)]
        if readers:
            raise ColumnChangeError(
                f"[{error}] Cannot {action} column {name} because this column is referenced by the following "
                f"{kind}(s):\n{chr(10).join(readers)} (table {table})",
                table=table,
            )


def _reads(expression: str, path: Sequence[str]) -> bool:
    """Whether ``expression`` reads the column at ``path`` (lowercase), a field of it or its struct."""
    for reference in parse_expression(expression).columns:
        parts = [part.lower() for part in reference.parts]
        shared = min(len(parts), len(path))
        if parts[:shared] == list(path[:shared]):
            return True
    return False
