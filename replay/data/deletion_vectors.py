"""Deletion vectors: descriptors, Z85, and the 64-bit roaring bitmap format Delta stores.

A deletion vector (DV) marks rows of one data file as deleted by their 0-based row index.
The descriptor in the log says where the bitmap lives:

* ``storageType`` ``"i"``: inline, ``pathOrInlineDv`` is the Z85-encoded serialised bitmap;
* ``"u"``: a file next to the table, ``pathOrInlineDv`` = random directory prefix + the
  Z85-encoded UUID (20 characters); the file is ``<table>/<prefix>/deletion_vector_<uuid>.bin``;
* ``"p"``: an absolute (URI-encoded) path of the DV file.

A DV file starts with a one-byte format version (1); each bitmap in it sits at ``offset``
as ``<size: int32 big-endian> <size bytes of bitmap> <CRC-32 of those bytes: int32 big-endian>``.
A serialised bitmap is a ``RoaringBitmapArray``: a little-endian magic number, the number
of 32-bit roaring bitmaps and, for each, its key (the high 32 bits of its row indexes) and
the bitmap in the standard portable roaring format. Decoding yields a sorted ``uint64``
numpy array of row indexes.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping
from typing import Protocol
from urllib.parse import unquote

import numpy as np

from logstores import open_filesystem
from replay.protocol.errors import DeltaError

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = np.full(128, 255, dtype=np.uint8)
_Z85_VALUES[np.frombuffer(Z85_ALPHABET.encode("ascii"), dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_Z85_POWERS = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)

PORTABLE_MAGIC = 1681511377
"""``RoaringBitmapArrayFormat.Portable``: keys stored explicitly, count as int64."""
NATIVE_MAGIC = 1681511376
"""``RoaringBitmapArrayFormat.Native``: bitmaps for keys 0..n-1, count as int32."""
DV_FILE_FORMAT_VERSION = 1
DV_FILE_NAME_CORE = "deletion_vector"
UUID_Z85_LENGTH = 20

_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_CONTAINER_MAX = 4096
_BITMAP_CONTAINER_BYTES = 8192


class DeletionVectorError(DeltaError):
    """A deletion vector could not be located or decoded."""


class CorruptDeletionVectorError(DeletionVectorError):
    """The DV bytes contradict the descriptor or the format (size, checksum, magic, cardinality)."""


class DeletionVectorNotFoundError(DeletionVectorError, FileNotFoundError):
    """The file a DV descriptor points to does not exist."""


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
    """The first ``size`` bytes Z85 ``text`` encodes (Delta's ``Base85Codec.decodeBytes``).

    The padding the encoder added to reach a whole block is dropped; text encoding fewer than
    ``size`` bytes gives all of them (the caller decides whether that is an error).
    """
    return z85_decode(text)[:size]


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


def decode_uuid(encoded: str) -> uuid.UUID:
    """The UUID of a ``"u"`` descriptor from its 20 Z85 characters."""
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


# -- bitmap format --------------------------------------------------------------------------
def deserialize_bitmap(data: bytes | memoryview) -> np.ndarray:
    """Row indexes (sorted ``uint64``) of a serialised ``RoaringBitmapArray``.

    Raises :class:`CorruptDeletionVectorError` for an unknown magic number or truncated data.
    """
    view = memoryview(data)
    try:
        (magic,) = struct.unpack_from("<i", view, 0)
        if magic == PORTABLE_MAGIC:
            (count,) = struct.unpack_from("<q", view, 4)
            position = 12
            keyed = True
        elif magic == NATIVE_MAGIC:
            (count,) = struct.unpack_from("<i", view, 4)
            position = 8
            keyed = False
        else:
            raise CorruptDeletionVectorError(f"Unexpected RoaringBitmapArray magic number {magic}")
        parts: list[np.ndarray] = []
        for ordinal in range(count):
            if keyed:
                (high,) = struct.unpack_from("<I", view, position)
                position += 4
            else:
                high = ordinal
            values, position = _deserialize_roaring32(view, position)
            parts.append(values.astype(np.uint64) | np.uint64(high << 32))
    except (struct.error, ValueError) as exc:
        raise CorruptDeletionVectorError(f"truncated or malformed deletion vector bitmap: {exc}") from exc
    if not parts:
        return np.empty(0, dtype=np.uint64)
    return np.concatenate(parts)


def _deserialize_roaring32(view: memoryview, position: int) -> tuple[np.ndarray, int]:
    """One portable 32-bit roaring bitmap starting at ``position``; returns values and end."""
    (cookie,) = struct.unpack_from("<I", view, position)
    position += 4
    run_flags: np.ndarray | None = None
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        flag_bytes = (size + 7) // 8
        run_flags = np.unpackbits(np.frombuffer(view, np.uint8, flag_bytes, position), bitorder="little")
        position += flag_bytes
        has_offsets = size >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (size,) = struct.unpack_from("<I", view, position)
        position += 4
        has_offsets = True
    else:
        raise CorruptDeletionVectorError(f"Unexpected roaring bitmap cookie {cookie}")
    header = np.frombuffer(view, "<u2", 2 * size, position).reshape(size, 2)
    position += 4 * size
    if has_offsets:
        position += 4 * size
    chunks: list[np.ndarray] = []
    for index in range(size):
        key = np.uint32(int(header[index, 0]) << 16)
        cardinality = int(header[index, 1]) + 1
        if run_flags is not None and run_flags[index]:
            (runs,) = struct.unpack_from("<H", view, position)
            position += 2
            pairs = np.frombuffer(view, "<u2", 2 * runs, position).reshape(runs, 2).astype(np.int64)
            position += 4 * runs
            lengths = pairs[:, 1] + 1
            offsets = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(lengths)[:-1]))
            low = (np.repeat(pairs[:, 0] - offsets, lengths) + np.arange(int(lengths.sum()))).astype(
                np.uint32
            )
        elif cardinality <= _ARRAY_CONTAINER_MAX:
            low = np.frombuffer(view, "<u2", cardinality, position).astype(np.uint32)
            position += 2 * cardinality
        else:
            bits = np.unpackbits(
                np.frombuffer(view, np.uint8, _BITMAP_CONTAINER_BYTES, position), bitorder="little"
            )
            low = np.flatnonzero(bits).astype(np.uint32)
            position += _BITMAP_CONTAINER_BYTES
        chunks.append(low | key)
    values = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint32)
    return values, position


def serialize_bitmap(row_indexes: Iterable[int] | np.ndarray) -> bytes:
    """Serialise row indexes in the portable ``RoaringBitmapArray`` format (no run containers)."""
    values = np.unique(np.asarray(row_indexes, dtype=np.uint64))
    highs = (values >> np.uint64(32)).astype(np.uint32)
    out = bytearray(struct.pack("<iq", PORTABLE_MAGIC, len(np.unique(highs))))
    for high in np.unique(highs):
        out += struct.pack("<I", int(high))
        out += _serialize_roaring32((values[highs == high] & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    return bytes(out)


def _serialize_roaring32(values: np.ndarray) -> bytes:
    keys = (values >> 16).astype(np.uint16)
    unique_keys, starts, counts = np.unique(keys, return_index=True, return_counts=True)
    bodies: list[bytes] = []
    for start, count in zip(starts, counts, strict=True):
        low = (values[start : start + count] & 0xFFFF).astype("<u2")
        if count <= _ARRAY_CONTAINER_MAX:
            bodies.append(low.tobytes())
        else:
            bits = np.zeros(_BITMAP_CONTAINER_BYTES * 8, dtype=np.uint8)
            bits[low] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    size = len(unique_keys)
    header = np.empty((size, 2), dtype="<u2")
    header[:, 0] = unique_keys
    header[:, 1] = counts - 1
    offsets = np.empty(size, dtype="<u4")
    offset = 8 + 8 * size
    for index, body in enumerate(bodies):
        offsets[index] = offset
        offset += len(body)
    return (
        struct.pack("<II", _SERIAL_COOKIE_NO_RUN, size)
        + header.tobytes()
        + offsets.tobytes()
        + b"".join(bodies)
    )


def frame_for_file(bitmap: bytes) -> bytes:
    """``<size> <bitmap> <crc>`` as stored at a DV's offset inside a DV file."""
    return struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))


# -- reading --------------------------------------------------------------------------------
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
    start = descriptor.offset if descriptor.offset is not None else 1
    try:
        frame = fs.cat_file(fs_path, start=start, end=start + descriptor.size_in_bytes + 8)
    except FileNotFoundError:
        raise DeletionVectorNotFoundError(f"Deletion vector file {path} does not exist") from None
    return parse_framed(frame, descriptor, path)
