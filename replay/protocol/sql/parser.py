"""Recursive-descent parser of Spark SQL scalar expressions into :mod:`replay.protocol.sql.ast`.

Precedence, loosest first, as Spark's grammar has it::

    OR
    AND
    NOT
    x [NOT] BETWEEN a AND b | x [NOT] IN (...) | x [NOT] LIKE p [ESCAPE 'c']
    x IS [NOT] NULL | TRUE | FALSE | UNKNOWN
    = == <=> != <> < <= > >=          (left-associative: ``a = b = c`` is ``(a = b) = c``)
    + - ||                            (one level: ``1 + 2 || 3`` is ``(1 + 2) || 3``)
    * / %
    unary - and +
    literals, columns, (expression), CASE, CAST(x AS type), function(args)

A predicate applies to the whole comparison before it (``x = 1 IS NULL`` tests ``x = 1``) and at
most one follows it. ``-`` directly before a number is part of the literal (``-2147483648`` is an
INT). ``DATE``, ``TIMESTAMP``, ``TIMESTAMP_NTZ`` and ``X`` make typed literals only before a string,
and ``INTERVAL`` before a string or a unit-value pair (``INTERVAL 1 DAY``); they are ordinary
names otherwise; the words of the grammar (``AND``, ``CASE``, ``IN`` ...) need
backquotes to be column names. Adjacent string literals are one string (``'a' 'b'`` is ``'ab'``).
Function names are checked against the registry here: an unknown function or a wrong number of
arguments is an error at parse time, naming the position.
"""

from __future__ import annotations

import decimal
import re
import struct

import pyarrow as pa

from replay.protocol.sql import datatypes as types
from replay.protocol.sql import interval_literals, syntax
from replay.protocol.sql.casts import parse_datetime_literal
from replay.protocol.sql.cursor import TokenCursor
from replay.protocol.sql.errors import ExpressionError
from replay.protocol.sql.functions import FUNCTIONS, arity_error
from replay.protocol.sql.lexer import Token, tokenize

RESERVED = frozenset(
    {"and", "or", "not", "is", "in", "between", "like", "escape", "case", "when", "then", "else", "end", "as"}
)
_NEVER_COLUMNS = frozenset({"not"})
"""Words that never name a column where a value is expected (``NOT`` starts a negation)."""
_COMPARISONS = {
    "=": "=",
    "==": "=",
    "<=>": "<=>",
    "!=": "!=",
    "<>": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
}
_TYPED = {
    "date": types.DATE,
    "timestamp": types.TIMESTAMP,
    "timestamp_ltz": types.TIMESTAMP,
    "timestamp_ntz": types.TIMESTAMP_NTZ,
}
_NUMBER = re.compile(r"(?P<body>.*?)(?P<suffix>[bB][dD]|[lLsSyYdDfF])?")
_INTEGER_RANGES = {
    "l": (types.BIGINT, 64, "bigint"),
    "s": (pa.int16(), 16, "smallint"),
    "y": (pa.int8(), 8, "tinyint"),
}


def parse(text: str, kind: str = "expression") -> syntax.Node:
    """The tree of ``text``; :class:`ExpressionError` naming the text and the position if invalid."""
    return _Parser(text, kind).parse()


