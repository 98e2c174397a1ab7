"""The worst-case weather stage: the simulation attack of Wang et al. (NeurIPS 2022 ML Safety
Workshop, "Evaluating Worst Case Adversarial Weather Perturbations Robustness") in the pipeline.

- :mod:`~models.stages.weather_attack.stage`: the stage;
- :mod:`~models.stages.weather_attack.protocol`: its definition block and resolved attack settings;
- :mod:`~models.stages.weather_attack.figures`: its leaderboard figures;
- :mod:`~models.stages.weather_attack.examples`: the example images it keeps for the web page.
"""
