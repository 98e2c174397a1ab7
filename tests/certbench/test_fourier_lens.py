"""Fourier-lens metrics (HFF, CD, Jacobian norm), records, sharding and summaries (Fridovich-Keil
et al., NeurIPS 2022, §3)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from certbench.errors import LensError
from certbench.lens.lens import (
    LensProtocol,
    LensRecord,
    consistent_distance,
    high_frequency_fraction,
    jacobian_sq_norms,
    lens_plan,
    lens_records,
    normalised_jacobian_norm,
    read_lens_metadata,
    read_lens_records,
    summarize,
    write_lens_records,
)
from certbench.nets.architectures import NormalizeLayer, build_classifier

MEAN, STD = [0.5, 0.45, 0.4], [0.25, 0.2, 0.3]
CLASSES = 4


def linear_model(scale: float = 0.3, size: int = 8, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Linear(3 * size * size, CLASSES)
    nn.init.normal_(net.weight, std=scale)
    return nn.Sequential(NormalizeLayer(MEAN, STD), nn.Flatten(), net).eval()


def clean_set(count: int = 40, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    images = torch.rand((count, 3, size, size), generator=g)
    return images, torch.arange(count) % CLASSES


SMALL = LensProtocol(paths=6, pixel_pairs=2, jacobian_images=5)


def one_hot(classes: list[int], k: int = 10) -> np.ndarray:
    return np.eye(k)[classes]


# --------------------------------------------------------------------------- HFF and CD


def test_hff_of_a_constant_path_is_zero():
    p = np.tile([0.1, 0.6, 0.3], (100, 1))
    hff, released = high_frequency_fraction(p)
    assert hff == pytest.approx(0.0, abs=1e-12) and released == pytest.approx(0.0, abs=1e-12)


def test_hff_of_an_alternating_path_is_its_nyquist_share():
    """One-hot A, B, A, B …: the Nyquist amplitude equals the DC (L/2 per class), so with the DC
    in the total (paper and released code) HFF = 1/2, and all the non-DC amplitude is high
    frequency. The released code's slice drops the Nyquist bin and scores the same path 0."""
    p = one_hot([0, 1] * 50)
    hff, released = high_frequency_fraction(p)
    assert hff == pytest.approx(0.5, abs=1e-12)
    assert released == pytest.approx(0.0, abs=1e-12)
    amplitude = np.abs(np.fft.rfft(p, axis=0)).mean(axis=1)
    non_dc = amplitude[1:].sum()
    assert (hff * amplitude.sum()) / non_dc == pytest.approx(1.0)


@pytest.mark.parametrize(("k", "expected"), [(5, 0.0), (6, 1 / 3), (20, 1 / 3)])
def test_hff_threshold_is_above_10_percent_of_the_maximum_frequency(k, expected):
    """A pure cosine at frequency k: DC of the class mean is L/C, bin k holds (L/4)·2/C·… so
    HFF = 1/3 when k is high (k ≥ 6 = ⌈0.1·51⌉) and 0 when it is low."""
    n = np.arange(100)
    a = 0.5 + 0.5 * np.cos(2 * np.pi * k * n / 100)
    p = np.stack([a, 1 - a], axis=1)
    hff, released = high_frequency_fraction(p)
    assert hff == pytest.approx(expected, abs=1e-12)
    assert released == pytest.approx(expected, abs=1e-12)


def test_hff_orders_smooth_below_rough_paths():
    """One change < regular alternation (1/2) < random flicker, rising towards 1 with classes."""
    rng = np.random.default_rng(0)
    step = one_hot([0] * 50 + [1] * 50)
    flicker2 = one_hot(list(rng.integers(0, 2, 100)))
    flicker10 = one_hot(list(rng.integers(0, 10, 100)))
    values = [high_frequency_fraction(p)[0] for p in (step, flicker2, flicker10)]
    assert 0 < values[0] < 0.5 < values[1] < values[2] < 1


