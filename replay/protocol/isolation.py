"""Isolation levels of Delta commits (Delta's ``IsolationLevel``).

``Serializable`` (the default of Delta Lake, delta-rs and Delta Kernel): a transaction commits only
if its reads and writes could have happened in the order of the commits. ``WriteSerializable``
(the default of Databricks' runtime, honoured when a table sets ``delta.isolationLevel``): the
same, except that blind appends by others may be ordered before it, so they never fail a
transaction that read the table. ``SnapshotIsolation``: for commits that change no data
(``dataChange=false`` only, such as a compaction): concurrent appends are never a conflict.
Pure: no I/O.
"""

from __future__ import annotations

import enum


class IsolationLevel(enum.Enum):
    """How strictly a commit is checked against the commits that won the race before it."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def parse_table_level(cls, text: str) -> IsolationLevel:
        """A ``delta.isolationLevel`` value (any case); only the two table levels are valid."""
        for level in (cls.SERIALIZABLE, cls.WRITE_SERIALIZABLE):
            if text.strip().lower() == level.value.lower():
                return level
        raise ValueError("expected 'Serializable' or 'WriteSerializable'")


DEFAULT_ISOLATION_LEVEL = IsolationLevel.SERIALIZABLE
"""Delta's ``delta.isolationLevel`` default (``DeltaConfigs.ISOLATION_LEVEL``)."""
