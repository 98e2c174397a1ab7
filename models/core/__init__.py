"""What every other package of the service builds on: one typed settings object, the service's
errors and how the API and the workers reach the same broker.

- :mod:`~models.core.settings`: ``Settings`` (pydantic-settings, ``CERTBENCH_*`` variables);
- :mod:`~models.core.errors`: the errors of the service layer (under
  ``certbench.errors.CertbenchError``), each mapped to one HTTP status by the API;
- :mod:`~models.core.queue`: the Celery broker and queue names, shared by the API (which sends
  tasks by name) and the workers (which define them).
"""
