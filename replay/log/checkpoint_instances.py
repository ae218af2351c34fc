"""Which checkpoints exist and which one to use (Delta's ``CheckpointInstance`` rules), pure.

Instances are ordered by ``(version, format, parts, file name)`` with SINGLE < WITH_PARTS < V2;
a multi-part checkpoint is complete only with all its parts; zero-byte files never count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from logstores.base import FileStatus
from replay.protocol import filenames


class CheckpointFormat(IntEnum):
    SINGLE = 0
    WITH_PARTS = 1
    V2 = 2


@dataclass(frozen=True, order=True)
class CheckpointInstance:
    """One checkpoint (possibly made of several files), ordered like Delta's ``CheckpointInstance``."""

    version: int
    format: CheckpointFormat = CheckpointFormat.SINGLE
    num_parts: int = 1
    file_name: str = ""

    @classmethod
    def from_name(cls, name: str) -> CheckpointInstance | None:
        """The instance a checkpoint file belongs to; ``None`` if ``name`` is not a checkpoint file."""
        if not filenames.is_checkpoint_file(name):
            return None
        version = filenames.checkpoint_version(name)
        parts = filenames.num_checkpoint_parts(name)
        if parts is not None:
            return cls(version, CheckpointFormat.WITH_PARTS, parts)
        if filenames.is_v2_checkpoint_file(name):
            return cls(version, CheckpointFormat.V2, 1, name.rsplit("/", 1)[-1])
        return cls(version, CheckpointFormat.SINGLE)


def complete_checkpoints(files: Iterable[FileStatus]) -> dict[CheckpointInstance, list[FileStatus]]:
    """The complete checkpoints among ``files`` (zero-byte files ignored), files sorted by name."""
    groups: dict[CheckpointInstance, dict[str, FileStatus]] = {}
    for status in files:
        if status.is_dir or status.size <= 0:
            continue
        instance = CheckpointInstance.from_name(status.name)
        if instance is not None:
            groups.setdefault(instance, {})[status.name] = status
    complete: dict[CheckpointInstance, list[FileStatus]] = {}
    for instance, by_name in groups.items():
        if instance.format == CheckpointFormat.WITH_PARTS:
            parts = {filenames.checkpoint_part(name) for name in by_name}
            if parts != set(range(1, instance.num_parts + 1)):
                continue
        elif len(by_name) != 1:
            continue
        complete[instance] = [by_name[name] for name in sorted(by_name)]
    return complete


def latest_complete_checkpoint(
    files: Iterable[FileStatus], not_later_than: int | None = None, before: CheckpointInstance | None = None
) -> tuple[CheckpointInstance, list[FileStatus]] | None:
    """The greatest complete checkpoint with version ``<= not_later_than`` and ``< before``."""
    candidates = [
        (instance, group)
        for instance, group in complete_checkpoints(files).items()
        if (not_later_than is None or instance.version <= not_later_than)
        and (before is None or instance < before)
    ]
    return max(candidates, key=lambda item: item[0]) if candidates else None


# -- _last_checkpoint ------------------------------------------------------------------------------
