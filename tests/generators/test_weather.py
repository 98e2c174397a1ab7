"""Weather simulator: sprites, compositing bounds, gradients to particle parameters, severities."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from certbench import weather as sim
from certbench.errors import GeneratorError
from generators import weather as w


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)


@pytest.mark.parametrize("kind", sim.WEATHERS)
def test_sprite_bank_is_fixed_bounded_and_rotation_safe(kind: str) -> None:
    bank = sim.sprite_bank(kind, 3)
    assert bank.shape == (sim.BANK_SIZE, 1, sim.SPRITE, sim.SPRITE) and bank.dtype == torch.float32
    assert bank.min() >= 0 and bank.max() <= 1 and (bank.amax(dim=(1, 2, 3)) > 0.5).all()
    sim.sprite_bank.cache_clear()
    assert torch.equal(bank, sim.sprite_bank(kind, 3))
    yy, xx = np.meshgrid(np.arange(15) - 7, np.arange(15) - 7, indexing="ij")
    outside = torch.from_numpy((yy**2 + xx**2) > 36)
    assert bank[:, 0][:, outside].abs().max() == 0  # nothing a rotation could push out


def test_rain_streaks_grow_with_the_level_length() -> None:
    extent = [
        float((sim.sprite_bank("rain", lv)[:, 0] > 0.3).sum(dim=(1, 2)).float().mean())
        for lv in range(1, 6)
    ]
    assert all(b > a for a, b in itertools.pairwise(extent)), extent


def test_compositing_stays_in_unit_interval_even_when_particles_pile_up() -> None:
    bank = sim.sprite_bank("snow", 5)
    b, n = 3, 400  # far more particles than any level, all near the centre
    ids = torch.randint(0, sim.BANK_SIZE, (b, n), generator=torch.Generator().manual_seed(0))
    centres = 16 + 2 * torch.randn(b, n, 2, generator=torch.Generator().manual_seed(1))
    angles = torch.rand(b, n, generator=torch.Generator().manual_seed(2)) * 6.3
    mask = sim.render_mask(bank, ids, centres, angles, opacity=0.95)
    assert mask.shape == (b, 1, 32, 32)
    assert mask.min() >= 0 and mask.max() <= 1 and mask.max() > 0.99
    for x in (torch.zeros(b, 3, 32, 32), torch.ones(b, 3, 32, 32), torch.rand(b, 3, 32, 32)):
        out = sim.composite(x, mask)
        assert out.min() >= 0 and out.max() <= 1
        assert torch.all(out >= x - 1e-6)  # white particles only brighten


def test_gradients_reach_particle_positions_and_rotations() -> None:
    bank = sim.sprite_bank("rain", 4).double()  # float64 so the finite difference is precise
    ids = torch.tensor([[3, 7, 11, 20]])
    centres = torch.tensor(
        [[[10.3, 12.6], [20.5, 8.2], [16.0, 16.0], [5.5, 25.1]]],
        dtype=torch.float64,
        requires_grad=True,
    )
    angles = torch.tensor([[0.3, -0.2, 0.9, 0.1]], dtype=torch.float64, requires_grad=True)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, 32, 32, generator=gen, dtype=torch.float64)
    target = torch.rand(1, 3, 32, 32, generator=gen, dtype=torch.float64)
    loss = (
        (sim.composite(x, sim.render_mask(bank, ids, centres, angles, opacity=0.7)) - target) ** 2
    ).sum()
    loss.backward()
    assert centres.grad is not None and angles.grad is not None
    assert (centres.grad.abs().sum(dim=-1) > 0).all() and (angles.grad.abs() > 0).all()

    # the gradient is the real derivative: compare with a central finite difference
    def f(c: torch.Tensor) -> float:
        mask = sim.render_mask(bank, ids, c, angles.detach(), opacity=0.7)
        return float(((sim.composite(x, mask) - target) ** 2).sum())

    eps = 1e-5
    bump = torch.zeros_like(centres)
    bump[0, 0, 1] = eps  # a non-integer centre: bilinear sampling is smooth there
    numeric = (f(centres.detach() + bump) - f(centres.detach() - bump)) / (2 * eps)
    assert numeric == pytest.approx(float(centres.grad[0, 0, 1]), rel=1e-3)


@pytest.mark.parametrize("kind", sim.WEATHERS)
def test_simulation_deterministic_batch_independent_and_ordered(kind: str) -> None:
    imgs = _images(12)
    out = w.simulate(imgs, kind, 3, seed=5)
    assert out.dtype == np.uint8 and out.shape == imgs.shape
    np.testing.assert_array_equal(out, w.simulate(imgs, kind, 3, seed=5))
    np.testing.assert_array_equal(
        w.simulate(imgs[3:6], kind, 3, seed=5, indices=[3, 4, 5]), out[3:6]
    )
    assert not np.array_equal(out, w.simulate(imgs, kind, 3, seed=6))
    assert np.all(out.astype(int) >= imgs.astype(int) - 1)  # only brightens (rounding aside)
    size = [
        np.abs(w.simulate(imgs, kind, lv, seed=5).astype(float) - imgs).sum() for lv in range(1, 6)
    ]
    assert all(b > a for a, b in itertools.pairwise(size)), size


def test_errors() -> None:
    with pytest.raises(GeneratorError, match="weather='fog'"):
        w.simulate(_images(2), "fog", 1)
    with pytest.raises(GeneratorError, match="severity=9"):
        w.simulate(_images(2), "rain", 9)
    with pytest.raises(GeneratorError, match="opacity"):
        sim.render_mask(
            sim.sprite_bank("rain", 1),
            torch.zeros(1, 1, dtype=torch.long),
            torch.zeros(1, 1, 2),
            torch.zeros(1, 1),
            opacity=1.0,
        )


def test_the_simulator_is_certbench_weather_and_keeps_the_published_streams() -> None:
    """The attack (certbench) and the generator must share one simulator and one stream
    definition: the random test sets' draws are the attack's first start points."""
    from certbench.weather import simulator as core
    from generators.corruption_runs import image_rngs

    assert sim.render_mask is core.render_mask and sim.sprite_bank is core.sprite_bank
    indices = [0, 7, 9999]
    for ours, theirs in zip(
        core.particle_rngs(3, "snow", 2, indices),
        image_rngs(3, "weather", "snow", 2, indices),
        strict=True,
    ):
        assert np.array_equal(ours.random(5), theirs.random(5))
    spec = sim.weather_level("rain", 4)
    draw = core.draw_particles(core.particle_rngs(3, "rain", 4, [5])[0], spec)
    legacy = sim.sample_particles(core.particle_rngs(3, "rain", 4, [5])[0], spec)
    assert np.array_equal(draw.angles, legacy["angles"]) and np.array_equal(draw.ids, legacy["ids"])


def test_the_attacks_first_start_is_the_published_random_image() -> None:
    """Random-weather accuracy in the attack is measured on the random test set's images."""
    from certbench.weather.simulator import draw_particles, particle_rngs
    from certbench.weather.threat import WeatherSet

    imgs = _images(24, seed=3)
    indices = np.arange(500, 524)
    published = w.simulate(imgs, "rain", 5, seed=2, indices=indices).astype(np.float64)
    wset = WeatherSet.for_level("rain", 5)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        ours = wset.apply(x, wset.random(2, indices, 0)).permute(0, 2, 3, 1).double().numpy()
    spec = sim.weather_level("rain", 5)
    draws = [draw_particles(r, spec) for r in particle_rngs(2, "rain", 5, indices)]
    unclipped = np.array([np.abs(d.offsets).max() <= 3 * spec.jitter for d in draws])
    assert 0 < unclipped.sum() < len(draws)  # both cases occur at 110 particles per image
    np.testing.assert_allclose(ours[unclipped] * 255, published[unclipped], atol=0.5 + 1e-3)