def test_consistent_distance_counts_leading_agreement_and_censors_at_path_length():
    assert consistent_distance(np.zeros(100, dtype=int)) == (100, False)
    assert consistent_distance(np.array([3] * 37 + [1] + [3] * 62)) == (37, True)
    assert consistent_distance(np.array([2, 0, 2, 2])) == (1, True)
    with pytest.raises(LensError):
        consistent_distance(np.zeros((0,), dtype=int))


# --------------------------------------------------------------------------- records


def fields_equal(a: LensRecord, b: LensRecord) -> bool:
    for f in dataclasses.fields(LensRecord):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, float):
            if not (math.isnan(x) and math.isnan(y)) and not math.isclose(x, y, rel_tol=1e-6):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("sigma", [None, 0.25])
def test_records_do_not_depend_on_sharding_or_batch_size(sigma):
    model, (images, labels) = linear_model(), clean_set()
    protocol = dataclasses.replace(SMALL, sigma=sigma, noise_samples=4)
    kwargs = dict(protocol=protocol, seed=7)
    whole = lens_records(model, images, labels, batch_size=100_000, **kwargs)
    size = lens_plan(labels, protocol, 7).size
    assert [r.unit for r in whole] == list(range(size))
    cuts = [0, 5, 9, 20, size]
    sharded = []
    for start, stop in itertools.pairwise(cuts):
        units = range(start, stop)
        sharded += lens_records(model, images, labels, units=units, batch_size=150, **kwargs)
    assert len(sharded) == len(whole)
    assert all(fields_equal(a, b) for a, b in zip(whole, sharded, strict=True))
    paths = [r for r in whole if r.kind != "jacobian"]
    assert any(r.changed for r in paths) and any(not r.changed for r in paths)
    assert {r.kind for r in whole} == set(SMALL.kinds)


def test_pairs_seed_draws_the_paths_and_seed_only_the_noise_and_projections():
    """``pairs_seed`` (public: what every entry is measured on) draws the pairs; ``seed`` (the
    run's secret in the service) draws the smoothed noise and the random Jacobian projections
    and nothing else; ``pairs_seed`` defaults to ``seed``."""
    model, (images, labels) = linear_model(), clean_set()
    secret, other = 2**127 + 12345, 2**127 + 67890  # 128-bit, as the service draws

    def run(protocol: LensProtocol, seed: int, pairs_seed: int | None = 3) -> list[LensRecord]:
        return lens_records(model, images, labels, protocol=protocol,
                            seed=seed, pairs_seed=pairs_seed)  # fmt: skip

    base = run(SMALL, secret)  # exact Jacobian, softmax paths: no draw of `seed`
    assert all(fields_equal(a, b) for a, b in zip(base, run(SMALL, other), strict=True))
    assert [(r.source, r.target) for r in base] != [
        (r.source, r.target) for r in run(SMALL, secret, pairs_seed=4)
    ]
    assert all(
        fields_equal(a, b) for a, b in zip(run(SMALL, 3, None), run(SMALL, 3, 3), strict=True)
    )

    smoothed = dataclasses.replace(SMALL, sigma=0.5, noise_samples=4, kinds=("amplitude",))
    a, b = run(smoothed, secret), run(smoothed, other)
    assert [(r.source, r.target) for r in a] == [(r.source, r.target) for r in b]  # same paths
    assert [r.hff for r in a] != [r.hff for r in b]  # other noise, other votes
    assert all(fields_equal(x, y) for x, y in zip(a, run(smoothed, secret), strict=True))

    projected = dataclasses.replace(SMALL, jacobian_projections=2, kinds=("jacobian",))
    assert [r.jacobian_sq for r in run(projected, secret)] != [
        r.jacobian_sq for r in run(projected, other)
    ]
    with pytest.raises(LensError, match="non-negative"):
        run(SMALL, -1)


