"""The PD threat (Cohen & co.'s d_PD), APGD with the ℓ∞ and ℓ∞ ∩ PD projections (exact and
lazy), and robust accuracy, on CUDA: records independent of batch and sharding, and CUDA values
consistent with CPU values. Skipped with "CUDA not available" where there is no GPU."""

from __future__ import annotations

import pytest
import torch

from certbench.nets import RowSlots
from certbench.pd import PDThreat, build_anchor_bank, robust_accuracy
from certbench.pd.apgd import LinfPDProjection, LinfProjection, apgd
from certbench.pd.exact_projection import halfspaces, project_exact
from tests.support.cuda import CUDA, DEVICE, NUM_CLASSES, cifar_like, small_resnet

pytestmark = CUDA

EPS = 8 / 255


@pytest.fixture(scope="module")
def data():
    x, y = cifar_like(24)
    return x, y


@pytest.fixture(scope="module")
def bank(data):
    x, y = data
    uint8 = (x * 255).round().to(torch.uint8)
    return build_anchor_bank(uint8, y, class_names=[str(c) for c in range(NUM_CLASSES)],
                             dataset="noise", k=2, seed=0)  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return small_resnet().to(DEVICE)


def _delta(x: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(x.shape, generator=g) * 2 - 1) * EPS


def test_pd_threat_of_a_row_is_the_same_alone_and_in_a_batch(bank, data):
    x, y = data
    threat = PDThreat(bank, device=DEVICE)
    xd, delta = x[:12].to(DEVICE), _delta(x[:12], 1).to(DEVICE)
    together = threat.evaluate(xd, delta, y[:12], RowSlots.positional(12, 256))
    for row in (0, 5, 11):
        part = slice(row, row + 1)
        alone = threat.evaluate(xd[part], delta[part], y[part], RowSlots([row], 256))
        assert torch.equal(alone.value[0], together.value[row])


def test_pd_threat_on_cuda_matches_cpu(bank, data):
    x, y = data
    delta = _delta(x, 2)
    on_device = PDThreat(bank, device=DEVICE)(x.to(DEVICE), delta.to(DEVICE), y).cpu()
    on_cpu = PDThreat(bank, device="cpu")(x, delta, y)
    torch.testing.assert_close(on_device.double(), on_cpu.double(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("exact", [True, False])
def test_apgd_with_the_pd_projection_stays_feasible(model, bank, data, exact):
    x, y = data
    xd, yd = x[:8].to(DEVICE), y[:8].to(DEVICE)
    threat = PDThreat(bank, device=DEVICE)
    projection = LinfPDProjection(threat, eps_inf=EPS, eps_pd=EPS, exact=exact)
    result = apgd(model, xd, yd, eps=EPS, projection=projection, seeds=list(range(8)), n_iter=10)
    assert bool((threat(xd, result.delta, yd) <= EPS * (1 + 1e-4)).all())
    assert float(result.delta.abs().max()) <= EPS + 1e-6
    assert float((xd + result.delta).min()) >= 0 and float((xd + result.delta).max()) <= 1


def test_linf_apgd_is_deterministic_and_feasible(model, data):
    x, y = data
    xd, yd = x[:8].to(DEVICE), y[:8].to(DEVICE)
    kwargs = dict(eps=EPS, projection=LinfProjection(EPS), seeds=list(range(8)), n_iter=10)
    a, b = apgd(model, xd, yd, **kwargs), apgd(model, xd, yd, **kwargs)
    assert torch.equal(a.delta, b.delta) and torch.equal(a.success, b.success)
    assert float(a.delta.abs().max()) <= EPS + 1e-6


def test_exact_projection_of_a_row_is_the_same_alone_and_in_a_batch(bank, data):
    x, y = data
    threat = PDThreat(bank, device=DEVICE)
    xd, delta = x[:4].to(DEVICE), (_delta(x[:4], 3) * 2).to(DEVICE)
    options = {"eps_pd": EPS, "eps_inf": EPS, "max_iter": 30, "tol": 1e-3}
    rows = RowSlots.of(range(4), DEVICE)
    sets = halfspaces(threat, xd, y[:4], eps_pd=EPS, eps_inf=EPS, slots=rows)
    together = project_exact(threat, xd, delta, y[:4], sets=sets, **options)
    for row in range(4):
        part = slice(row, row + 1)
        own = halfspaces(threat, xd[part], y[part], eps_pd=EPS, eps_inf=EPS,
                         slots=RowSlots.of([row], DEVICE))  # fmt: skip
        alone = project_exact(threat, xd[part], delta[part], y[part], sets=own, **options)
        assert torch.equal(alone.delta, together.delta[part])


@pytest.mark.parametrize("projection", ["exact", "lazy"])
def test_robust_accuracy_records_do_not_depend_on_sharding(model, bank, data, projection):
    x, y = data
    kwargs = dict(anchors=bank, eps_list=(EPS,), n_iter=5, n_target_classes=1, seed=3,
                  device=DEVICE, pd_projection=projection)  # fmt: skip
    whole = robust_accuracy(model, x[:8], y[:8], batch_size=8, **kwargs).records
    shards = []
    for a, b in ((0, 3), (3, 8)):
        shards += robust_accuracy(model, x[a:b], y[a:b], batch_size=2,
                                  indices=torch.arange(a, b), **kwargs).records  # fmt: skip
    assert shards == whole


def test_robust_accuracy_on_cuda_agrees_with_cpu_on_clean_predictions(bank, data):
    x, y = data
    kwargs = dict(anchors=bank, eps_list=(EPS,), n_iter=5, n_target_classes=1, seed=3)
    on_device = robust_accuracy(small_resnet().to(DEVICE), x[:8], y[:8], device=DEVICE, **kwargs)
    on_cpu = robust_accuracy(small_resnet(), x[:8], y[:8], device="cpu", **kwargs)
    assert [r.clean_correct for r in on_device.records] == [r.clean_correct for r in on_cpu.records]
