"""Tokens of the statements :func:`replay.spark.sql` reads (:mod:`replay.spark.sql_parse`): Spark's
spellings of identifiers (```x```, a doubled backquote for one), strings (``'...'``, ``"..."``,
read as the expression grammar reads them) and numbers; ``--`` and ``/* */`` comments and spaces
are dropped. Positions are 0-based offsets into the statement."""

from __future__ import annotations

import re
from dataclasses import dataclass

from replay.protocol.sql.lexer import unescape
from replay.spark.sql_ast import StatementParseError

_TOKEN = re.compile(
    r"""(?:
        (?P<space>\s+|--[^\n]*|/\*.*?\*/)
      | '(?P<string>(?:[^'\\]|\\.|'')*)'
      | "(?P<dstring>(?:[^"\\]|\\.|"")*)"
      | `(?P<quoted>(?:[^`]|``)*)`
      | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[bB][dD]|[lLsSyYdDfF])?)(?![A-Za-z0-9_])
      | (?P<word>[A-Za-z0-9_]+)
      | (?P<op><=>|==|!=|<>|<=|>=|\|\||::|->|=>|[^\s])
    )""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    """``kind``: ``word``, ``quoted`` (identifier), ``string``, ``number``, ``op`` or ``end``;
    ``value``: the unquoted identifier or the string's value; ``end``: the offset after it."""

    kind: str
    text: str
    position: int
    end: int
    value: str = ""

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and (not words or self.text.lower() in words)

    def is_op(self, *ops: str) -> bool:
        return self.kind == "op" and self.text in ops

    @property
    def name(self) -> str | None:
        """The identifier this token spells, if it is one."""
        return self.value if self.kind == "quoted" else self.text if self.kind == "word" else None


def tokenize(text: str) -> list[Token]:
    """The tokens of a statement (comments and spaces dropped), ending with an ``end`` token."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or (match.group(0) in ("'", '"', "`") and match.lastgroup == "op"):
            raise StatementParseError(f"unclosed quote {text[position]!r}", text, position)
        kind = match.lastgroup or "op"
        if kind != "space":
            value = match.group(kind) if kind in ("string", "dstring", "quoted") else ""
            if kind in ("string", "dstring"):
                value = unescape(value, "'" if kind == "string" else '"')
                kind = "string"
            elif kind == "quoted":
                value = value.replace("``", "`")
            tokens.append(Token(kind, match.group(0), position, match.end(), value))
        position = match.end()
    tokens.append(Token("end", "", len(text), len(text)))
    return tokens
