"""Tokens of the SQL expression grammar, with Spark's literal spellings.

Numbers keep their text (the parser types them: ``1`` int, ``1L`` bigint, ``1S`` smallint, ``1Y``
tinyint, ``1.5``/``1.5BD`` decimal, ``1e3``/``1.5D`` double, ``1.5F`` float). Strings are quoted
with ``'`` or ``"``; a doubled quote stands for one, and backslash escapes are read as Spark reads
them (``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\0``, ``\\Z``, ``\\uXXXX``, three octal digits;
``\\%`` and ``\\_`` keep their backslash for ``LIKE``; any other ``\\c`` is ``c``). ``X'0AFF'`` is
a binary literal; ```name``` a quoted identifier (a doubled backquote stands for one). Positions
are 0-based character offsets into the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from replay.protocol.sql.errors import ExpressionError

_TOKEN = re.compile(
    r"""(?:
        (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[bB][dD]|[lLsSyYdDfF])?)(?![A-Za-z0-9_])
      | [xX]'(?P<hex>[^']*)'
      | '(?P<string>(?:[^'\\]|\\.|'')*)'
      | "(?P<dstring>(?:[^"\\]|\\.|"")*)"
      | `(?P<quoted>(?:[^`]|``)+)`
      | (?P<op><=>|==|!=|<>|<=|>=|\|\||[=<>()+\-*/%,.])
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[0-3][0-7]{2}|.)", re.DOTALL)


@dataclass(frozen=True)
class Token:
    """``kind``: ``number``, ``string``, ``binary``, ``word``, ``quoted`` (identifier), ``op``, ``end``."""

    kind: str
    text: str
    position: int
    value: object = None

    def is_word(self, *words: str) -> bool:
        """Whether this is an unquoted word, one of ``words`` (lowercase) if any are given."""
        return self.kind == "word" and (not words or self.text.lower() in words)

    def describe(self) -> str:
        return "the end" if self.kind == "end" else f"{self.text!r} at position {self.position}"


def unescape(body: str, quote: str) -> str:
    """A string literal's body as Spark reads it (see the module docstring)."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "u" and len(code) == 5:
            return chr(int(code[1:], 16))
        if len(code) == 3:
            return chr(int(code, 8))
        return _ESCAPES.get(code, code)

    return _ESCAPE.sub(one, body.replace(quote * 2, quote))


def tokenize(text: str, kind: str = "expression") -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; :class:`ExpressionError` on bad input."""
    tokens: list[Token] = []
    position = 0
    length = len(text)
    while True:
        while position < length and text[position].isspace():
            position += 1
        if position >= length:
            tokens.append(Token("end", "", length))
            return tokens
        match = _TOKEN.match(text, position)
        if match is None:
            raise ExpressionError(
                f"unexpected input at position {position}: {text[position:]!r}",
                text=text,
                position=position,
                action="parse",
                kind=kind,
            )
        group = match.lastgroup or ""
        raw = match.group(0)
        if group == "hex":
            tokens.append(Token("binary", raw, position, _hex(match.group(group), text, position, kind)))
        elif group in ("string", "dstring"):
            quote = "'" if group == "string" else '"'
            tokens.append(Token("string", raw, position, unescape(match.group(group), quote)))
        elif group == "quoted":
            tokens.append(Token("quoted", raw, position, match.group(group).replace("``", "`")))
        else:
            tokens.append(Token(group, raw, position))
        position = match.end()


def _hex(digits: str, text: str, position: int, kind: str) -> bytes:
    if not re.fullmatch(r"[0-9a-fA-F]*", digits):
        raise ExpressionError(
            f"[INVALID_TYPED_LITERAL] {digits!r} is not a valid BINARY at position {position}",
            text=text,
            position=position,
            error_class="INVALID_TYPED_LITERAL",
            action="parse",
            kind=kind,
        )
    return bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits)
