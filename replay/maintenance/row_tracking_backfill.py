"""Turning row tracking on for a table that has files: Delta's backfill.

Every row of a table with ``delta.enableRowTracking`` has a row id, so before the property is set
every file needs a ``baseRowId`` (:mod:`replay.txn.row_tracking`). As Delta's
``RowTrackingBackfillCommand`` does it:

1. the protocol gets the ``rowTracking`` feature first (an ``UPGRADE PROTOCOL`` commit), so every
   file committed from then on, by any writer, gets its ids as it is added;
2. the files added before that are re-added as they are (``dataChange=false``: readers of the
   change feed and streams skip them) in ``ROW TRACKING BACKFILL`` commits (``batchId`` 0, 1,
   ...) of at most :data:`MAX_FILES_PER_COMMIT` files; each numbers them after the high water mark, and
   conflicts with a concurrent commit that removed one of them;
3. the caller then commits the property (``SET TBLPROPERTIES``).

Nothing is rewritten: the data files stay where they are.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

import orjson

from replay.log.table_io import TableIO
from replay.protocol.actions import Protocol
from replay.protocol.table_features import metadata_features, protocol_with, uses_table_features
from replay.protocol.table_properties import ENABLE_ROW_TRACKING
from replay.state.loader import load_snapshot
from replay.state.snapshot import Snapshot
from replay.txn.row_tracking import FEATURE
from replay.txn.transaction import Transaction

logger = logging.getLogger(__name__)

BACKFILL_OPERATION = "ROW TRACKING BACKFILL"
MAX_FILES_PER_COMMIT = 10_000
"""Files one backfill commit re-adds (its size in the log stays that of a modest append)."""


def protocol_parameters(protocol: Protocol) -> dict[str, object]:
    """``protocol`` as Delta's UPGRADE PROTOCOL ``newProtocol`` parameter shows it."""
    return {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
        "readerFeatures": protocol.reader_features if protocol.min_reader_version >= 3 else None,
        "writerFeatures": protocol.writer_features if uses_table_features(protocol) else None,
    }


def backfill_row_ids(io: TableIO, snapshot: Snapshot) -> Snapshot:
    """Give every file of the table row ids (see the module docstring); returns the table's
    snapshot afterwards (``snapshot`` itself when there was nothing to do). Raises Delta's
    conflict exceptions when a concurrent commit removed a file being backfilled (run it again:
    what is committed stays)."""
    protocol = snapshot.protocol
    if not protocol.has_writer_feature(FEATURE):
        needed = metadata_features({ENABLE_ROW_TRACKING.key: "true"}, "")
        upgraded = protocol_with(protocol, needed)
        txn = Transaction(io, snapshot, operation="UPGRADE PROTOCOL")
        txn.add_actions([upgraded])
        txn.operation_parameters = {"newProtocol": orjson.dumps(protocol_parameters(upgraded)).decode()}
        txn.commit()
        snapshot = load_snapshot(io)
    for batch_id in itertools.count():
        missing = [add for add in snapshot.files() if add.base_row_id is None]
        if not missing:
            break
        batch = missing[:MAX_FILES_PER_COMMIT]
        txn = Transaction(io, snapshot, operation=BACKFILL_OPERATION)
        txn.read_files(batch)
        txn.add_actions(dataclasses.replace(add, data_change=False) for add in batch)
        txn.operation_parameters = {"batchId": batch_id}
        version = txn.commit()
        logger.info("gave row ids to %d files of %s in version %d", len(batch), io.shown_path, version)
        snapshot = load_snapshot(io)
    return snapshot
