"""APGD and robust accuracy on a tiny classifier trained here on synthetic data (seeded, CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchattacks
from torch import nn

from certbench.errors import ThreatModelError
from certbench.pd.anchors import AnchorBank, build_anchor_bank
from certbench.pd.apgd import (
    LinfPDProjection,
    LinfProjection,
    apgd,
    checkpoints,
    margin_dlr_targeted,
)
from certbench.pd.evaluation import RobustnessRecord, RobustnessReport, robust_accuracy
from certbench.pd.threat import PDThreat

NUM_CLASSES = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscribing the shared CPU cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class templates plus noise, 3×4×4 pixels in [0, 1]: learnable but not trivially robust."""
    templates = torch.rand(NUM_CLASSES, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    noise = 0.12 * torch.randn(n, 3, 4, 4, generator=g)
    return (0.3 * templates[labels] + 0.35 + noise).clamp(0, 1), labels


@pytest.fixture(scope="module")
def trained() -> tuple[nn.Module, torch.Tensor, torch.Tensor, AnchorBank]:
    torch.manual_seed(0)
    x_train, y_train = synthetic(512, seed=1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(20):
        for start in range(0, 512, 64):
            optimiser.zero_grad()
            loss = nn.functional.cross_entropy(
                model(x_train[start : start + 64]), y_train[start : start + 64]
            )
            loss.backward()
            optimiser.step()
    model.eval()
    bank = build_anchor_bank(
        (x_train * 255).round().to(torch.uint8),
        y_train,
        class_names=["a", "b", "c", "d"],
        dataset="synthetic",
        k=5,
        seed=0,
    )
    x_test, y_test = synthetic(64, seed=2)
    return model, x_test, y_test, bank


def test_checkpoints_follow_the_apgd_schedule():
    assert checkpoints(100) == [22, 41, 57, 70, 80, 87, 93, 99]
    assert all(0 < p < 10 for p in checkpoints(10))


def test_dlr_targeted_is_scale_invariant_and_needs_four_classes():
    logits = torch.tensor([[3.0, 1.0, 0.5, -1.0, 0.0]])
    label, target = torch.tensor([0]), torch.tensor([1])
    value = margin_dlr_targeted(logits, label, target)
    torch.testing.assert_close(margin_dlr_targeted(7 * logits + 2, label, target), value)
    assert float(value) == pytest.approx(-(3.0 - 1.0) / (3.0 - 0.5 * (0.5 + 0.0)))
    with pytest.raises(ThreatModelError, match="at least 4 classes"):
        margin_dlr_targeted(logits[:, :3], label, target)


def test_apgd_reduces_accuracy_and_stays_in_the_linf_ball(trained):
    model, x, y, _ = trained
    eps = 8 / 255
    with torch.no_grad():
        clean = model(x).argmax(1) == y
    assert float(clean.float().mean()) >= 0.9
    result = apgd(
        model, x, y, eps=eps, projection=LinfProjection(eps), seeds=list(range(64)), n_iter=100
    )
    with torch.no_grad():
        adversarial = model(x + result.delta).argmax(1) != y
    assert int(result.success.sum()) > int((~clean).sum())
    assert torch.equal(adversarial, result.success)
    assert float(result.delta.abs().max()) <= eps + 1e-6
    assert float((x + result.delta).min()) >= 0 and float((x + result.delta).max()) <= 1


@pytest.mark.parametrize("eps", [4 / 255, 8 / 255])
def test_apgd_finds_at_least_as_many_adversarials_as_torchattacks(trained, eps):
    model, x, y, _ = trained
    reference = torchattacks.APGD(
        model, norm="Linf", eps=eps, steps=100, n_restarts=1, seed=0, loss="ce"
    )
    with torch.no_grad():
        theirs = int((model(reference(x, y)).argmax(1) != y).sum())
    ours = apgd(model, x, y, eps=eps, projection=LinfProjection(eps), seeds=list(range(64)))
    assert theirs > 0
    assert int(ours.success.sum()) >= theirs


def test_pd_aware_apgd_iterates_are_feasible(trained):
    model, x, y, bank = trained
    threat = PDThreat(bank)
    eps = 8 / 255
    projection = LinfPDProjection(threat, eps_inf=eps, eps_pd=eps)
    result = apgd(model, x, y, eps=eps, projection=projection, seeds=list(range(64)), n_iter=20)
    assert (threat(x, result.delta, y) <= eps * (1 + 1e-4)).all()
    assert float(result.delta.abs().max()) <= eps + 1e-6
    # The PD constraint binds: the PD-aware perturbations are smaller than ℓ∞ ones.
    free = apgd(
        model, x, y, eps=eps, projection=LinfProjection(eps), seeds=list(range(64)), n_iter=20
    )
    assert float(threat(x, free.delta, y).max()) > eps


@pytest.fixture(scope="module")
def report(trained) -> RobustnessReport:
    model, x, y, bank = trained
    return robust_accuracy(
        model,
        x[:32],
        y[:32],
        anchors=bank,
        eps_list=(4 / 255, 16 / 255),
        n_iter=20,
        n_target_classes=1,
        seed=3,
        batch_size=16,
    )


def test_linf_robust_accuracy_is_never_above_the_pd_figure(report):
    assert report.eps_list == (4 / 255, 16 / 255)
    for eps in report.eps_list:
        assert report.linf_accuracy(eps) <= report.pd_accuracy(eps) <= report.clean_accuracy()
        for r in report.records:
            if r.eps == eps:
                assert r.pd_robust == (r.pd_robust_projected and r.pd_robust_aware)
                assert not r.linf_robust or r.pd_robust
                assert not r.pd_robust or r.clean_correct
    assert report.linf_accuracy(16 / 255) < report.clean_accuracy()
    summary = report.summary()
    assert summary["linf_robust_accuracy_16"] == report.linf_accuracy(16 / 255)
    for tag, eps in (("4", 4 / 255), ("16", 16 / 255)):
        chosen = [r for r in report.records if r.eps == eps]
        pd_figure = summary[f"pd_robust_accuracy_{tag}"]
        assert pd_figure <= min(
            summary[f"pd_projected_accuracy_{tag}"], summary[f"pd_aware_accuracy_{tag}"]
        )
        assert summary[f"pd_aware_accuracy_{tag}"] == np.mean([r.pd_robust_aware for r in chosen])
        threats = sorted(r.linf_pd_threat for r in chosen if r.linf_pd_threat is not None)
        assert summary[f"linf_pd_threat_median_{tag}"] == pytest.approx(np.median(threats))
    broken = [r for r in report.records if r.clean_correct and not r.linf_robust]
    assert broken and all(r.linf_pd_threat > 0 and r.linf_pd_anchor >= 0 for r in broken)
    assert all(r.linf_pd_threat is None for r in report.records if r.linf_robust)


def test_an_image_attacked_alone_gets_the_records_it_gets_in_a_batch(trained):
    """Seed 3, image 13, ε = 8/255: its PD-aware attack broke it next to image 12 but not alone,
    while the exact projection kept iterating every image until the whole batch had converged."""
    model, x, y, bank = trained

    def run(start: int, stop: int) -> list[RobustnessRecord]:
        return robust_accuracy(
            model,
            x[start:stop],
            y[start:stop],
            anchors=bank,
            eps_list=(8 / 255,),
            n_iter=20,
            n_target_classes=1,
            seed=3,
            batch_size=64,
            indices=torch.arange(start, stop),
        ).records

    alone = run(13, 14)
    assert alone == [r for r in run(12, 14) if r.index == 13]
    assert alone == [r for r in run(8, 16) if r.index == 13]


@pytest.mark.slow
def test_shards_reproduce_the_full_run_and_tables_round_trip(trained, report, tmp_path):
    model, x, y, bank = trained
    progress: list[int] = []
    shards = [
        robust_accuracy(
            model,
            x[start : start + 16],
            y[start : start + 16],
            anchors=bank,
            eps_list=(16 / 255,),
            n_iter=20,
            n_target_classes=1,
            seed=3,
            batch_size=8,
            indices=torch.arange(start, start + 16),
            on_batch=progress.append,
        )
        for start in (16, 0)
    ]
    assert progress == [8, 16, 8, 16]
    merged = RobustnessReport.merge(shards)
    # Seeds depend on (seed, image index, ε, run) only: shards, other batch sizes and other
    # ε lists reproduce the full run's records.
    assert merged.records == [r for r in report.records if r.eps == 16 / 255]
    assert RobustnessReport.from_table(report.to_table()).records == report.records
    path = report.write(tmp_path / "shard.parquet", metadata={"seed": "3"})
    assert RobustnessReport.read(path).records == report.records
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    with pytest.raises(ThreatModelError, match="cannot read"):
        RobustnessReport.read(tmp_path / "bad.parquet")
    with pytest.raises(ThreatModelError, match="overlap"):
        RobustnessReport.merge([shards[0], shards[0]])


def test_robust_accuracy_rejects_bad_arguments(trained):
    model, x, y, bank = trained
    with pytest.raises(ThreatModelError, match="eps_list"):
        robust_accuracy(model, x, y, anchors=bank, eps_list=())
    with pytest.raises(ThreatModelError, match="differ"):
        robust_accuracy(model, x, y[:3], anchors=bank)


def test_summary_is_strict_json_when_no_adversarial_example_was_found():
    """PostgreSQL's JSON has no NaN: an undefined median must be None, not float('nan')."""
    records = [
        RobustnessRecord(
            index=i, label=0, eps=8 / 255, clean_prediction=1, clean_correct=False,
            linf_robust=False, pd_robust=False, pd_robust_projected=False,
            pd_robust_aware=False, linf_pd_threat=None, linf_pd_anchor=-1,
        )
        for i in range(3)
    ]  # fmt: skip
    summary = RobustnessReport(records).summary()
    assert summary["linf_pd_threat_median_8"] is None
    assert summary["clean_accuracy"] == summary["pd_robust_accuracy_8"] == 0.0
    json.dumps(summary, allow_nan=False)  # raises ValueError on NaN
