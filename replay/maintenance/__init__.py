"""Table maintenance: the operations that keep a table small, fast and evolving.

Each operation works on a :class:`~replay.log.table_io.TableIO` and the table's latest
:class:`~replay.state.snapshot.Snapshot` and commits through a
:class:`~replay.txn.transaction.Transaction`, so every front end (``DeltaTable``, the CLI, a Spark
``DeltaTable``) only calls it: ``vacuum`` (deleting files no version within the retention needs),
``restore`` (a table back to an earlier version in one commit) and ``alter`` (table properties,
protocol features, columns and CHECK constraints).
"""
