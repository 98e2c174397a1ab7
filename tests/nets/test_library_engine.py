"""timm networks under the certification engine's optimisations (issue 33 §1), as for the
built-in ones: BatchNorm folded into the convolutions of a timm ResNet (logits within round-off),
a ViT (no BatchNorm) left as it is, and certification counts identical for batch sizes 250, 7
and 1 in fp32, and in bf16 for the ViT (``certbench.nets.batch_invariance``).

``torch.compile`` is not run here: it takes minutes of CPU per network (measured on a busy
2-core machine: the timm ResNet below 112 s, the ViT 28 s, with records equal to the eager
ones); the engine falls back to eager where it fails (``certbench.smoothing.compiled``), as for
any network."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from certbench.nets import build_classifier
from certbench.nets.folding import batchnorm_count, fold_batchnorm
from certbench.smoothing import certify
from tests.nets.test_library_architectures import RESNET, VIT

NETWORKS = {"timm-resnet": RESNET, "timm-vit": VIT}


def network(architecture: dict[str, Any]) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_classifier(architecture["name"], num_classes=10, mean=[0.5] * 3,
                             std=[0.25] * 3, **architecture["kwargs"])  # fmt: skip
    return model.eval()


@pytest.fixture(scope="module")
def images() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand((3, 3, 32, 32), generator=g), torch.tensor([0, 1, 2])


def test_batchnorm_is_folded_in_a_timm_resnet_and_a_vit_is_left_as_it_is(images):
    resnet, vit = network(RESNET), network(VIT)
    folded = fold_batchnorm(resnet)
    assert batchnorm_count(resnet) > 0 and batchnorm_count(folded) == 0
    with torch.no_grad():
        assert torch.allclose(folded(images[0]), resnet(images[0]), atol=1e-5, rtol=0)
    assert batchnorm_count(vit) == 0 and fold_batchnorm(vit) is vit


def _counts(records: list[Any]) -> list[tuple[int, ...]]:
    return [(r.selected, r.n_a, r.n_y, r.n, r.n0, r.prediction) for r in records]


@pytest.mark.parametrize(
    ("family", "amp"), [("timm-resnet", None), ("timm-vit", None), ("timm-vit", "bf16")]
)
def test_certification_counts_do_not_depend_on_the_batch_size(family: str, amp, images):
    """bf16 for the ViT (its attention and LayerNorm under autocast); fp32 for both."""
    model = network(NETWORKS[family])
    x, labels = images[0][:2], images[1][:2]
    kwargs: dict[str, Any] = dict(sigma=0.5, n0=4, n=40, seed=3, amp=amp, compile=False)
    runs = [_counts(certify(model, x, labels, batch_size=b, **kwargs)) for b in (250, 7, 1)]
    assert runs[0] == runs[1] == runs[2]
