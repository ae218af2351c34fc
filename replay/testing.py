"""pytest plugin: the ``delta_table`` fixture, to set up Delta tables in tests.

Installed with the package (entry point ``pytest11``) beside :mod:`logstores.testing`, whose
emulators it uses: a table on ``s3://``/``s3a://`` is written with the ``s3_conf`` of the
session's moto server, one on ``gs://`` with ``gcs_conf``, one on ``abfs://``/``wasb://`` with
``azure_conf`` (each started only when a table needs it)::

    def test_pipeline(s3_bucket, s3_conf, delta_table):
        source = delta_table(f"s3://{s3_bucket}/events", [{"id": 1, "day": "2024-06-01"}], ["day"])
        run_my_pipeline(source, conf=s3_conf)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest

from replay import write_table
from replay.txn.write import ArrowData

CONF_FIXTURES: dict[str, str] = {
    "s3": "s3_conf",
    "s3a": "s3_conf",
    "s3n": "s3_conf",
    "gs": "gcs_conf",
    "abfs": "azure_conf",
    "abfss": "azure_conf",
    "wasb": "azure_conf",
    "wasbs": "azure_conf",
}
"""URI scheme -> the fixture of :mod:`logstores.testing` whose settings reach its emulator."""


class DeltaTableFactory:
    """``delta_table(uri, rows_or_arrow, partition_by=None, properties=None)``: write a table.

    ``rows_or_arrow`` is a list of rows (dicts, column name -> value) or anything ``write_table``
    accepts (a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, a pandas DataFrame).
    The first call for a URI creates the table with ``partition_by`` and the table properties
    ``properties`` (e.g. ``{"delta.enableChangeDataFeed": "true"}``); later calls append a version
    (``mode`` chooses otherwise). ``conf`` adds settings to those of the URI's emulator. Returns
    the table URI as a string.
    """

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __call__(
        self,
        uri: str | os.PathLike[str],
        rows_or_arrow: Sequence[Mapping[str, Any]] | ArrowData,
        partition_by: Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        mode: str = "append",
        conf: Mapping[str, str] | None = None,
    ) -> str:
        table_uri = os.fspath(uri)
        settings = {**self.emulator_conf(table_uri), **(conf or {})}
        write_table(
            table_uri,
            _as_arrow(rows_or_arrow),
            mode=mode,
            partition_by=list(partition_by) if partition_by is not None else None,
            conf=settings,
            configuration=properties,
        )
        return table_uri

    def emulator_conf(self, uri: str) -> dict[str, str]:
        """The settings of the emulator serving ``uri``'s scheme (none for local paths)."""
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
        fixture = CONF_FIXTURES.get(scheme)
        return dict(self._request.getfixturevalue(fixture)) if fixture else {}


def _as_arrow(data: Sequence[Mapping[str, Any]] | ArrowData) -> ArrowData:
    """Rows (a list of dicts) as a pyarrow Table; anything else unchanged."""
    if isinstance(data, list | tuple):
        if not data:
            raise ValueError("delta_table needs at least one row, or a pyarrow Table with a schema")
        return pa.Table.from_pylist(list(data))
    return data


@pytest.fixture
def delta_table(request: pytest.FixtureRequest) -> DeltaTableFactory:
    """A factory writing Delta tables: ``delta_table(uri, rows_or_arrow, partition_by, properties)``."""
    return DeltaTableFactory(request)
