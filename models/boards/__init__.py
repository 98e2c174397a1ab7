"""The leaderboard: what an entry shows, how entries rank, and how two entries compare.

- :mod:`~models.boards.leaderboard`: ranked queries and per-submission results (the one read
  path for REST and web);
- :mod:`~models.boards.read_model`: ``leaderboard_rows``, each entry's figures and card;
- :mod:`~models.boards.snapshots`: a board held in memory per API process, valid for one value
  of the board version counter;
- :mod:`~models.boards.comparisons`: paired tests and "tied" marks from stored per-image data;
- :mod:`~models.boards.uncertainty`: storing every stage's intervals the same way;
- :mod:`~models.boards.interval_backfill`: intervals of entries aggregated before them, and
  :mod:`~models.boards.commands` its command (``certbench results backfill-intervals``).
"""
