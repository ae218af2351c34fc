"""The target of a Spark row-level change: its storage settings, and reads of its files with each
row's file and physical row index.

Every read goes through the ``deltalog`` data source, pinned to the version the operation
planned on (``versionAsOf``) and restricted with its internal options
(:mod:`replay.spark.row_ids`) to the files the driver chose: the candidate files its pruning
kept, then, for a second pass, the files the first one found touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from replay.delta_log import DeltaLog
from replay.spark.row_ids import COLUMNS_OPTION, FILES_OPTION, ROW_IDS_OPTION
from replay.spark.settings import storage_conf
from replay.state.snapshot import Snapshot

FORMAT = "deltalog"


@dataclass(frozen=True)
class SparkTarget:
    """A Delta table as the Spark ``DeltaTable`` changes it: the session, the table's path, the
    storage settings of the driver-side work (the session's, plus ``options``) and the options
    every read of it gets (``forPath``'s ``hadoopConf``), and its alias (``None``: none)."""

    spark: Any
    path: str
    options: Mapping[str, str] = field(default_factory=dict)
    alias: str | None = None

    def conf(self) -> dict[str, str]:
        """The storage settings now: the session's (as the data source reads them) and ``options``."""
        from replay.spark.datasource import session_storage_settings

        return {**session_storage_settings(self.spark), **storage_conf(self.options)}

    def log(self) -> DeltaLog:
        return DeltaLog.for_table(self.path, self.conf())

    def latest(self) -> Snapshot:
        """The table's latest snapshot (every operation works on it, as Delta's do)."""
        return self.log().update()

    def _reader(self) -> Any:
        """A reader of the ``deltalog`` format, registered on the session if it is not yet."""
        from replay.spark.datasource import ensure_registered

        ensure_registered(self.spark)
        return self.spark.read.format(FORMAT).options(**self.options)

    def read(self, version: int | None = None) -> Any:
        """A DataFrame of the table's rows (at ``version``, default the latest)."""
        reader = self._reader()
        if version is not None:
            reader = reader.option("versionAsOf", str(version))
        return reader.load(self.path)

    def scan(
        self,
        version: int,
        files: Iterable[str],
        columns: Sequence[str] | None = None,
        *,
        aliased: bool = True,
    ) -> Any:
        """The rows of ``files`` at ``version`` with ``columns`` (all without a list) and their row
        ids (a file is its position in :func:`file_ids`), under the table's alias when ``aliased``."""
        reader = (
            self._reader()
            .option("versionAsOf", str(version))
            .option(FILES_OPTION, orjson.dumps(list(file_ids(files))).decode())
            .option(ROW_IDS_OPTION, "true")
        )
        if columns is not None:
            reader = reader.option(COLUMNS_OPTION, orjson.dumps(list(dict.fromkeys(columns))).decode())
        frame = reader.load(self.path)
        return frame.alias(self.alias) if aliased and self.alias else frame


def file_ids(files: Iterable[str]) -> tuple[str, ...]:
    """The files of a scan in the order their ids (:data:`~replay.spark.row_ids.FILE_COLUMN`)
    number them."""
    return tuple(sorted(set(files)))
