"""The simulation attack (Wang et al., NeurIPS 2022 ML Safety Workshop): perturbation set, PGD,
records, summaries, examples.

A small CNN is trained here on synthetic 32x32 images (smooth class templates plus noise,
under a second on one core), so the attack runs against a real decision boundary.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from certbench.errors import GeneratorError, RecordsError, ThreatModelError
from certbench.figures import write_weather_panel
from certbench.smoothing.core import CertifyRecord
from certbench.smoothing.records import write_records
from certbench.weather.attack import attack_base, attack_smoothed
from certbench.weather.examples import (
    read_examples,
    weather_examples,
    write_examples,
)
from certbench.weather.objectives import base_objective, smoothed_objective, smoothing_noise
from certbench.weather.records import (
    merge_weather_records,
    read_weather_metadata,
    read_weather_records,
    summarize_weather,
    write_weather_records,
)
from certbench.weather.search import AttackConfig, pgd
from certbench.weather.simulator import LEVELS, draw_particles, particle_rngs
from certbench.weather.threat import Particles, WeatherSet

CLASSES = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small tensors: one intra-op thread avoids oversubscribing the shared CPU cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth colour templates per class plus low-frequency noise, in [0, 1]."""
    g = torch.Generator().manual_seed(0)
    templates = F.interpolate(torch.rand(CLASSES, 3, 4, 4, generator=g), size=32, mode="bilinear")
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    noise = F.interpolate(torch.randn(n, 3, 8, 8, generator=g), size=32, mode="bilinear")
    return (0.5 * templates[labels] + 0.25 + 0.15 * noise).clamp(0, 1), labels


