"""The PD robustness stage: the base classifier under ℓ∞ and ℓ∞ ∩ Projected Displacement
attacks (Muthukumar, Pal, Sulam & Vidal 2025, arXiv:2501.18098).

- :mod:`~models.stages.pd_robustness.stage`: the stage;
- :mod:`~models.stages.pd_robustness.protocol`: its definition block and resolved attack settings.
"""
