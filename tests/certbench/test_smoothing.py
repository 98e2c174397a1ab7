"""CERTIFY/PREDICT: statistics against scipy and closed forms, invariances, abstention, errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy.stats import beta, binomtest, norm
from torch import nn

from certbench.errors import CertificationError
from certbench.smoothing.core import (
    ABSTAIN,
    CertifyRecord,
    certified_radius,
    certify,
    lower_confidence_bound,
    min_count_to_certify,
    predict,
)
from certbench.smoothing.sampling import NOISE_BLOCK
from certbench.smoothing.streams import derive_seed


class HalfSpace(nn.Module):
    """Two classes split by ⟨w, x⟩ > t: under N(0, σ²I) noise P(class 1) = Φ((⟨w,x⟩ − t)/(σ‖w‖))."""

    def __init__(self, w: torch.Tensor, t: float) -> None:
        super().__init__()
        self.register_buffer("w", w.flatten())
        self.t = t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = x.flatten(1) @ self.w - self.t
        return torch.stack([torch.zeros_like(score), score], dim=1)

    def p_class1(self, x: torch.Tensor, sigma: float) -> np.ndarray:
        margin = (x.flatten(1).double() @ self.w.double() - self.t) / (sigma * self.w.norm())
        return norm.cdf(margin.numpy())


class Constant(nn.Module):
    """Always the same class: p_A = 1 exactly."""

    def __init__(self, cls: int, classes: int = 10) -> None:
        super().__init__()
        self.cls, self.classes = cls, classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(x), self.classes)
        logits[:, self.cls] = 1.0
        return logits


def small_cnn(classes: int = 5) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, classes),
    )


def without_time(records: list[CertifyRecord]) -> list[tuple]:
    return [tuple(getattr(r, f) for f in r.__slots__ if f != "seconds") for r in records]


@pytest.mark.parametrize("n_a,n", [(1, 10), (57, 100), (99_000, 100_000), (100_000, 100_000)])
@pytest.mark.parametrize("alpha", [0.001, 0.05])
def test_lower_bound_is_scipy_beta_quantile_and_exact_clopper_pearson(n_a, n, alpha):
    bound = lower_confidence_bound(n_a, n, alpha)
    assert bound == pytest.approx(beta.ppf(alpha, n_a, n - n_a + 1), rel=1e-12)
    # the one-sided 1−α bound is the lower end of the two-sided 1−2α exact interval
    two_sided = binomtest(n_a, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    assert bound == pytest.approx(two_sided.low, rel=1e-9)


def test_lower_bound_of_zero_successes_is_zero():
    assert lower_confidence_bound(0, 100, 0.001) == 0.0


def test_maximum_radius_matches_design_constant():
    # α = 0.001, n = 1e5, σ = 0.25: p̲_A = α^(1/n), radius 0.953 (DESIGN.md §3)
    pa = lower_confidence_bound(100_000, 100_000, 0.001)
    assert pa == pytest.approx(0.001 ** (1 / 100_000), rel=1e-12)
    assert certified_radius(pa, 0.25) == pytest.approx(0.953, abs=5e-4)
    assert certified_radius(0.4999, 0.25) == 0.0


def test_min_count_to_certify_is_the_exact_threshold():
    for n, alpha in [(100, 0.001), (1000, 0.01), (100_000, 0.001)]:
        k = min_count_to_certify(n, alpha)
        assert lower_confidence_bound(k, n, alpha) >= 0.5
        assert lower_confidence_bound(k - 1, n, alpha) < 0.5
    assert min_count_to_certify(5, 0.001) == 6  # five samples can never certify at α = 0.001


def test_lower_bound_covers_true_pa_with_frequency_at_least_one_minus_alpha():
    torch.manual_seed(1)
    sigma, alpha, points = 0.5, 0.1, 600
    w = torch.randn(3, 4, 4)
    model = HalfSpace(w, t=0.0)
    # inputs along w so that the true p(class 1) spreads over (0.5, 0.99)
    margins = torch.linspace(0.05, 2.3, points) * sigma * w.norm()
    x = 0.5 + (margins[:, None] / w.norm() ** 2) * w.flatten()[None]
    x = x.view(points, 3, 4, 4).clamp(0, 1)
    p1 = model.p_class1(x, sigma)
    labels = torch.ones(points, dtype=torch.long)
    records = certify(model, x, labels, sigma=sigma, n0=20, n=200, alpha=alpha, batch_size=997)
    p_selected = np.array([p1[r.index] if r.selected == 1 else 1 - p1[r.index] for r in records])
    bounds = np.array([r.pa_lower for r in records])
    coverage = np.mean(bounds <= p_selected)
    standard_error = math.sqrt(alpha * (1 - alpha) / points)
    assert coverage >= 1 - alpha - 3 * standard_error
    # and the bound is informative, not trivially zero
    assert np.mean(p_selected - bounds) < 0.1


def test_records_identical_for_any_batch_size_and_sharding():
    model = small_cnn()
    torch.manual_seed(2)
    x, y = torch.rand(9, 3, 8, 8), torch.randint(0, 5, (9,))
    kwargs = dict(sigma=0.5, n0=30, n=NOISE_BLOCK + 21, seed=7)
    whole = certify(model, x, y, batch_size=64, **kwargs)
    for batch_size in (29, 333, 5000):
        assert without_time(certify(model, x, y, batch_size=batch_size, **kwargs)) == without_time(
            whole
        )
    shards = [slice(0, 4), slice(4, 5), slice(5, 9)]
    sharded = []
    for part in shards:
        idx = list(range(9))[part]
        sharded += certify(model, x[part], y[part], batch_size=100, indices=idx, **kwargs)
    assert without_time(sharded) == without_time(whole)


def test_streams_depend_on_seed_test_set_and_index():
    model = small_cnn()
    x, y = torch.rand(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)
    base = dict(sigma=1.0, n0=10, n=300, batch_size=128)
    a = certify(model, x, y, seed=0, **base)
    assert without_time(certify(model, x, y, seed=1, **base)) != without_time(a)
    assert without_time(certify(model, x, y, seed=0, test_set="fog_s5", **base)) != without_time(a)
    assert derive_seed(0, "a", 1) != derive_seed(0, "a", 2) != derive_seed(1, "a", 1)


def test_records_fields_and_counts():
    model = small_cnn()
    x, y = torch.rand(3, 3, 8, 8), torch.tensor([0, 1, 2])
    for r in certify(model, x, y, sigma=0.25, n0=40, n=600, batch_size=256):
        assert r.n == 600 and r.n0 == 40 and 0 <= r.n_a <= r.n and 0 <= r.n_y <= r.n
        assert r.pa_lower == pytest.approx(lower_confidence_bound(r.n_a, r.n, r.alpha))
        if r.prediction == ABSTAIN:
            assert r.radius == 0.0 and not r.correct
        else:
            assert r.prediction == r.selected
            assert r.radius == pytest.approx(0.25 * norm.ppf(r.pa_lower))
            assert r.correct == (r.prediction == r.label)
            assert r.n_y == (r.n_a if r.correct else r.n_y)


def test_constant_classifier_gets_maximum_radius():
    records = certify(Constant(3), torch.rand(2, 3, 4, 4), [3, 4], sigma=0.25, n0=10, n=1000)
    expected = 0.25 * norm.ppf(0.001 ** (1 / 1000))
    assert [r.prediction for r in records] == [3, 3]
    assert [r.correct for r in records] == [True, False]
    assert records[0].radius == pytest.approx(expected)
    assert records[0].n_y == 1000 and records[1].n_y == 0


def test_coin_flip_classifier_abstains():
    model = HalfSpace(torch.ones(3, 4, 4), t=0.5 * 48)  # x = 0.5 sits on the boundary: p = 1/2
    x = torch.full((5, 3, 4, 4), 0.5)
    records = certify(model, x, torch.ones(5, dtype=torch.long), sigma=0.5, n0=50, n=2000)
    assert all(r.prediction == ABSTAIN and r.radius == 0.0 and not r.correct for r in records)
    assert all(r.pa_lower < 0.5 for r in records)


class NoiseVote(nn.Module):
    """Ten classes; at x = 0.5 the noise alone decides, so p_A ≈ 0.1: a hopeless image."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10]


