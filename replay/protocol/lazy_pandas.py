"""Keeping pyarrow from importing pandas on this library's behalf.

pyarrow decides once per process, lazily, whether pandas is available, and takes that decision by
importing pandas: the first array built from a NumPy array or from Python objects, the first
scalar made from a Python value, and the import of ``pyarrow.dataset`` (whose initialisation makes
a scalar) each do it; its Cython layer decides on the first of these, its C++ conversion of Python
values once more on the first value whose type it infers. Importing pandas costs about 40 MB of
resident memory and a third of a second, in a process that may never use it; this library never
needs it (``to_pandas`` imports it when asked).

Importing this module (the first thing ``import replay`` does) lets pyarrow take that decision
at once, with pandas out of reach for the moment, so that it records "no pandas" without loading
it; and watches for the first import of pandas by anyone, after which pyarrow is told to look
again. From then on pyarrow treats pandas objects exactly as it would have: a DataFrame or Series
exists only once pandas is imported, and by then pyarrow knows of it. Nothing is done when pandas
is already imported or pyarrow has already decided. The only difference while pandas is not
imported: a nanosecond timestamp or duration scalar's ``as_py()`` gives a ``datetime`` (or refuses
a value that is not a whole microsecond) where it would give a pandas ``Timestamp``; the library
converts no such scalar.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pyarrow as pa

logger = logging.getLogger(__name__)

_PANDAS = "pandas"


def _shim() -> Any:
    """pyarrow's lazy pandas importer, or ``None`` if this pyarrow has none."""
    return getattr(getattr(pa, "lib", None), "_pandas_api", None)


class _HidePandas(importlib.abc.MetaPathFinder):
    """Makes ``import pandas`` fail, in one thread only (others import as usual)."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _PANDAS and threading.get_ident() == self._thread:
            raise ImportError("pandas is not imported on pyarrow's behalf")
        return None


class _Loader(importlib.abc.Loader):
    """pandas' own loader; once pandas is executed, pyarrow is told that it is there and the
    watcher leaves ``sys.meta_path``."""

    def __init__(self, loader: importlib.abc.Loader, watcher: _WatchPandas) -> None:
        self._loader = loader
        self._watcher = watcher

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        with contextlib.suppress(ValueError):  # another import of pandas removed it already
            sys.meta_path.remove(self._watcher)
        try:
            _shim().compat  # noqa: B018 -- pyarrow imports pandas (now loaded) and its glue
        except Exception:  # an unusable pandas: pyarrow goes on without it, as it would have
            logger.debug("pyarrow does not take up pandas", exc_info=True)

    def __getattr__(self, name: str) -> Any:  # resources, source and the like
        return getattr(self._loader, name)


class _WatchPandas(importlib.abc.MetaPathFinder):
    """Finds pandas as the other finders do, with :class:`_Loader` wrapped around its loader.
    A lookup without an import (``importlib.util.find_spec``) leaves the watch in place."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _PANDAS:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if isinstance(finder, _WatchPandas) or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self)
                return spec
        return None


def defer_pandas() -> None:
    """Let pyarrow decide now, without pandas, and take pandas up when it is imported (see the
    module docstring). Does nothing when pandas is imported already."""
    shim = _shim()
    if shim is None or _PANDAS in sys.modules:
        return
    hide = _HidePandas()
    sys.meta_path.insert(0, hide)
    try:
        available = bool(shim.have_pandas)  # pyarrow's decision, taken now
        pa.scalar(True)  # the conversion of Python values makes an attempt of its own, once
    except Exception:  # pyarrow's internals moved: leave it to its own ways
        logger.debug("could not defer pyarrow's import of pandas", exc_info=True)
        return
    finally:
        sys.meta_path.remove(hide)
    if not available and _PANDAS not in sys.modules:
        sys.meta_path.insert(0, _WatchPandas())


defer_pandas()
