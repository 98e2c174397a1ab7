"""Celery workers: validate a submission, certify it shard by shard, aggregate the results.

Sits above ``certbench`` (the science) and ``models`` (the database); never imports ``api``. Tasks
are addressed by name (``workers.names``) so the API can enqueue them without importing this
package.
"""