def test_early_abstain_is_exact_and_saves_samples():
    x = torch.full((4, 3, 4, 4), 0.5)
    x[2:, 0, 0, 0] = 1.0  # two easy images: class 0 wins by a wide margin
    y = torch.zeros(4, dtype=torch.long)
    kwargs = dict(sigma=0.1, n0=50, n=20_000, batch_size=250, seed=4)
    full = certify(NoiseVote(), x, y, **kwargs)
    early = certify(NoiseVote(), x, y, early_abstain=True, **kwargs)
    assert [r.prediction for r in full] == [ABSTAIN, ABSTAIN, 0, 0]
    assert [r.prediction for r in early] == [r.prediction for r in full]
    assert [r.radius for r in early] == [r.radius for r in full]
    assert all(r.early_abstain and r.n <= 16_000 for r in early[:2])
    assert without_time(early[2:]) == without_time(full[2:])


def test_predict_uses_two_sided_binomial_test():
    records = predict(Constant(2, classes=4), torch.rand(2, 3, 4, 4), [2, 1], sigma=0.5, n=100)
    assert [r.prediction for r in records] == [2, 2]
    assert records[0].count1 == 100 and records[0].count2 == 0
    assert records[0].p_value == pytest.approx(binomtest(100, 100, 0.5).pvalue)
    coin = HalfSpace(torch.ones(3, 4, 4), t=0.5 * 48)
    x = torch.full((3, 3, 4, 4), 0.5)
    tossed = predict(coin, x, [1, 1, 1], sigma=0.5, n=400, alpha=0.001)
    for r in tossed:
        assert r.p_value == pytest.approx(binomtest(r.count1, r.count1 + r.count2, 0.5).pvalue)
        assert r.prediction == ABSTAIN


