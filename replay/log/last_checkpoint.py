"""``_last_checkpoint``: the hint that names the newest checkpoint, read tolerantly and written with
Delta's checksum (``LastCheckpointInfo``).

A missing, empty, garbled or mis-checksummed file only costs a full listing: the reader then
finds the newest complete checkpoint itself, as Delta does.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self
from urllib.parse import quote

import orjson

from replay.log.checkpoint_instances import CheckpointFormat
from replay.log.table_io import TableIO
from replay.protocol import filenames

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LastCheckpointInfo:
    """The content of ``_last_checkpoint`` (unknown fields kept in ``extra``)."""

    version: int
    size: int = -1
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    checkpoint_schema: dict[str, Any] | None = None
    v2_checkpoint: dict[str, Any] | None = None
    checksum: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("version", "version"),
        ("size", "size"),
        ("parts", "parts"),
        ("size_in_bytes", "sizeInBytes"),
        ("num_of_add_files", "numOfAddFiles"),
        ("checkpoint_schema", "checkpointSchema"),
        ("v2_checkpoint", "v2Checkpoint"),
        ("checksum", "checksum"),
    )

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Parse the file content. Raises :class:`ValueError` if it is not valid."""
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("version"), int):
            raise ValueError("no integer 'version' field")
        known = {key for _, key in cls._KEYS}
        kwargs = {attr: data[key] for attr, key in cls._KEYS if data.get(key) is not None}
        return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self, with_checksum: bool = True) -> dict[str, Any]:
        """The JSON object (``version``, ``size``, ``parts`` first), with a fresh checksum if asked."""
        out: dict[str, Any] = {}
        for attr, key in self._KEYS:
            value = getattr(self, attr)
            if value is not None and key != "checksum":
                out[key] = value
        out.update({k: v for k, v in self.extra.items() if k not in out})
        if with_checksum:
            out["checksum"] = last_checkpoint_checksum(out)
        return out

    def to_json(self, with_checksum: bool = True) -> str:
        return orjson.dumps(self.to_dict(with_checksum)).decode("utf-8")

    @property
    def format(self) -> CheckpointFormat:
        if self.v2_checkpoint is not None:
            return CheckpointFormat.V2
        return CheckpointFormat.WITH_PARTS if self.parts else CheckpointFormat.SINGLE


def _canonical_text(value: str) -> str:
    return '"' + quote(value.encode("utf-8"), safe="-._~") + '"'


def _canonical_leaf(value: Any) -> str:
    if isinstance(value, str):
        return _canonical_text(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _canonical_entries(prefix: list[str], value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            _canonical_entries([*prefix, _canonical_text(key)], child, out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _canonical_entries([*prefix, str(index)], child, out)
    else:
        out.append("+".join(prefix) + "=" + _canonical_leaf(value))


def last_checkpoint_checksum(data: Mapping[str, Any]) -> str:
    """Delta's ``_last_checkpoint`` checksum: MD5 of the sorted canonical ``path=value`` entries."""
    entries: list[str] = []
    for key, value in data.items():
        if key != "checksum":
            _canonical_entries([_canonical_text(key)], value, entries)
    return hashlib.md5(",".join(sorted(entries)).encode("utf-8")).hexdigest()


def read_last_checkpoint(io: TableIO) -> LastCheckpointInfo | None:
    """``_last_checkpoint`` if present and readable; ``None`` (with a warning if corrupt) otherwise.

    A missing, empty or garbled file only costs a full listing: the caller then finds the
    newest complete checkpoint itself, as Delta does.
    """
    path = filenames.last_checkpoint_file(io.log_path)
    try:
        data = io.store.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("could not read %s (%s); searching the log for the newest checkpoint", path, exc)
        return None
    try:
        info = LastCheckpointInfo.from_json(data)
    except ValueError as exc:
        logger.warning("ignoring corrupt %s (%s); searching the log for the newest checkpoint", path, exc)
        return None
    if info.checksum is not None:
        raw = orjson.loads(data)
        if last_checkpoint_checksum(raw) != info.checksum:
            logger.warning("checksum mismatch in %s; searching the log for the newest checkpoint", path)
            return None
    return info


# -- reading checkpoint content --------------------------------------------------------------------
