"""Spark's pushed filters (``pyspark.sql.datasource``) read into :mod:`replay.protocol.predicates`.

Spark hands a Python data source the conjuncts of a query's ``WHERE`` that it can express as
``EqualTo``, ``EqualNullSafe``, ``GreaterThan``, ``GreaterThanOrEqual``, ``LessThan``,
``LessThanOrEqual``, ``In``, ``IsNull``, ``IsNotNull``, ``StringStartsWith``, ``StringEndsWith``,
``StringContains``, each possibly under one ``Not``; literals arrive as Python values
(timestamps as UTC-aware datetimes, ``TIMESTAMP_NTZ`` as naive ones). :func:`to_predicate` reads
one filter with Spark's semantics:

* ``NOT`` is pushed to the leaf as SQL defines it; a comparison with ``NULL`` is never true, nor
  is ``x NOT IN (..., NULL)``, while ``x IN (..., NULL)`` is true only for a listed value;
* what the predicates cannot say exactly becomes :class:`~replay.protocol.predicates.Opaque`
  (it prunes nothing): ``StringEndsWith``, ``StringContains``, ``NOT StringStartsWith``,
  non-scalar literals, and on ``float``/``double`` columns every test a NaN satisfies in Spark
  (NaN is larger than any number and equal to itself there, while Arrow and file statistics
  leave NaN out), i.e. ``>``, ``>=``, ``!=`` and ``NOT IN``.

Which converted filters are then decided by partition values alone (and need not go back to
Spark) is :func:`replay.state.pruning.decided_by_partition_values`.
"""

from __future__ import annotations

import datetime as dt
import decimal

from pyspark.sql import datasource as spark_filters
from pyspark.sql.types import DataType, DoubleType, FloatType, StructType

from replay.protocol.predicates import (
    FALSE,
    And,
    Compare,
    In,
    IsNull,
    Op,
    Opaque,
    Or,
    Predicate,
    StartsWith,
    negate,
)

_COMPARISONS: dict[type, Op] = {
    spark_filters.EqualTo: "=",
    spark_filters.GreaterThan: ">",
    spark_filters.GreaterThanOrEqual: ">=",
    spark_filters.LessThan: "<",
    spark_filters.LessThanOrEqual: "<=",
}
_SCALARS = (bool, int, float, str, bytes, decimal.Decimal, dt.date)  # dt.datetime is a dt.date
_NAN_MATCHING_OPS = (">", ">=", "!=")


def to_predicate(spark_filter: spark_filters.Filter, schema: StructType) -> Predicate:
    """The predicate of one pushed filter on a table of Spark ``schema`` (see the module docstring)."""
    return _convert(spark_filter, schema, negated=False)


def _convert(spark_filter: spark_filters.Filter, schema: StructType, negated: bool) -> Predicate:
    if isinstance(spark_filter, spark_filters.Not):
        return _convert(spark_filter.child, schema, not negated)
    path = tuple(getattr(spark_filter, "attribute", ()))
    data_type = _field_type(schema, path)
    if data_type is None:
        return Opaque(str(spark_filter))
    predicate = _leaf(spark_filter, path, negated)
    if isinstance(data_type, FloatType | DoubleType) and _nan_may_match(predicate):
        return Opaque(str(spark_filter))
    return predicate


def _leaf(spark_filter: spark_filters.Filter, path: tuple[str, ...], negated: bool) -> Predicate:
    """The leaf with ``NOT`` applied; ``negate`` is exact for every two-valued or null-free form."""
    text = f"NOT {spark_filter}" if negated else str(spark_filter)
    if isinstance(spark_filter, spark_filters.IsNull | spark_filters.IsNotNull):
        return IsNull(path, negated=isinstance(spark_filter, spark_filters.IsNotNull) != negated)
    if isinstance(spark_filter, spark_filters.In):
        values = tuple(spark_filter.value)
        if not all(value is None or isinstance(value, _SCALARS) for value in values):
            return Opaque(text)
        present = tuple(value for value in values if value is not None)
        if len(present) < len(values):  # true for a listed value, otherwise null: never false
            return FALSE if negated or not present else In(path, present)
        return In(path, present, negated)
    value = getattr(spark_filter, "value", None)
    if value is not None and not isinstance(value, _SCALARS):
        return Opaque(text)
    positive: Predicate
    if isinstance(spark_filter, spark_filters.EqualNullSafe):
        if value is None:
            positive = IsNull(path)
        else:
            positive = And((IsNull(path, negated=True), Compare(path, "=", value)))
        return negate(positive) if negated else positive  # two-valued
    if isinstance(spark_filter, spark_filters.StringStartsWith) and isinstance(value, str):
        positive = StartsWith(path, value)
    elif type(spark_filter) in _COMPARISONS:
        if value is None:
            return FALSE  # a comparison with NULL is null, and so is its negation
        positive = Compare(path, _COMPARISONS[type(spark_filter)], value)
    else:
        return Opaque(text)
    return negate(positive) if negated else positive


def _nan_may_match(predicate: Predicate) -> bool:
    """Whether a Spark NaN satisfies some leaf of ``predicate`` that pruning would evaluate."""
    if isinstance(predicate, And | Or):
        return any(_nan_may_match(child) for child in predicate.children)
    if isinstance(predicate, Compare):
        return predicate.op in _NAN_MATCHING_OPS
    return isinstance(predicate, In) and predicate.negated


def _field_type(schema: StructType, path: tuple[str, ...]) -> DataType | None:
    current: DataType = schema
    for name in path:
        if not isinstance(current, StructType) or name not in current.fieldNames():
            return None
        current = current[name].dataType
    return current if path else None
