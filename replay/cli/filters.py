"""``deltalog read --filter``: a small SQL-like filter language, read into DNF filter terms.

::

    part = 3 and id > 10
    city in ('Oslo', 'Lima') or amount >= 2.5
    name is not null and day < '2024-01-31'

Terms are ``column op value`` with ``=``, ``==``, ``!=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``,
``in (...)``, ``not in (...)``, ``is null`` and ``is not null``; ``and`` binds tighter than
``or``. Values are numbers, ``'quoted strings'`` (``''`` for a quote), ``true``, ``false`` or
``null``; they are converted to the column's type when the filter is applied. Column names may
be written ``a.b`` for nested fields or in ``"double quotes"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from replay.protocol.predicates import DnfTerm, InvalidFilterError

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<quoted>"(?:[^"]|"")+")
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<paren>[(),])
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false"}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    position: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    position = 0
    while position < len(text):
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise InvalidFilterError(f"cannot read the filter at position {position}: {text[position:]!r}")
        kind = match.lastgroup or ""
        out.append(_Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.index = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def next(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise InvalidFilterError(f"the filter {self.text!r} ends where {what} was expected")
        self.index += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "word" and token.text.lower() == word:
            self.index += 1
            return True
        return False

    def expect(self, text: str) -> None:
        token = self.next(repr(text))
        if token.text.lower() != text:
            raise InvalidFilterError(
                f"expected {text!r} at position {token.position} of the filter, found {token.text!r}"
            )

    def disjunction(self) -> list[list[DnfTerm]]:
        groups = [self.conjunction()]
        while self.keyword("or"):
            groups.append(self.conjunction())
        if self.peek() is not None:
            token = self.peek()
            assert token is not None
            raise InvalidFilterError(f"unexpected {token.text!r} at position {token.position} of the filter")
        return groups

    def conjunction(self) -> list[DnfTerm]:
        terms = [self.term()]
        while self.keyword("and"):
            terms.append(self.term())
        return terms

    def column(self) -> str:
        token = self.next("a column name")
        if token.kind == "quoted":
            return token.text[1:-1].replace('""', '"')
        if token.kind != "word" or token.text.lower() in _KEYWORDS:
            raise InvalidFilterError(
                f"expected a column name at position {token.position}, found {token.text!r}"
            )
        return token.text

    def value(self) -> object:
        token = self.next("a value")
        if token.kind == "string":
            return token.text[1:-1].replace("''", "'")
        if token.kind == "number":
            return float(token.text) if any(c in token.text for c in ".eE") else int(token.text)
        lowered = token.text.lower()
        if token.kind == "word" and lowered in ("true", "false"):
            return lowered == "true"
        if token.kind == "word" and lowered == "null":
            return None
        raise InvalidFilterError(f"expected a value at position {token.position}, found {token.text!r}")

    def values(self) -> list[object]:
        self.expect("(")
        values = [self.value()]
        while self.peek() is not None and self.peek().text == ",":  # type: ignore[union-attr]
            self.index += 1
            values.append(self.value())
        self.expect(")")
        return values

    def term(self) -> DnfTerm:
        column = self.column()
        if self.keyword("is"):
            negated = self.keyword("not")
            self.expect("null")
            return column, "!=" if negated else "=", None
        if self.keyword("not"):
            self.expect("in")
            return column, "not in", self.values()
        if self.keyword("in"):
            return column, "in", self.values()
        token = self.next("an operator")
        if token.kind != "op":
            raise InvalidFilterError(
                f"expected an operator at position {token.position}, found {token.text!r}"
            )
        op = "!=" if token.text == "<>" else token.text
        return column, op, self.value()


def parse_filter(text: str) -> list[DnfTerm] | list[list[DnfTerm]]:
    """DNF filter terms of a ``--filter`` expression; :class:`InvalidFilterError` naming the spot."""
    groups = _Reader(text).disjunction()
    return groups[0] if len(groups) == 1 else groups
