"""Generating the identity column values of one commit (:mod:`replay.protocol.identity_columns`).

A write (``write_table``) and a MERGE's inserts each hold one :class:`IdentityValues`: it gives the
rows that need them the next values of each identity column, batch after batch, continuing where
the last batch stopped, and reports the furthest value generated per column
(:attr:`IdentityValues.marks`); :func:`high_water_mark_metadata` is the metadata that records
them in the commit. :func:`identity_to_generate` decides, from the columns the data brings, which
identity columns a write generates, refusing values for a GENERATED ALWAYS one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pyarrow as pa

from replay.protocol.actions import Action, Metadata
from replay.protocol.identity_columns import (
    IdentityColumn,
    IdentityColumnError,
    explicit_insert_error,
    with_high_water_marks,
)


class IdentityValues:
    """The identity values one commit generates for ``columns``."""

    def __init__(self, columns: Sequence[IdentityColumn], generated: Mapping[str, int] | None = None) -> None:
        """``generated``: per column, how many of the commit's values come before these (those
        of the parallel tasks before this one)."""
        self.columns = tuple(columns)
        self._generated: dict[str, int] = dict(generated or {})
        self.marks: dict[str, int] = {}
        """Per column values were generated for, the furthest of them."""

    def fill(
        self, rows: pa.Table | pa.RecordBatch, columns: Sequence[IdentityColumn] | None = None
    ) -> pa.Table:
        """``rows`` with this commit's next values in each of ``columns`` (default: every column
        it generates), replacing the column, or appended when ``rows`` lacks it."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        for column in self.columns if columns is None else columns:
            done = self._generated.get(column.name, 0)
            first, stride = column.span(done, table.num_rows)
            values = pa.array(first + stride * np.arange(table.num_rows, dtype=np.int64), pa.int64())
            self._generated[column.name] = done + table.num_rows
            if table.num_rows:
                self.marks[column.name] = values[-1].as_py()
            present = _named(table.column_names, column.name)
            if present is None:
                table = table.append_column(pa.field(column.name, pa.int64()), values)
            else:
                index = table.column_names.index(present)
                table = table.set_column(index, pa.field(present, pa.int64()), values)
        return table


def last_values(columns: Sequence[IdentityColumn], counts: Mapping[str, int]) -> dict[str, int]:
    """Per column, the last of the ``counts`` values a commit generated in one run from the
    column's mark (the commit's high water marks); columns without values are left out."""
    marks = {}
    for column in columns:
        count = counts.get(column.name, 0)
        if count:
            first, stride = column.span(0, count)
            marks[column.name] = first + stride * (count - 1)
    return marks


def identity_to_generate(
    columns: Sequence[IdentityColumn], given: Collection[str], table: str | None = None
) -> list[IdentityColumn]:
    """The identity columns a write of data with the columns ``given`` generates: those it lacks.
    Raises :func:`~replay.protocol.identity_columns.explicit_insert_error` when it gives values
    to a GENERATED ALWAYS one."""
    missing = []
    for column in columns:
        if _named(given, column.name) is None:
            missing.append(column)
        elif not column.allow_explicit_insert:
            raise explicit_insert_error(column.name, table)
    return missing


def not_generated_error(column: IdentityColumn, table: str, engine: str) -> IdentityColumnError:
    """The error for a write ``engine`` runs that would have to generate ``column``'s values in
    parallel tasks, which do not generate identity values."""
    explicit = " or give the column's values" if column.allow_explicit_insert else ""
    return IdentityColumnError(
        f"Cannot write to table {table} with {engine}: the rows need values of the IDENTITY column "
        f"{column.name}, and its tasks do not generate identity values; write them with "
        f"replay.write_table or a MERGE (replay's or Spark's DeltaTable){explicit}.",
        column=column.name,
        table=table,
    )


def marked_actions(actions: Sequence[Action], current: Metadata, marks: Mapping[str, int]) -> list[Action]:
    """A commit's metadata ``actions`` (``current``: the table's metadata before it) with the
    identity high water marks ``marks`` move on: the commit's own metadata action updated, or
    ``current`` updated and added."""
    committed = next((a for a in reversed(actions) if isinstance(a, Metadata)), None)
    marked = high_water_mark_metadata(committed or current, marks)
    if marked is None:
        return list(actions)
    if committed is None:
        return [*actions, marked]
    return [marked if action is committed else action for action in actions]


def high_water_mark_metadata(metadata: Metadata, marks: Mapping[str, int]) -> Metadata | None:
    """``metadata`` with the identity high water marks that ``marks`` move on (``None``: none)."""
    if not marks:
        return None
    schema = with_high_water_marks(metadata.schema, marks)
    return None if schema is None else dataclasses.replace(metadata, schema_string=schema.to_json())


def _named(names: Collection[str], name: str) -> str | None:
    """The name of ``names`` that spells ``name`` in any case (Delta's column resolution)."""
    lowered = name.lower()
    return next((each for each in names if each.lower() == lowered), None)
