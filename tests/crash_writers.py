"""Writer processes for the kill -9 test: commit through replay until killed, acknowledging each commit.

Imported by the forkserver before it forks writers (so a writer starts in milliseconds), hence
everything a writer needs is imported here at module level and nothing starts a thread on import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The stores are preloaded in the forkserver, so forked writers start at once.
import logstores.s3
import logstores.s3_dynamodb  # noqa: F401
from replay.delta_log import DeltaLog
from replay.protocol.actions import AddFile


def commit_until_killed(uri: str, conf: Mapping[str, str], ack_path: str, writer: str) -> None:
    """Append one file per commit to the table at ``uri`` forever.

    After each commit returns, the line ``<version> <file path>`` is appended to ``ack_path`` with
    one ``write`` (atomic for a short line on a local file opened with ``O_APPEND``): a line there
    means the commit was acknowledged to this writer.
    """
    log = DeltaLog(uri, dict(conf))
    fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    number = 0
    while True:
        path = f"{writer}-{number}"
        version = log.commit([AddFile(path=path, size=1, modification_time=1, data_change=True)])
        os.write(fd, f"{version} {path}\n".encode())
        number += 1
