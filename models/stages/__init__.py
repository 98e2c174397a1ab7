"""Evaluation stages: the plug-ins the submission pipeline runs (certification, PD robustness, ...).

A stage is one module that declares a ``Stage`` subclass (``models.stages.base``) and registers it
(``models.stages.registry``). The pipeline (``models.runs.shards``, ``models.completion``, the
workers' one shard task) knows no stage by name.
"""
