"""The errors of the SQL expression grammar: parse, resolution, type and evaluation errors.

Every error is a :class:`PredicateError` (which is an ``InvalidFilterError`` and a ``DeltaError``),
so code that catches predicate errors catches all of them. An :class:`ExpressionError` carries
Spark's error class (``UNRESOLVED_COLUMN.WITH_SUGGESTION``, ``DIVIDE_BY_ZERO``, ...) where Spark
has one, and the 0-based character position in the text it is about.
"""

from __future__ import annotations

from replay.protocol.errors import DeltaError
from replay.protocol.predicates import InvalidFilterError


class PredicateError(InvalidFilterError, DeltaError):
    """A predicate cannot be parsed or does not fit the table (the message names the predicate)."""


class ExpressionError(PredicateError):
    """A SQL expression that cannot be parsed, resolved, typed or evaluated.

    ``detail`` is the message without the leading ``Cannot <action> the <kind> '<text>':`` (it
    ends with ``at position N`` where a position is known);
    ``error_class`` is Spark's error class (``None`` for plain syntax errors); ``position`` is the
    0-based character offset in ``text`` of the offending part (``None`` when the whole text is).
    """

    def __init__(
        self,
        detail: str,
        *,
        text: str | None = None,
        position: int | None = None,
        error_class: str | None = None,
        action: str = "resolve",
        kind: str = "expression",
    ) -> None:
        self.detail = detail
        self.text = text
        self.position = position
        self.error_class = error_class
        self.action = action
        self.kind = kind
        super().__init__(self._message())

    def _message(self) -> str:
        if self.text is None:
            return self.detail
        return f"Cannot {self.action} the {self.kind} {self.text!r}: {self.detail}"

    def located(self, text: str, kind: str) -> ExpressionError:
        """This error about ``text`` (a predicate or an expression); a new error, same class."""
        if self.text is not None:
            return self
        return type(self)(
            self.detail,
            text=text,
            position=self.position,
            error_class=self.error_class,
            action=self.action,
            kind=kind,
        )


class ExpressionEvaluationError(ExpressionError):
    """A run-time error of ANSI SQL evaluation (division by zero, overflow, a malformed cast).

    Raised only for rows the expression really evaluates: a ``CASE`` branch, an ``IF``, a
    ``COALESCE`` argument or the right side of ``AND``/``OR`` that SQL does not evaluate for a
    row cannot fail on that row.
    """

    def __init__(
        self,
        detail: str,
        *,
        text: str | None = None,
        position: int | None = None,
        error_class: str | None = None,
        action: str = "evaluate",
        kind: str = "expression",
    ) -> None:
        super().__init__(
            detail, text=text, position=position, error_class=error_class, action=action, kind=kind
        )


def _detail(error_class: str, message: str, position: int | None) -> str:
    where = f" at position {position}" if position is not None and position >= 0 else ""
    return f"[{error_class}] {message}{where}"


def resolution_error(error_class: str, message: str, position: int | None) -> ExpressionError:
    """``[ERROR_CLASS] message at position N`` (the text is added by :meth:`ExpressionError.located`)."""
    return ExpressionError(
        _detail(error_class, message, position), position=position, error_class=error_class
    )


def evaluation_error(error_class: str, message: str, position: int | None) -> ExpressionEvaluationError:
    """A run-time ``[ERROR_CLASS] message at position N`` (the text is added by the caller)."""
    return ExpressionEvaluationError(
        _detail(error_class, message, position), position=position, error_class=error_class
    )
