"""An evaluation run: the work a submission's stages declare, split into shards, leased to
workers, recorded exactly once, merged and aggregated into results.

- :mod:`~models.runs.shards`: planning and recording shards, for every stage alike;
- :mod:`~models.runs.reconcile`: the reconciler (the database says what work exists; send what
  nothing runs);
- :mod:`~models.runs.results`: recorded shards into stored results and a leaderboard entry;
- :mod:`~models.runs.progress`: progress, throughput and ETA, one computation for every view;
- :mod:`~models.runs.estimates`: how much work a submission is and how fast the fleet does it;
- :mod:`~models.runs.backlog`: the queue ahead of a submission (the work its shards wait behind).

The top of the service's domain: it drives the stages and writes the boards' read model.
"""
