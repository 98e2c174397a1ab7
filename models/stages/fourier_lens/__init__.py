"""The Fourier-lens stage: high-frequency fraction, consistent distance, pixel-path HFF and
Jacobian norm of an entry (Fridovich-Keil et al., NeurIPS 2022).

- :mod:`~models.stages.fourier_lens.stage`: the stage;
- :mod:`~models.stages.fourier_lens.block`: its definition block (presets, overrides, feasibility);
- :mod:`~models.stages.fourier_lens.figures`: its leaderboard figures.
"""
