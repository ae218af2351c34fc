"""Row ids and row commit versions of the rows of a data file (Delta's row tracking).

On a table with row tracking every row has a row id and a row commit version. A file stores
them in two hidden columns whose names the table's properties give (the *materialized* columns,
absent from the schema); where a file lacks the column, or holds a null, the value is derived: the
file's ``baseRowId`` plus the row's physical index, and the file's ``defaultRowCommitVersion``.

A rewrite that keeps rows (a copy-on-write DELETE, UPDATE or MERGE, OPTIMIZE) must keep their
ids, so it carries them along with the rows, in the columns :data:`ROW_ID` and
:data:`ROW_COMMIT_VERSION`, and the data writer stores them under the materialized names
(:class:`~replay.txn.write_spec.FileWriteSpec` ``row_tracking``). A row an operation updates keeps
its id and gets a null commit version: the new file's default, the version of the commit. Pure
but for :func:`read_with_lineage`, which reads through the :class:`TableReader` it is handed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.data.reader import TableReader
from replay.protocol.actions import AddFile
from replay.protocol.errors import DeltaError

ROW_ID = "_metadata.row_id"
"""The column carrying rows' row ids through a rewrite (Delta's metadata column's name)."""
ROW_COMMIT_VERSION = "_metadata.row_commit_version"
"""The column carrying rows' row commit versions through a rewrite."""
LINEAGE_COLUMNS = (ROW_ID, ROW_COMMIT_VERSION)


class MissingRowIdsError(DeltaError, ValueError):
    """A file of a table with row tracking has no ``baseRowId`` or ``defaultRowCommitVersion``."""


def stored_fields(materialized: tuple[str, str]) -> list[pa.Field]:
    """The materialized columns (``materialized``: their names) as a data file stores them."""
    return [pa.field(name, pa.int64()) for name in materialized]


def derived(file: AddFile, stored: pa.Table | None, count: int) -> tuple[pa.Array, pa.Array]:
    """The row ids and row commit versions of every physical row of ``file`` (``count`` rows),
    from its materialized columns (``stored``, all rows in file order, the two
    :func:`stored_fields` columns; ``None``: the file has neither) where they hold a value.
    Raises :class:`MissingRowIdsError` naming a file without ``baseRowId`` or
    ``defaultRowCommitVersion``."""
    if file.base_row_id is None or file.default_row_commit_version is None:
        raise MissingRowIdsError(
            f"Cannot keep the row ids of file {file.path}: its add action has no baseRowId or "
            "defaultRowCommitVersion though its table has row tracking enabled"
        )
    ids = pa.array(np.arange(file.base_row_id, file.base_row_id + count, dtype=np.int64))
    versions = pa.repeat(pa.scalar(file.default_row_commit_version, pa.int64()), count)
    if stored is None:
        return ids, versions
    kept_ids, kept_versions = (stored.column(i).combine_chunks() for i in range(2))
    if kept_ids.null_count < count:
        ids = pc.coalesce(kept_ids, ids)
    if kept_versions.null_count < count:
        versions = pc.coalesce(kept_versions, versions)
    return ids, versions


def with_lineage(rows: pa.Table, ids: pa.Array, versions: pa.Array) -> pa.Table:
    """``rows`` with the :data:`ROW_ID` and :data:`ROW_COMMIT_VERSION` columns appended."""
    return rows.append_column(ROW_ID, ids).append_column(ROW_COMMIT_VERSION, versions)


def updated_lineage(ids: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The lineage of updated rows whose ids are ``ids``: the ids kept, the commit versions null
    (the new file's default: the version of the commit)."""
    return ids, pa.nulls(len(ids), pa.int64())


def read_with_lineage(
    reader: TableReader,
    file: AddFile,
    columns: Sequence[str],
    materialized: tuple[str, str],
    *,
    data: bytes | None = None,
) -> pa.Table:
    """The live rows of ``file`` (its deletion vector applied) with ``columns`` and the
    :data:`ROW_ID` / :data:`ROW_COMMIT_VERSION` columns (``materialized``: the names the
    table stores them under)."""
    raw = reader.read_file(
        file, columns, row_filter=False, extra_columns=stored_fields(materialized), data=data
    )
    count = raw.num_rows
    ids, versions = derived(file, raw.select(list(materialized)), count)
    rows = with_lineage(raw.drop_columns(list(materialized)), ids, versions)
    deleted = reader.deletion_filter(file)
    return rows if deleted is None else rows.filter(deleted.mask(count, reader.file_uri(file)))
