"""deltalake's arguments that tune or extend its own engine, on this library's operations: so that
deltalake code runs unchanged, each is accepted where it changes nothing here and refused by name
where honouring it would take something this library does not do, never silently dropped.

Accepted: DataFusion's memory and concurrency settings (``streamed_exec``, ``max_spill_size``,
``max_temp_directory_size``, ``max_concurrent_tasks``: operations here stream file by file and
size their own thread pools) and ``error_on_type_mismatch=True`` (a value must have its
column's type, as here anyway). Anything else given (not ``None``) raises
:class:`UnsupportedOptionError`.
"""

from __future__ import annotations

from replay.protocol.errors import DeltaError

INERT = frozenset({"streamed_exec", "max_spill_size", "max_temp_directory_size", "max_concurrent_tasks"})
"""Arguments that tune deltalake's engine and change no result."""
ACCEPTED_VALUES = {"error_on_type_mismatch": True}
"""Arguments accepted with the value that is this library's behaviour."""
INSTEAD = {
    "writer_properties": "Parquet files are written with this library's settings",
    "post_commithook_properties": "checkpoints and log cleanup follow the table's properties",
    "error_on_type_mismatch": "values are cast to a column's type only where SQL casts them",
    "keep_versions": "versions are kept by delta.deletedFileRetentionDuration (retention_hours)",
    "filesystem": "files are read with the table's storage settings (storage_options or conf)",
}
"""What to do instead, for the arguments refused."""


class UnsupportedOptionError(DeltaError, ValueError):
    """An argument of deltalake's API that this library cannot honour (the message names it)."""


def check_deltalake_options(operation: str, **options: object) -> None:
    """Raise :class:`UnsupportedOptionError` naming every argument of ``options`` given to
    ``operation`` that this library cannot honour."""
    refused = [
        name
        for name, value in options.items()
        if value is not None and name not in INERT and ACCEPTED_VALUES.get(name, object()) != value
    ]
    if refused:
        reasons = "; ".join(f"{name}: {INSTEAD.get(name, 'not supported')}" for name in refused)
        raise UnsupportedOptionError(f"{operation}: {', '.join(refused)} not supported ({reasons})")
