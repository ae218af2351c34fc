"""The Hilbert curve over integer coordinates, vectorised: the order liquid clustering writes rows in.

Delta clusters a clustered table's rows along a Hilbert curve over the clustering columns' range
ids (``HilbertClustering``): unlike the Z-curve, consecutive points of the Hilbert curve are
always neighbours, so a stretch of the curve (one file) covers a compact box of every column's
ranges and statistics skip more files for a filter on any of them.

:func:`hilbert_transposed` is Skilling's transform ("Programming the Hilbert curve", 2004) from
axes to the *transposed* Hilbert index: ``n`` words whose bits, taken most significant first and
word by word (the Z-curve's interleaving), spell the point's index along the curve. Each step
works on whole numpy arrays of coordinates, one word per column; pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def hilbert_transposed(coordinates: Sequence[np.ndarray], bits: int) -> list[np.ndarray]:
    """The transposed Hilbert index of each point whose ``bits``-bit coordinates are
    ``coordinates`` (one array per dimension, equal lengths): interleaving the returned words'
    bits, most significant first, gives the index along the curve of order ``bits``. One
    dimension is its own index."""
    words = [np.asarray(axis, dtype=np.uint32).copy() for axis in coordinates]
    count = len(words)
    if count < 2 or bits < 1:
        return words
    top = np.uint32(1 << (bits - 1))
    # Inverse undo: walk the bits from the top, reflecting and exchanging the lower ones.
    q = top
    while q > 1:
        low = np.uint32(q - 1)
        for i in range(count):
            high = (words[i] & q) != 0
            words[0] = np.where(high, words[0] ^ low, words[0])  # invert the low bits of the first
            swap = np.where(high, np.uint32(0), (words[0] ^ words[i]) & low)
            words[0] ^= swap  # or exchange the low bits of the first and this one
            words[i] ^= swap
        q = np.uint32(q >> 1)
    # Gray encode.
    for i in range(1, count):
        words[i] ^= words[i - 1]
    flip = np.zeros_like(words[0])
    q = top
    while q > 1:
        flip = np.where((words[count - 1] & q) != 0, flip ^ np.uint32(q - 1), flip)
        q = np.uint32(q >> 1)
    return [word ^ flip for word in words]
