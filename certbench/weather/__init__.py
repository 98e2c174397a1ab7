"""Worst-case weather (Wang et al. 2022): the rain/snow simulator and the simulation attack.

- :mod:`~certbench.weather.simulator`: differentiable rain and snow particles (shared with the
  weather data set generators);
- :mod:`~certbench.weather.threat`: the perturbation set Δ; :mod:`~certbench.weather.objectives`:
  what the attack ascends; :mod:`~certbench.weather.search`: PGD on the particles;
- :mod:`~certbench.weather.attack`: the evaluations of base and smoothed classifiers;
- :mod:`~certbench.weather.records`: per-image records and summaries;
  :mod:`~certbench.weather.examples`: example panels; :mod:`~certbench.weather.terms`: figure terms.

Uses the ground floor. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.weather.attack import attack_base, attack_smoothed
    from certbench.weather.examples import (
        read_examples,
        weather_examples,
        write_examples,
    )
    from certbench.weather.objectives import (
        base_objective,
        forward,
        smoothed_objective,
        smoothing_noise,
    )
    from certbench.weather.records import (
        WeatherSummary,
        merge_weather_records,
        read_weather_metadata,
        read_weather_records,
        summarize_weather,
        write_weather_records,
    )
    from certbench.weather.search import AttackConfig, search
    from certbench.weather.simulator import (
        BANK_SIZE,
        CONTENT_RADIUS,
        FAMILY,
        LEVELS,
        PATCH,
        RAIN_LEVELS,
        SNOW_LEVELS,
        SPRITE,
        WEATHERS,
        WeatherLevel,
        composite,
        particle_rngs,
        rain_sprite,
        render_mask,
        sample_particles,
        snow_sprite,
        sprite_bank,
        weather_level,
    )
    from certbench.weather.terms import weather_terms
    from certbench.weather.threat import WeatherSet, all_sets

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