@pytest.fixture(scope="module")
def trained() -> nn.Module:
    torch.manual_seed(0)
    x, y = synthetic(256, seed=1)
    model = nn.Sequential(
        nn.AvgPool2d(2), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(16, CLASSES),
    )  # fmt: skip
    # Adam by hand: torch.optim would import torch._dynamo, ~10 s on a loaded 2-core machine
    params = list(model.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    step = 0
    for _ in range(15):
        for start in range(0, 256, 64):
            loss = F.cross_entropy(model(x[start : start + 64]), y[start : start + 64])
            grads = torch.autograd.grad(loss, params)
            step += 1
            with torch.no_grad():
                for p, g, (m, v) in zip(params, grads, moments, strict=True):
                    m.mul_(0.9).add_(g, alpha=0.1)
                    v.mul_(0.999).addcmul_(g, g, value=0.001)
                    denominator = (v / (1 - 0.999**step)).sqrt_().add_(1e-8)
                    p.addcdiv_(m, denominator, value=-1e-2 / (1 - 0.9**step))
    return model.eval()


def in_set(wset: WeatherSet, p: Particles) -> torch.Tensor:
    """Membership in Δ from the rendered angles themselves (the module docstring's equivalent
    form), independent of the attack's parametrisation; per image."""
    spec = LEVELS[wset.weather][wset.severity - 1]
    theta = torch.rad2deg(p.angles.double())
    r, limit, tol = 3 * spec.jitter, spec.base_angle, 1e-4
    hi, lo = theta.max(dim=1).values, theta.min(dim=1).values
    angles_ok = (hi - lo <= 2 * r + tol) & (hi - r <= limit + tol) & (lo + r >= -limit - tol)
    centres_ok = ((p.centres >= -3) & (p.centres <= 35)).flatten(1).all(dim=1)
    return angles_ok & centres_ok & (p.ids.shape[1] == spec.count)


# --------------------------------------------------------------------------- perturbation set


def test_the_set_is_the_generators_range_per_severity() -> None:
    for weather, levels in LEVELS.items():
        for severity, spec in enumerate(levels, start=1):
            wset = WeatherSet.for_level(weather, severity)
            assert wset.count == spec.count and wset.opacity == spec.opacity
            assert (wset.centre_low, wset.centre_high) == (-3.0, 35.0)
            assert math.degrees(wset.base_limit) == pytest.approx(spec.base_angle)
            assert math.degrees(wset.offset_limit) == pytest.approx(3 * spec.jitter)
    # the generator's own draws (restart 0) lie in Δ except offsets beyond 3σ, which are clipped
    wset = WeatherSet.for_level("rain", 5)
    indices = np.arange(200)
    draws = [draw_particles(r, LEVELS["rain"][4]) for r in particle_rngs(0, "rain", 5, indices)]
    raw = np.stack([d.offsets for d in draws])
    start = wset.random(0, indices, 0)
    assert bool(in_set(wset, start).all())
    inside = np.abs(raw) <= 3 * 5.0
    assert 0.99 < inside.mean() < 1.0  # some particles were clipped, few
    np.testing.assert_allclose(
        np.degrees(start.offsets.numpy())[inside], raw[inside], rtol=0, atol=1e-4
    )
    assert np.array_equal(start.ids.numpy(), np.stack([d.ids for d in draws]))


def test_pgd_never_leaves_the_set_even_with_huge_steps(trained, monkeypatch) -> None:
    x, y = synthetic(6, seed=2)
    wset = WeatherSet.for_level("snow", 4)
    seen: list[Particles] = []
    original = WeatherSet.apply

    def spy(self, images, p, bank=None):  # every iterate the objective is evaluated at
        seen.append(p.detach())
        return original(self, images, p, bank)

    monkeypatch.setattr(WeatherSet, "apply", spy)
    config = AttackConfig(steps=6, position_step=40.0, angle_step=3.0)
    start = wset.random(0, range(6), 1)
    found = pgd(base_objective(trained), x, y, start, wset, config)
    assert len(seen) == 7
    for p in [*seen, found.best, found.broken]:
        assert bool(in_set(wset, p).all())
        assert torch.equal(p.ids, start.ids)  # sprite choice is not attacked
    # with these steps the unprojected iterates would have left Δ: the projection was active
    assert any(bool((p.centres.abs() == 3).any() | (p.centres == 35).any()) for p in seen[1:])

    monkeypatch.setattr(WeatherSet, "project", lambda self, p: p)  # a broken projection
    with pytest.raises(
        ThreatModelError,
        match=r"PGD step 1 left the snow-4 perturbation set: centres outside \[-3, 35\] px",
    ):
        pgd(base_objective(trained), x, y, start, wset, config)


def test_attack_breaks_at_least_as_many_images_as_100_random_draws(trained) -> None:
    x, y = synthetic(32, seed=2)
    with torch.no_grad():
        keep = trained(x).argmax(1) == y  # attack the correctly classified images
    x, y = x[keep][:16], y[keep][:16]
    for weather in ("rain", "snow"):
        wset = WeatherSet.for_level(weather, 3)
        records = attack_base(
            trained, x, y, weathers=(weather,), severities=(3,), config=AttackConfig(restarts=2)
        )
        attack = np.mean([not r.robust for r in records])
        broken = torch.zeros(len(x), dtype=torch.bool)
        with torch.no_grad():
            for draw in range(1, 101):  # an independent seed: not the attack's restarts
                p = wset.random(99, range(len(x)), draw)
                broken |= trained(wset.apply(x, p)).argmax(1) != y
        assert attack >= float(broken.float().mean()) and attack > 0, weather
        assert all(r.robust <= r.random_correct for r in records)  # the start is random weather


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("smoothed", [False, True])
def test_objective_gradients_match_finite_differences(smoothed: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.Tanh(), nn.AvgPool2d(4), nn.Flatten(), nn.Linear(196, 5)
    ).double()  # smooth activations and float64: a precise finite difference
    wset = WeatherSet.for_level("rain", 2)
    x = torch.rand(2, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([1, 3])
    noise = smoothing_noise(0, wset, torch.tensor([0, 1]), 3, 0.25, (3, 32, 32)).double()
    objective = smoothed_objective(model) if smoothed else base_objective(model)
    bank = wset.bank().double()
    start = wset.random(0, [0, 1], 0)
    point = [start.centres.double(), start.base.double(), start.offsets.double()]

    def f(values: list[torch.Tensor]) -> torch.Tensor:
        images = wset.apply(x, Particles(start.ids, *values), bank)
        return objective(images, y, noise if smoothed else None)[0].sum()

    variables = [v.clone().requires_grad_(True) for v in point]
    grads = torch.autograd.grad(f(variables), variables)
    g = torch.Generator().manual_seed(2)
    for group in range(3):  # centres, fall direction, offsets in turn
        direction = [torch.zeros_like(v) for v in point]
        direction[group] = torch.randn(point[group].shape, dtype=torch.float64, generator=g)
        eps = 1e-6
        plus = f([v + eps * d for v, d in zip(point, direction, strict=True)])
        minus = f([v - eps * d for v, d in zip(point, direction, strict=True)])
        numeric = float((plus - minus).detach() / (2 * eps))
        analytic = float((grads[group] * direction[group]).sum())
        assert abs(analytic) > 1e-6
        assert numeric == pytest.approx(analytic, rel=1e-4), group


# --------------------------------------------------------------------------- determinism


def test_records_are_deterministic_and_independent_of_batch_size_and_sharding(trained) -> None:
    x, y = synthetic(7, seed=3)
    kwargs = {"weathers": ("rain", "snow"), "severities": (2,), "config": AttackConfig(restarts=2)}
    full = attack_base(trained, x, y, batch_size=7, **kwargs)
    assert full == attack_base(trained, x, y, batch_size=7, **kwargs)
    assert full == attack_base(trained, x, y, batch_size=3, **kwargs)
    shards = [
        attack_base(trained, x[a:b], y[a:b], indices=range(a, b), batch_size=2, **kwargs)
        for a, b in ((0, 4), (4, 7))
    ]
    assert merge_weather_records(shards) == full
    other = attack_base(trained, x, y, **{**kwargs, "config": AttackConfig(restarts=2, seed=1)})
    assert [r.attacked_loss for r in other] != [r.attacked_loss for r in full]
    assert [(r.weather, r.severity, r.index) for r in full] == [
        (w, 2, i) for w in ("rain", "snow") for i in range(7)
    ]


def test_smoothed_attack_raises_smoothadv_loss_and_certifies_the_attacked_image(trained) -> None:
    x, y = synthetic(5, seed=4)
    config = AttackConfig(steps=4, restarts=2)
    kwargs = {"sigma": 0.25, "severities": (3,), "weathers": ("snow",), "config": config}
    kwargs |= {"noise_samples": 4, "n0": 10, "n": 200}
    records = attack_smoothed(trained, x, y, batch_size=5, **kwargs)
    again = attack_smoothed(trained, x, y, batch_size=2, **kwargs)
    assert [dataclasses.replace(r, seconds=0) for r in records] == [
        dataclasses.replace(r, seconds=0) for r in again
    ]
    assert all(r.n == 200 and r.n0 == 10 and r.sigma == 0.25 for r in records)
    wset = WeatherSet.for_level("snow", 3)
    noise = smoothing_noise(0, wset, torch.arange(5), 4, 0.25, (3, 32, 32))
    with torch.no_grad():
        start, _ = smoothed_objective(trained)(wset.apply(x, wset.random(0, range(5), 0)), y, noise)
    found = torch.tensor([r.objective for r in records])
    assert bool((found >= start - 1e-5).all()) and float(found.mean()) > float(start.mean())


def test_the_run_seed_draws_restarts_and_noise_never_the_random_weather(trained) -> None:
    """``config.seed`` (the public weather sets' seed) draws restart 0 only; ``run_seed`` draws
    restarts 1+, SmoothAdv's noise and CERTIFY's; None means ``config.seed``."""
    x, y = synthetic(6, seed=8)
    config = AttackConfig(steps=1, restarts=4, seed=5)
    base = {"weathers": ("rain",), "severities": (3,), "config": config}
    secret, other = 2**127 + 12345, 2**127 + 67890  # 128-bit, as the service draws
    first = attack_base(trained, x, y, run_seed=secret, **base)
    assert first == attack_base(trained, x, y, run_seed=secret, batch_size=4, **base)
    second = attack_base(trained, x, y, run_seed=other, **base)
    assert attack_base(trained, x, y, **base) == attack_base(trained, x, y, run_seed=5, **base)
    # restart 0 (random weather) is the public sets' draw whatever the run seed
    assert [r.random_prediction for r in first] == [r.random_prediction for r in second]
    assert all(r.restarts_run >= 1 for r in first)
    # images that survive restart 0 meet the run seed's starts: other starts, other losses
    survivors = [i for i, r in enumerate(first) if r.restarts_run > 1]
    assert survivors, "no image reached restart 1: the test needs a weaker attack"
    assert [(r.attacked_loss, r.broken_restart) for r in first] != [
        (r.attacked_loss, r.broken_restart) for r in second
    ]
    one_restart = {**base, "config": AttackConfig(steps=2, restarts=1, seed=5)}
    assert attack_base(trained, x, y, run_seed=secret, **one_restart) == attack_base(
        trained, x, y, run_seed=other, **one_restart
    )  # restart 0 alone: nothing of the run seed

    smoothed = {**one_restart, "sigma": 0.5, "noise_samples": 2, "n0": 4, "n": 40}
    a = attack_smoothed(trained, x, y, run_seed=secret, **smoothed)
    b = attack_smoothed(trained, x, y, run_seed=other, **smoothed)
    again = attack_smoothed(trained, x, y, run_seed=secret, batch_size=4, **smoothed)
    assert _timeless(a) == _timeless(again)
    assert [r.objective for r in a] != [r.objective for r in b]  # SmoothAdv's noise
    wset = WeatherSet.for_level("rain", 3)
    noise = smoothing_noise(secret, wset, torch.arange(6), 2, 0.5, (3, 32, 32))
    with torch.no_grad():
        start, _ = smoothed_objective(trained)(wset.apply(x, wset.random(5, range(6), 0)), y, noise)
    assert bool((torch.tensor([r.objective for r in a]) >= start - 1e-5).all())
    with pytest.raises(ThreatModelError, match="run_seed=-1"):
        attack_base(trained, x, y, run_seed=-1, **base)


def _timeless(records: list) -> list:
    return [dataclasses.replace(r, seconds=0) for r in records]


# --------------------------------------------------------------------------- records


def test_records_roundtrip_merge_and_summary(trained, tmp_path) -> None:
    x, y = synthetic(6, seed=5)
    records = attack_base(trained, x, y, severities=(1, 2), config=AttackConfig(steps=1))
    path = write_weather_records(records, tmp_path / "r.parquet", {"seed": 0})
    assert read_weather_records(path) == records
    assert read_weather_metadata(path)["record_type"] == "weather-base"
    empty = write_weather_records([], tmp_path / "e.parquet", kind="base")
    assert read_weather_records(empty) == []
    with pytest.raises(RecordsError, match="overlap"):
        merge_weather_records([records, records[:1]])
    summary = summarize_weather(records)
    assert [(row["weather"], row["severity"]) for row in summary.rows] == [
        ("rain", 1), ("rain", 2), ("snow", 1), ("snow", 2)
    ]  # fmt: skip
    rain2 = [r for r in records if (r.weather, r.severity) == ("rain", 2)]
    fig = summary.figures
    assert fig["worst_case_accuracy_rain_2"] == np.mean([r.robust for r in rain2])
    assert fig["random_accuracy_rain_2"] == np.mean([r.random_correct for r in rain2])
    assert fig["worst_case_accuracy_rain"] == pytest.approx(
        (fig["worst_case_accuracy_rain_1"] + fig["worst_case_accuracy_rain_2"]) / 2
    )
    for row in summary.rows:
        assert row["worst_case_accuracy"] <= row["random_accuracy"]
    certify_file = write_records(
        [CertifyRecord(0, 1, 1, 0.1, 0.6, 1, 60, 60, 100, 10, True, 0.0, 0.25, 0.001)],
        tmp_path / "c.parquet",
    )
    with pytest.raises(RecordsError, match="not a weather-attack records table"):
        read_weather_records(certify_file)
    with pytest.raises(RecordsError, match="no weather records"):
        summarize_weather([])


def test_bad_inputs_are_clear_errors(trained) -> None:
    x, y = synthetic(2, seed=6)
    with pytest.raises(ThreatModelError, match="restarts=0"):
        AttackConfig(restarts=0)
    with pytest.raises(ThreatModelError, match="32x32"):
        attack_base(trained, torch.rand(2, 3, 16, 16), y)
    with pytest.raises(GeneratorError, match="weather='fog'"):
        attack_base(trained, x, y, weathers=("fog",))
    with pytest.raises(ThreatModelError, match="indices"):
        attack_base(trained, x, y, indices=[0, 1, 2])
    with pytest.raises(ThreatModelError, match="noise_samples=0"):
        attack_smoothed(trained, x, y, sigma=0.25, noise_samples=0)


# --------------------------------------------------------------------------- examples


def test_examples_are_the_attacks_images_and_render_as_png(trained, tmp_path) -> None:
    x, y = synthetic(3, seed=7)
    config = AttackConfig(steps=3, restarts=2)
    examples = weather_examples(
        trained, x, y, weather="rain", severity=4, config=config, indices=[10, 11, 12]
    )
    records = attack_base(
        trained, x, y, weathers=("rain",), severities=(4,), config=config, indices=[10, 11, 12]
    )
    for e, r in zip(examples, records, strict=True):
        assert (e.index, e.random_prediction, e.attacked_prediction) == (
            r.index, r.random_prediction, r.attacked_prediction
        )  # fmt: skip
        np.testing.assert_allclose(e.difference, e.attacked - e.random, atol=1e-6)
        assert e.attacked.min() >= 0 and e.attacked.max() <= 1
        assert np.all(e.random >= e.clean - 1e-6)  # white particles only brighten
    path = write_weather_panel(examples, tmp_path / "fig1.png", positions=[0, 1, 2])
    with Image.open(path) as png:  # 3 rows × 4 columns of 64 × 64 px pictures, titled
        assert png.size[0] > 4 * 64 * 2 and png.size[1] > 3 * 64 * 2
    # kept as parquet (the service draws the panel at merge time): the same panel, bit for bit
    stored = read_examples(write_examples(examples, tmp_path / "examples.parquet", {"k": 1}))
    for e, back in zip(examples, stored, strict=True):
        for field in dataclasses.fields(e):
            np.testing.assert_array_equal(getattr(back, field.name), getattr(e, field.name))
    again = write_weather_panel(stored, tmp_path / "again.png", positions=[0, 1, 2])
    assert again.read_bytes() == path.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file
    with pytest.raises(RecordsError, match="not a weather-examples file"):
        read_examples(write_records([], tmp_path / "certify.parquet"))
