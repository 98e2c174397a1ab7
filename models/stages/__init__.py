"""Evaluation stages: the plug-ins the submission pipeline runs (certification, PD robustness, ...).

A stage is one module that declares a ``Stage`` subclass and registers it; the pipeline
(``models.runs.shards``, ``models.runs.results``, the workers' one shard task) knows no stage by
name (``docs/architecture/stages.md``).

The contract and what every stage shares:

- :mod:`models.stages.base`: the contract (``Stage``) and the values it takes and returns;
- :mod:`models.stages.shard_files`: the shard plumbing: what shard and merged files carry,
  reading a stage's shards back verified (run seed commitment, data hashes), merged results;
- :mod:`models.stages.registry`: where stages are registered (built-in and plug-ins), and their
  figures declared to the leaderboard entries;
- :mod:`models.stages.work`: the work item a stage is handed;
- :mod:`models.stages.inputs`: a worker's model and images, cached and checked against the pins;
- :mod:`models.stages.intervals`: the 95 % intervals of the stages' figures.

The stages, one subpackage each (its ``stage`` module, and beside it the modules that hold its
protocol and figures; each subpackage's docstring lists them):

- :mod:`models.stages.certification`: randomized smoothing, the certified figures;
- :mod:`models.stages.pd_robustness`: ℓ∞ and ℓ∞ ∩ PD robust accuracy;
- :mod:`models.stages.fourier_sensitivity`: Fourier heatmaps;
- :mod:`models.stages.fourier_lens`: HFF, consistent distance, Jacobian norm;
- :mod:`models.stages.weather_attack`: worst-case weather.
"""
