"""The Fourier sensitivity stage: heatmaps of the smoothed classifier's ACR and the base
classifier's accuracy under single-frequency perturbations (Yin et al., NeurIPS 2019; Sun et al.,
ECCV 2022).

- :mod:`~models.stages.fourier_sensitivity.stage`: the stage;
- :mod:`~models.stages.fourier_sensitivity.protocol`: its definition block and grid;
- :mod:`~models.stages.fourier_sensitivity.figures`: its leaderboard columns and their values;
- :mod:`~models.stages.fourier_sensitivity.text`: its help texts, protocol note and cost as read.
"""
