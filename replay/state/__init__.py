"""Table state: a :class:`Snapshot` (log segment + table configuration + replayed state) and how
one is loaded from a table's log."""

from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.state.table_log import TableLog

__all__ = ["Snapshot", "TableLog", "load_snapshot"]
