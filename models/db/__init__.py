"""The database: engines and sessions, the ORM and the values its columns hold.

- :mod:`~models.db.engine`: engines and sessions for SQLite (embedded default) and PostgreSQL;
- :mod:`~models.db.base`: the declarative base, constraint naming, the UTC timestamp type;
- :mod:`~models.db.entities`: the tables (users, benchmarks, artifacts, submissions, shards,
  results, leaderboard entries);
- :mod:`~models.db.states`: the submission state machine and the reasons on its transitions;
- :mod:`~models.db.roles`: what an account may do;
- :mod:`~models.db.accounts`: users and hashed API tokens;
- :mod:`~models.db.board_version`: the counter that moves, in the same transaction, with every
  change a leaderboard shows. It lives with the engine because the engine installs its session
  events on every session it makes, whatever package opens it.
"""