def test_records_follow_the_plan_and_trace_dataset_indices():
    model, (images, labels) = linear_model(), clean_set()
    indices = torch.arange(len(labels)) * 10 + 3
    records = lens_records(model, images, labels, protocol=SMALL, seed=1, indices=indices)
    plan = lens_plan(labels, SMALL, seed=1)
    for r in records:
        kind, index = plan.locate(r.unit)
        assert (r.kind, r.index) == (kind, index)
        source = plan.pairs[kind][index][0]
        assert r.source == int(indices[source]) and r.source_label == int(labels[source])
    amp = [r for r in records if r.kind == "amplitude"]
    assert all(r.length == 100 and 1 <= r.cd <= 100 for r in amp)
    within = [r for r in records if r.kind == "pixel_within"]
    assert all(r.source_label == r.target_label for r in within)
    assert all(r.target_label != r.source_label for r in records if r.kind == "pixel_between")


def test_invariant_model_has_zero_hff_and_never_changes():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, CLASSES))
    nn.init.zeros_(model[1].weight)
    with torch.no_grad():
        model[1].bias.copy_(torch.tensor([0.0, 2.0, 1.0, -1.0]))
    images, labels = clean_set()
    records = lens_records(model, images, labels, protocol=SMALL)
    paths = [r for r in records if r.kind != "jacobian"]
    assert all(r.hff == pytest.approx(0.0, abs=1e-12) for r in paths)
    assert all(r.cd == r.length and not r.changed and r.first_prediction == 1 for r in paths)
    assert all(r.jacobian_sq == 0.0 for r in records if r.kind == "jacobian")


def test_jacobian_norm_of_a_linear_model_is_exact_and_projections_estimate_it():
    """The model normalises first, so logits = W·z + b = W·diag(1/std)·x + …: the Jacobian is
    taken w.r.t. the pixels x, ‖J_x‖²_F = Σ(W/std)² (the released code's normalised-space
    ‖J_z‖²_F = ΣW² would depend on the std the entry declares)."""
    model, (images, _) = linear_model(), clean_set(count=3)
    weight = model[2].weight.detach().double()
    normalised_space = float((weight**2).sum())
    per_pixel_std = torch.tensor(STD, dtype=torch.float64).repeat_interleave(64)
    expected = float(((weight / per_pixel_std) ** 2).sum())
    exact = jacobian_sq_norms(model, images, projections=0)
    np.testing.assert_allclose(exact, expected, rtol=1e-5)
    assert not np.isclose(exact[0], normalised_space, rtol=0.1)
    low, high = normalised_jacobian_norm(math.sqrt(exact[0]), STD)
    assert low <= math.sqrt(normalised_space) <= high and (low, high) == pytest.approx(
        (0.2 * math.sqrt(exact[0]), 0.3 * math.sqrt(exact[0]))
    )
    estimate = jacobian_sq_norms(model, images, projections=400, seeds=[1, 2, 3])
    np.testing.assert_allclose(estimate, expected, rtol=0.1)
    assert not np.allclose(estimate, expected, rtol=1e-6)


def test_an_images_jacobian_is_bitwise_the_same_alone_or_in_a_batch():
    """Round-off of the CPU kernels depends on the batch (its size, a row's position) and can flip
    a ReLU, which changes a ResNet's Jacobian by far more (0.1 % seen on one image): images are
    evaluated in fixed-shape chunks keyed by their position, so a shard of one Jacobian image
    equals an unsharded run."""
    torch.manual_seed(3)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD).eval()
    model = model.to(memory_format=torch.channels_last)
    images = torch.rand((5, 3, 32, 32), generator=torch.Generator().manual_seed(3))
    together = jacobian_sq_norms(model, images)
    alone = [
        jacobian_sq_norms(model, images[i : i + 1], keys=torch.tensor([i]))[0] for i in range(5)
    ]
    pairs = np.concatenate(
        [
            jacobian_sq_norms(model, images[i : i + 2], keys=torch.arange(i, 5)[:2])
            for i in (0, 2, 4)
        ]
    )
    np.testing.assert_array_equal(together, alone)
    np.testing.assert_array_equal(together, pairs)
    projected = jacobian_sq_norms(model, images[:1], projections=3, seeds=[9])
    assert projected == jacobian_sq_norms(model, images[:3], 3, [9, 1, 2])[0]


