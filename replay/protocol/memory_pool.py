"""Which allocator Arrow's buffers come from: jemalloc rather than pyarrow's default mimalloc.

Decoding, filtering and encoding Parquet files allocates and frees buffers of a few megabytes
file after file, on several threads. mimalloc keeps what each thread freed for that thread's
later use, so a process that rewrote a hundred files holds far more memory than it ever used at
once: a copy-on-write DELETE over a hundred files of 100 000 rows peaked at 213 MB with mimalloc,
126 MB with jemalloc, for the same CPU time (the system allocator: 122 MB, a quarter more CPU;
jemalloc returning freed pages at once: 116 MB, twice the CPU).

Importing this module (the first thing ``import replay`` does) makes jemalloc Arrow's default
pool, a process-wide setting, only where the choice is still pyarrow's own: not when
``ARROW_DEFAULT_MEMORY_POOL`` names a pool, nor when the application set a pool other than
mimalloc, nor where pyarrow has no jemalloc (its wheels have it on Linux only; its build
configuration header says). Arrow's C++ code reads the variable once, when pyarrow is imported:
when pyarrow is not imported yet, it is imported here with the variable set (and the variable
removed again, so that child processes choose for themselves); when it is, pyarrow's default pool
is switched (allocations Arrow's C++ code makes on its own, e.g. the Parquet writer's pages, then
stay with mimalloc). Arrays keep the pool they were allocated from, so buffers made before the
switch are released correctly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's default pool where pyarrow's default (mimalloc) would be in use (see
    the module docstring)."""
    if os.environ.get(POOL_VARIABLE) or not sys.platform.startswith("linux"):
        return
    if "pyarrow" not in sys.modules and _built_with_jemalloc():
        os.environ[POOL_VARIABLE] = "jemalloc"
        try:
            import pyarrow  # noqa: F401 -- Arrow chooses its default pool now, once per process
        finally:
            del os.environ[POOL_VARIABLE]
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "mimalloc":
        return
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        logger.debug("pyarrow has no jemalloc pool; keeping mimalloc")
        return
    pa.set_memory_pool(pool)


def _built_with_jemalloc() -> bool:
    """Whether the installed pyarrow has jemalloc, by its build configuration header, read without
    importing pyarrow (Arrow warns about a pool it lacks). ``False`` when the header is missing."""
    spec = importlib.util.find_spec("pyarrow")
    if spec is None or not spec.submodule_search_locations:
        return False
    for location in spec.submodule_search_locations:
        header = Path(location) / "include" / "arrow" / "util" / "config.h"
        with contextlib.suppress(OSError):
            return "#define ARROW_JEMALLOC\n" in header.read_text(encoding="utf-8", errors="replace")
    return False


prefer_jemalloc()
