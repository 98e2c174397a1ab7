"""PD threat: definition properties, anchors, k_min, PD-W weights and projections."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from certbench.errors import ThreatModelError
from certbench.pd.anchors import (
    AnchorBank,
    build_anchor_bank,
    greedy_k_center,
    k_center_objective,
)
from certbench.pd.exact_projection import project_exact
from certbench.pd.lazy_projection import project_lazy
from certbench.pd.threat import PDThreat, find_k_min, pdw_class_weights, weighted_threat

NUM_CLASSES = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscribing the shared CPU cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def train() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(48) % NUM_CLASSES
    # Class-dependent brightness so classes differ, plus pixel noise.
    base = (labels.float() / NUM_CLASSES).view(-1, 1, 1, 1) * 120 + 40
    noise = torch.randint(0, 96, (48, 3, 4, 4), generator=g).float()
    return (base + noise).clamp(0, 255).to(torch.uint8), labels


@pytest.fixture(scope="module")
def bank(train) -> AnchorBank:
    images, labels = train
    return build_anchor_bank(
        images, labels, class_names=["a", "b", "c", "d"], dataset="tiny", k=3, seed=0
    )


def direct_threat(bank: AnchorBank, x, delta, labels, beta=0.5, weights=None):
    """Per-sample reference: explicit (M, d) differences, float64."""
    anchors = bank.flat(torch.float64)
    values, args = [], []
    for xi, di, yi in zip(x.double().flatten(1), delta.double().flatten(1), labels, strict=True):
        diff = anchors - xi
        w = torch.ones(len(anchors), dtype=torch.float64)
        if weights is not None:
            w = weights[yi, bank.labels].double()
        r = (diff @ di).clamp_min(0) / (beta * w * (diff * diff).sum(1))
        r[bank.labels == yi] = 0
        values.append(r.max())
        args.append(int(r.argmax()) if r.max() > 0 else -1)
    return torch.stack(values), torch.tensor(args)


def batch(seed: int, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 4, 4, generator=g, dtype=torch.float64)
    delta = torch.randn(n, 3, 4, 4, generator=g, dtype=torch.float64) * 0.2
    return x, delta, torch.arange(n) % NUM_CLASSES


def test_gemm_threat_matches_per_sample_reference_and_attributes_anchor(bank):
    threat = PDThreat(bank, dtype=torch.float64, batch_size=4)
    x, delta, y = batch(1, n=9)
    got = threat.evaluate(x, delta, y)
    value, anchor = direct_threat(bank, x, delta, y)
    torch.testing.assert_close(got.value, value)
    assert torch.equal(got.anchor, anchor)
    assert (bank.labels[got.anchor[got.anchor >= 0]] != y[got.anchor >= 0]).all()


def test_positively_homogeneous_and_zero_at_zero(bank):
    threat = PDThreat(bank, dtype=torch.float64)
    x, delta, y = batch(2)
    base = threat(x, delta, y)
    assert (base > 0).any()
    for t in (0.0, 0.5, 2.0, 3.7):
        torch.testing.assert_close(threat(x, t * delta, y), t * base)
    assert torch.equal(threat(x, torch.zeros_like(x), y), torch.zeros(len(y), dtype=x.dtype))


def test_zero_for_directions_away_from_all_anchors(bank):
    threat = PDThreat(bank, dtype=torch.float64)
    y = torch.arange(NUM_CLASSES)
    # At a white image every anchor lies in the direction of darker pixels, so brightening
    # (which the box forbids anyway) or any δ ≥ 0 has ⟨δ, x̃ − x⟩ ≤ 0 for every anchor.
    white = torch.ones(NUM_CLASSES, 3, 4, 4, dtype=torch.float64)
    up = torch.rand(NUM_CLASSES, 3, 4, 4, generator=torch.Generator().manual_seed(3))
    result = threat.evaluate(white, up.double(), y)
    assert torch.equal(result.value, torch.zeros(NUM_CLASSES, dtype=torch.float64))
    assert torch.equal(result.anchor, torch.full((NUM_CLASSES,), -1))
    black = torch.zeros_like(white)
    assert torch.equal(threat(black, -up.double(), y), result.value)


@pytest.mark.parametrize("beta", [0.5, 0.9])
def test_unsafe_displacement_to_other_class_anchor_exceeds_one(bank, beta):
    threat = PDThreat(bank, beta=beta, dtype=torch.float64)
    anchors = bank.flat(torch.float64)
    for y in range(NUM_CLASSES):
        others = anchors[bank.labels != y]
        x = anchors[bank.labels == y][:1].expand(len(others), -1).reshape(-1, 3, 4, 4)
        values = threat(x, others.reshape(-1, 3, 4, 4) - x, torch.full((len(others),), y))
        assert (values >= 1 / beta - 1e-9).all()
        assert (values > 1).all()


def test_input_space_is_unit_pixels(bank):
    threat = PDThreat(bank)
    x, delta, y = batch(4)
    with pytest.raises(ThreatModelError, match=r"\[0, 1\] pixel space"):
        threat(x * 255, delta, y)
    # Anchors are uint8/255: the threat of the displacement between two anchors computed from
    # raw bytes rescaled by 1/255 is the one the class reports.
    a, b = bank.images[0].double() / 255, bank.images[-1].double() / 255
    value = threat(a[None].float(), (b - a)[None].float(), bank.labels[:1])
    reference, _ = direct_threat(bank, a[None], (b - a)[None], bank.labels[:1])
    torch.testing.assert_close(value.double(), reference, rtol=1e-4, atol=1e-6)


def test_greedy_k_center_within_two_approximation_of_brute_force():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        points = torch.tensor(rng.random((9, 3)) + 0.05)
        for k in (2, 3):
            greedy = greedy_k_center(points, k, start=int(rng.integers(9)))
            best = max(
                k_center_objective(points, torch.tensor(s))
                for s in itertools.combinations(range(9), k)
            )
            # Farthest-first is a 2-approximation of k-centre in the angular metric arccos(cos).
            greedy_radius = math.acos(min(1.0, k_center_objective(points, greedy)))
            optimal_radius = math.acos(min(1.0, best))
            assert greedy_radius <= 2 * optimal_radius + 1e-9
            assert len(set(greedy.tolist())) == k


def test_bank_is_seeded_nested_and_round_trips(train, bank, tmp_path):
    images, labels = train
    again = build_anchor_bank(
        images, labels, class_names=["a", "b", "c", "d"], dataset="tiny", k=3, seed=0
    )
    assert torch.equal(again.source_indices, bank.source_indices)
    small = build_anchor_bank(
        images, labels, class_names=["a", "b", "c", "d"], dataset="tiny", k=2, seed=0
    )
    assert torch.equal(bank.truncated(2).source_indices, small.source_indices)
    other_seed = build_anchor_bank(
        images, labels, class_names=["a", "b", "c", "d"], dataset="tiny", k=3, seed=5
    )
    assert not torch.equal(other_seed.source_indices, bank.source_indices)
    path = bank.save(tmp_path / "bank.safetensors")
    loaded = AnchorBank.load(path)
    assert torch.equal(loaded.images, bank.images)
    assert (loaded.k, loaded.seed, loaded.dataset, loaded.class_names) == (
        3,
        0,
        "tiny",
        ("a", "b", "c", "d"),
    )
    assert "[0,1]" in loaded.metadata()["input_space"]
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ThreatModelError, match="not a readable safetensors"):
        AnchorBank.load(tmp_path / "junk.safetensors")


def test_k_min_is_the_smallest_k_rating_all_sampled_unsafe_pairs_above_one(train):
    images, labels = train
    result = find_k_min(
        images, labels, class_names=["a", "b", "c", "d"], k_max=12, seed=0, pairs=300
    )
    assert result.k_min is not None
    assert result.min_threat_by_k[result.k_min] > 1
    if result.k_min > 1:
        assert result.min_threat_by_k[result.k_min - 1] <= 1
    ks = sorted(result.min_threat_by_k)
    values = [result.min_threat_by_k[k] for k in ks]
    assert values == sorted(values)  # nested greedy banks: the threat grows with k


def test_pdw_weights_amplify_threat_within_a_superclass(bank):
    coarse = torch.tensor([0, 0, 1, 1])
    weights = pdw_class_weights(bank, class_to_coarse=coarse, floor=0.25)
    assert float(weights.min()) >= 0.25 and float(weights.max()) <= 1
    assert weights[0, 1] == pytest.approx(0.25) and weights[2, 3] == pytest.approx(0.25)
    threat = PDThreat(bank, dtype=torch.float64)
    weighted = PDThreat(bank, class_weights=weights, dtype=torch.float64)
    x, delta, y = batch(5)
    value, _ = direct_threat(bank, x, delta, y, weights=weights)
    torch.testing.assert_close(weighted(x, delta, y), value)
    assert (weighted(x, delta, y) >= threat(x, delta, y) - 1e-12).all()


def _constraints(bank, x, y, eps_pd, weights=None, beta=0.5):
    """Explicit unit-normalised halfspaces (u_j, b_j) of the other classes' anchors."""
    anchors = bank.flat(torch.float64)
    diff = anchors - x.flatten()
    norm = diff.norm(dim=1)
    w = torch.ones(len(anchors), dtype=torch.float64)
    if weights is not None:
        w = weights[y, bank.labels]
    keep = bank.labels != y
    return diff[keep] / norm[keep, None], eps_pd * beta * w[keep] * norm[keep], keep


