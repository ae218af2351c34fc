"""deltalake's exception names (``deltalake.exceptions``) for this library's errors, so that code
catching them ports with its import changed.

Where deltalake raises one class for errors this library tells apart, the name is a tuple of the
classes (``except`` and ``isinstance`` take tuples): ``CommitFailedError`` is a concurrent
commit that conflicts or a change an append-only table refuses, ``DeltaProtocolError`` a table
this library cannot read or write or a row that breaks its constraints. Every one of them is a
:class:`DeltaError`.
"""

from replay.protocol.errors import (
    AppendOnlyTableError,
    ConcurrentModificationError,
    DeltaError,
    TableNotFoundError,
    UnsupportedTableFeatureError,
)
from replay.txn.constraint_checks import InvariantViolationError
from replay.txn.schema_merge import SchemaMismatchError

CommitFailedError = (ConcurrentModificationError, AppendOnlyTableError)
DeltaProtocolError = (UnsupportedTableFeatureError, InvariantViolationError)

__all__ = [
    "CommitFailedError",
    "DeltaError",
    "DeltaProtocolError",
    "SchemaMismatchError",
    "TableNotFoundError",
]
