"""Database layer of the certbench service: settings, ORM, and the data functions that the API
and the workers share (they never import each other; both import this package).

Modules: ``settings`` (typed env config), ``db`` (engines/sessions), ``entities`` (ORM),
``states`` (submission state machine), ``pipeline`` (worker-facing persistence), ``results``
(aggregation into results and leaderboard entries), ``storage`` (artifact paths), ``catalog``
(benchmark definitions), ``accounts`` (users, hashed tokens), ``submissions`` (intake, quotas,
dedup, visibility), ``leaderboard`` (ranked queries), ``run_seeds`` (commit-reveal of each run's
noise seed), ``data_pins`` (pinned test-set data), ``comparisons`` (paired tests and tie marks),
``interval_backfill`` (intervals of entries aggregated before them).
"""
