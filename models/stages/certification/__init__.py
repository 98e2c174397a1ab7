"""The certification stage: randomized smoothing (Cohen, Rosenfeld & Kolter, ICML 2019,
arXiv:1902.02918) on every test set of a benchmark, certified with one-sided Clopper–Pearson
bounds from fresh samples.

- :mod:`~models.stages.certification.stage`: the stage (units, shards, merge, estimate, figures);
- :mod:`~models.stages.certification.provenance`: what its records say about how they were
  computed (network and denoiser libraries, protocol, the noise streams' key);
- :mod:`~models.stages.certification.keys`: its figure keys, shared with the boards;
- :mod:`~models.stages.certification.results`: the per-test-set results it stores;
- :mod:`~models.stages.certification.intervals`: the 95 % intervals of its figures;
- :mod:`~models.stages.certification.cost`: the cost of a certified image (FLOPs and
  device-seconds at the benchmark's n) and the network's figures its protocol records.
"""
