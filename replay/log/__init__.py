"""The transaction log of one table, read through its LogStore: listing, log segments,
``_last_checkpoint``, checkpoints, commit files, commit times and the pure log replays.

Every function that touches storage receives a :class:`~replay.log.table_io.TableIO`.
"""