def test_protocol_and_range_errors_name_the_argument():
    model, (images, labels) = linear_model(), clean_set()
    with pytest.raises(LensError, match="paths=30"):
        lens_records(model, images, labels, protocol=LensProtocol(paths=30))
    with pytest.raises(LensError, match="units"):
        lens_records(model, images, labels, protocol=SMALL, units=range(0, 10_000))
    with pytest.raises(LensError, match="kinds"):
        LensProtocol(kinds=("amplitude", "fourier"))
    assert LensProtocol.from_dict(SMALL.to_dict()) == SMALL


# --------------------------------------------------------------------------- summary and files


def record(unit: int, kind: str, hff: float = math.nan, cd: int = -1, sq: float = math.nan):
    return LensRecord(
        unit=unit, kind=kind, index=unit, source=unit, target=-1, source_label=0,
        target_label=-1, length=100, first_prediction=0, hff=hff, hff_released=hff / 2, cd=cd,
        changed=cd < 100, jacobian_sq=sq,
    )  # fmt: skip


def test_summary_means_and_gaussian_intervals():
    records = [
        record(0, "amplitude", 0.1, 40),
        record(1, "amplitude", 0.2, 100),
        record(2, "amplitude", 0.3, 70),
        record(3, "jacobian", sq=1.0),
        record(4, "jacobian", sq=4.0),
    ]
    summary = summarize(list(reversed(records)))
    hff = summary.nyquist["hff_amplitude_nyquist"]  # the equation's HFF: the records' ``hff``
    half = norm.ppf(0.975) * 0.1 / math.sqrt(3)
    assert (hff.mean, hff.low, hff.high, hff.count) == pytest.approx(
        (0.2, 0.2 - half, 0.2 + half, 3)
    )
    assert summary.metrics["cd_amplitude"].mean == pytest.approx(70.0)
    # the headline HFF is the released code's (Nyquist bin left out), as the published values
    assert summary.metrics["hff_amplitude"].mean == pytest.approx(0.1)
    assert summary.to_dict()["hff_convention"] == "nyquist-dropped"
    assert summary.changed["amplitude"] == pytest.approx(2 / 3)
    assert summary.metrics["jacobian_norm"].mean == pytest.approx(math.sqrt(2.5))
    assert summary.counts == {"amplitude": 3, "jacobian": 2}
    with pytest.raises(LensError, match="twice"):
        summarize([*records, records[0]])


def test_records_round_trip_through_parquet(tmp_path):
    model, (images, labels) = linear_model(), clean_set()
    records = lens_records(model, images, labels, protocol=SMALL)
    path = write_lens_records(records, tmp_path / "r.parquet", {"protocol": SMALL.to_dict()})
    back = read_lens_records(path)
    assert all(fields_equal(a, b) for a, b in zip(records, back, strict=True))
    assert read_lens_metadata(path)["protocol"]["paths"] == 6
    assert summarize(back).to_dict() == summarize(records).to_dict()


def test_progress_callback_counts_units_and_can_stop_the_run():
    model, (images, labels) = linear_model(), clean_set()
    kwargs = dict(protocol=SMALL, seed=2, batch_size=250)
    seen: list[int] = []
    records = lens_records(model, images, labels, units=range(3, 17), on_progress=seen.append,
                           **kwargs)  # fmt: skip
    assert len(seen) > 1 and seen == sorted(seen) and seen[-1] == len(records) == 14

    class Stop(Exception):
        pass

    def stop_after_first(done: int) -> None:
        raise Stop(done)

    with pytest.raises(Stop) as stopped:
        lens_records(model, images, labels, on_progress=stop_after_first, **kwargs)
    assert 0 < stopped.value.args[0] < lens_plan(labels, SMALL, 2).size
