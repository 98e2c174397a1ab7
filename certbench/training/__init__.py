"""Training base classifiers for randomized smoothing with the recipes of Sun et al. (2022).

- :mod:`certbench.training.recipes`: the six recipes (views, noise, loss).
- :mod:`certbench.training.schedule`: SGD and the step schedule of the paper's release.
- :mod:`certbench.training.data`: seeded per-image augmentation, batched DataLoader fetches.
- :mod:`certbench.training.checkpoint`: safetensors + JSON checkpoints (no pickle).
- :mod:`certbench.training.trainer`: :func:`~certbench.training.trainer.train`, the run.
"""
