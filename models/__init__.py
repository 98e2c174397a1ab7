"""The certbench service's domain: its database, its evaluation pipeline and its stages (the
networks are ``certbench.nets``, the science ``certbench``; nothing here is a neural network).

The API (``api``) and the workers (``workers``) share this package and never import each other.
Packages by concept, each importing only the ones below it (import-linter checks it,
``[tool.importlinter]`` in ``pyproject.toml``):

- :mod:`models.runs`: an evaluation run: shards planned, leased, recorded and merged; the
  reconciler; results; progress and estimates;
- :mod:`models.boards`: the leaderboard: ranked queries, the read model, in-memory snapshots,
  paired comparisons, interval backfill;
- :mod:`models.catalog`: the benchmarks the service offers: definitions loaded into the
  database, their data pins, packaged reference entries;
- :mod:`models.stages`: the evaluation stages and their contract, and the work item they are
  handed;
- :mod:`models.submissions`: a submission's intake, quotas, artifacts, life cycle, run seed
  and the zoo;
- :mod:`models.benchmarks`: a benchmark definition's schema and where its images come from
  (sources, pins, availability, generated data sets);
- :mod:`models.db`: the engine, the ORM entities, the state machine, roles, accounts and the
  board version counter;
- :mod:`models.core`: settings, errors and the broker address shared by everything above.

Callers import from the modules (``from models.db.entities import Submission``); each package's
docstring lists its modules.
"""
