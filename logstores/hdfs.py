"""The generic rename-based store, Delta's default for every scheme without its own store."""

from __future__ import annotations

from logstores.filesystem import FileSystemLogStore, Location


class HDFSLogStore(FileSystemLogStore):
    """Delta's ``HDFSLogStore`` over any fsspec filesystem (``hdfs``, ``sftp``, local, ...).

    Writes go to a hidden temp file ``.<name>.<uuid>.tmp`` that is then renamed into place,
    failing if the target exists. Mutual exclusion therefore holds across processes only where
    the filesystem's rename refuses to replace an existing file (HDFS, local disk via hard
    links); on other filesystems it holds within one process. Overwrites are renamed into place
    as well. Partial writes are reported visible, as in Delta, so checkpoints use rename.
    """

    partial_write_visible = True

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        self.write_with_rename(location, data, overwrite=False)

    def _overwrite(self, location: Location, data: bytes) -> None:
        self.write_with_rename(location, data, overwrite=True)
