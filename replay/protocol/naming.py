"""Spelling rules: Delta's camelCase JSON keys and this library's snake_case names, and column
paths written as Spark writes them (``s.`a b```)."""

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


def split_column_path(text: str) -> tuple[str, ...] | None:
    """The parts of a column path as Spark reads an attribute name: split at dots outside
    backquotes, a backquoted part unquoted (a doubled backquote is one): ``s.`a.b``` is
    ``("s", "a.b")``. ``None`` for an unclosed backquote or an empty part."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    index = 0
    while index < len(text):
        char = text[index]
        if char == "`":
            if quoted and text[index + 1 : index + 2] == "`":
                current.append("`")
                index += 1
            else:
                quoted = not quoted
        elif char == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    parts.append("".join(current))
    if quoted or not all(parts):
        return None
    return tuple(parts)
