"""The errors of deletion vectors, shared by their reading, decoding and writing."""

from __future__ import annotations

from replay.protocol.errors import DeltaError


class DeletionVectorError(DeltaError):
    """A deletion vector could not be located, decoded or written."""


class CorruptDeletionVectorError(DeletionVectorError):
    """The DV bytes contradict the descriptor, the format or the data file (size, checksum, magic,
    cardinality, a row index past the end of the file)."""


class DeletionVectorNotFoundError(DeletionVectorError, FileNotFoundError):
    """The file a DV descriptor points to does not exist."""