def test_exact_projection_is_feasible_not_farther_than_lazy_and_satisfies_kkt(bank):
    threat = PDThreat(bank, dtype=torch.float64)
    x, z, y = batch(6)
    z = z * 2
    eps_pd, eps_inf, tol = 0.05, 0.1, 1e-7
    result = project_exact(
        threat, x, z, y, eps_pd=eps_pd, eps_inf=eps_inf, max_iter=20000, tol=1e-10
    )
    lazy = project_lazy(threat, x, z, y, eps_pd=eps_pd, eps_inf=eps_inf)
    for i in range(len(y)):
        d, r = result.delta[i].flatten(), result.raw[i].flatten()
        lo = (-x[i].flatten()).clamp(min=-eps_inf)
        hi = (1 - x[i].flatten()).clamp(max=eps_inf)
        u, b, keep = _constraints(bank, x[i], int(y[i]), eps_pd)
        # Feasible.
        assert (u @ d <= b + tol).all() and (d >= lo - tol).all() and (d <= hi + tol).all()
        assert float(threat(x[i : i + 1], result.delta[i : i + 1], y[i : i + 1])) <= eps_pd + tol
        # No farther than the lazy projection.
        assert (d - z[i].flatten()).norm() <= (lazy[i].flatten() - z[i].flatten()).norm() + tol
        # KKT: λ ≥ 0, complementary slackness, and the stationarity residual
        # z − Uᵀλ − δ is a normal-cone vector of the box (0 inside, ≤ 0 at lo, ≥ 0 at hi).
        lam = result.multipliers[i][keep]
        assert (lam >= 0).all()
        assert (lam * (b - u @ r)).abs().max() <= tol
        residual = z[i].flatten() - u.T @ lam - r
        inside = (r > lo + 1e-9) & (r < hi - 1e-9)
        assert residual[inside].abs().max() <= 1e-6
        assert (residual[r <= lo + 1e-9] <= 1e-6).all()
        assert (residual[r >= hi - 1e-9] >= -1e-6).all()
        assert (u @ r - b).max() <= tol


