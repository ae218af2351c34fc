"""Delta's ``RoaringBitmapArray``: the serialised form of a deletion vector's row indexes.

A ``RoaringBitmapArray`` holds 64-bit row indexes as an array of 32-bit roaring bitmaps, the
high 32 bits of an index choosing the bitmap. Its serialised form starts with a little-endian
magic number:

* ``Portable`` (:data:`PORTABLE_MAGIC`, the one Delta writes): the number of bitmaps as an int64,
  then for each bitmap its key (uint32) and the bitmap in the portable roaring format;
* ``Native`` (:data:`NATIVE_MAGIC`, read only): the number of bitmaps as an int32, then for each
  its byte length and the bitmap; the keys are the positions 0..n-1.

A 32-bit roaring bitmap splits its values by their high 16 bits into containers: an *array*
(up to 4096 sorted 16-bit values), a *bitmap* (65536 bits) or a *run* container (pairs of
start and length - 1). Delta builds a DV's bitmap value by value, so a container is an array up
to 4096 values and a bitmap above, then calls Roaring's ``runOptimize``, which turns a container
into runs when ``2 + 4 * runs`` bytes is less than its array or bitmap size. Delta serialises
the bitmaps of every key from 0 to the highest one, empty ones included.
:func:`serialize_bitmap` does all of this with numpy, so its bytes are the bytes Delta writes for
the same rows; :func:`deserialize_bitmap` reads every container kind and both formats.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from replay.data.deletion_vector_errors import CorruptDeletionVectorError

PORTABLE_MAGIC = 1681511377
"""``RoaringBitmapArrayFormat.Portable``: keys stored explicitly, count as int64."""
NATIVE_MAGIC = 1681511376
"""``RoaringBitmapArrayFormat.Native``: bitmaps for keys 0..n-1, count as int32."""
MAX_ROW_INDEX = ((2**31 - 2) << 32) | 0x8000_0000
"""The largest value a ``RoaringBitmapArray`` can hold (Delta's ``MAX_REPRESENTABLE_VALUE``)."""

_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_CONTAINER_MAX = 4096
_BITMAP_CONTAINER_BYTES = 8192
_EMPTY_ROARING32 = struct.pack("<II", _SERIAL_COOKIE_NO_RUN, 0)


# -- reading ----------------------------------------------------------------------------------
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
        previous = -1
        for ordinal in range(count):
            if keyed:
                (high,) = struct.unpack_from("<I", view, position)
                if high <= previous:
                    raise CorruptDeletionVectorError(
                        f"RoaringBitmapArray keys are not ascending: {high} follows {previous}"
                    )
                previous = high
                values, position = _deserialize_roaring32(view, position + 4)
            else:  # each bitmap follows its byte length, which says where the next one starts
                high = ordinal
                (length,) = struct.unpack_from("<i", view, position)
                values, _ = _deserialize_roaring32(view, position + 4)
                position += 4 + length
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


# -- writing ----------------------------------------------------------------------------------
def row_index_array(row_indexes: Iterable[int] | np.ndarray) -> np.ndarray:
    """``row_indexes`` as a sorted ``uint64`` array without duplicates.

    Raises :class:`ValueError` for a negative index or one above :data:`MAX_ROW_INDEX` (Delta's
    ``RoaringBitmapArray`` cannot hold it). A sorted array costs one pass; others are sorted.
    """
    array = np.asarray(row_indexes if isinstance(row_indexes, np.ndarray) else list(row_indexes))
    if array.size == 0:
        return np.empty(0, dtype=np.uint64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"row indexes must be a 1-dimensional array of integers, got {array.dtype}")
    if array.dtype.kind == "i" and int(array.min()) < 0:
        raise ValueError(f"row indexes must not be negative, got {int(array.min())}")
    values = array.astype(np.uint64, copy=False)
    if not bool(np.all(values[1:] > values[:-1])):
        # Sorting, then dropping repeats: numpy's unique hashes first, ten times slower here. The
        # stable sort (timsort) merges already sorted runs, such as a DV united with new rows.
        values = np.sort(values, kind="stable")
        distinct = np.ones(values.size, dtype=bool)
        np.not_equal(values[1:], values[:-1], out=distinct[1:])
        values = values[distinct]
    if int(values[-1]) > MAX_ROW_INDEX:
        raise ValueError(f"row index {int(values[-1])} is above the largest a deletion vector holds")
    return values


def serialize_bitmap(row_indexes: Iterable[int] | np.ndarray, *, run_optimize: bool = True) -> bytes:
    """The portable ``RoaringBitmapArray`` bytes Delta writes for ``row_indexes``.

    Containers are arrays or bitmaps by cardinality and, with ``run_optimize`` (Delta's default),
    runs where those are smaller. Raises :class:`ValueError` for indexes :func:`row_index_array`
    refuses.
    """
    values = row_index_array(row_indexes)
    if values.size == 0:
        return struct.pack("<iq", PORTABLE_MAGIC, 0)
    highs = (values >> np.uint64(32)).astype(np.int64)
    count = int(highs[-1]) + 1  # Delta writes the bitmaps of every key up to the highest
    bounds = np.searchsorted(highs, np.arange(count + 1), side="left")
    out = [struct.pack("<iq", PORTABLE_MAGIC, count)]
    for high in range(count):
        start, end = int(bounds[high]), int(bounds[high + 1])
        out.append(struct.pack("<I", high))
        if start == end:
            out.append(_EMPTY_ROARING32)
        else:
            low = (values[start:end] & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
            out.append(_serialize_roaring32(low, run_optimize))
    return b"".join(out)


def _serialize_roaring32(values: np.ndarray, run_optimize: bool) -> bytes:
    """A non-empty sorted ``uint32`` array as one portable 32-bit roaring bitmap.

    The work is a few array operations over all values plus a few per container (a DV holds a
    handful of containers per 65536 rows), so that small bitmaps, the common case, stay cheap.
    """
    keys = values >> 16
    size_all = int(values.size)
    starts = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist()]
    ends = [*starts[1:], size_all]
    low = (values & 0xFFFF).astype("<u2")
    # breaks[i]: values i and i + 1 are not consecutive, so a run ends at i (a container's runs
    # are counted from its own slice, so a boundary between containers never joins two runs)
    breaks = np.diff(values) != 1

    bodies: list[bytes] = []
    header: list[int] = []
    is_run: list[bool] = []
    for start, end in zip(starts, ends, strict=True):
        count = end - start
        header += (int(keys[start]), count - 1)
        inner = breaks[start : end - 1]
        runs = 1 + int(np.count_nonzero(inner))
        base_size = 2 * count if count <= _ARRAY_CONTAINER_MAX else _BITMAP_CONTAINER_BYTES
        if run_optimize and 2 + 4 * runs < base_size:
            firsts = np.empty(runs, dtype=np.int64)
            firsts[0] = 0
            firsts[1:] = np.flatnonzero(inner) + 1
            pairs = np.empty((runs, 2), dtype="<u2")
            pairs[:, 0] = low[start + firsts]
            pairs[:, 1] = np.diff(firsts, append=count) - 1
            bodies.append(struct.pack("<H", runs) + pairs.tobytes())
            is_run.append(True)
        elif count <= _ARRAY_CONTAINER_MAX:
            bodies.append(low[start:end].tobytes())
            is_run.append(False)
        else:
            bits = np.zeros(_BITMAP_CONTAINER_BYTES * 8, dtype=np.uint8)
            bits[low[start:end]] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
            is_run.append(False)

    size = len(starts)
    header_bytes = struct.pack(f"<{2 * size}H", *header)
    if any(is_run):
        flags = np.packbits(np.array(is_run, dtype=np.uint8), bitorder="little").tobytes()
        prefix = struct.pack("<I", _SERIAL_COOKIE | ((size - 1) << 16)) + flags + header_bytes
        with_offsets = size >= _NO_OFFSET_THRESHOLD
    else:
        prefix = struct.pack("<II", _SERIAL_COOKIE_NO_RUN, size) + header_bytes
        with_offsets = True
    if with_offsets:
        offset = len(prefix) + 4 * size
        offsets = []
        for body in bodies:
            offsets.append(offset)
            offset += len(body)
        prefix += struct.pack(f"<{size}I", *offsets)
    return prefix + b"".join(bodies)
