"""The token cursor of this library's recursive-descent parsers (expressions and statements).

A parser walks a list of tokens that ends with an ``end`` token: it looks at the current token,
takes it when it is the word or operator it expects, and raises its own error otherwise.
:class:`TokenCursor` holds those moves once; a parser subclasses it with its token type and
defines :meth:`TokenCursor.error`.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar


class CursorToken(Protocol):
    """What the cursor reads of a token."""

    @property
    def kind(self) -> str: ...

    @property
    def text(self) -> str: ...

    def is_word(self, *words: str) -> bool: ...


T = TypeVar("T", bound=CursorToken)


class TokenCursor(Generic[T]):
    """A position in ``tokens`` (the tokens of ``text``, the last one of kind ``end``)."""

    def __init__(self, text: str, tokens: list[T]) -> None:
        self.text = text
        self.tokens = tokens
        self.index = 0

    @property
    def token(self) -> T:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> T:
        """The token ``offset`` places ahead (the ``end`` token past the end)."""
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> T:
        """The current token; the cursor moves past it (never past the ``end`` token)."""
        token = self.token
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def take_word(self, *words: str) -> T | None:
        """The current token if it is an unquoted word, one of ``words`` (lowercase) if given."""
        return self.advance() if self.token.is_word(*words) else None

    def take_op(self, *ops: str) -> T | None:
        """The current token if it is one of the operators ``ops``."""
        return self.advance() if self.token.kind == "op" and self.token.text in ops else None

    def expect_word(self, *words: str) -> T:
        """The current token, which must be one of ``words``; the parser's error otherwise."""
        token = self.take_word(*words)
        if token is None:
            raise self.error(" or ".join(word.upper() for word in words))
        return token

    def expect_op(self, op: str) -> T:
        """The current token, which must be the operator ``op``; the parser's error otherwise."""
        token = self.take_op(op)
        if token is None:
            raise self.error(repr(op))
        return token

    def error(self, expected: str) -> Exception:
        """The parser's error for a token other than ``expected`` at the cursor."""
        raise NotImplementedError
