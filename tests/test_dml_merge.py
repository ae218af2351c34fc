"""MERGE from Python: every clause kind against delta-rs, Delta's rules (clause order, multiple
matches, schema evolution), deletion vectors, pruning by the source's keys, and a property test
against a row-by-row model of Delta's MERGE semantics."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RustTable
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replay import AppendOnlyTableError, DeltaTable, write_table
from replay.data.reader import TableReader
from replay.dml.errors import MergeResolutionError, MultipleSourceRowMatchError
from replay.dml.merge_builder import TableMerger
from replay.protocol.sql import ExpressionError
from tests.dml_cases import (
    CDF,
    DV_CDF,
    MERGE_CASES,
    MERGE_SOURCE,
    MERGE_TARGET,
    files_under,
    last_commit_info,
    latest_version,
    our_changes,
    our_rows,
    python_merge,
    rust_changes,
    rust_rows,
    twin_tables,
)

TARGET = MERGE_TARGET
SOURCE = MERGE_SOURCE

Build = Callable[[Any], Any]
CLAUSES: dict[str, Build] = {
    name: functools.partial(python_merge, specs=specs) for name, specs in MERGE_CASES.items()
}


def _merge(table: Any, source: pa.Table, name: str) -> Any:
    merger = table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    return CLAUSES[name](merger).execute()


@pytest.mark.parametrize("partition_by", [None, ["p"]])
@pytest.mark.parametrize("name", list(CLAUSES))
def test_rows_and_changes_are_delta_rs(tmp_path: Path, name: str, partition_by: list[str] | None) -> None:
    ours, rust = twin_tables(tmp_path, TARGET, partition_by=partition_by, max_rows_per_file=4)
    metrics = _merge(DeltaTable(ours), SOURCE, name)
    rust_metrics = _merge(RustTable(rust), SOURCE, name)
    assert our_rows(ours) == rust_rows(rust) == rust_rows(ours)
    for key in ("inserted", "updated", "deleted"):
        ours_count = metrics[f"numTargetRows{key.capitalize()}"]
        assert ours_count == rust_metrics[f"num_target_rows_{key}"], key
    assert metrics["numSourceRows"] == rust_metrics["num_source_rows"]
    assert latest_version(ours) == latest_version(rust)
    if latest_version(ours) == 1:
        assert our_changes(ours, 1) == rust_changes(ours, 1)
        assert _changed_images(our_changes(ours, 1)) == _changed_images(rust_changes(rust, 1))


def _changed_images(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """delta-rs leaves out the images of updates that changed nothing; Delta writes them."""

    def data(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((k, v) for k, v in sorted(row.items()) if k != "_change_type")

    pre = {data(r) for r in changes if r["_change_type"] == "update_preimage"}
    post = {data(r) for r in changes if r["_change_type"] == "update_postimage"}
    return [r for r in changes if not (r["_change_type"].startswith("update_") and data(r) in pre & post)]


@pytest.mark.parametrize("partition_by", [None, ["p"]])
@pytest.mark.parametrize("name", list(CLAUSES))
def test_deletion_vectors_give_the_rows_and_changes_of_copy_on_write(
    tmp_path: Path, name: str, partition_by: list[str] | None
) -> None:
    cow, _ = twin_tables(tmp_path / "cow", TARGET, partition_by=partition_by, max_rows_per_file=4)
    dv, _ = twin_tables(
        tmp_path / "dv", TARGET, partition_by=partition_by, configuration=DV_CDF, max_rows_per_file=4
    )
    cow_metrics = _merge(DeltaTable(cow), SOURCE, name)
    metrics = _merge(DeltaTable(dv), SOURCE, name)
    assert our_rows(dv) == our_rows(cow) == rust_rows(dv)
    assert latest_version(dv) == latest_version(cow)
    if latest_version(dv) == 1:
        assert our_changes(dv, 1) == our_changes(cow, 1) == rust_changes(dv, 1)
    assert metrics["numTargetRowsCopied"] == 0
    for key in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted", "numOutputRows"):
        expected = cow_metrics[key] - (cow_metrics["numTargetRowsCopied"] if key == "numOutputRows" else 0)
        assert metrics[key] == expected, key


def test_commit_info_has_delta_operation_parameters_and_metrics(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    metrics = _merge(DeltaTable(uri), SOURCE, "conditional")
    info = last_commit_info(uri)
    assert info["operation"] == "MERGE"
    parameters = {key: json.loads(value) for key, value in info["operationParameters"].items()}
    assert parameters == {
        "predicate": ["t.id = s.id"],
        "matchedPredicates": [
            {"predicate": "s.v > t.v", "actionType": "update"},
            {"predicate": "t.v >= 50", "actionType": "delete"},
        ],
        "notMatchedPredicates": [{"predicate": "s.v < 500", "actionType": "insert"}],
        "notMatchedBySourcePredicates": [],
    }
    assert info["operationMetrics"] == {key: str(value) for key, value in metrics.items()}
    # 1 (11 > 10: update), 3 (33 > null: unknown; t.v null: kept), 5 (s.v null; t.v 50: delete),
    # 7 (77 > 70: update)
    assert (metrics["numTargetRowsMatchedUpdated"], metrics["numTargetRowsMatchedDeleted"]) == (2, 1)
    assert metrics["numTargetRowsInserted"] == 2  # 11 and 12 (the null key's v is 999)
    assert metrics["numSourceRows"] == 7


# -- Delta's rules ---------------------------------------------------------------------------------
def test_several_source_rows_matching_one_target_row_fail_and_commit_nothing(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    before = files_under(uri)
    source = pa.table({"id": [1, 1, 20], "v": [5, 6, 7], "p": [0, 0, 0]})
    merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    with pytest.raises(MultipleSourceRowMatchError) as caught:
        merger.when_matched_update_all("s.v > 100").when_not_matched_insert_all().execute()
    assert str(caught.value).startswith(
        "[DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE] Cannot perform Merge as multiple source "
        "rows matched and attempted to modify the same\ntarget row in the Delta table in possibly "
        "conflicting ways."
    )
    assert latest_version(uri) == 0 and files_under(uri) == before


def test_several_matches_are_allowed_for_one_unconditional_delete(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    source = pa.table({"id": [1, 1, 2, 20], "v": [5, 6, 7, 8], "p": [0, 0, 0, 0]})
    metrics = (
        DeltaTable(uri)
        .merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    assert metrics["numTargetRowsDeleted"] == 2 and metrics["numTargetRowsInserted"] == 1
    assert [c["id"] for c in our_changes(uri, 1) if c["_change_type"] == "delete"] == [1, 2]
    with pytest.raises(MultipleSourceRowMatchError):  # a conditional delete is not exempt
        DeltaTable(uri).merge(
            pa.table({"id": [3, 3], "v": [1, 2], "p": [0, 0]}),
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
        ).when_matched_delete("s.v > 0").execute()


def test_insert_only_merge_reads_only_key_columns_and_rewrites_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    read = TableReader.read_file
    columns: list[list[str]] = []

    def recording(self: TableReader, file: Any, wanted: Any = None, **kwargs: Any) -> pa.Table:
        columns.append(list(wanted or []))
        return read(self, file, wanted, **kwargs)

    monkeypatch.setattr(TableReader, "read_file", recording)
    before = files_under(uri)
    metrics = (
        DeltaTable(uri)
        .merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t")
        .when_not_matched_insert_all()
        .execute()
    )
    assert columns and all(c == ["id"] for c in columns)
    assert metrics["numTargetFilesRemoved"] == 0 and metrics["numTargetRowsInserted"] == 3
    assert before <= files_under(uri)


def test_source_key_ranges_prune_the_target_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(1000), pa.int64()), "v": pa.array(range(1000), pa.int64())})
    write_table(uri, data, max_rows_per_file=100)
    read = TableReader.read_file
    paths: set[str] = set()

    def recording(self: TableReader, file: Any, *args: Any, **kwargs: Any) -> pa.Table:
        paths.add(file.path)
        return read(self, file, *args, **kwargs)

    monkeypatch.setattr(TableReader, "read_file", recording)
    source = pa.table({"id": pa.array([*range(250, 260), *range(5000, 5010)], pa.int64()), "v": [1] * 20})
    metrics = (
        DeltaTable(uri)
        .merge(source, "target.id = source.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert len(paths) == 1  # two clusters of keys: [250, 259] and [5000, 5009]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (10, 10)
    assert metrics["numTargetFilesRemoved"] == 1


def test_clause_order_and_missing_clauses_follow_delta(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET)
    table = DeltaTable(uri)

    def merger() -> TableMerger:
        return table.merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t")

    with pytest.raises(MergeResolutionError, match="DELTA_MERGE_MISSING_WHEN"):
        merger().execute()
    with pytest.raises(MergeResolutionError, match="DELTA_NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION"):
        merger().when_matched_delete().when_matched_update_all("s.v > 1").execute()
    with pytest.raises(MergeResolutionError, match="DELTA_NON_LAST_NOT_MATCHED_BY_SOURCE_CLAUSE_OMIT"):
        merger().when_not_matched_by_source_delete().when_not_matched_by_source_delete("t.v > 1").execute()
    with pytest.raises(ExpressionError, match=r"UNRESOLVED_COLUMN.*`t`\.`v`"):
        merger().when_not_matched_insert({"v": "t.v"}).execute()  # an insert reads only the source
    with pytest.raises(ExpressionError, match=r"UNRESOLVED_COLUMN.*`s`\.`v`"):
        merger().when_not_matched_by_source_update({"v": "s.v"}).execute()
    with pytest.raises(ExpressionError, match="nope") as caught:
        table.merge(
            SOURCE, "t.id = s.nope", source_alias="s", target_alias="t"
        ).when_matched_delete().execute()
    assert caught.value.position == 7
    with pytest.raises(
        MergeResolutionError, match=r"DELTA_MERGE_UNRESOLVED_EXPRESSION\] Cannot resolve w in UPDATE"
    ):
        merger().when_matched_update({"w": "s.v"}).execute()
    assert latest_version(uri) == 0


def test_star_clauses_need_every_target_column_in_the_source(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET)
    source = SOURCE.drop_columns(["p"])
    merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    with pytest.raises(
        MergeResolutionError, match=r"Cannot resolve p in INSERT clause given columns s\.id, s\.v"
    ):
        merger.when_not_matched_insert_all().execute()
    merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    metrics = merger.when_not_matched_insert_all(except_cols=["p"]).execute()
    assert metrics["numTargetRowsInserted"] == 3
    assert [r["p"] for r in our_rows(uri) if r["id"] == 11] == [None]


# -- schema evolution ------------------------------------------------------------------------------
def test_schema_evolution_adds_source_columns_of_star_clauses(tmp_path: Path) -> None:
    ours, rust = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    source = SOURCE.append_column("w", pa.array([f"w{i}" for i in range(7)]))
    for table in (DeltaTable(ours), RustTable(rust)):
        table.merge(
            source, "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True
        ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert DeltaTable(ours).schema().field_names == ["id", "v", "p", "w"]
    assert our_rows(ours) == rust_rows(rust)
    assert our_changes(ours, 1) == rust_changes(ours, 1)
    info = DeltaTable(ours).history(1)[0]
    assert info["operation"] == "MERGE"
    rows = {r["id"]: r["w"] for r in our_rows(ours)}
    assert rows[1] == "w0" and rows[2] is None and rows[12] == "w5"


def test_schema_evolution_by_assignment_and_its_limits(tmp_path: Path) -> None:
    uri, _ = twin_tables(tmp_path, TARGET)
    source = SOURCE.append_column("w", pa.array([1.5] * 7)).append_column("z", pa.array(["z"] * 7))
    DeltaTable(uri).merge(
        source, "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True
    ).when_matched_update({"w": "s.w * 2"}).execute()
    table = DeltaTable(uri)
    assert table.schema().field_names == ["id", "v", "p", "w"]  # z is not assigned: not added
    assert {r["id"]: r["w"] for r in our_rows(uri)}[1] == 3.0
    with pytest.raises(MergeResolutionError, match="Cannot resolve z in UPDATE"):
        table.merge(
            source, "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True
        ).when_not_matched_by_source_update({"z": "'x'"}).execute()
    with pytest.raises(MergeResolutionError, match="Cannot resolve z in UPDATE"):
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t").when_matched_update(
            {"z": "s.z"}
        ).execute()
    # evolving the schema with no row changed still commits the new schema
    DeltaTable(uri).merge(
        source.slice(0, 0), "t.id = s.id", source_alias="s", target_alias="t", merge_schema=True
    ).when_not_matched_insert_all().execute()
    assert DeltaTable(uri).schema().field_names == ["id", "v", "p", "w", "z"]
    assert latest_version(uri) == 2


# -- failures --------------------------------------------------------------------------------------
def test_append_only_table_allows_only_insert_only_merges(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, TARGET, configuration={"delta.appendOnly": "true", **CDF})
    table = DeltaTable(uri)
    with pytest.raises(AppendOnlyTableError):
        table.merge(SOURCE, "t.id = s.id", source_alias="s", target_alias="t").when_matched_delete().execute()
    assert latest_version(uri) == 0
    table.merge(
        SOURCE, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_not_matched_insert_all().execute()
    assert latest_version(uri) == 1


def test_a_failure_while_writing_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = twin_tables(tmp_path, TARGET, max_rows_per_file=2)
    before = files_under(uri)
    from replay.dml.outputs import Sinks

    rewrite = Sinks.rewrite
    calls = []

    def failing(self: Sinks, rows: pa.Table) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return rewrite(self, rows)

    monkeypatch.setattr(Sinks, "rewrite", failing)
    with pytest.raises(OSError, match="disk full"):
        _merge(DeltaTable(uri), SOURCE, "upsert")
    assert files_under(uri) == before and latest_version(uri) == 0


# -- a model of Delta's MERGE --------------------------------------------------------------------
@dataclass(frozen=True)
class Clause:
    kind: str
    action: str
    condition: str | None
    assignments: str | None  # a key of ASSIGNMENTS


CONDITIONS: dict[str, Callable[[dict[str, Any] | None, dict[str, Any] | None], bool | None]] = {
    "s.v > t.v": lambda t, s: None if s["v"] is None or t["v"] is None else s["v"] > t["v"],
    "t.v < 50": lambda t, s: None if t["v"] is None else t["v"] < 50,
    "s.v IS NULL": lambda t, s: s["v"] is None,
    "t.v IS NULL": lambda t, s: t["v"] is None,
    "s.v < 70": lambda t, s: None if s["v"] is None else s["v"] < 70,
    "t.p = 1": lambda t, s: t["p"] == 1,
}
ASSIGNMENTS: dict[
    str, tuple[dict[str, str], Callable[[dict[str, Any] | None, dict[str, Any] | None], dict[str, Any]]]
] = {
    "all": ({}, lambda t, s: dict(s)),
    "sum": (
        {"v": "t.v + s.v"},
        lambda t, s: {"v": None if t["v"] is None or s["v"] is None else t["v"] + s["v"]},
    ),
    "double": ({"v": "t.v * 2"}, lambda t, s: {"v": None if t["v"] is None else t["v"] * 2}),
    "shifted": (
        {"id": "s.id", "v": "s.v + 1000"},
        lambda t, s: {"id": s["id"], "v": None if s["v"] is None else s["v"] + 1000, "p": None},
    ),
}
CLAUSE_CHOICES = {
    "MATCHED": [("update", "all"), ("update", "sum"), ("delete", None)],
    "NOT_MATCHED": [("insert", "all"), ("insert", "shifted")],
    "NOT_MATCHED_BY_SOURCE": [("update", "double"), ("delete", None)],
}
CONDITION_CHOICES = {
    "MATCHED": ["s.v > t.v", "t.v < 50", "s.v IS NULL"],
    "NOT_MATCHED": ["s.v IS NULL", "s.v < 70"],
    "NOT_MATCHED_BY_SOURCE": ["t.v IS NULL", "t.p = 1", "t.v < 50"],
}


@st.composite
def clause_lists(draw: st.DrawFn) -> list[Clause]:
    clauses: list[Clause] = []
    for kind in ("MATCHED", "NOT_MATCHED", "NOT_MATCHED_BY_SOURCE"):
        count = draw(st.integers(0, 2))
        for index in range(count):
            action, assignments = draw(st.sampled_from(CLAUSE_CHOICES[kind]))
            last = index == count - 1
            condition = draw(
                st.sampled_from([None, *CONDITION_CHOICES[kind]] if last else CONDITION_CHOICES[kind])
            )
            clauses.append(Clause(kind, action, condition, assignments))
    if not clauses:
        clauses.append(Clause("NOT_MATCHED", "insert", None, "all"))
    return clauses


def rows_strategy(keys: st.SearchStrategy[int | None], size: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.fixed_dictionaries(
        {"id": keys, "v": st.one_of(st.none(), st.integers(-100, 100)), "p": st.integers(0, 2)}
    )
    return st.lists(row, max_size=size)


def _same_id(t: dict[str, Any], s: dict[str, Any]) -> bool:
    return t["id"] is not None and s["id"] == t["id"]


def model_merge(
    target: list[dict[str, Any]],
    source: list[dict[str, Any]],
    clauses: list[Clause],
    on: Callable[[dict[str, Any], dict[str, Any]], bool] = _same_id,
) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]] | None:
    """Delta's MERGE on ``on`` (default ``t.id = s.id``), row by row; ``None`` when it must fail
    (a target row matched several times, unless the MERGE only inserts or its one MATCHED clause
    is an unconditional delete)."""
    matched = [c for c in clauses if c.kind == "MATCHED"]
    by_source = [c for c in clauses if c.kind == "NOT_MATCHED_BY_SOURCE"]
    inserts = [c for c in clauses if c.kind == "NOT_MATCHED"]
    only_delete = len(matched) == 1 and matched[0].action == "delete" and matched[0].condition is None
    result: list[dict[str, Any]] = []
    changes: list[tuple[Any, ...]] = []
    used: set[int] = set()

    def first(options: list[Clause], t: dict[str, Any] | None, s: dict[str, Any] | None) -> Clause | None:
        return next((c for c in options if c.condition is None or CONDITIONS[c.condition](t, s)), None)

    def image(row: dict[str, Any]) -> tuple[Any, ...]:
        return (row["id"], row["v"], row["p"])

    insert_only = not matched and not by_source
    for t in target:
        hits = [i for i, s in enumerate(source) if on(t, s)]
        if len(hits) > 1 and not only_delete and not insert_only:
            return None
        used.update(hits)
        if hits:
            clause = first(matched, t, source[hits[0]])
            s: dict[str, Any] | None = source[hits[0]]
        else:
            clause, s = first(by_source, t, None), None
        if clause is None:
            result.append(t)
        elif clause.action == "delete":
            changes.append((*image(t), "delete"))
        else:
            assert clause.assignments is not None
            new = {**t, **ASSIGNMENTS[clause.assignments][1](t, s)}
            result.append(new)
            changes += [(*image(t), "update_preimage"), (*image(new), "update_postimage")]
    for i, s in enumerate(source):
        if i in used:
            continue
        clause = first(inserts, None, s)
        if clause is not None:
            assert clause.assignments is not None
            new = {"id": None, "v": None, "p": None, **ASSIGNMENTS[clause.assignments][1](None, s)}
            result.append(new)
            changes.append((*image(new), "insert"))
    return result, changes


def _apply(merger: TableMerger, clause: Clause) -> TableMerger:
    updates = ASSIGNMENTS[clause.assignments][0] if clause.assignments else None
    if clause.kind == "MATCHED":
        if clause.action == "delete":
            return merger.when_matched_delete(clause.condition)
        if updates:
            return merger.when_matched_update(updates, clause.condition)
        return merger.when_matched_update_all(clause.condition)
    if clause.kind == "NOT_MATCHED":
        if updates:
            return merger.when_not_matched_insert(updates, clause.condition)
        return merger.when_not_matched_insert_all(clause.condition)
    if clause.action == "delete":
        return merger.when_not_matched_by_source_delete(clause.condition)
    assert updates is not None
    return merger.when_not_matched_by_source_update(updates, clause.condition)


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda row: tuple((v is None, str(v)) for v in row))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(  # an insert-only MERGE ignores duplicate matches (Delta's InsertOnlyMergeExecutor)
    target=[{"id": 1, "v": 1, "p": 0}],
    source=[{"id": 1, "v": 2, "p": 0}, {"id": 1, "v": 3, "p": 0}, {"id": 2, "v": 3, "p": 0}],
    clauses=[Clause("NOT_MATCHED", "insert", None, "all")],
    partitioned=False,
    deletion_vectors=False,
)
@example(  # duplicate source keys under one unconditional delete: every duplicate counts as matched
    target=[{"id": 1, "v": 1, "p": 0}],
    source=[{"id": 1, "v": 2, "p": 0}, {"id": 1, "v": 3, "p": 0}],
    clauses=[Clause("MATCHED", "delete", None, None), Clause("NOT_MATCHED", "insert", None, "all")],
    partitioned=False,
    deletion_vectors=True,
)
@given(
    target=rows_strategy(st.one_of(st.none(), st.integers(0, 12)), 14).map(
        lambda rows: (
            list({r["id"]: r for r in rows if r["id"] is not None}.values())
            + [r for r in rows if r["id"] is None]
        )
    ),
    source=rows_strategy(st.one_of(st.none(), st.integers(0, 15)), 10),
    clauses=clause_lists(),
    partitioned=st.booleans(),
    deletion_vectors=st.booleans(),
)
def test_merge_follows_the_model_of_delta_semantics(  # noqa: PLR0917 - hypothesis's arguments
    tmp_path_factory: pytest.TempPathFactory,
    target: list[dict[str, Any]],
    source: list[dict[str, Any]],
    clauses: list[Clause],
    partitioned: bool,
    deletion_vectors: bool,
) -> None:
    root = tmp_path_factory.mktemp("merge")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.int64())])
    uri = str(root / "t")
    configuration = DV_CDF if deletion_vectors else CDF
    write_table(
        uri,
        pa.Table.from_pylist(target, schema),
        partition_by=["p"] if partitioned else None,
        configuration=configuration,
        max_rows_per_file=3,
    )
    merger = DeltaTable(uri).merge(
        pa.Table.from_pylist(source, schema), "t.id = s.id", source_alias="s", target_alias="t"
    )
    for clause in clauses:
        merger = _apply(merger, clause)
    expected = model_merge(target, source, clauses)
    try:
        if expected is None:
            with pytest.raises(MultipleSourceRowMatchError):
                merger.execute()
            assert latest_version(uri) == 0
            return
        merger.execute()
        result, changes = expected
        rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
        assert _sorted([(r["id"], r["v"], r["p"]) for r in rows]) == _sorted(
            [(r["id"], r["v"], r["p"]) for r in result]
        )
        if latest_version(uri) == 1:
            feed = our_changes(uri, 1)
            assert _sorted([(c["id"], c["v"], c["p"], c["_change_type"]) for c in feed]) == _sorted(changes)
        else:
            assert not changes
    finally:
        shutil.rmtree(root, ignore_errors=True)


JOINS: dict[str, Callable[[dict[str, Any], dict[str, Any]], bool]] = {
    "t.id = s.id": _same_id,
    "t.k = s.k": lambda t, s: t["k"] is not None and t["k"] == s["k"],
    "t.id <=> s.id": lambda t, s: t["id"] == s["id"],
    "t.id = s.id AND t.k = s.k": _same_id,
    "t.id >= s.id AND t.id <= s.id": _same_id,
    "t.id = s.id AND s.v > 0": lambda t, s: _same_id(t, s) and s["v"] is not None and s["v"] > 0,
    "t.k <=> s.k AND t.id <=> s.id": lambda t, s: t["id"] == s["id"],
}


def _keyed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "k": None if r["id"] is None else f"k{r['id']}"} for r in rows]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=rows_strategy(st.one_of(st.none(), st.integers(0, 8)), 10).map(
        lambda rows: list({r["id"]: r for r in rows}.values())
    ),
    source=rows_strategy(st.one_of(st.none(), st.integers(0, 10)), 8).map(
        lambda rows: list({r["id"]: r for r in rows}.values())
    ),
    on=st.sampled_from(list(JOINS)),
)
def test_every_kind_of_join_condition_matches_as_sql_does(
    tmp_path_factory: pytest.TempPathFactory,
    target: list[dict[str, Any]],
    source: list[dict[str, Any]],
    on: str,
) -> None:
    """Whole-number keys (binary search), other keys (hash join), null-safe keys, several keys,
    a condition without keys (every pair tried) and keys with a residual condition."""
    root = tmp_path_factory.mktemp("join")
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("p", pa.int64()), ("k", pa.string())])
    uri = str(root / "t")
    write_table(uri, pa.Table.from_pylist(_keyed(target), schema), max_rows_per_file=3)
    clauses = [
        Clause("MATCHED", "update", None, "sum"),
        Clause("NOT_MATCHED", "insert", None, "shifted"),
        Clause("NOT_MATCHED_BY_SOURCE", "delete", "t.v IS NULL", None),
    ]
    merger = DeltaTable(uri).merge(
        pa.Table.from_pylist(_keyed(source), schema), on, source_alias="s", target_alias="t"
    )
    for clause in clauses:
        merger = _apply(merger, clause)
    expected = model_merge(_keyed(target), _keyed(source), clauses, JOINS[on])
    try:
        if expected is None:
            with pytest.raises(MultipleSourceRowMatchError):
                merger.execute()
            return
        merger.execute()
        rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
        assert _sorted([(r["id"], r["v"]) for r in rows]) == _sorted([(r["id"], r["v"]) for r in expected[0]])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_chain_of_changes_on_files_with_deletion_vectors(tmp_path: Path) -> None:
    """Each operation unions its rows with the files' existing DVs; rows and feed stay those of
    copy-on-write, and delta-rs reads the result."""
    cow, _ = twin_tables(tmp_path / "cow", TARGET, partition_by=["p"], max_rows_per_file=4)
    dv, _ = twin_tables(
        tmp_path / "dv", TARGET, partition_by=["p"], configuration=DV_CDF, max_rows_per_file=4
    )
    for uri in (cow, dv):
        table = DeltaTable(uri)
        table.delete("id IN (0, 3)")
        table.update({"v": "v + 1"}, predicate="id % 2 = 0")
        _merge(table, SOURCE, "by-source")
        table.delete("v > 60")
        assert table.version() == 4
    assert our_rows(dv) == our_rows(cow) == rust_rows(dv)
    assert our_changes(dv, 1) == our_changes(cow, 1)
    metrics = [entry["operationMetrics"] for entry in DeltaTable(dv).history()]
    updated = [
        int(m.get("numDeletionVectorsUpdated", m.get("numTargetDeletionVectorsUpdated", 0))) for m in metrics
    ]
    assert sum(updated) > 0  # some file's DV was unioned with new rows


def test_duplicate_matches_fail_every_merge_but_insert_only_ones(tmp_path: Path) -> None:
    """Insert-only: no check (as delta-rs and Delta's InsertOnlyMergeExecutor); NOT MATCHED BY
    SOURCE without MATCHED clauses: Delta checks (delta-rs 1.6.6 does not)."""
    ours, rust = twin_tables(tmp_path, TARGET, max_rows_per_file=4)
    source = pa.table({"id": [1, 1, 30, 30], "v": [5, 6, 7, 8], "p": [0, 0, 0, 0]})
    for table in (DeltaTable(ours), RustTable(rust)):
        table.merge(
            source, "t.id = s.id", source_alias="s", target_alias="t"
        ).when_not_matched_insert_all().execute()
    assert our_rows(ours) == rust_rows(rust)
    assert [r["v"] for r in our_rows(ours) if r["id"] == 30] == [7, 8]
    merger = DeltaTable(ours).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    with pytest.raises(MultipleSourceRowMatchError):
        merger.when_not_matched_by_source_delete().execute()
