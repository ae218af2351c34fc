"""Reading a snapshot's rows: its active files through :mod:`replay.data`."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from replay.data.reader import read_files
from replay.state.snapshot import Snapshot


def read_snapshot(snapshot: Snapshot, columns: Sequence[str] | None = None) -> pa.Table:
    """All rows of ``snapshot`` (or ``columns`` of them), deletion vectors applied."""
    return read_files(
        snapshot.files(),
        table_path=snapshot.table_path,
        metadata=snapshot.metadata,
        protocol=snapshot.protocol,
        conf=snapshot.io.conf,
        columns=columns,
    )