def test_bf16_autocast_keeps_noise_in_fp32_and_agrees_mostly():
    model = small_cnn()
    x, y = torch.rand(6, 3, 8, 8), torch.randint(0, 5, (6,))
    fp32 = certify(model, x, y, sigma=0.25, n0=20, n=400, batch_size=128)
    bf16 = certify(model, x, y, sigma=0.25, n0=20, n=400, batch_size=128, amp="bf16")
    assert [r.selected for r in bf16] == [r.selected for r in fp32]
    assert all(abs(a.n_a - b.n_a) <= 40 for a, b in zip(fp32, bf16, strict=True))


def test_training_mode_model_is_certified_in_eval_mode():
    model = small_cnn().train()
    x, y = torch.rand(3, 3, 8, 8), torch.zeros(3, dtype=torch.long)
    a = certify(model, x, y, sigma=0.25, n0=10, n=200, batch_size=64)
    b = certify(model, x, y, sigma=0.25, n0=10, n=200, batch_size=211)
    assert without_time(a) == without_time(b)
    assert not model.training


def test_on_record_sees_every_record_in_order():
    seen: list[int] = []
    certify(
        Constant(0),
        torch.rand(4, 3, 4, 4),
        [0] * 4,
        sigma=0.1,
        n0=5,
        n=50,
        on_record=lambda r: seen.append(r.index),
        indices=[10, 11, 12, 13],
    )
    assert seen == [10, 11, 12, 13]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"images": torch.randint(0, 255, (2, 3, 4, 4), dtype=torch.uint8)}, "float in"),
        ({"images": torch.rand(2, 3, 4, 4) * 2}, "must lie in"),
        ({"images": torch.rand(2, 48)}, "shape (N, C, H, W)"),
        ({"labels": [0]}, "labels must have shape"),
        ({"labels": [0, -1]}, "non-negative"),
        ({"labels": [0, 10]}, "out of range"),
        ({"indices": [3, 3]}, "distinct"),
        ({"sigma": 0.0}, "sigma"),
        ({"alpha": 1.5}, "alpha"),
        ({"n": 0}, "n and n0"),
        ({"batch_size": 0}, "batch_size"),
        ({"amp": "int8"}, "amp"),
    ],
)
def test_bad_inputs_raise_clear_errors(change, message):
    args = {"images": torch.rand(2, 3, 4, 4), "labels": [0, 1], "sigma": 0.25, "n0": 5, "n": 20}
    args.update(change)
    images, labels = args.pop("images"), args.pop("labels")
    with pytest.raises(CertificationError, match=re.escape(message)):
        certify(Constant(1, classes=10), images, labels, **args)


def test_model_with_wrong_output_shape_is_rejected():
    class Flat(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten()

    with pytest.raises(CertificationError, match="logits of shape"):
        certify(Flat(), torch.rand(2, 3, 4, 4), [0, 1], sigma=0.25, n0=5, n=20)
