"""Reading deletion vectors: descriptors, Z85, DV files and their framing.

A deletion vector (DV) marks rows of one data file as deleted by their 0-based row index.
The descriptor in the log says where the bitmap lives:

* ``storageType`` ``"i"``: inline, ``pathOrInlineDv`` is the Z85-encoded serialised bitmap;
* ``"u"``: a file next to the table, ``pathOrInlineDv`` = random directory prefix + the
  Z85-encoded UUID (20 characters); the file is ``<table>/<prefix>/deletion_vector_<uuid>.bin``;
* ``"p"``: an absolute (URI-encoded) path of the DV file.

A DV file starts with a one-byte format version (1); each bitmap in it sits at ``offset``
as ``<size: int32 big-endian> <size bytes of bitmap> <CRC-32 of those bytes: int32 big-endian>``.
A serialised bitmap is a ``RoaringBitmapArray`` (:mod:`replay.data.roaring_bitmap`); decoding
yields a sorted ``uint64`` numpy array of row indexes. :func:`check_row_indexes` is the one check
that a DV's rows exist in the data file it is applied to. Writing DVs is
:mod:`replay.data.deletion_vector_writer`.
"""

from __future__ import annotations

import functools
import struct
import uuid
import zlib
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import unquote

import numpy as np

from logstores import open_filesystem
from replay.data.deletion_vector_errors import (
    CorruptDeletionVectorError,
    DeletionVectorError,
    DeletionVectorNotFoundError,
)
from replay.data.roaring_bitmap import deserialize_bitmap

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = np.full(128, 255, dtype=np.uint8)
_Z85_VALUES[np.frombuffer(Z85_ALPHABET.encode("ascii"), dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_Z85_INDEX = {ch: index for index, ch in enumerate(Z85_ALPHABET)}
_Z85_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)

DV_FILE_FORMAT_VERSION = 1
DV_FILE_NAME_CORE = "deletion_vector"
UUID_Z85_LENGTH = 20


class DeletionVectorDescriptorLike(Protocol):
    """What is read from a descriptor (``replay.protocol.actions.DeletionVectorDescriptor`` fits)."""

    @property
    def storage_type(self) -> str: ...

    @property
    def path_or_inline_dv(self) -> str: ...

    @property
    def offset(self) -> int | None: ...

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def cardinality(self) -> int: ...


# -- Z85 --------------------------------------------------------------------------------------
# Delta's Base85Codec: the Z85 alphabet over 4-byte big-endian blocks. The encoder pads the input
# with zero bytes to a multiple of 4 (encodeBytes); the decoder turns every 5 characters into one
# block in 32-bit arithmetic (a 5-character group above 2**32 - 1 wraps, as Java's Long.toInt does)
# and the caller keeps the first sizeInBytes bytes (decodeBytes), so whatever stands in the
# padding of the last block never matters.
#
# Writers built on the Rust ``z85`` crate (3.x) end unaligned data differently: the last 1 to 3
# bytes are encoded as a right-aligned number in a final 5-character block whose first 4 - n
# characters, zeros for such a small number, are replaced by '#'. Delta's encoder never starts a
# block with '#' (84 * 85**4 > 2**32 - 1), so a final block with 1 to 3 leading '#' is such a
# tail; delta-kernel-rs (and delta-rs) decode inline DVs with that crate and read both.
def z85_decode(text: str) -> bytes:
    """Decode Z85 text (length a multiple of 5) into bytes (4 per 5 characters), as Delta does.

    Each group of 5 characters is one big-endian 32-bit block, computed modulo 2**32 like Delta's
    ``Base85Codec.decodeBlocks``. Raises :class:`CorruptDeletionVectorError` on a bad length or a
    character outside Z85.
    """
    if len(text) % 5:
        raise CorruptDeletionVectorError(f"Z85 text length must be a multiple of 5, got {len(text)}")
    raw = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)
    if raw.size and (raw.max() >= 128 or (_Z85_VALUES[raw] == 255).any()):
        raise CorruptDeletionVectorError(f"invalid Z85 character in {text[:40]!r}")
    digits = _Z85_VALUES[raw].astype(np.uint64).reshape(-1, 5)
    words = (digits @ _Z85_POWERS) & np.uint64(0xFFFFFFFF)
    return words.astype(">u4").tobytes()


