"""Device-aware engine defaults and BatchNorm folding (issue 28 §3)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from certbench.nets import batchnorm_count, build_classifier, fold_batchnorm
from certbench.smoothing import certify, sampling
from certbench.smoothing.defaults import (
    AUTO_COMPILE_SAMPLES,
    DEVICE_DEFAULTS,
    compiler_available,
    engine_choice,
)

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


def _trained_like_resnet() -> nn.Module:
    """A ResNet-20 whose BatchNorm statistics and affine terms are not the identity (as after
    training), so folding really rescales the convolutions."""
    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    g = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            c = module.num_features
            module.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            module.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            module.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            module.bias.data.copy_(torch.randn(c, generator=g) * 0.1)
    return model.eval()


def test_folded_batchnorm_gives_the_same_logits_and_leaves_the_model_alone():
    model = _trained_like_resnet()
    folded = fold_batchnorm(model)
    assert batchnorm_count(model) == 21 and batchnorm_count(folded) == 0
    x = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (folded(x) - model(x)).abs().max() < 1e-5
    assert batchnorm_count(model) == 21  # a copy was folded
    with pytest.raises(ValueError, match="eval"):
        fold_batchnorm(model.train())


def test_certification_with_folded_batchnorm_predicts_as_without(monkeypatch):
    model = _trained_like_resnet()
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([0, 1, 2])
    kwargs = dict(sigma=0.25, n0=20, n=200, seed=5, batch_size=64)
    folded = certify(model, x, y, **kwargs)
    monkeypatch.setattr(sampling, "fold_batchnorm", lambda m: m)
    sampling._FOLDED.clear()
    plain = certify(model, x, y, **kwargs)
    assert [(r.prediction, r.selected) for r in folded] == [
        (r.prediction, r.selected) for r in plain
    ]
    assert [r.n_a for r in folded] == [r.n_a for r in plain]


def test_the_folded_copy_is_rebuilt_when_weights_change_in_place():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(3))
    model(torch.rand(1, 3, 8, 8))
    x, y = torch.rand(2, 3, 8, 8), torch.tensor([0, 1])
    kwargs = dict(sigma=0.5, n0=10, n=50, seed=1)
    before = certify(model, x, y, **kwargs)
    with torch.no_grad():
        model[3].bias.copy_(torch.tensor([100.0, 0.0, 0.0]))  # an optimizer step, in place
    after = certify(model, x, y, **kwargs)
    assert [r.selected for r in after] == [0, 0]
    assert [r.n_a for r in after] == [50, 50] != [r.n_a for r in before]


def test_engine_choice_follows_the_device_table_and_explicit_arguments_win():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    small = engine_choice(cpu, 1000, batch_size=None, amp="auto", compile=None)
    assert (small.batch_size, small.amp, small.compile) == (*DEVICE_DEFAULTS["cpu"], False)
    gpu = engine_choice(cuda, 1000, batch_size=None, amp="auto", compile=None)
    assert (gpu.batch_size, gpu.amp) == DEVICE_DEFAULTS["cuda"] == (4096, "bf16")
    explicit = engine_choice(cpu, 10**7, batch_size=7, amp=None, compile=False)
    assert (explicit.batch_size, explicit.amp, explicit.compile) == (7, None, False)
    assert engine_choice(cpu, 1, batch_size=None, amp=None, compile=None,
                         compiled_already=True).compile  # fmt: skip
    big = engine_choice(cpu, AUTO_COMPILE_SAMPLES, batch_size=None, amp=None, compile=None)
    assert big.compile == compiler_available(cpu)


def test_a_default_demo_shard_never_pays_for_compilation():
    """The first-start demo certifies one default shard per test set; compiling it cost more
    than the shard's 30 s time limit on a loaded CI machine, so auto-compile must stay off there
    while a shard of the papers' protocol (n = 100,000) still compiles."""
    import json
    from pathlib import Path

    from models.core.settings import Settings

    root = Path(__file__).resolve().parents[2]
    definition = root / "models/catalog/definitions/demo-digits.json"
    demo = json.loads(definition.read_text())["protocol"]
    shard = Settings.model_fields["shard_size"].default
    cpu = torch.device("cpu")
    demo_shard = engine_choice(cpu, shard * (demo["n0"] + demo["n"]), batch_size=None,
                               amp=None, compile=None)  # fmt: skip
    assert demo_shard.compile is False
    paper_shard = engine_choice(cpu, shard * (100 + 100_000), batch_size=None, amp=None,
                                compile=None)  # fmt: skip
    assert paper_shard.compile == compiler_available(cpu)
