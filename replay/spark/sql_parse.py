"""The grammar of Delta's SQL statements as :func:`replay.spark.sql` runs them: statement text to
:mod:`replay.spark.sql_ast` values.

The statements are Delta's (``DESCRIBE HISTORY``, ``OPTIMIZE``, ``VACUUM``, ``RESTORE``, ``REORG``,
``ALTER TABLE ... TBLPROPERTIES`` / ``CONSTRAINT``) and Spark's row-level ones (``DELETE``,
``UPDATE``, ``MERGE``), with Delta's grammar (its ``DeltaSqlBase.g4``): keywords in any case, ```x```
identifiers, ``'...'`` / ``"..."`` strings, ``--`` and ``/* */`` comments, trailing ``;``.
Conditions and values are not interpreted here: each is the text span of the statement it covers,
checked with the project's expression grammar (:func:`replay.protocol.sql.parse_expression`), so
an error in one names its position in the statement. Queries (``SELECT``, ``WITH``) are scanned
only for their Delta table references (:mod:`replay.spark.sql_query`); Spark parses the rest.

Errors: :class:`StatementParseError` (Spark's ``PARSE_SYNTAX_ERROR``, with the 0-based position)
and :class:`~replay.spark.sql_ast.UnsupportedStatementError` for Delta statements this library
does not run (naming the API to use instead).
"""

from __future__ import annotations

from replay.protocol.sql import parse_expression
from replay.protocol.sql.cursor import TokenCursor
from replay.protocol.sql.errors import ExpressionError
from replay.spark import sql_ast as ast
from replay.spark.sql_ast import ALTER_HINT, UNSUPPORTED, StatementParseError, UnsupportedStatementError
from replay.spark.sql_tokens import Token, tokenize

_QUERY_STARTS = ("select", "with", "from", "table", "values")


