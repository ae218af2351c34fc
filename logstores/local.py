"""LogStore for local filesystems (``file:`` URIs and plain paths)."""

from __future__ import annotations

import os
import tempfile

from logstores.filesystem import FileSystemLogStore, Location, link_into_place


class LocalLogStore(FileSystemLogStore):
    """Local disk, safe for many threads and processes writing one table.

    Put-if-absent writes the whole file to a temp file in the same directory and publishes it
    with ``os.link``, which is atomic and fails if the name exists: no reader sees a partial
    file and exactly one writer wins. Overwrites publish with ``os.replace``, also atomic.
    The parent directory must exist (``FileNotFoundError`` otherwise).
    """

    partial_write_visible = False

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        temp = _write_temp(location, data)
        link_into_place(temp, location.path, location.qualify(location.path))

    def _overwrite(self, location: Location, data: bytes) -> None:
        temp = _write_temp(location, data)
        try:
            os.replace(temp, location.path)
        except BaseException:
            os.unlink(temp)
            raise


def _write_temp(location: Location, data: bytes) -> str:
    parent = location.parent
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{location.name}.", suffix=".tmp", dir=parent)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file or directory: {location.qualify(parent)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        os.unlink(temp)
        raise
    return temp
