"""A Spark driver process for the streaming-sink crash test: streams JSON files into a table.

``python -m tests.stream_driver SOURCE TABLE CHECKPOINT ROWS`` runs a processing-time query (one
input file per micro-batch) until the table holds ``ROWS`` rows and no input is left, then stops.
With the environment variable ``KILL_AFTER_VERSION`` set, the table's LogStore
(:class:`tests.fault_stores.KillingLogStore`) kills this driver's whole process group right after
the sink wrote that version: the commit is in the table, Spark's commit log does not have the
batch yet.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from tests.fault_stores import KILL_PROCESS_GROUP


def main(argv: Sequence[str]) -> int:
    source, table, checkpoint, rows = argv
    os.environ[KILL_PROCESS_GROUP] = str(os.getpgid(0))  # inherited by the JVM and Python workers
    from replay.spark import register
    from replay.spark.session import local_session

    spark = local_session(
        "stream-driver",
        {"spark.delta.logStore.file.impl": "tests.fault_stores.KillingLogStore"},
        master="local[1]",
    )
    register(spark)
    query = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.format("deltalog")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="250 milliseconds")
        .start(table)
    )
    from replay import DeltaLog

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and query.exception() is None:
        log = DeltaLog.for_table(table)
        written = log.update().to_arrow().num_rows if log.table_exists() else 0
        if written >= int(rows) and not query.status["isDataAvailable"]:
            break
        time.sleep(0.5)
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
