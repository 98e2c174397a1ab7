"""Training and data transforms on CUDA: one step of every `certbench train` recipe under bf16
autocast with channels-last weights, FourierMix on device tensors, and CIFAR-F's batched FFTs.
Skipped with "CUDA not available" where there is no GPU."""

from __future__ import annotations

import math

import pytest
import torch

from certbench.augment import FourierMixConfig, RandomStream, fourier_mix
from certbench.nets import build_classifier
from certbench.training import (
    RECIPES,
    Schedule,
    TrainBatches,
    build_optimizer,
    make_views,
    recipe_loss,
)
from generators import cifar_f
from tests.support.cuda import CUDA, DEVICE, NUM_CLASSES, ON_CUDA

pytestmark = CUDA


@pytest.mark.parametrize("name", list(RECIPES))
def test_one_training_step_per_recipe_under_bf16_and_channels_last(name):
    recipe = RECIPES[name]
    torch.manual_seed(0)
    model = build_classifier(
        "cifar_resnet20", num_classes=NUM_CLASSES, mean=[0.5] * 3, std=[1.0] * 3
    )
    model = model.to(DEVICE).to(memory_format=torch.channels_last)
    optimizer, _ = build_optimizer(model, Schedule())
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (8, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, NUM_CLASSES, (8,), generator=g)
    gpu_views = ON_CUDA and recipe.views == "fouriermix"
    batch = TrainBatches(images, labels, torch.arange(8), recipe, seed=0,
                         gpu_views=gpu_views)[(0, list(range(8)))]  # fmt: skip
    if "views" in batch:
        views = batch["views"].to(DEVICE)
    else:
        views = make_views(recipe, batch["base"].to(DEVICE), batch["seeds"])
    before = [p.detach().clone() for p in model.parameters()]
    lbd, eta = recipe.default_weights("cifar10")
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        result = recipe_loss(
            recipe,
            lambda x: model(x.contiguous(memory_format=torch.channels_last)),
            views, batch["labels"].to(DEVICE), sigma=0.25, stream=RandomStream(0, DEVICE),
            lbd=lbd, eta=eta,
        )  # fmt: skip
    optimizer.zero_grad(set_to_none=True)
    result.loss.backward()
    optimizer.step()
    assert math.isfinite(float(result.loss))
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def test_fouriermix_on_device_tensors_matches_cpu():
    g = torch.Generator().manual_seed(2)
    x = torch.rand(6, 3, 32, 32, generator=g)
    seeds = list(range(6))
    on_device = fourier_mix(x.to(DEVICE), seeds, FourierMixConfig())
    assert on_device.device.type == DEVICE.type
    assert torch.equal(on_device, fourier_mix(x.to(DEVICE), seeds, FourierMixConfig()))
    on_cpu = fourier_mix(x, seeds, FourierMixConfig())
    torch.testing.assert_close(on_device.cpu(), on_cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("protocol", ["paper", "reference"])
def test_cifar_f_batched_ffts_on_device_match_cpu(protocol):
    g = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (8, 3, 32, 32), generator=g, dtype=torch.uint8)
    spec = cifar_f.CifarFSpec(f_c=4, alpha=1.0, severity=2)
    keys = cifar_f.streams.image_keys(11, torch.arange(8).numpy())
    if protocol == "paper":
        mask, draws = cifar_f.paper_mask_rfft(4, 1.0), cifar_f.draw_paper(keys)
        run, moved = cifar_f.paper_perturb, cifar_f.PaperDraws
    else:
        mask, draws = cifar_f.reference_mask(4, 1.0), cifar_f.draw_reference(keys)
        run, moved = cifar_f.reference_perturb, cifar_f.ReferenceDraws
    on_cpu = run(images, mask, draws, spec.eps)
    device_draws = moved(amplitude=draws.amplitude.to(DEVICE), phase=draws.phase.to(DEVICE))
    on_device = run(images.to(DEVICE), mask.to(DEVICE), device_draws, spec.eps)
    torch.testing.assert_close(on_device.cpu(), on_cpu, rtol=0, atol=1e-9)  # float64 FFTs
