"""The certbench REST service (FastAPI): ``api.main.create_app`` builds the app.

Layering: api → models (+ certbench.nets.loading for the cheap upload checks); never workers. Jobs
are sent to the workers by Celery task *name* (see ``api.queue``).
"""
