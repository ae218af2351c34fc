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


def split_outside_backquotes(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` where it stands outside backquotes, the pieces as written
    (a doubled backquote inside a quoted name opens and closes, so it never splits)."""
    items: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == "`":
            quoted = not quoted
        if char == separator and not quoted:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return items


_QUOTED = re.compile(r"`((?:[^`]|``)*)`")


def split_column_path(text: str) -> tuple[str, ...] | None:
    """The parts of a column path as Spark reads an attribute name: split at dots outside
    backquotes, a backquoted part unquoted (a doubled backquote is one): ``s.`a.b``` is
    ``("s", "a.b")``. ``None`` for an unclosed backquote or an empty part."""
    if text.count("`") % 2:
        return None
    parts = tuple(
        _QUOTED.sub(lambda m: m.group(1).replace("``", "`"), piece)
        for piece in split_outside_backquotes(text, ".")
    )
    return parts if all(parts) else None
