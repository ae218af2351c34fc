"""The errors of row-level changes, with Delta's error classes and wording."""

from __future__ import annotations

from collections.abc import Sequence

from replay.protocol.errors import DeltaError

MERGE_DOCS = "https://docs.delta.io/latest/delta-update.html#upsert-into-a-table-using-merge"


class InvalidDmlArgumentError(DeltaError, ValueError):
    """Arguments of DELETE, UPDATE or MERGE that cannot be used (the message names them)."""


class MultipleSourceRowMatchError(DeltaError, ValueError):
    """Several source rows of a MERGE matched one target row (Delta's
    ``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``); nothing was committed."""


class MergeResolutionError(DeltaError, ValueError):
    """A MERGE clause names a column that neither the target nor (with schema evolution) the source
    has, or is malformed (``DELTA_MERGE_UNRESOLVED_EXPRESSION``, ``DELTA_MERGE_MISSING_WHEN``, ...)."""


def multiple_source_rows_error(table: str) -> MultipleSourceRowMatchError:
    """Delta's error, word for word (``table`` is kept as the error's attribute)."""
    return MultipleSourceRowMatchError(
        "[DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE] Cannot perform Merge as multiple "
        "source rows matched and attempted to modify the same\ntarget row in the Delta table in possibly "
        "conflicting ways. By SQL semantics of Merge,\nwhen multiple source rows match on the same target "
        "row, the result may be ambiguous\nas it is unclear which source row should be used to update or "
        "delete the matching\ntarget row. You can preprocess the source table to eliminate the possibility "
        f"of\nmultiple matches. Please refer to\n{MERGE_DOCS}",
        table=table,
    )


def unresolved_error(
    name: str, clause: str, alias: str, columns: Sequence[str], table: str
) -> MergeResolutionError:
    """``DELTA_MERGE_UNRESOLVED_EXPRESSION`` for column ``name`` of a ``clause`` (``UPDATE`` /
    ``INSERT``), given the columns of the side it was looked up in (qualified by ``alias``)."""
    given = ", ".join(f"{alias}.{column}" for column in columns)
    return MergeResolutionError(
        f"[DELTA_MERGE_UNRESOLVED_EXPRESSION] Cannot resolve {name} in {clause} clause given columns "
        f"{given} (MERGE into table {table})",
        table=table,
    )


def missing_when_error(table: str) -> MergeResolutionError:
    return MergeResolutionError(
        "[DELTA_MERGE_MISSING_WHEN] There must be at least one WHEN clause in a MERGE statement "
        f"(MERGE into table {table}).",
        table=table,
    )


def unconditional_not_last_error(kind: str, table: str) -> MergeResolutionError:
    """Delta's ``DELTA_NON_LAST_{kind}_CLAUSE_OMIT_CONDITION``: only the last clause of a kind
    may omit its condition (the ones after it could never apply)."""
    words = {
        "MATCHED": "MATCHED",
        "NOT_MATCHED": "NOT MATCHED",
        "NOT_MATCHED_BY_SOURCE": "NOT MATCHED BY SOURCE",
    }
    return MergeResolutionError(
        f"[DELTA_NON_LAST_{kind}_CLAUSE_OMIT_CONDITION] When there are more than one {words[kind]} "
        f"clauses in a MERGE statement, only the last {words[kind]} clause can omit the condition "
        f"(MERGE into table {table}).",
        table=table,
    )


def conflicting_set_error(columns: Sequence[str], table: str) -> InvalidDmlArgumentError:
    """Delta's ``DELTA_CONFLICT_SET_COLUMN``: a column assigned twice (names compare case-insensitively)."""
    return InvalidDmlArgumentError(
        f"[DELTA_CONFLICT_SET_COLUMN] There is a conflict from these SET columns: [{', '.join(columns)}] "
        f"(table {table}).",
        table=table,
    )
