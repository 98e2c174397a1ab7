"""Consistency losses: HCR (Sun et al., ECCV 2022, Eq. 3-4) by hand, its JSD limits, Jeong & Shin,
gradients."""

from __future__ import annotations

import math

import pytest
import torch

from certbench.errors import TrainingError
from certbench.training.consistency import (
    HCR_ETA,
    gaussian_consistency,
    hcr_lambda,
    hierarchical_consistency,
    jensen_shannon,
)


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True) if a > 0)


def mean(dists: list[list[float]]) -> list[float]:
    return [sum(col) / len(dists) for col in zip(*dists, strict=True)]


def logits_of(probs: list[list[list[float]]]) -> torch.Tensor:
    """(views, samples, 1, classes) logits whose softmax is exactly ``probs``."""
    return torch.tensor(probs, dtype=torch.float64).log()[:, :, None, :]


# p_{j,i}: view j (0 = original), noise sample i, two classes
P = [[[0.9, 0.1], [0.7, 0.3]], [[0.6, 0.4], [0.2, 0.8]], [[0.5, 0.5], [0.45, 0.55]]]


def hcr_by_hand(probs: list[list[list[float]]], lbd: float, eta: float) -> float:
    """Eq. 3-4 written out with Python floats."""
    view_means = [mean(view) for view in probs]  # M̄(x_j, δ)
    overall = mean(view_means)  # M̄(x, δ)
    total = 0.0
    for view, view_mean in zip(probs, view_means, strict=True):
        l_g = sum(kl(p, view_mean) for p in view) / len(view)  # Eq. 3
        total += lbd * kl(view_mean, overall) + eta * l_g
    return total / len(probs)  # Eq. 4


def test_hcr_equals_equation_4_on_a_hand_computed_case():
    got = hierarchical_consistency(logits_of(P), lbd=40.0, eta=10.0)
    assert float(got) == pytest.approx(hcr_by_hand(P, 40.0, 10.0), rel=1e-12)


def test_hcr_first_level_is_kl_of_each_sample_to_its_view_mean_as_eq_3_says():
    """The reverse direction (the release's KL(mean ‖ sample)) gives another value."""
    only_noise = hierarchical_consistency(logits_of(P), lbd=0.0, eta=1.0)
    reverse = sum(sum(kl(mean(view), p) for p in view) / len(view) for view in P) / len(P)
    assert float(only_noise) == pytest.approx(hcr_by_hand(P, 0.0, 1.0), rel=1e-12)
    assert abs(float(only_noise) - reverse) > 1e-3


def test_hcr_with_one_noise_sample_is_lambda_times_the_jsd_of_the_views():
    """s = 1: L_G vanishes and HCR is AugMix's JSD consistency (the paper's 'two levels of JSD')."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 1, 5, 10, generator=g, dtype=torch.float64)
    got = hierarchical_consistency(logits, lbd=12.0, eta=HCR_ETA)
    torch.testing.assert_close(got, 12.0 * jensen_shannon(logits[:, 0]).double())


def test_hcr_with_one_view_is_eta_times_the_jsd_of_the_noise_samples():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 4, 5, 10, generator=g, dtype=torch.float64)
    got = hierarchical_consistency(logits, lbd=40.0, eta=10.0)
    torch.testing.assert_close(got, 10.0 * jensen_shannon(logits[0]).double())


def test_jsd_is_zero_for_identical_predictions_and_at_most_log_n():
    same = torch.randn(4, 10).expand(3, 4, 10)
    assert float(jensen_shannon(same)) == pytest.approx(0.0, abs=1e-7)
    one_hot = torch.full((3, 1, 3), -1e4)
    for j in range(3):
        one_hot[j, 0, j] = 1e4
    assert float(jensen_shannon(one_hot)) == pytest.approx(math.log(3), rel=1e-5)


def test_jeong_shin_consistency_matches_their_formula():
    probs = [[0.8, 0.15, 0.05], [0.5, 0.3, 0.2]]
    p_hat = mean(probs)
    entropy = -sum(p * math.log(p) for p in p_hat)
    expected = 20.0 * sum(kl(p_hat, p) for p in probs) / 2 + 0.5 * entropy
    logits = torch.tensor(probs, dtype=torch.float64).log()[:, None, :]
    got = gaussian_consistency(logits, lbd=20.0, eta=0.5)
    assert float(got) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("scale", [1.0, 60.0])
def test_gradients_are_finite_even_for_saturated_logits(scale):
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(3, 2, 8, 10, generator=g) * scale).requires_grad_(True)
    loss = (
        hierarchical_consistency(logits, lbd=40.0, eta=10.0)
        + jensen_shannon(logits[:, 0])
        + gaussian_consistency(logits[0])
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert logits.grad.abs().sum() > 0


def test_hcr_lambda_is_the_papers_per_dataset():
    assert hcr_lambda("cifar10") == 40.0 and hcr_lambda("uoft-cs/cifar100") == 20.0


def test_wrong_shapes_are_refused():
    with pytest.raises(TrainingError, match="views, samples, batch, classes"):
        hierarchical_consistency(torch.zeros(2, 3, 4), lbd=1.0)
    with pytest.raises(TrainingError, match="members, batch, classes"):
        jensen_shannon(torch.zeros(3, 4))
