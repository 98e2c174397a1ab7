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
- :mod:`models.stages.stage_intervals`: the 95 % intervals of the stages' figures.

The stages, each a stage module and the modules that hold its protocol and figures:

- certification: :mod:`models.stages.certification`, its figure keys
  (:mod:`models.stages.certification_keys`), stored results
  (:mod:`models.stages.certification_results`) and intervals
  (:mod:`models.stages.certification_intervals`);
- PD robustness: :mod:`models.stages.pd_robustness`, :mod:`models.stages.pd_protocol`;
- Fourier sensitivity: :mod:`models.stages.fourier_sensitivity`,
  :mod:`models.stages.fourier_protocol`, :mod:`models.stages.fourier_text`;
- Fourier lens: :mod:`models.stages.fourier_lens`, :mod:`models.stages.lens_block`,
  :mod:`models.stages.lens_figures`;
- worst-case weather: :mod:`models.stages.weather_attack`, :mod:`models.stages.weather_protocol`,
  :mod:`models.stages.weather_figures`, :mod:`models.stages.weather_examples`.
"""
