"""The one SQL expression grammar: Spark SQL scalar expressions, parsed, bound, evaluated, pruned.

* :func:`parse_expression` reads text into a :class:`SqlExpression` (syntax errors, unknown
  functions and wrong argument counts are :class:`ExpressionError` with their position);
* :meth:`SqlExpression.bind` resolves names against the columns in scope and types the tree
  (Spark 4's ANSI coercion rules) into a :class:`BoundExpression`;
* :meth:`BoundExpression.evaluate` computes it over a ``pyarrow`` table or record batch,
  vectorised, in SQL's three-valued logic;
* :meth:`BoundExpression.to_predicate` gives the :mod:`replay.protocol.predicates` tree that
  file pruning reads; :func:`join_keys` and :meth:`BoundExpression.conjuncts` split conditions
  for MERGE.

Modules: ``lexer`` (tokens), ``syntax`` (the tree and its SQL), ``parser``, ``datatypes`` (types
and coercion rules), ``casts``, ``coercion`` (implicit casts of bound nodes), ``functions`` (the
registry), ``operators`` (kernels), ``bound`` (typed nodes), ``binder``, ``evaluate``,
``to_predicate``, ``expression`` (the API). Pure: no I/O.
"""

from replay.protocol.sql.errors import ExpressionError, ExpressionEvaluationError, PredicateError
from replay.protocol.sql.expression import (
    BoundExpression,
    ColumnNames,
    ColumnReference,
    JoinKey,
    Reference,
    SqlExpression,
    conjunction,
    join_keys,
    parse_expression,
)
from replay.protocol.sql.functions import FUNCTIONS

__all__ = [
    "FUNCTIONS",
    "BoundExpression",
    "ColumnNames",
    "ColumnReference",
    "ExpressionError",
    "ExpressionEvaluationError",
    "JoinKey",
    "PredicateError",
    "Reference",
    "SqlExpression",
    "conjunction",
    "join_keys",
    "parse_expression",
]