class _Parser(TokenCursor[Token]):
    def __init__(self, text: str, kind: str) -> None:
        super().__init__(text, tokenize(text, kind))
        self.kind = kind

    def error(self, expected: str) -> ExpressionError:
        token = self.token
        return ExpressionError(
            f"expected {expected}, found {token.describe()}",
            text=self.text,
            position=token.position,
            action="parse",
            kind=self.kind,
        )

    def invalid(self, detail: str, position: int, error_class: str | None = None) -> ExpressionError:
        return ExpressionError(
            f"{detail} at position {position}",
            text=self.text,
            position=position,
            error_class=error_class,
            action="parse",
            kind=self.kind,
        )

    # -- grammar --------------------------------------------------------------------------------------
    def parse(self) -> syntax.Node:
        if self.token.kind == "end":
            raise ExpressionError(f"Cannot parse an empty {self.kind}", position=0, action="parse")
        node = self.expression()
        if self.token.kind != "end":
            raise self.error("AND, OR or the end")
        return node

    def expression(self) -> syntax.Node:
        left = self.conjunction()
        while (token := self.take_word("or")) is not None:
            left = syntax.Binary("OR", left, self.conjunction(), position=token.position)
        return left

    def conjunction(self) -> syntax.Node:
        left = self.negation()
        while (token := self.take_word("and")) is not None:
            left = syntax.Binary("AND", left, self.negation(), position=token.position)
        return left

    def negation(self) -> syntax.Node:
        token = self.take_word("not")
        if token is not None:
            return syntax.Unary("NOT", self.negation(), position=token.position)
        return self.predicated()

    def predicated(self) -> syntax.Node:
        value = self.comparison()
        start = value.position
        if self.take_word("is") is not None:
            negated = self.take_word("not") is not None
            if self.take_word("null", "unknown") is not None:
                return syntax.IsNull(value, negated, position=start)
            for word, truth in (("true", True), ("false", False)):
                if self.take_word(word) is not None:
                    return syntax.IsBool(value, truth, negated, position=start)
            raise self.error("NULL")
        not_token = self.take_word("not")
        negated = not_token is not None
        if self.take_word("between") is not None:
            low = self.comparison()
            self.expect_word("and")
            return syntax.Between(value, low, self.comparison(), negated, position=start)
        if self.take_word("in") is not None:
            self.expect_op("(")
            items = [self.expression()]
            while self.take_op(","):
                items.append(self.expression())
            self.expect_op(")")
            return syntax.InList(value, tuple(items), negated, position=start)
        if self.take_word("like") is not None:
            pattern = self.comparison()
            escape = "\\"
            if self.take_word("escape") is not None:
                token = self.advance()
                if token.kind != "string" or not isinstance(token.value, str) or len(token.value) != 1:
                    raise self.invalid("the ESCAPE of LIKE must be a string of one character", token.position)
                escape = token.value
            return syntax.Like(value, pattern, escape, negated, position=start)
        if negated:
            raise self.error("IN, BETWEEN or LIKE after NOT")
        return value

    def comparison(self) -> syntax.Node:
        left = self.additive()
        while (token := self.take_op(*_COMPARISONS)) is not None:
            left = syntax.Binary(_COMPARISONS[token.text], left, self.additive(), position=token.position)
        return left

    def additive(self) -> syntax.Node:
        left = self.multiplicative()
        while (token := self.take_op("+", "-", "||")) is not None:
            left = syntax.Binary(token.text, left, self.multiplicative(), position=token.position)
        return left

    def multiplicative(self) -> syntax.Node:
        left = self.unary()
        while (token := self.take_op("*", "/", "%")) is not None:
            left = syntax.Binary(token.text, left, self.unary(), position=token.position)
        return left

    def unary(self) -> syntax.Node:
        token = self.take_op("-", "+")
        if token is None:
            return self.primary()
        if token.text == "+":
            return self.unary()
        if self.token.kind == "number":
            return self.number(self.advance(), negative=True, position=token.position)
        return syntax.Unary("-", self.unary(), position=token.position)

    def primary(self) -> syntax.Node:
        token = self.token
        if token.kind == "number":
            return self.number(self.advance(), negative=False, position=token.position)
        if token.kind == "string":
            value = ""
            while self.token.kind == "string":
                value += str(self.advance().value)
            return syntax.Literal(value, types.STRING, position=token.position)
        if token.kind == "binary":
            self.advance()
            return syntax.Literal(token.value, pa.binary(), position=token.position)
        if token.kind == "quoted":
            return self.column()
        if self.take_op("(") is not None:
            node = self.expression()
            self.expect_op(")")
            return node
        if token.kind != "word" or token.text.lower() in _NEVER_COLUMNS:
            raise self.error("a column or a value")
        word = token.text.lower()
        if word in RESERVED - {"case"}:
            return self.column()  # Spark's non-reserved keywords name columns where one is expected
        for name, constant, data_type in (
            ("true", True, types.BOOLEAN),
            ("false", False, types.BOOLEAN),
            ("null", None, types.VOID),
        ):
            if word == name:
                self.advance()
                return syntax.Literal(constant, data_type, position=token.position)
        if word in _TYPED and self.peek().kind == "string":
            self.advance()
            return self.typed_literal(word, self.advance(), token.position)
        if word == "interval" and (self.peek().kind == "string" or self.interval_pair_at(1)):
            return self.interval()
        if word == "case":
            return self.case()
        if word == "cast" and self.peek().text == "(":
            return self.cast()
        if self.peek().kind == "op" and self.peek().text == "(":
            return self.call()
        return self.column()

    def column(self) -> syntax.Node:
        first = self.advance()
        parts = [str(first.value) if first.kind == "quoted" else first.text]
        while self.take_op(".") is not None:
            if self.token.kind not in ("word", "quoted"):
                raise self.error("a field name after '.'")
            part = self.advance()
            parts.append(str(part.value) if part.kind == "quoted" else part.text)
        return syntax.Column(tuple(parts), position=first.position)

    def case(self) -> syntax.Node:
        start = self.advance().position
        operand = None if self.token.is_word("when") else self.expression()
        whens: list[tuple[syntax.Node, syntax.Node]] = []
        while self.take_word("when") is not None:
            condition = self.expression()
            self.expect_word("then")
            whens.append((condition, self.expression()))
        if not whens:
            raise self.error("WHEN")
        otherwise = self.expression() if self.take_word("else") is not None else None
        self.expect_word("end")
        return syntax.Case(operand, tuple(whens), otherwise, position=start)

    def cast(self) -> syntax.Node:
        start = self.advance().position
        self.expect_op("(")
        operand = self.expression()
        self.expect_word("as")
        if self.token.kind != "word":
            raise self.error("a type name")
        name = self.advance()
        arguments: list[int] = []
        if self.take_op("(") is not None:
            while True:
                if self.token.kind != "number" or not self.token.text.isdigit():
                    raise self.error("a number")
                number = self.advance()
                arguments.append(int(number.text))
                if self.take_op(")") is not None:
                    break
                self.expect_op(",")
        data_type = types.type_from_name(name.text, arguments)
        if data_type is None:
            spelled = name.text + (f"({', '.join(map(str, arguments))})" if arguments else "")
            raise self.invalid(
                f"[UNSUPPORTED_DATATYPE] Unsupported data type {spelled.upper()!r}",
                name.position,
                "UNSUPPORTED_DATATYPE",
            )
        self.expect_op(")")
        return syntax.Cast(operand, data_type, position=start)

    def call(self) -> syntax.Node:
        name = self.advance()
        self.expect_op("(")
        args: list[syntax.Node] = []
        if self.take_op(")") is None:
            args.append(self.expression())
            while self.take_op(",") is not None:
                args.append(self.expression())
            self.expect_op(")")
        lowered = name.text.lower()
        spec = FUNCTIONS.get(lowered)
        if spec is None:
            raise self.invalid(
                f"[UNRESOLVED_ROUTINE] Cannot resolve function `{name.text}`",
                name.position,
                "UNRESOLVED_ROUTINE",
            )
        if not spec.accepts(len(args)):
            raise arity_error(spec, len(args), name.position).located(self.text, self.kind)
        return syntax.Call(lowered, tuple(args), position=name.position)

    # -- literals -------------------------------------------------------------------------------------
    def number(self, token: Token, *, negative: bool, position: int) -> syntax.Node:
        match = _NUMBER.fullmatch(token.text)
        assert match is not None
        body, suffix = match.group("body"), (match.group("suffix") or "").lower()
        sign = -1 if negative else 1
        spelled = ("-" if negative else "") + token.text
        if suffix in _INTEGER_RANGES:
            data_type, bits, name = _INTEGER_RANGES[suffix]
            if not body.isdigit():
                raise self.invalid(f"[INVALID_NUMERIC_LITERAL] {spelled!r} is not a valid {name}", position)
            value = sign * int(body)
            if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                raise self.invalid(
                    f"[INVALID_NUMERIC_LITERAL_RANGE] Numeric literal {spelled} is outside the valid range "
                    f"for {name}",
                    position,
                    "INVALID_NUMERIC_LITERAL_RANGE",
                )
            return syntax.Literal(value, data_type, position=position)
        if suffix in ("d", "f") or (not suffix and "e" in body.lower()):
            number = sign * float(body)
            try:
                if suffix == "f":
                    return syntax.Literal(
                        struct.unpack("<f", struct.pack("<f", number))[0], pa.float32(), position=position
                    )
            except OverflowError:
                number = float("inf")
            if number in (float("inf"), float("-inf")):
                raise self.invalid(
                    f"[INVALID_NUMERIC_LITERAL_RANGE] Numeric literal {spelled} is outside the valid range",
                    position,
                    "INVALID_NUMERIC_LITERAL_RANGE",
                )
            return syntax.Literal(number, types.DOUBLE, position=position)
        if suffix == "bd" or "." in body:
            value_d = decimal.Decimal(body)
            value_d = -value_d if negative else value_d
            try:
                return syntax.Literal(value_d, types.decimal_literal_type(value_d), position=position)
            except ValueError:
                raise self.invalid(
                    f"[DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION] {spelled} has more than 38 digits", position
                ) from None
        value = sign * int(body)
        try:
            data_type = types.integer_literal_type(value)
            if pa.types.is_decimal(data_type):
                return syntax.Literal(decimal.Decimal(value), data_type, position=position)
            return syntax.Literal(value, data_type, position=position)
        except ValueError:
            raise self.invalid(
                f"[DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION] {spelled} has more than 38 digits", position
            ) from None

    def interval_pair_at(self, offset: int) -> bool:
        """Whether a unit-value pair (``[-]1 DAY``, ``'1' DAY``) starts ``offset`` tokens ahead."""
        value = self.peek(offset)
        if value.kind == "op" and value.text in ("-", "+"):
            offset, value = offset + 1, self.peek(offset + 1)
            if value.kind != "number":
                return False
        unit = self.peek(offset + 1)
        unit_word = unit.kind == "word" and interval_literals.unit_field(unit.text) is not None
        return value.kind in ("number", "string") and unit_word

    def interval(self) -> syntax.Node:
        """``INTERVAL`` and its unit-value pairs, its string of pairs, or its from-to string."""
        start = self.advance().position
        first = self.token
        try:
            if first.kind == "string" and not self.interval_pair_at(0):
                self.advance()
                return syntax.Interval(interval_literals.from_text(str(first.value)), position=start)
            pairs: list[tuple[str, str]] = []
            while self.interval_pair_at(0):
                sign = self.take_op("-", "+")
                value = self.advance()
                number = str(value.value) if value.kind == "string" else value.text
                pairs.append(((sign.text if sign is not None else "") + number, self.advance().text))
                if len(pairs) == 1 and value.kind == "string" and self.token.is_word("to"):
                    self.advance()
                    if self.token.kind != "word":
                        raise self.error("an interval unit after TO")
                    end = self.advance().text
                    literal = interval_literals.from_range(number, pairs[0][1], end)
                    return syntax.Interval(literal, position=start)
            return syntax.Interval(interval_literals.from_pairs(pairs), position=start)
        except interval_literals.IntervalFormatError as exc:
            raise self.invalid(f"[{exc.error_class}] {exc}", first.position, exc.error_class) from None

    def typed_literal(self, word: str, token: Token, position: int) -> syntax.Node:
        data_type = _TYPED[word]
        text = str(token.value)
        value = parse_datetime_literal(text, data_type)
        if value is None:
            raise self.invalid(
                f"[INVALID_TYPED_LITERAL] {text!r} is not a valid {word.upper()}",
                token.position,
                "INVALID_TYPED_LITERAL",
            )
        return syntax.Literal(value, data_type, position=position)
