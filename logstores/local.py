"""LogStore for local filesystems (``file:`` URIs and plain paths)."""

from __future__ import annotations

from logstores.filesystem import FileSystemLogStore, Location, publish_local_file


class LocalLogStore(FileSystemLogStore):
    """Local disk, safe for many threads and processes writing one table.

    Put-if-absent writes the whole file to a hidden temp file ``.<name>.<unique>.tmp`` in the same
    directory, syncs it and publishes it with ``os.link``, which is atomic and fails if the name
    exists: no reader sees a partial file and exactly one writer wins. Overwrites publish with
    ``os.replace``, also atomic. The directory is synced after either, so a write that returned
    survives a power loss. Files get the permissions a plain ``open()`` gives under the umask.
    The parent directory must exist (``FileNotFoundError`` otherwise).
    """

    partial_write_visible = False

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        publish_local_file(location, data, overwrite=False)

    def _overwrite(self, location: Location, data: bytes) -> None:
        publish_local_file(location, data, overwrite=True)
