"""What the commits made inside a ``with commit_properties(...)`` block carry besides their own
content: deltalake's ``CommitProperties`` (``custom_metadata``, ``max_commit_retries``) and Delta's
``userMetadata``.

The properties are a context variable, so that an operation several layers below the one that
was given them (a MERGE's commit, a VACUUM's two commits) carries them with no argument in
between: every :class:`~replay.txn.transaction.Transaction` created in the block reads them. The
``custom_metadata`` entries become fields of ``commitInfo``, as delta-rs writes them; one that
would replace a field Delta writes there is refused (:class:`ValueError` naming it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from replay.protocol.deltalake_options import UnsupportedOptionError, check_deltalake_options
from replay.txn.committer import COMMIT_INFO_FIELDS


@dataclass(frozen=True)
class CommitProperties:
    """deltalake's ``CommitProperties``: ``custom_metadata``, extra ``commitInfo`` fields;
    ``max_commit_retries``, how many times a commit that lost a race to a non-conflicting one is
    retried (``None``: the default); ``app_transactions``, the ``(app_id, version)`` pairs an
    idempotent write records (``write_deltalake`` takes one); and Delta's ``user_metadata``."""

    custom_metadata: Mapping[str, Any] | None = None
    max_commit_retries: int | None = None
    app_transactions: Sequence[Any] | None = None
    user_metadata: str | None = None

    def __post_init__(self) -> None:
        clashing = sorted(COMMIT_INFO_FIELDS & set(self.custom_metadata or {}))
        if clashing:
            raise ValueError(
                f"custom commit metadata {clashing} would replace fields Delta writes in commitInfo"
            )
        if self.max_commit_retries is not None and self.max_commit_retries < 0:
            raise ValueError(f"max_commit_retries must be 0 or more, not {self.max_commit_retries}")


_CURRENT: ContextVar[CommitProperties | None] = ContextVar("commit_properties", default=None)


def from_deltalake(
    given: object | None, operation: str, *, applications: bool = False
) -> CommitProperties | None:
    """deltalake's ``CommitProperties`` (or this module's) for ``operation``; its application
    transactions only where ``applications`` (an operation that records them), else
    :class:`UnsupportedOptionError` if it has any."""
    if given is None:
        return None
    recorded = getattr(given, "app_transactions", None)
    if recorded and not applications:
        raise UnsupportedOptionError(
            f"{operation}: commit_properties.app_transactions not supported (write_deltalake records one)"
        )
    return CommitProperties(
        custom_metadata=getattr(given, "custom_metadata", None),
        max_commit_retries=getattr(given, "max_commit_retries", None),
        app_transactions=recorded if applications else None,
        user_metadata=getattr(given, "user_metadata", None),
    )


def deltalake_arguments(operation: str, arguments: Mapping[str, object]) -> CommitProperties | None:
    """deltalake's keyword arguments of ``operation``: its ``commit_properties`` as this module's,
    the others checked (:func:`~replay.protocol.deltalake_options.check_deltalake_options`)."""
    rest = {key: value for key, value in arguments.items() if key != "commit_properties"}
    check_deltalake_options(operation, **rest)
    return from_deltalake(arguments.get("commit_properties"), operation)


def current_commit_properties() -> CommitProperties | None:
    """The properties of the innermost ``commit_properties`` block around the caller, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def commit_properties(properties: CommitProperties | None) -> Iterator[None]:
    """Make the commits of the block carry ``properties`` (nothing changes for ``None``). Their
    application transactions are refused (:class:`UnsupportedOptionError`): only a write records
    one, so a block's other commits would drop them."""
    if properties is None:
        yield
        return
    if properties.app_transactions:
        raise UnsupportedOptionError(
            "commit_properties: app_transactions not supported for a block (write_deltalake records one)"
        )
    token = _CURRENT.set(properties)
    try:
        yield
    finally:
        _CURRENT.reset(token)
