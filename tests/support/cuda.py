"""Shared pieces of the CUDA tests (issue 28 §1), imported as `tests.support.cuda`.

Every test module here but the two that guard the suite itself (import chain, gpu-check dry run)
is marked ``cuda`` and skipped with the reason "CUDA not available" where torch sees no GPU.
They import only what the GPU image has (torch, numpy, scipy, safetensors, pyarrow, tqdm,
huggingface_hub, pytest): ``test_cuda_imports.py`` checks that in CI.

``CERTBENCH_CUDA_TESTS_DEVICE=cpu`` runs their code on the CPU instead (a development check that
the calls are right where no GPU is lent; the CUDA-only checks, such as the sync debug mode,
are then skipped): ``CERTBENCH_CUDA_TESTS_DEVICE=cpu pytest -m cuda tests/cuda``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch

DEVICE = torch.device(os.environ.get("CERTBENCH_CUDA_TESTS_DEVICE", "cuda"))
ON_CUDA = DEVICE.type == "cuda"
NUM_CLASSES = 10
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)

requires_cuda = pytest.mark.skipif(
    ON_CUDA and not torch.cuda.is_available(), reason="CUDA not available"
)
"""Skip where the device the tests run on is a GPU that torch does not see."""

CUDA = [pytest.mark.cuda, requires_cuda]
"""``pytestmark`` of every CUDA test module."""


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Any device-to-host synchronisation inside raises (``set_sync_debug_mode("error")``);
    a no-op off CUDA."""
    if not ON_CUDA:
        yield
        return
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def small_resnet(seed: int = 0) -> torch.nn.Module:
    """A ResNet-20 with non-trivial BatchNorm statistics (as after training), eval mode."""
    from certbench.nets import build_classifier

    torch.manual_seed(seed)
    model = build_classifier("cifar_resnet20", num_classes=NUM_CLASSES, mean=MEAN, std=STD)
    g = torch.Generator().manual_seed(seed + 1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            c = module.num_features
            module.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            module.running_var.copy_(torch.rand(c, generator=g) + 0.5)
    return model.eval()


def cifar_like(count: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-shaped float images in [0, 1] with labels."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (count, 3, 32, 32), generator=g, dtype=torch.uint8)
    return x.float() / 255, torch.arange(count) % NUM_CLASSES
