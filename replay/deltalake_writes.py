"""``write_deltalake``: deltalake's write function, with its arguments and defaults, on
:func:`~replay.txn.write.write_table` (deltalake code ports with its import changed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from logstores.conf import ConfLike, to_conf_dict
from logstores.delta_rs_options import with_storage_options
from replay.protocol.deltalake_options import UnsupportedOptionError, check_deltalake_options
from replay.table import DeltaTable
from replay.txn.commit_properties import commit_properties as committing
from replay.txn.commit_properties import from_deltalake
from replay.txn.write import ArrowData, InvalidWriteOptionError, write_table

DEFAULT_TARGET_FILE_SIZE = 100 * 1024 * 1024
"""The bytes after which ``write_deltalake`` closes a file unless told otherwise (deltalake's)."""


def write_deltalake(
    table_or_uri: str | os.PathLike[str] | DeltaTable,
    data: ArrowData,
    *,
    partition_by: list[str] | str | None = None,
    mode: str = "error",
    name: str | None = None,
    description: str | None = None,
    configuration: Mapping[str, str | None] | None = None,
    schema_mode: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    predicate: str | None = None,
    target_file_size: int | None = None,
    writer_properties: object | None = None,
    commit_properties: object | None = None,
    post_commithook_properties: object | None = None,
    conf: ConfLike | None = None,
) -> None:
    """deltalake's ``write_deltalake``, on :func:`~replay.txn.write.write_table`.

    ``mode`` is ``error`` (the default: the table must not exist), ``append``, ``overwrite`` or
    ``ignore``; ``schema_mode="merge"`` adds new columns, ``"overwrite"`` (with
    ``mode="overwrite"``) replaces the schema; ``predicate`` overwrites only the rows it selects
    (``replaceWhere``); ``name``, ``description``, ``partition_by`` and ``configuration`` shape a
    new table. ``storage_options`` are delta-rs's (``AWS_ENDPOINT_URL``, ...) and ``conf`` this
    library's settings. ``commit_properties`` (deltalake's or :class:`CommitProperties`) adds its
    ``custom_metadata`` to the commit, sets its retries, and its one application transaction
    makes the write idempotent (``txn_app_id``/``txn_version``). Files roll over at
    ``target_file_size`` bytes (deltalake's default: :data:`DEFAULT_TARGET_FILE_SIZE`).
    ``writer_properties`` and ``post_commithook_properties`` are refused when given
    (:class:`UnsupportedOptionError` naming them), not ignored. Raises what ``write_table`` raises.
    """
    check_deltalake_options(
        "write_deltalake",
        writer_properties=writer_properties,
        post_commithook_properties=post_commithook_properties,
    )
    properties = from_deltalake(commit_properties, "write_deltalake", applications=True)
    applications = list(properties.app_transactions or ()) if properties is not None else []
    if len(applications) > 1:
        raise UnsupportedOptionError(
            "write_deltalake: commit_properties.app_transactions: one write records one"
        )
    application = applications[0] if applications else None
    if schema_mode not in (None, "merge", "overwrite"):
        raise InvalidWriteOptionError(
            f"schema_mode must be 'merge', 'overwrite' or None, not {schema_mode!r}"
        )
    if isinstance(table_or_uri, DeltaTable):  # the table's settings, then the ones given here
        uri, conf = table_or_uri.table_uri, {**table_or_uri.delta_log.conf, **to_conf_dict(conf)}
    else:
        uri = os.fspath(table_or_uri)
    settings = with_storage_options(uri, conf, storage_options)
    with committing(replace(properties, app_transactions=None) if properties is not None else None):
        write_table(
            uri,
            data,
            mode=mode,
            partition_by=[partition_by] if isinstance(partition_by, str) else partition_by,
            conf=settings,
            configuration={key: value for key, value in (configuration or {}).items() if value is not None},
            merge_schema=schema_mode == "merge",
            overwrite_schema=schema_mode == "overwrite",
            replace_where=predicate,
            name=name,
            description=description,
            txn_app_id=application.app_id if application is not None else None,
            txn_version=application.version if application is not None else None,
            target_file_size=target_file_size or DEFAULT_TARGET_FILE_SIZE,
        )
