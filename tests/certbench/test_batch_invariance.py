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
from certbench.pd_threat import PDThreat, build_anchor_bank

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


def test_pd_threat_of_one_row_equals_its_value_in_a_batch(images):
    x, labels = images
    bank = build_anchor_bank(
        x, labels, class_names=[str(c) for c in range(NUM_CLASSES)], dataset="noise", k=3, seed=0
    )
    threat = PDThreat(bank)
    flat = x[:12].float() / 255
    delta = torch.randn(flat.shape, generator=torch.Generator().manual_seed(2)) * 0.03
    together = threat.evaluate(flat, delta, labels[:12])
    for row in (0, 5):
        alone = threat.evaluate(flat[row : row + 1], delta[row : row + 1], labels[row : row + 1])
        assert torch.equal(alone.value[0], together.value[row])
        assert int(alone.anchor[0]) == int(together.anchor[row])
