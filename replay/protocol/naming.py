"""Spelling rules between Delta's camelCase JSON keys and this library's snake_case names."""

from __future__ import annotations

import functools
import re

_CAMEL_BOUNDARY = re.compile(r"(?<!^)(?=[A-Z])")


@functools.cache
def camel_case(name: str) -> str:
    """``path_or_inline_dv`` -> ``pathOrInlineDv`` (Delta's JSON key for a snake_case name)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@functools.cache
def snake_case(name: str) -> str:
    """``pathOrInlineDv`` -> ``path_or_inline_dv``."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()
