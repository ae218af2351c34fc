"""Type widening (Delta's ``typeWidening`` table feature): which type changes a column may take, and
how a schema records them.

On a table with the feature and ``delta.enableTypeWidening``, a column's type may change to a wider
one without rewriting a file: readers cast the values of files written before. The rules are
Delta's (``TypeWidening.isTypeChangeSupported``):

* integral types to wider ones (``byte`` < ``short`` < ``integer`` < ``long``);
* ``float`` to ``double``, and ``byte``/``short``/``integer`` to ``double``;
* ``date`` to ``timestamp_ntz``;
* a decimal to one at least as wide on both sides of the point;
* ``byte``/``short``/``integer`` to a decimal with 10 digits before the point, ``long`` with 20.

Schema evolution (a write or MERGE with ``mergeSchema``) widens on its own only within a type's
family (:func:`is_automatic_widening`: integral, float to double, decimal, date to
``timestamp_ntz``); the others take ``ALTER TABLE ... ALTER COLUMN ... TYPE``.

Every change is recorded on the field, in its ``delta.typeChanges`` metadata: a list of
``{"toType", "fromType"}`` (``fieldPath`` ``element`` / ``key`` / ``value`` for a change inside an
array or a map) that readers use to know which files hold the narrower type
(:func:`with_type_changes`). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from replay.protocol.schema import ArrayType, DataType, MapType, PrimitiveType, StructField, StructType

TYPE_CHANGES_KEY = "delta.typeChanges"
_INTEGRAL = ("byte", "short", "integer", "long")
_INTEGRAL_DIGITS = {"byte": 10, "short": 10, "integer": 10, "long": 20}
"""Digits before the point a decimal needs to hold an integral type (Parquet stores the first
three as INT32, which its readers convert to ``decimal(10, 0)`` and wider)."""


def is_widening(before: DataType, after: DataType) -> bool:
    """Whether a column of type ``before`` may become ``after`` (see the module docstring)."""
    if not isinstance(before, PrimitiveType) or not isinstance(after, PrimitiveType) or before == after:
        return False
    old, new = before.name, after.name
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL.index(old) < _INTEGRAL.index(new)
    if (old, new) in (("float", "double"), ("date", "timestamp_ntz")):
        return True
    if new == "double":
        return old in ("byte", "short", "integer")
    if after.is_decimal:
        precision, scale = after.precision_scale
        if before.is_decimal:
            old_precision, old_scale = before.precision_scale
            return scale >= old_scale and precision - scale >= old_precision - old_scale
        return old in _INTEGRAL_DIGITS and precision - scale >= _INTEGRAL_DIGITS[old]
    return False


def is_automatic_widening(before: DataType, after: DataType) -> bool:
    """Whether schema evolution widens ``before`` to ``after`` by itself (Delta's
    ``isTypeChangeSupportedForSchemaEvolution``): a widening within the type's family."""
    if not is_widening(before, after):
        return False
    assert isinstance(before, PrimitiveType) and isinstance(after, PrimitiveType)
    old, new = before.name, after.name
    same_family = (old in _INTEGRAL and new in _INTEGRAL) or (before.is_decimal and after.is_decimal)
    return same_family or (old, new) in (("float", "double"), ("date", "timestamp_ntz"))


def widened_columns(target: StructType, source: StructType, columns: Collection[str]) -> StructType:
    """``target`` with each of ``columns`` (top-level names, any case) whose ``source`` type is an
    automatic widening of its own (:func:`is_automatic_widening`) taking that type: what a MERGE
    with schema evolution does to the columns its ``*`` clauses assign."""
    wanted = {name.lower() for name in columns}
    incoming = {f.name.lower(): f.type for f in source.fields}
    fields = []
    for column in target.fields:
        wider = incoming.get(column.name.lower()) if column.name.lower() in wanted else None
        if wider is not None and is_automatic_widening(column.type, wider):
            fields.append(StructField(column.name, wider, column.nullable, column.metadata))
        else:
            fields.append(column)
    return StructType(fields)


def with_type_changes(old: StructType, new: StructType) -> StructType:
    """``new`` with every type change from ``old`` (fields matched by name, case-insensitively)
    appended to the changed field's ``delta.typeChanges``."""
    before = {f.name.lower(): f for f in old.fields}
    fields = []
    for struct_field in new.fields:
        prior = before.get(struct_field.name.lower())
        if prior is None:
            fields.append(struct_field)
            continue
        changes: list[dict[str, str]] = []
        data_type = _changed(prior.type, struct_field.type, [], changes)
        metadata = dict(struct_field.metadata)
        if changes:
            metadata[TYPE_CHANGES_KEY] = [*recorded_changes(struct_field), *changes]
        fields.append(StructField(struct_field.name, data_type, struct_field.nullable, metadata))
    return StructType(fields)


def _changed(
    before: DataType, after: DataType, path: Sequence[str], changes: list[dict[str, str]]
) -> DataType:
    if isinstance(before, StructType) and isinstance(after, StructType):
        return with_type_changes(before, after)
    if isinstance(before, ArrayType) and isinstance(after, ArrayType):
        element = _changed(before.element_type, after.element_type, [*path, "element"], changes)
        return ArrayType(element, after.contains_null)
    if isinstance(before, MapType) and isinstance(after, MapType):
        key = _changed(before.key_type, after.key_type, [*path, "key"], changes)
        value = _changed(before.value_type, after.value_type, [*path, "value"], changes)
        return MapType(key, value, after.value_contains_null)
    if isinstance(before, PrimitiveType) and isinstance(after, PrimitiveType) and before != after:
        change = {"toType": after.name, "fromType": before.name}
        if path:
            change["fieldPath"] = ".".join(path)
        changes.append(change)
    return after


def recorded_changes(struct_field: StructField) -> list[dict[str, Any]]:
    """The type changes ``struct_field`` records (``delta.typeChanges``), oldest first."""
    value = struct_field.metadata.get(TYPE_CHANGES_KEY)
    return [dict(change) for change in value] if isinstance(value, list) else []


def unsupported_type_changes(old: StructType, new: StructType, prefix: Sequence[str] = ()) -> list[str]:
    """The type changes from ``old`` to ``new`` that are no widening, or that ``new`` does not
    record as :func:`with_type_changes` would: each as ``path: from -> to`` (empty: all fine)."""
    before = {f.name.lower(): f for f in old.fields}
    problems: list[str] = []
    for struct_field in new.fields:
        prior = before.get(struct_field.name.lower())
        if prior is None:
            continue
        path = [*prefix, struct_field.name]
        changes: list[dict[str, str]] = []
        _changed(prior.type, struct_field.type, [], changes)
        added = recorded_changes(struct_field)[len(recorded_changes(prior)) :]
        for change in changes:
            shown = f"{'.'.join(path)}: {change['fromType']} -> {change['toType']}"
            widening = is_widening(PrimitiveType(change["fromType"]), PrimitiveType(change["toType"]))
            if not widening or change not in added:
                problems.append(shown)
        problems += _nested_problems(prior.type, struct_field.type, path)
    return problems


def _nested_problems(before: DataType, after: DataType, path: Sequence[str]) -> list[str]:
    if isinstance(before, StructType) and isinstance(after, StructType):
        return unsupported_type_changes(before, after, path)
    if isinstance(before, ArrayType) and isinstance(after, ArrayType):
        return _nested_problems(before.element_type, after.element_type, [*path, "element"])
    if isinstance(before, MapType) and isinstance(after, MapType):
        key = _nested_problems(before.key_type, after.key_type, [*path, "key"])
        return key + _nested_problems(before.value_type, after.value_type, [*path, "value"])
    return []