def z85_decode_bytes(text: str, size: int) -> bytes:
    """The first ``size`` bytes Z85 ``text`` encodes, whichever convention padded its last block.

    Delta's zero padding (``Base85Codec.decodeBytes``) is dropped; a final block marked with
    leading '#' (the Rust ``z85`` crate's tail, see above) gives the 1 to 3 bytes it holds. Text
    encoding fewer than ``size`` bytes gives all of them (the caller decides whether that is an
    error).
    """
    tail = _z85_crate_tail(text)
    if tail is None:
        return z85_decode(text)[:size]
    return (z85_decode(text[:-5]) + tail)[:size]


def _z85_crate_tail(text: str) -> bytes | None:
    """The bytes of ``text``'s final block if it is a ``z85`` crate tail, else ``None``.

    A tail has 1 to 3 leading '#' (the bytes missing from a whole block) and encodes a number
    that fits the bytes left; anything else is decoded the way Delta decodes every block.
    """
    if len(text) < 5 or len(text) % 5 or text[-5] != "#":
        return None
    block = text[-5:]
    digits = block.lstrip("#")
    missing = 5 - len(digits)
    if missing > 3 or any(ch not in _Z85_INDEX for ch in digits):
        return None
    value = 0
    for ch in digits:
        value = value * 85 + _Z85_INDEX[ch]
    kept = 4 - missing
    if value >= 256**kept:
        return None
    return value.to_bytes(kept, "big")


def z85_encode(data: bytes) -> str:
    """Encode bytes as Z85 the way Delta's ``Base85Codec.encodeBytes`` does.

    Input whose length is not a multiple of 4 is padded with zero bytes up to the next multiple
    (Delta allocates ``((length + 4) / 4) * 4`` bytes), so every block is a whole 5 characters.
    """
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _Z85_POWERS) % 85
    alphabet = np.frombuffer(Z85_ALPHABET.encode("ascii"), dtype=np.uint8)
    return alphabet[digits.reshape(-1)].tobytes().decode("ascii")


@functools.lru_cache(maxsize=4096)
def decode_uuid(encoded: str) -> uuid.UUID:
    """The UUID of a ``"u"`` descriptor from its 20 Z85 characters (remembered: the DVs of one
    operation share a few DV files)."""
    if len(encoded) != UUID_Z85_LENGTH:
        raise CorruptDeletionVectorError(f"a Z85 UUID has {UUID_Z85_LENGTH} characters, got {encoded!r}")
    return uuid.UUID(bytes=z85_decode(encoded))


def encode_uuid(value: uuid.UUID) -> str:
    """The 20 Z85 characters Delta writes for a DV file's UUID."""
    return z85_encode(value.bytes)


# -- locating -------------------------------------------------------------------------------
def dv_file_path(descriptor: DeletionVectorDescriptorLike, table_path: str) -> str | None:
    """Where the DV's file is (``None`` for inline DVs).

    Raises :class:`DeletionVectorError` for an unknown storage type.
    """
    storage = descriptor.storage_type
    if storage == "i":
        return None
    if storage == "u":
        encoded = descriptor.path_or_inline_dv
        prefix, uuid_text = encoded[:-UUID_Z85_LENGTH], encoded[-UUID_Z85_LENGTH:]
        name = f"{DV_FILE_NAME_CORE}_{decode_uuid(uuid_text)}.bin"
        base = table_path.rstrip("/")
        return f"{base}/{prefix}/{name}" if prefix else f"{base}/{name}"
    if storage == "p":
        path = descriptor.path_or_inline_dv
        return unquote(path)
    raise DeletionVectorError(
        f"Unknown deletion vector storage type {storage!r} (expected 'u', 'i' or 'p') "
        f"for {descriptor.path_or_inline_dv!r}"
    )


def dv_location(descriptor: DeletionVectorDescriptorLike, table_path: str) -> str:
    """How messages name a DV: ``deletion vector <file> at offset <n>`` or ``inline deletion vector``."""
    path = dv_file_path(descriptor, table_path)
    if path is None:
        return "inline deletion vector"
    offset = descriptor.offset if descriptor.offset is not None else 1
    return f"deletion vector {path} at offset {offset}"


