"""The Delta tables a query reads, for :func:`replay.spark.sql`: found in the statement's tokens
(:func:`table_references`), then replaced by temp views over the ``deltalog`` data source
(:func:`run_query`) so that Spark runs the rest of the query (joins, filters, aggregates) itself.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from replay.spark import sql_ast as ast
from replay.spark.datasource import ensure_registered
from replay.spark.sql_parse import StatementParser
from replay.spark.sql_tables import registered, resolve
from replay.spark.sql_tokens import tokenize

FORMAT = "deltalog"


_NOT_ALIASES = frozenset(
    {
        "where",
        "group",
        "having",
        "order",
        "limit",
        "offset",
        "window",
        "union",
        "except",
        "intersect",
        "minus",
        "on",
        "using",
        "join",
        "inner",
        "left",
        "right",
        "full",
        "cross",
        "natural",
        "semi",
        "anti",
        "lateral",
        "sort",
        "cluster",
        "distribute",
        "qualify",
        "pivot",
        "unpivot",
        "tablesample",
    }
)
"""Words that may follow a table in a query without being its alias."""


def table_references(text: str) -> tuple[ast.QueryReference, ...]:
    """The Delta tables a query reads: ``delta.`uri``` anywhere it names a relation, and names
    right after ``FROM`` / ``JOIN`` or a comma of a ``FROM`` list, with their time travel
    (``VERSION AS OF``, ``TIMESTAMP AS OF``, ``@v5``), as spans of ``text`` to replace."""
    tokens = tokenize(text)
    references = []
    index = 0
    in_from = 0
    while index < len(tokens) - 1:
        token = tokens[index]
        before = tokens[index - 1] if index else None
        starts = before is not None and (before.is_word("from", "join") or (in_from and before.is_op(",")))
        if token.is_word("from"):
            in_from = 1
        elif token.is_word("select", "where", "group", "order", "having", "limit") or token.is_op(")"):
            in_from = 0
        if not starts or token.name is None or token.is_word("lateral", "values"):
            index += 1
            continue
        parser = StatementParser.__new__(StatementParser)
        parser.text, parser.tokens, parser.index = text, tokens, index
        ref = ast.with_at_suffix(parser.table())
        at, suffix = parser.token, parser.peek()
        if (
            at.is_op("@")
            and suffix.kind == "word"
            and re.fullmatch(r"[vV]\d+", suffix.text)
            and at.position == tokens[parser.index - 1].end
        ):
            parser.index += 2
            ref = ast.with_version(ref, int(suffix.text[1:]))
        ref = parser.time_travel(ref)
        if ref.path is not None or ref.name is not None:
            end = tokens[parser.index - 1].end
            after = parser.token
            aliased = (
                after.kind == "quoted"
                or after.is_word("as")
                or (after.is_word() and not after.is_word(*_NOT_ALIASES))
            )
            references.append(ast.QueryReference(ref, token.position, end, aliased))
        index = max(parser.index, index + 1)
    return tuple(references)


def run_query(spark: Any, query: ast.Query) -> Any:
    """``query`` run by ``spark.sql`` with each Delta table it reads (a path, or a name registered
    on the session) replaced by a temp view of the ``deltalog`` source at the version asked for;
    names of other tables are left to Spark."""
    text = query.text
    for reference in sorted(table_references(text), key=lambda r: r.start, reverse=True):
        ref = reference.table
        if ref.path is None and registered(spark, ref.name or ()) is None:
            continue
        view = delta_view(spark, ref)
        if not reference.aliased and ref.name is not None:
            view += " AS `" + ref.name[-1].replace("`", "``") + "`"
        text = text[: reference.start] + view + text[reference.end :]
    return spark.sql(text)


def delta_view(spark: Any, ref: ast.TableRef) -> str:
    """The name of a temp view of the Delta table ``ref`` (at its version or timestamp, if it has
    one), created on ``spark`` if needed. Views are named after what they read, so a query run
    twice reuses them, and Spark Connect, which analyses a query again at each action, finds them."""
    table = resolve(spark, ref)
    options = dict(table.options)
    if ref.version is not None:
        options["versionAsOf"] = str(ref.version)
    if ref.timestamp is not None:
        options["timestampAsOf"] = ref.timestamp
    digest = hashlib.sha256(orjson.dumps([table.path, sorted(options.items())])).hexdigest()[:20]
    name = f"__delta_{digest}"
    ensure_registered(spark)
    spark.read.format(FORMAT).options(**options).load(table.path).createOrReplaceTempView(name)
    return name
