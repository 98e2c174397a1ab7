"""A row's result must not depend on how many rows share its batch (certbench.batch_invariance):
the PD attack, the weather search and the lens Jacobian pad their batches, so a shard holding one
image reproduces an unsharded run bit for bit (end to end: the PD stage's worker test compares
one-image shards with a direct run). 32×32 float32 inputs and a ResNet-20 are the sizes
where CPU kernels switch code paths for batches of one or two (a 4×4 toy does not show it)."""

from __future__ import annotations

import pytest
import torch

from certbench.architectures import create_architecture
from certbench.batch_invariance import MIN_ROWS, PaddedForward, pad_rows, padded_forward
from certbench.pd_anchors import build_anchor_bank
from certbench.pd_exact_projection import halfspaces, project_exact
from certbench.pd_threat import PDThreat

NUM_CLASSES = 10


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_architecture("cifar_resnet20", num_classes=NUM_CLASSES).eval()


@pytest.fixture(scope="module")
def images() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (40, 3, 32, 32), generator=g, dtype=torch.uint8)
    return x, torch.arange(40) % NUM_CLASSES


def test_pad_rows_appends_zero_rows_only_when_short():
    x = torch.ones(3, 2)
    padded = pad_rows(x)
    assert padded.shape == (MIN_ROWS, 2)
    assert torch.equal(padded[:3], x) and not padded[3:].any()
    big = torch.ones(MIN_ROWS + 1, 2)
    assert pad_rows(big) is big


def test_a_padded_forward_of_one_image_equals_its_row_in_a_larger_batch(resnet, images):
    x = images[0][:12].float() / 255
    with torch.no_grad():
        alone = padded_forward(resnet, x[:1])
        together = PaddedForward(resnet)(x)
    assert alone.shape == (1, NUM_CLASSES)
    assert torch.equal(alone[0], together[0])


@pytest.fixture(scope="module")
def threat(images) -> PDThreat:
    x, labels = images
    bank = build_anchor_bank(
        x, labels, class_names=[str(c) for c in range(NUM_CLASSES)], dataset="noise", k=3, seed=0
    )
    return PDThreat(bank)


def test_pd_threat_of_one_row_equals_its_value_in_a_batch(threat, images):
    x, labels = images
    flat = x[:12].float() / 255
    delta = torch.randn(flat.shape, generator=torch.Generator().manual_seed(2)) * 0.03
    together = threat.evaluate(flat, delta, labels[:12])
    for row in (0, 5):
        alone = threat.evaluate(flat[row : row + 1], delta[row : row + 1], labels[row : row + 1])
        assert torch.equal(alone.value[0], together.value[row])
        assert int(alone.anchor[0]) == int(together.anchor[row])


def _towards_anchors(threat: PDThreat, x: torch.Tensor, eps: float, g: torch.Generator):
    """ℓ∞ perturbations of size ≤ eps pointing at a random anchor each: most break the PD bound,
    so the exact projection has work to do, for more dual steps on some rows than on others."""
    rows = torch.randint(threat.num_anchors, (x.shape[0],), generator=g)
    toward = (threat.anchors[rows] - x.reshape(x.shape[0], -1)).sign()
    return (eps * torch.rand(x.shape[0], 1, generator=g) * toward).reshape(x.shape)


def test_exact_projection_of_one_row_equals_its_row_in_a_batch(threat, images):
    """The PD-aware attack projects every step: a row's projection must not depend on its
    batch-mates (it once kept iterating until the whole batch had converged, and its dual GEMMs
    were not padded), or shards disagree with an unsharded run."""
    x, labels = images[0][:4].float() / 255, images[1][:4]
    g = torch.Generator().manual_seed(3)
    iterated = 0
    for eps in (8 / 255, 16 / 255):
        options = {"eps_pd": eps, "eps_inf": eps, "max_iter": 30, "tol": 1e-3}
        rows = [slice(row, row + 1) for row in range(4)]
        sets = [halfspaces(threat, x[part], labels[part], eps_pd=eps, eps_inf=eps) for part in rows]
        together_sets = halfspaces(threat, x, labels, eps_pd=eps, eps_inf=eps)
        for draw in range(4):
            delta = _towards_anchors(threat, x, eps, g)
            together = project_exact(threat, x, delta, labels, sets=together_sets, **options)
            iterated += together.iterations > 0
            for part, own in zip(rows, sets, strict=True):
                alone = project_exact(
                    threat, x[part], delta[part], labels[part], sets=own, **options
                )
                assert torch.equal(alone.delta, together.delta[part]), (eps, draw, part)
                assert torch.equal(alone.multipliers, together.multipliers[part]), (eps, draw, part)
    assert iterated >= 4  # the projections really iterated


def test_exact_projection_geometry_of_one_row_equals_its_row_in_a_batch(threat, images):
    x, labels = images[0][:6].float() / 255, images[1][:6]
    together = halfspaces(threat, x, labels, eps_pd=8 / 255, eps_inf=8 / 255)
    for row in (0, 3):
        part = slice(row, row + 1)
        alone = halfspaces(threat, x[part], labels[part], eps_pd=8 / 255, eps_inf=8 / 255)
        assert torch.equal(alone.step, together.step[part])  # 1 / ‖UUᵀ‖ by power iteration
        assert torch.equal(alone.bound, together.bound[part])