def check_row_indexes(row_indexes: np.ndarray, num_rows: int, data_file: str, source: str) -> None:
    """Refuse row indexes of ``source`` (see :func:`dv_location`) that ``data_file`` lacks.

    ``num_rows`` is the file's physical row count (its Parquet row count when it is read, its
    ``numRecords`` otherwise). Raises :class:`CorruptDeletionVectorError` with Delta's
    ``DELTA_DELETION_VECTOR_INVALID_ROW_INDEX`` naming the file, the DV and the row.
    """
    if row_indexes.size == 0:
        return
    last = int(row_indexes.max())
    if last >= num_rows:
        raise CorruptDeletionVectorError(
            "[DELTA_DELETION_VECTOR_INVALID_ROW_INDEX] Deletion vector integrity check failed. "
            f"Encountered an invalid row index: {source} marks row {last} of data file {data_file}, "
            f"which has {num_rows} rows"
        )


# -- framing ----------------------------------------------------------------------------------
def frame_for_file(bitmap: bytes) -> bytes:
    """``<size> <bitmap> <crc>`` as stored at a DV's offset inside a DV file."""
    return struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))


# -- reading --------------------------------------------------------------------------------
def frame_range(descriptor: DeletionVectorDescriptorLike) -> tuple[int, int]:
    """The bytes ``[start, end)`` of a stored DV's frame in its file (size, bitmap, checksum)."""
    start = descriptor.offset if descriptor.offset is not None else 1
    return start, start + descriptor.size_in_bytes + 8


def decode_inline(descriptor: DeletionVectorDescriptorLike) -> np.ndarray:
    """Row indexes of an inline (``"i"``) DV."""
    data = z85_decode_bytes(descriptor.path_or_inline_dv, descriptor.size_in_bytes)
    if len(data) < descriptor.size_in_bytes:
        raise CorruptDeletionVectorError(
            f"inline deletion vector has {len(data)} bytes, descriptor says {descriptor.size_in_bytes}"
        )
    return _checked(deserialize_bitmap(data), descriptor, "inline")


def parse_framed(frame: bytes, descriptor: DeletionVectorDescriptorLike, where: str) -> np.ndarray:
    """Row indexes from the bytes at a DV's offset (size prefix, bitmap, CRC-32), all checked."""
    expected = descriptor.size_in_bytes
    if len(frame) < expected + 8:
        raise CorruptDeletionVectorError(
            f"deletion vector in {where} at offset {descriptor.offset} is truncated: "
            f"{len(frame)} bytes, expected {expected + 8}"
        )
    (size,) = struct.unpack_from(">i", frame, 0)
    if size != expected:
        raise CorruptDeletionVectorError(
            f"deletion vector in {where} at offset {descriptor.offset} has size {size}, "
            f"descriptor says {expected}"
        )
    bitmap = frame[4 : 4 + size]
    (checksum,) = struct.unpack_from(">I", frame, 4 + size)
    actual = zlib.crc32(bitmap)
    if checksum != actual:
        raise CorruptDeletionVectorError(
            f"deletion vector in {where} at offset {descriptor.offset} fails its checksum "
            f"(stored {checksum:#010x}, computed {actual:#010x})"
        )
    return _checked(deserialize_bitmap(bitmap), descriptor, where)


def _checked(values: np.ndarray, descriptor: DeletionVectorDescriptorLike, where: str) -> np.ndarray:
    if len(values) != descriptor.cardinality:
        raise CorruptDeletionVectorError(
            f"deletion vector in {where} holds {len(values)} rows, descriptor cardinality is "
            f"{descriptor.cardinality}"
        )
    return values


def read_deletion_vector(
    descriptor: DeletionVectorDescriptorLike, table_path: str, conf: Mapping[str, str] | None = None
) -> np.ndarray:
    """The deleted row indexes (sorted ``uint64``) of ``descriptor``, read and verified.

    Files are reached through :func:`logstores.open_filesystem` with ``conf``; only the DV's
    byte range is fetched. Raises :class:`DeletionVectorNotFoundError` if the file is missing
    and :class:`CorruptDeletionVectorError` if size, checksum, magic or cardinality disagree.
    """
    if descriptor.storage_type == "i":
        return decode_inline(descriptor)
    path = dv_file_path(descriptor, table_path)
    assert path is not None
    fs, fs_path = open_filesystem(path, conf)
    start, end = frame_range(descriptor)
    try:
        frame = fs.cat_file(fs_path, start=start, end=end)
    except FileNotFoundError:
        raise DeletionVectorNotFoundError(f"Deletion vector file {path} does not exist") from None
    return parse_framed(frame, descriptor, path)
