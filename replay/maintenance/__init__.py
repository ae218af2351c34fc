"""Table maintenance: rewriting a table's files without changing its rows, and its history.

Compaction, Z-ordering and deletion-vector purges (:mod:`replay.maintenance.optimize`), and auto
compaction after writes (:mod:`replay.maintenance.auto_compact`, registered with the post-commit
hooks of :mod:`replay.txn.post_commit` when this package is imported).
"""

from replay.maintenance.auto_compact import HOOK_NAME, auto_compact_hook
from replay.txn.post_commit import register_post_commit_hook

register_post_commit_hook(HOOK_NAME, auto_compact_hook)
