"""The composition denoiser · classifier is one base classifier for every stage.

Salman et al. (NeurIPS 2020, arXiv:2003.01908) smooth f ∘ D; certbench certifies it through the
same engine as any model, so an identity denoiser must change nothing, bit for bit, and the
composition must keep the engine's batch invariance.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from certbench.denoising import (
    DENOISER_PRESETS,
    DenoisedClassifier,
    DnCNN,
    DnCNNConfig,
    build_denoiser,
)
from certbench.errors import StateDictMismatchError
from certbench.nets import (
    Architecture,
    Manifest,
    Metadata,
    Preprocessing,
    Smoothing,
    build_classifier,
    load_model,
    save_weights,
)
from certbench.smoothing import certify

SIGMA = 0.5


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def classifier(arch: str = "wrn", **kwargs: int) -> nn.Module:
    """A classifier with BatchNorm (folded by the engine) unless ``arch`` says otherwise."""
    torch.manual_seed(0)
    kwargs = kwargs or ({"depth": 10, "widen_factor": 1} if arch == "wrn" else {})
    return build_classifier(arch, num_classes=10, mean=[0.45] * 3, std=[0.25] * 3, **kwargs)


def images(count: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return torch.rand((count, 3, 32, 32), generator=generator), torch.arange(count) % 10


def records(model: nn.Module, batch_size: int | None = None) -> list:
    """CERTIFY's records without their timings."""
    x, y = images()
    found = certify(
        model, x, y, sigma=SIGMA, n0=8, n=48, alpha=0.001, amp=None, batch_size=batch_size
    )
    return [replace(record, seconds=0.0) for record in found]


@pytest.mark.parametrize("identity", ["nn.Identity", "untrained DnCNN"])
def test_an_identity_denoiser_gives_the_classifiers_records_bit_for_bit(identity):
    """nn.Identity, and Salman et al.'s DnCNN at initialisation: its last convolution is
    zero-initialised (microsoft/denoised-smoothing, code/archs/dncnn.py), so x − 0 = x."""
    denoiser = nn.Identity() if identity == "nn.Identity" else DnCNN(depth=5, features=8)
    alone, composed = classifier().eval(), DenoisedClassifier(denoiser, classifier()).eval()
    x, _ = images()
    with torch.no_grad():
        assert torch.equal(composed(x), alone(x))
    assert records(composed) == records(alone)


def test_a_diffusion_composition_is_certified_the_same_whatever_the_batch():
    """A U-Net in front of a BatchNorm classifier: the engine's folding leaves the untraceable
    composition as it is, and the counts do not depend on the batch size."""
    torch.manual_seed(1)
    unet = build_denoiser(DENOISER_PRESETS["unet-demo"], sigma=SIGMA, input_size=(3, 32, 32))
    composed = DenoisedClassifier(unet, classifier()).eval()
    small, large = records(composed, batch_size=7), records(composed, batch_size=56)
    assert small == large


def test_dncnn_is_salman_et_als_network():
    net = DnCNN(image_channels=1, depth=6, features=8)
    convs = [m for m in net.dncnn if isinstance(m, nn.Conv2d)]
    norms = [m for m in net.dncnn if isinstance(m, nn.BatchNorm2d)]
    assert len(convs) == 6 and len(norms) == 4
    assert convs[0].bias is not None and all(c.bias is None for c in convs[1:])
    assert (convs[0].in_channels, convs[-1].out_channels) == (1, 1)
    assert all(n.eps == 1e-4 and n.momentum == 0.95 for n in norms)
    assert "dncnn.0.weight" in net.state_dict() and "dncnn.14.weight" in net.state_dict()
    assert torch.count_nonzero(convs[-1].weight) == 0
    # residual: the network estimates the noise and subtracts it
    torch.nn.init.normal_(convs[-1].weight)
    net.eval()
    x = torch.rand((2, 1, 12, 12))
    with torch.no_grad():
        assert torch.equal(net(x), x - net.dncnn(x))
        assert net(x).shape == x.shape


def manifest(denoiser: DnCNNConfig | None = None) -> Manifest:
    return Manifest(
        benchmark="demo-digits",
        architecture=Architecture(name="lenet5"),
        num_classes=10,
        preprocessing=Preprocessing(mean=(0.45,) * 3, std=(0.25,) * 3),
        smoothing=Smoothing(sigma=SIGMA),
        metadata=Metadata(name="denoised lenet5"),
        denoiser=denoiser,
    )


def test_a_denoised_submission_loads_from_one_safetensors_file(tmp_path):
    """certbench.nets.load_model, which every stage, the CLI and the zoo load through, builds
    denoiser · classifier from the manifest's denoiser block and one file of both parts."""
    config = DnCNNConfig(depth=4, features=8)
    torch.manual_seed(2)
    denoiser = build_denoiser(config, sigma=SIGMA, input_size=(3, 32, 32))
    torch.nn.init.normal_(denoiser.dncnn[-1].weight, std=0.01)  # not the identity
    model = DenoisedClassifier(denoiser, classifier("lenet5")).eval()
    path = tmp_path / "model.safetensors"
    save_weights(model, path)
    loaded = load_model(path, manifest(config))
    assert isinstance(loaded, DenoisedClassifier)
    x, _ = images()
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert {k.split(".")[0] for k in loaded.state_dict()} == {"denoiser", "classifier"}
    with pytest.raises(StateDictMismatchError, match="shape mismatches"):
        load_model(path, manifest(DnCNNConfig(depth=4, features=16)))
    with pytest.raises(StateDictMismatchError, match="the manifest has no denoiser"):
        load_model(path, manifest())
    save_weights(model.classifier, tmp_path / "plain.safetensors")
    with pytest.raises(StateDictMismatchError, match=r"start with 'denoiser\.' or 'classifier\.'"):
        load_model(tmp_path / "plain.safetensors", manifest(config))
    plain = load_model(tmp_path / "plain.safetensors", manifest())
    with torch.no_grad():
        assert torch.equal(plain(x), model.classifier(x))