def test_exact_projection_agrees_with_a_generic_qp_solver(bank):
    threat = PDThreat(bank, dtype=torch.float64)
    x, z, y = batch(7, n=2)
    eps_pd, eps_inf = 0.04, 0.08
    result = project_exact(
        threat, x, z, y, eps_pd=eps_pd, eps_inf=eps_inf, max_iter=20000, tol=1e-11
    )
    for i in range(2):
        u, b, _ = _constraints(bank, x[i], int(y[i]), eps_pd)
        zi = z[i].flatten().numpy()
        lo = (-x[i].flatten()).clamp(min=-eps_inf).numpy()
        hi = (1 - x[i].flatten()).clamp(max=eps_inf).numpy()
        solution = minimize(
            lambda d, zi=zi: 0.5 * np.sum((d - zi) ** 2),
            np.clip(zi, lo, hi) * 0,
            jac=lambda d, zi=zi: d - zi,
            bounds=list(zip(lo, hi, strict=True)),
            constraints=[
                {
                    "type": "ineq",
                    "fun": lambda d, u=u, b=b: b.numpy() - u.numpy() @ d,
                    "jac": lambda d, u=u: -u.numpy(),
                }
            ],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        assert solution.success
        np.testing.assert_allclose(result.delta[i].flatten().numpy(), solution.x, atol=1e-5)


def test_lazy_projection_keeps_feasible_points_and_scales_others(bank):
    threat = PDThreat(bank, dtype=torch.float64)
    x, delta, y = batch(8)
    small = delta * 1e-4
    small = torch.maximum(torch.minimum(small, 1 - x), -x)
    value = threat(x, small, y)
    eps = float(value.max()) * 2
    torch.testing.assert_close(project_lazy(threat, x, small, y, eps_pd=eps), small)
    big = project_lazy(threat, x, delta, y, eps_pd=1e-3, eps_inf=0.1)
    assert (threat(x, big, y) <= 1e-3 + 1e-12).all()
    assert big.abs().max() <= 0.1 + 1e-12
    assert ((x + big) >= -1e-12).all() and ((x + big) <= 1 + 1e-12).all()


def test_superclasses_travel_with_the_bank_into_pdw_weights(train, tmp_path):
    images, labels = train
    coarse = torch.tensor([1, 1, 0, 0])[labels]  # classes a, b share a superclass; so do c, d
    bank = build_anchor_bank(
        images,
        labels,
        class_names=["a", "b", "c", "d"],
        dataset="tiny",
        k=3,
        coarse_labels=coarse,
        coarse_class_names=["cd", "ab"],
    )
    loaded = AnchorBank.load(bank.save(tmp_path / "bank.safetensors"))
    assert loaded.class_to_coarse.tolist() == [1, 1, 0, 0]
    assert loaded.coarse_class_names == ("cd", "ab")
    weights = pdw_class_weights(loaded, floor=0.5)
    assert weights[0, 1] == weights[2, 3] == pytest.approx(0.5)
    assert torch.equal(
        weights, pdw_class_weights(bank, class_to_coarse=torch.tensor([1, 1, 0, 0]), floor=0.5)
    )
    chosen = weighted_threat(loaded, "pdw")
    assert torch.equal(chosen.coef, PDThreat(loaded, class_weights=pdw_class_weights(loaded)).coef)
    assert torch.equal(weighted_threat(loaded, "pd").coef, PDThreat(loaded).coef)


def test_pdw_refuses_a_bank_without_superclasses(bank):
    with pytest.raises(ThreatModelError, match="superclass labels"):
        weighted_threat(bank, "pdw")
    with pytest.raises(ThreatModelError, match="'pd' or 'pdw'"):
        weighted_threat(bank, "dreamsim")
