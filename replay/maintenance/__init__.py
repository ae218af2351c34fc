"""Table maintenance: the operations that keep a table small, fast and evolving.

Each operation works on a :class:`~replay.log.table_io.TableIO` and the table's latest
:class:`~replay.state.snapshot.Snapshot` and commits through a
:class:`~replay.txn.transaction.Transaction`, so every front end (``DeltaTable``, the CLI, a Spark
``DeltaTable``) only calls it: compaction, Z-ordering and deletion-vector purges
(:mod:`replay.maintenance.optimize`), ``vacuum`` (deleting files no version within the retention
needs), ``restore`` (a table back to an earlier version in one commit), ``alter`` (table
properties, protocol features, columns and CHECK constraints), and auto compaction after writes
(:mod:`replay.maintenance.auto_compact`, registered with the post-commit hooks of
:mod:`replay.txn.post_commit` when this package is imported).
"""

from replay.maintenance.auto_compact import HOOK_NAME, auto_compact_hook
from replay.txn.post_commit import register_post_commit_hook

register_post_commit_hook(HOOK_NAME, auto_compact_hook)
