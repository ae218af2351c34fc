"""The commit every ALTER makes: new metadata, the protocol it needs, Delta's operation name.

An ALTER is a metadata-only commit (plus a protocol upgrade when the new metadata needs one, see
:func:`replay.protocol.table_features.protocol_for_metadata`). Features this library cannot
write for a table that uses them are refused before anything is committed: a metadata change
that would start using generated or identity columns or column invariants (writers would have to
maintain them); features it does not know at all are refused by the commit's own protocol check.
Row tracking is turned on after its backfill (:mod:`replay.maintenance.row_tracking_backfill`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.log.table_io import TableIO
from replay.protocol.actions import Metadata, Protocol
from replay.protocol.column_names import check_column_names
from replay.protocol.table_features import (
    features_of_metadata,
    protocol_for_metadata,
    unsupported_feature_error,
)
from replay.state.snapshot import Snapshot
from replay.txn.transaction import Transaction

UNWRITABLE_METADATA_FEATURES = frozenset({"generatedColumns", "identityColumns", "invariants"})
"""Features a metadata change may not start using: this library's writers cannot maintain them."""


def commit_alter(
    io: TableIO,
    snapshot: Snapshot,
    operation: str,
    parameters: Mapping[str, Any],
    metadata: Metadata | None,
    *,
    protocol: Protocol | None = None,
    reads_whole_table: bool = False,
) -> int:
    """Commit ``metadata`` (``None``: unchanged) and ``protocol`` (``None``: the current one),
    upgraded to what the metadata needs, as ``operation``; returns the version.

    ``reads_whole_table`` makes a concurrent data change a conflict (an ALTER that checked the
    rows, like ADD CONSTRAINT). Raises
    :class:`~replay.protocol.errors.UnsupportedTableFeatureError` for a feature the change would
    start using that this library cannot write, Delta's conflict exceptions, and the commit's
    checks.
    """
    table = io.shown_path
    new_metadata = metadata if metadata is not None else snapshot.metadata
    started = set(features_of_metadata(new_metadata)) - set(features_of_metadata(snapshot.metadata))
    refused = started & UNWRITABLE_METADATA_FEATURES
    if refused:
        raise unsupported_feature_error(refused, table, operation)
    if metadata is not None and metadata.schema_string != snapshot.metadata.schema_string:
        check_column_names(metadata, table)
    new_protocol = protocol_for_metadata(protocol or snapshot.protocol, new_metadata)
    txn = Transaction(io, snapshot, operation=operation)
    if reads_whole_table:
        txn.read_whole_table()
    if new_protocol != snapshot.protocol:
        txn.add_actions([new_protocol])
    if metadata is not None:
        txn.add_actions([metadata])
    txn.operation_parameters = dict(parameters)
    return txn.commit()