class StatementParser(TokenCursor[Token]):
    def __init__(self, text: str) -> None:
        super().__init__(text, tokenize(text))

    def error(self, expected: str, token: Token | None = None) -> StatementParseError:
        at = token or self.token
        near = "end of input" if at.kind == "end" else repr(at.text)
        return StatementParseError(
            f"Syntax error at or near {near}: expected {expected}", self.text, at.position
        )

    def finish(self) -> None:
        while self.take_op(";"):
            pass
        if self.token.kind != "end":
            raise self.error("the end of the statement")

    # -- pieces ---------------------------------------------------------------------------------------
    def identifier(self, what: str = "an identifier") -> str:
        name = self.token.name
        if name is None:
            raise self.error(what)
        self.advance()
        return name

    def qualified_name(self) -> tuple[str, ...]:
        parts = [self.identifier("a table name")]
        while self.token.is_op(".") and self.peek().name is not None:
            self.advance()
            parts.append(self.identifier())
        return tuple(parts)

    def table(self, *, path_string: bool = False, time_travel: bool = False) -> ast.TableRef:
        """A table: ``delta.`uri```, a (registered) name, or, where Delta allows it, ``'uri'``."""
        start = self.token
        if path_string and start.kind == "string":
            self.advance()
            return ast.TableRef(start.value, None, start.position, self.text[start.position : start.end])
        parts = self.qualified_name()
        end = self.tokens[self.index - 1].end
        ref = ast.table_ref(parts, start.position, self.text[start.position : end])
        if time_travel:
            ref = self.time_travel(ref)
        return ref

    def time_travel(self, ref: ast.TableRef) -> ast.TableRef:
        """``[FOR] VERSION|SYSTEM_VERSION AS OF n`` or ``[FOR] TIMESTAMP|SYSTEM_TIME AS OF 'ts'``."""
        offset = 1 if self.token.is_word("for") else 0
        head = self.peek(offset)
        if not (
            head.is_word("version", "system_version", "timestamp", "system_time")
            and self.peek(offset + 1).is_word("as")
        ):
            return ref
        self.index += offset + 1
        self.expect_word("as")
        self.expect_word("of")
        value = self.advance()
        if head.is_word("version", "system_version"):
            if value.kind == "number" and value.text.isdigit():
                return ast.with_version(ref, int(value.text))
            if value.kind == "string" and value.value.isdigit():
                return ast.with_version(ref, int(value.value))
            raise self.error("a version number", value)
        if value.kind != "string":
            raise self.error("a timestamp string such as '2024-01-31 12:00:00'", value)
        return ast.with_timestamp(ref, value.value)

    def alias(self, stop: tuple[str, ...]) -> str | None:
        if self.take_word("as"):
            return self.identifier("an alias")
        if self.token.kind == "quoted" or (self.token.kind == "word" and not self.token.is_word(*stop)):
            return self.identifier()
        return None

    def span(
        self, stop_words: tuple[str, ...] = (), stop_ops: tuple[str, ...] = (), what: str = "an expression"
    ) -> str:
        """The text of the tokens up to a stop word or op at depth 0 (or the end), as an expression
        checked with the project's grammar."""
        first = self.token
        depth = 0
        last: Token | None = None
        while True:
            token = self.token
            if token.kind == "end" or (
                depth == 0
                and (
                    token.is_op(";", *stop_ops)
                    or token.is_op(")")
                    or (stop_words and token.is_word(*stop_words))
                )
            ):
                break
            if token.is_op("(") or token.is_word("case"):
                depth += 1
            elif token.is_op(")") or token.is_word("end"):
                depth -= 1
            last = self.advance()
        if last is None:
            raise self.error(what)
        text = self.text[first.position : last.end]
        try:
            parse_expression(text)
        except ExpressionError as error:
            position = first.position + (error.position or 0)
            raise StatementParseError(f"{error.detail} in {text!r}", self.text, position) from None
        return text

    def number(self, what: str) -> str:
        negative = self.take_op("-") is not None
        token = self.advance()
        if token.kind != "number":
            raise self.error(what, token)
        return ("-" if negative else "") + token.text

    # -- statements -----------------------------------------------------------------------------------
    def statement(self) -> ast.Statement:
        head = self.token
        if head.is_word("desc", "describe") and self.peek().is_word("history", "detail"):
            return self.describe()
        for word, method in (
            ("optimize", self.optimize),
            ("vacuum", self.vacuum),
            ("restore", self.restore),
            ("reorg", self.reorg),
            ("alter", self.alter),
            ("delete", self.delete),
            ("update", self.update),
            ("merge", self.merge),
        ):
            if head.is_word(word):
                return method()
        if head.is_word(*_QUERY_STARTS) or head.is_op("("):
            return ast.Query(self.text)
        if head.is_word(*UNSUPPORTED):
            name, instead = UNSUPPORTED[head.text.lower()]
            raise UnsupportedStatementError(name, instead)
        raise self.error(
            "a statement (DESCRIBE HISTORY, OPTIMIZE, VACUUM, RESTORE, DELETE, UPDATE, MERGE, SELECT ...)"
        )

    def describe(self) -> ast.Statement:
        self.advance()
        if self.take_word("detail"):
            table = self.table(path_string=True)
            self.finish()
            return ast.DescribeDetail(table)
        self.expect_word("history")
        table = self.table(path_string=True)
        limit = None
        if self.take_word("limit"):
            token = self.advance()
            if token.kind != "number" or not token.text.isdigit():
                raise self.error("an integer LIMIT", token)
            limit = int(token.text)
        self.finish()
        return ast.DescribeHistory(table, limit)

    def optimize(self) -> ast.Statement:
        self.advance()
        table = self.table(path_string=True)
        full = self.take_word("full")
        where = self.span(("zorder",), what="a partition predicate") if self.take_word("where") else None
        columns: list[str] = []
        if self.take_word("zorder"):
            self.expect_word("by")
            parenthesised = self.take_op("(") is not None
            columns.append(".".join(self.qualified_name()))
            while self.take_op(","):
                columns.append(".".join(self.qualified_name()))
            if parenthesised:
                self.expect_op(")")
        self.finish()
        return ast.Optimize(table, where, tuple(columns), bool(full))

    def vacuum(self) -> ast.Statement:
        self.advance()
        table = self.table(path_string=True)
        if self.token.is_word("using") and self.peek().is_word("inventory"):
            raise UnsupportedStatementError(
                "VACUUM ... USING INVENTORY", "sql(spark, 'VACUUM <table>') without an inventory"
            )
        mode = self.take_word("lite", "full")
        hours = None
        if self.take_word("retain"):
            hours = float(self.number("a number of hours"))
            self.expect_word("hours")
        dry_run = False
        if self.take_word("dry"):
            self.expect_word("run")
            dry_run = True
        self.finish()
        return ast.Vacuum(table, hours, dry_run, lite=mode is not None and mode.text.lower() == "lite")

    def restore(self) -> ast.Statement:
        self.advance()
        self.take_word("table")
        table = self.table()
        self.take_word("to")
        restored = self.time_travel(table)
        if restored.version is None and restored.timestamp is None:
            raise self.error("VERSION AS OF or TIMESTAMP AS OF")
        self.finish()
        return ast.Restore(table, restored.version, restored.timestamp)

    def reorg(self) -> ast.Statement:
        self.advance()
        self.expect_word("table")
        table = self.table()
        where = self.span(("apply",), what="a partition predicate") if self.take_word("where") else None
        self.expect_word("apply")
        self.expect_op("(")
        if self.token.is_word("upgrade"):
            raise UnsupportedStatementError(
                "REORG TABLE ... APPLY (UPGRADE UNIFORM ...)",
                "Delta Lake on Spark (UniForm is not written here)",
            )
        self.expect_word("purge")
        self.expect_op(")")
        self.finish()
        return ast.Reorg(table, where)

    def alter(self) -> ast.Statement:
        self.advance()
        self.expect_word("table")
        table = self.table()
        if self.take_word("set"):
            self.expect_word("tblproperties")
            pairs = self.properties(with_values=True)
            self.finish()
            return ast.SetProperties(table, tuple((key, value or "") for key, value in pairs))
        if self.take_word("unset"):
            self.expect_word("tblproperties")
            if_exists = self.if_exists()
            keys = tuple(key for key, _ in self.properties(with_values=False))
            self.finish()
            return ast.UnsetProperties(table, keys, if_exists)
        if self.token.is_word("add") and self.peek().is_word("constraint"):
            self.index += 2
            name = self.identifier("a constraint name")
            self.expect_word("check")
            self.expect_op("(")
            expression = self.span(what="a CHECK expression")
            self.expect_op(")")
            self.finish()
            return ast.AddConstraint(table, name, expression)
        if self.token.is_word("drop") and self.peek().is_word("constraint"):
            self.index += 2
            if_exists = self.if_exists()
            name = self.identifier("a constraint name")
            self.finish()
            return ast.DropConstraint(table, name, if_exists)
        if self.token.is_word("rename") and self.peek().is_word("column"):
            self.index += 2
            column = self.column_path()
            self.expect_word("to")
            new_name = self.identifier("a column name")
            self.finish()
            return ast.RenameColumn(table, column, new_name)
        if self.token.is_word("drop") and (self.peek().is_word("column") or self.peek().is_word("columns")):
            self.index += 2
            if_exists = self.if_exists()
            listed = self.take_op("(") is not None
            columns = [self.column_path()]
            while self.take_op(","):
                columns.append(self.column_path())
            if listed:
                self.expect_op(")")
            self.finish()
            return ast.DropColumns(table, tuple(columns), if_exists)
        if self.token.is_word("alter") or self.token.is_word("change"):
            self.advance()
            self.take_word("column")
            column = self.column_path()
            self.expect_word("type")
            data_type = self.data_type()
            self.finish()
            return ast.ChangeColumnType(table, column, data_type)
        if self.token.is_word("cluster") and self.peek().is_word("by"):
            self.index += 2
            clustering: list[tuple[str, ...]] = []
            if not self.take_word("none"):
                self.expect_op("(")
                clustering.append(self.column_path())
                while self.take_op(","):
                    clustering.append(self.column_path())
                self.expect_op(")")
            self.finish()
            return ast.ClusterBy(table, tuple(clustering))
        words = " ".join(
            token.text.upper() for token in self.tokens[self.index : self.index + 2] if token.kind == "word"
        )
        raise UnsupportedStatementError(f"ALTER TABLE ... {words}".rstrip(), ALTER_HINT)

    def data_type(self) -> str:
        """A type name, with its arguments: ``bigint``, ``decimal(12, 2)`` (as ``decimal(12,2)``)."""
        name = self.identifier("a data type")
        if not self.take_op("("):
            return name
        arguments = [self.number("a type argument")]
        while self.take_op(","):
            arguments.append(self.number("a type argument"))
        self.expect_op(")")
        return f"{name}({','.join(arguments)})"

    def column_path(self) -> tuple[str, ...]:
        """A column, ``a`` or ``s.f`` (parts backquoted where needed)."""
        parts = [self.identifier("a column name")]
        while self.take_op("."):
            parts.append(self.identifier("a field name"))
        return tuple(parts)

    def if_exists(self) -> bool:
        if self.take_word("if"):
            self.expect_word("exists")
            return True
        return False

    def properties(self, *, with_values: bool) -> list[tuple[str, str | None]]:
        self.expect_op("(")
        pairs: list[tuple[str, str | None]] = []
        while True:
            key = self.advance().value if self.token.kind == "string" else ".".join(self.qualified_name())
            value: str | None = None
            if with_values:
                self.take_op("=", "==")
                token = self.advance()
                if token.kind == "string":
                    value = token.value
                elif token.kind in ("number", "word"):
                    value = token.text.lower() if token.is_word("true", "false") else token.text
                else:
                    raise self.error(f"a value for property {key!r}", token)
            pairs.append((key, value))
            if not self.take_op(","):
                break
        self.expect_op(")")
        return pairs

    # -- row-level changes ----------------------------------------------------------------------------
    def delete(self) -> ast.Statement:
        self.advance()
        self.expect_word("from")
        table = ast.aliased(self.table(), self.alias(("where",)))
        condition = self.span(what="a condition") if self.take_word("where") else None
        self.finish()
        return ast.Delete(table, condition)

    def update(self) -> ast.Statement:
        self.advance()
        table = ast.aliased(self.table(), self.alias(("set",)))
        self.expect_word("set")
        assignments = self.assignments(("where",))
        condition = self.span(what="a condition") if self.take_word("where") else None
        self.finish()
        return ast.Update(table, assignments, condition)

    def assignments(self, stop: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        pairs = []
        while True:
            column = self.qualified_name()
            self.expect_op("=")
            pairs.append((".".join(column), self.span(stop, (",",), "a value")))
            if not self.take_op(","):
                return tuple(pairs)

    def merge(self) -> ast.Statement:
        self.advance()
        evolution = False
        if self.take_word("with"):
            self.expect_word("schema")
            self.expect_word("evolution")
            evolution = True
        self.expect_word("into")
        target = ast.aliased(self.table(), self.alias(("using",)))
        self.expect_word("using")
        source = self.merge_source()
        self.expect_word("on")
        condition = self.span(("when",), what="a merge condition")
        clauses = []
        while self.take_word("when"):
            clauses.append(self.merge_clause())
        if not clauses:
            raise self.error("WHEN MATCHED or WHEN NOT MATCHED")
        self.finish()
        return ast.Merge(target, source, condition, tuple(clauses), evolution)

    def merge_source(self) -> ast.MergeSource:
        if self.token.is_op("("):
            start = self.advance()
            depth = 1
            while depth:
                token = self.advance()
                if token.kind == "end":
                    raise self.error("')' closing the source query", token)
                depth += 1 if token.is_op("(") else -1 if token.is_op(")") else 0
            query = self.text[start.end : self.tokens[self.index - 1].position].strip()
            return ast.MergeSource(None, query, self.alias(("on",)))
        table = self.table(time_travel=True)
        return ast.MergeSource(table, None, self.alias(("on",)))

    def merge_clause(self) -> ast.MergeClause:
        if self.take_word("matched"):
            kind = ast.MATCHED
        else:
            self.expect_word("not")
            self.expect_word("matched")
            kind = ast.NOT_MATCHED
            if self.take_word("by"):
                kind = (
                    ast.NOT_MATCHED_BY_SOURCE
                    if self.expect_word("target", "source").is_word("source")
                    else kind
                )
        condition = self.span(("then",), what="a clause condition") if self.take_word("and") else None
        self.expect_word("then")
        if kind == ast.NOT_MATCHED:
            self.expect_word("insert")
            if self.take_op("*"):
                return ast.MergeClause(kind, "insert", condition, None)
            self.expect_op("(")
            columns = [".".join(self.qualified_name())]
            while self.take_op(","):
                columns.append(".".join(self.qualified_name()))
            self.expect_op(")")
            self.expect_word("values")
            self.expect_op("(")
            values = [self.span(stop_ops=(",",), what="a value")]
            while self.take_op(","):
                values.append(self.span(stop_ops=(",",), what="a value"))
            closing = self.expect_op(")")
            if len(values) != len(columns):
                raise StatementParseError(
                    f"INSERT names {len(columns)} columns but has {len(values)} values",
                    self.text,
                    closing.position,
                )
            return ast.MergeClause(kind, "insert", condition, tuple(zip(columns, values, strict=True)))
        if self.take_word("delete"):
            return ast.MergeClause(kind, "delete", condition, None)
        self.expect_word("update")
        self.expect_word("set")
        if kind == ast.MATCHED and self.take_op("*"):
            return ast.MergeClause(kind, "update", condition, None)
        return ast.MergeClause(kind, "update", condition, self.assignments(("when",)))


def parse_statement(text: str) -> ast.Statement:
    """The statement ``text`` (see the module docstring); raises :class:`StatementParseError` or
    :class:`~replay.spark.sql_ast.UnsupportedStatementError`."""
    if not text.strip():
        raise StatementParseError("Syntax error at or near end of input: the statement is empty", text, 0)
    return StatementParser(text).statement()
