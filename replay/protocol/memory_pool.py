"""Which allocator Arrow's buffers come from: jemalloc rather than pyarrow's default mimalloc.

Decoding, filtering and encoding Parquet files allocates and frees buffers of a few megabytes
file after file, on several threads. mimalloc keeps what each thread freed for that thread's
later use, so a process that rewrote a hundred files holds far more memory than it ever used at
once: a copy-on-write DELETE over a hundred files of 100 000 rows peaked at 213 MB with mimalloc,
126 MB with jemalloc, for the same CPU time (the system allocator: 122 MB, a quarter more CPU).

Importing this module (``import replay`` does) makes jemalloc the process's default pool, a
process-wide setting, and only when the choice is still pyarrow's own: not when
``ARROW_DEFAULT_MEMORY_POOL`` names a pool, when the default pool is not mimalloc (set by the
application before), or when pyarrow was built without jemalloc. Arrays keep the pool they were
allocated from, so buffers made before the switch are released correctly.
"""

from __future__ import annotations

import logging
import os

import pyarrow as pa

logger = logging.getLogger(__name__)

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's default pool where pyarrow's default (mimalloc) is in use (see the
    module docstring)."""
    if os.environ.get(POOL_VARIABLE) or pa.default_memory_pool().backend_name != "mimalloc":
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        logger.debug("pyarrow has no jemalloc pool; keeping %s", pa.default_memory_pool().backend_name)
        return
    pa.set_memory_pool(pool)


prefer_jemalloc()
