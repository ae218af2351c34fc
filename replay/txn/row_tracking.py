"""Row tracking (Delta's ``rowTracking`` writer feature): fresh row ids for the files a commit adds.

On a table whose protocol has the feature every row has a row id: the ``baseRowId`` of its file
plus its index in the file (unless the file materializes another value). A commit gives each file
it adds without one (a new file) a range of ids after the table's high water mark, kept in the
``delta.rowTracking`` domain as ``{"rowIdHighWaterMark": n}``, and the commit's version as the
file's ``defaultRowCommitVersion``; then records the new mark. Files that carry ids (a file
re-added with a deletion vector, a restored file) keep them. Ids are assigned for each attempt at
a version: a commit that lost a race assigns after the winners' mark, which is how Delta resolves
concurrent assignments (they are no conflict). Pure: no I/O.

With ``delta.enableRowTracking`` a row's id must also survive a rewrite: the operations that copy or
update rows store the ids in the table's hidden columns (:mod:`replay.data.row_lineage`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import orjson

from replay.protocol.actions import Action, AddFile, DomainMetadata
from replay.protocol.errors import DeltaError

ROW_TRACKING_DOMAIN = "delta.rowTracking"
HIGH_WATER_MARK_KEY = "rowIdHighWaterMark"
FEATURE = "rowTracking"


class RowTrackingError(DeltaError, ValueError):
    """A file added to a table with row tracking has no ``numRecords`` to size its row ids by."""


def high_water_mark(domains: Mapping[str, DomainMetadata] | Iterable[Action]) -> int | None:
    """The row id high water mark a table's domains (or a commit's actions) record, if any."""
    found = domains.values() if isinstance(domains, Mapping) else domains
    marks = [
        int(orjson.loads(action.configuration or "{}").get(HIGH_WATER_MARK_KEY, -1))
        for action in found
        if isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN and not action.removed
    ]
    return max(marks) if marks else None


def assign_row_ids(actions: Sequence[Action], version: int, mark: int) -> tuple[list[Action], int]:
    """``actions`` with row ids for the files added without them, numbered on from ``mark`` (the
    high water mark, -1 for none yet), ``version`` as their default row commit version, and the
    new ``delta.rowTracking`` domain when any were assigned; and the new mark. Raises
    :class:`RowTrackingError` for an added file without ``numRecords``."""
    assigned: list[Action] = []
    changed = False
    given: DomainMetadata | None = None
    for action in actions:
        if isinstance(action, AddFile) and action.base_row_id is None:
            records = action.num_records
            if records is None:
                raise RowTrackingError(
                    f"Cannot give row ids to file {action.path}: its statistics have no numRecords"
                )
            commit_version = action.default_row_commit_version
            assigned.append(
                dataclasses.replace(
                    action,
                    base_row_id=mark + 1,
                    default_row_commit_version=version if commit_version is None else commit_version,
                )
            )
            mark += max(records, 0)
            changed = True
        elif isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN:
            given = action  # written below: the mark of the ids given here supersedes it
        else:
            assigned.append(action)
    if changed:
        configuration = orjson.dumps({HIGH_WATER_MARK_KEY: mark}).decode()
        assigned.append(DomainMetadata(ROW_TRACKING_DOMAIN, configuration))
    elif given is not None:
        assigned.append(given)
    return assigned, mark
