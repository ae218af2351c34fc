"""``replay.spark.sql``: Delta's SQL statements on path tables and registered names, with Delta's
result DataFrames, checked against the ``DeltaTable`` API and delta-rs; and the statement grammar
alone (fast, with hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable
from hypothesis import given
from hypothesis import strategies as st

from replay import write_table
from replay.spark import DeltaTable, register_table, sql, unregister_table
from replay.spark import sql_ast as ast
from replay.spark.sql_ast import StatementParseError, UnsupportedStatementError
from replay.spark.sql_parse import parse_statement
from replay.spark.sql_query import table_references
from replay.spark.sql_tables import UnknownTableError

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "v": pa.array([10, 20, 30, 40], pa.int64()),
        "p": ["a", "a", "b", "b"],
    }
)


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- the grammar alone ---------------------------------------------------------------------------------
def test_statements_parse_to_their_parts() -> None:
    merge = parse_statement(
        "MERGE INTO events AS t USING (SELECT 1 AS id) s ON t.id = s.id "
        "WHEN MATCHED AND s.v > 1 THEN UPDATE SET t.v = CASE WHEN s.v > 2 THEN 1 ELSE 2 END, p = 'x' "
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED BY TARGET THEN INSERT (id, v) VALUES (s.id, s.v + 1) "
        "WHEN NOT MATCHED BY SOURCE AND t.v < 0 THEN UPDATE SET v = 0 WHEN NOT MATCHED THEN INSERT *;"
    )
    assert isinstance(merge, ast.Merge)
    assert merge.source == ast.MergeSource(None, "SELECT 1 AS id", "s")
    assert merge.condition == "t.id = s.id"
    assert [(c.kind, c.action, c.condition, c.assignments) for c in merge.clauses] == [
        (ast.MATCHED, "update", "s.v > 1", (("t.v", "CASE WHEN s.v > 2 THEN 1 ELSE 2 END"), ("p", "'x'"))),
        (ast.MATCHED, "delete", None, None),
        (ast.NOT_MATCHED, "insert", None, (("id", "s.id"), ("v", "s.v + 1"))),
        (ast.NOT_MATCHED_BY_SOURCE, "update", "t.v < 0", (("v", "0"),)),
        (ast.NOT_MATCHED, "insert", None, None),
    ]
    vacuum = parse_statement("vacuum delta.`s3a://b/t` retain 0 hours dry run")
    assert vacuum == ast.Vacuum(vacuum.table, 0.0, True) and vacuum.table.path == "s3a://b/t"
    lite, full = parse_statement("VACUUM t LITE RETAIN 2 HOURS"), parse_statement("VACUUM t FULL DRY RUN")
    assert isinstance(lite, ast.Vacuum) and lite == ast.Vacuum(lite.table, 2.0, False, lite=True)
    assert isinstance(full, ast.Vacuum) and full == ast.Vacuum(full.table, None, True, lite=False)
    optimize = parse_statement("OPTIMIZE '/t' WHERE p = 'a' ZORDER BY (x, y)")
    assert isinstance(optimize, ast.Optimize) and (optimize.where, optimize.zorder) == ("p = 'a'", ("x", "y"))
    widened = parse_statement("ALTER TABLE t ALTER COLUMN s.a TYPE decimal(12, 2)")
    assert widened == ast.ChangeColumnType(widened.table, ("s", "a"), "decimal(12,2)")  # type: ignore[union-attr]
    clustering = parse_statement("ALTER TABLE t CLUSTER BY (a, s.`b c`)")
    assert clustering == ast.ClusterBy(clustering.table, (("a",), ("s", "b c")))  # type: ignore[union-attr]
    assert parse_statement("ALTER TABLE t CLUSTER BY NONE").columns == ()  # type: ignore[union-attr]
    full = parse_statement("OPTIMIZE delta.`/t` FULL WHERE p = 'a'")
    assert isinstance(full, ast.Optimize) and (full.full, full.where) == (True, "p = 'a'")
    restore = parse_statement("RESTORE t TO TIMESTAMP AS OF '2024-01-31'")
    assert isinstance(restore, ast.Restore) and (restore.version, restore.timestamp) == (None, "2024-01-31")
    rename = parse_statement("ALTER TABLE t RENAME COLUMN s.`a b` TO `c.d`")
    assert rename == ast.RenameColumn(rename.table, ("s", "a b"), "c.d")  # type: ignore[union-attr]
    drop = parse_statement("ALTER TABLE t DROP COLUMNS IF EXISTS (a, s.b)")
    assert drop == ast.DropColumns(drop.table, (("a",), ("s", "b")), True)  # type: ignore[union-attr]
    assert parse_statement("alter table t drop column a") == ast.DropColumns(drop.table, (("a",),), False)
    props = parse_statement("ALTER TABLE t SET TBLPROPERTIES ('delta.appendOnly' = 'true', a.b = 1, c true)")
    assert isinstance(props, ast.SetProperties)
    assert props.properties == (("delta.appendOnly", "true"), ("a.b", "1"), ("c", "true"))
    refs = table_references(
        "SELECT * FROM delta.`/a@v3` x JOIN events VERSION AS OF 2 ON x.id = events.id, u@v1"
    )
    assert [(r.table.path, r.table.name, r.table.version, r.aliased) for r in refs] == [
        ("/a", None, 3, True),
        (None, ("events",), 2, False),
        (None, ("u",), 1, False),
    ]


def test_errors_name_the_position_or_the_api_to_use() -> None:
    with pytest.raises(StatementParseError, match=r"PARSE_SYNTAX_ERROR.*\(line 1, pos 24\)") as parse:
        parse_statement("DELETE FROM t WHERE id >")
    assert parse.value.position == 24
    with pytest.raises(StatementParseError, match="line 2, pos 6"):
        parse_statement("UPDATE t\nSET v WHERE x")
    with pytest.raises(
        UnsupportedStatementError, match=r"^CONVERT TO DELTA is not supported .* use df\.write"
    ):
        parse_statement("CONVERT TO DELTA parquet.`/x`")
    with pytest.raises(UnsupportedStatementError, match=r"ALTER TABLE \.\.\. RENAME TO .*add_columns"):
        parse_statement("ALTER TABLE t RENAME TO u")
    with pytest.raises(UnsupportedStatementError, match="USING INVENTORY"):
        parse_statement("VACUUM t USING INVENTORY inv")


_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)


@given(path=_NAMES, alias=_NAMES, column=_NAMES, value=st.integers(-(10**6), 10**6))
def test_quoted_identifiers_and_values_round_trip(path: str, alias: str, column: str, value: int) -> None:
    name = quote(column)
    statement = f"UPDATE delta.{quote(path)} AS {quote(alias)} SET {name} = {value} WHERE {name} > 0"
    parsed = parse_statement(statement)
    assert isinstance(parsed, ast.Update)
    assert (parsed.table.path, parsed.table.alias) == (path, alias)
    assert parsed.assignments == ((column, str(value)),)
    assert parsed.condition == f"{quote(column)} > 0"
    refs = table_references(f"SELECT {quote(column)} FROM delta.{quote(path)} WHERE 1 = 1")
    assert len(refs) == 1 and refs[0].table.path is not None


# -- on Spark ------------------------------------------------------------------------------------------
def _table(tmp_path: Path, name: str = "events") -> str:
    uri = str(tmp_path / name)
    write_table(uri, ROWS, partition_by=["p"])
    write_table(uri, ROWS.slice(0, 1))
    return uri


def _rows(uri: str) -> list[tuple[Any, ...]]:
    table = RsTable(uri).to_pyarrow_table()
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.mark.spark
def test_maintenance_statements_match_the_delta_table_api(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    register_table(spark, "Events", uri)
    table = DeltaTable.forPath(spark, uri)
    history = sql(spark, "DESCRIBE HISTORY events LIMIT 1")
    assert history.columns == table.history(1).columns and history.collect()[0]["version"] == 1
    detail = sql(spark, f"DESC DETAIL delta.`{uri}`").collect()[0]
    assert detail["numFiles"] == table.detail().collect()[0]["numFiles"] == 3
    assert sql(spark, "ALTER TABLE EVENTS SET TBLPROPERTIES ('owner' = 'me')").collect() == []
    assert sql(spark, f"DESCRIBE DETAIL '{uri}'").collect()[0]["properties"]["owner"] == "me"
    sql(spark, "ALTER TABLE events UNSET TBLPROPERTIES IF EXISTS ('owner', 'nothing')")
    assert "owner" not in table.detail().collect()[0]["properties"]
    optimized = sql(spark, "OPTIMIZE events WHERE p = 'a'").collect()[0]
    assert optimized["path"] == uri and optimized["metrics"]["numFilesRemoved"] == 2
    restored = sql(spark, "RESTORE TABLE events TO VERSION AS OF 1")
    assert restored.columns[:2] == ["table_size_after_restore", "num_of_files_after_restore"]
    assert restored.collect()[0]["num_of_files_after_restore"] == 3
    sql(spark, "ALTER TABLE events ADD CONSTRAINT positive CHECK (v > 0)")
    assert table.detail().collect()[0]["properties"]["delta.constraints.positive"] == "v > 0"
    sql(spark, "ALTER TABLE events DROP CONSTRAINT positive")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        dry = sql(spark, "VACUUM events RETAIN 0 HOURS DRY RUN").collect()
        assert len(dry) == 1 and f"{uri}/p=a/part-" in dry[0]["path"]
        assert sql(spark, "VACUUM events RETAIN 0 HOURS").collect()[0]["path"].endswith(uri)
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert _rows(uri) == [(1, 10), (1, 10), (2, 20), (3, 30), (4, 40)]
    sql(spark, "ALTER TABLE events SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    sql(spark, "ALTER TABLE events RENAME COLUMN v TO `the value`")
    sql(spark, "ALTER TABLE events DROP COLUMN IF EXISTS (nothing)")
    assert spark.read.format("deltalog").load(uri).columns == ["id", "the value", "p"]
    sql(spark, "ALTER TABLE events SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    sql(spark, "ALTER TABLE events ALTER COLUMN id TYPE decimal(22, 0)")  # long -> a wider decimal
    widened = spark.read.format("deltalog").load(uri).orderBy("id").collect()
    assert [int(row["id"]) for row in widened] == [1, 1, 2, 3, 4]
    assert unregister_table(spark, "events")


@pytest.mark.spark
def test_dml_statements_change_the_rows_as_delta_rs_reads_them(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    register_table(spark, "events", uri)
    deleted = sql(spark, "DELETE FROM events WHERE events.id = 1")
    assert deleted.collect()[0]["num_affected_rows"] == 2
    updated = sql(spark, f"UPDATE delta.`{uri}` AS t SET t.v = v * 2 WHERE id > 2")
    assert updated.collect()[0]["num_affected_rows"] == 2
    assert _rows(uri) == [(2, 20), (3, 60), (4, 80)]
    spark.createDataFrame([(2, 21), (5, 50)], "id long, v long").createOrReplaceTempView("changes")
    merged = sql(
        spark,
        "MERGE INTO events t USING changes s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, v, p) VALUES (s.id, s.v, 'c') "
        "WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN DELETE",
    )
    assert merged.columns == [
        "num_affected_rows",
        "num_updated_rows",
        "num_deleted_rows",
        "num_inserted_rows",
    ]
    assert tuple(merged.collect()[0]) == (3, 1, 1, 1)
    assert _rows(uri) == [(2, 21), (3, 60), (5, 50)]
    sql(
        spark,
        f"MERGE INTO events USING (SELECT * FROM delta.`{uri}` VERSION AS OF 0) old ON events.id = old.id "
        "WHEN NOT MATCHED THEN INSERT *",
    )
    assert _rows(uri) == [(1, 10), (2, 21), (3, 60), (4, 40), (5, 50)]
    unregister_table(spark, "events")


@pytest.mark.spark
def test_queries_read_delta_tables_at_a_version(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    register_table(spark, "events", uri)
    assert sql(spark, "SELECT count(*) AS n FROM events").collect()[0]["n"] == 5
    old = sql(spark, f"SELECT sum(v) AS s FROM delta.`{uri}` VERSION AS OF 0 WHERE p = 'a'")
    assert old.collect()[0]["s"] == 30
    joined = sql(
        spark,
        f"SELECT e.id FROM events e JOIN delta.`{uri}@v0` o ON e.id = o.id WHERE o.v > 20 ORDER BY e.id",
    )
    assert [row["id"] for row in joined.collect()] == [3, 4]
    assert sql(spark, "SELECT events.id FROM events VERSION AS OF 0 ORDER BY events.id").count() == 4
    unregister_table(spark, "events")


@pytest.mark.spark
def test_errors_of_statements_on_spark(spark: Any, tmp_path: Path) -> None:
    uri = _table(tmp_path)
    with pytest.raises(UnknownTableError, match=r"TABLE_OR_VIEW_NOT_FOUND.*nowhere.*register_table"):
        sql(spark, "DESCRIBE HISTORY nowhere")
    with pytest.raises(
        StatementParseError, match=r"^\[PARSE_SYNTAX_ERROR\] Syntax error at or near end of input"
    ):
        sql(spark, f"DELETE FROM delta.`{uri}` WHERE id >")  # Spark's own parser and message
    with pytest.raises(UnsupportedStatementError, match="GENERATE is not supported"):
        sql(spark, f"GENERATE symlink_format_manifest FOR TABLE delta.`{uri}`")
    assert _rows(uri) == [(1, 10), (1, 10), (2, 20), (3, 30), (4, 40)]
