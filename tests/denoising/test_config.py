"""A manifest's denoiser block is data: allow-listed keys, bounded values, clear refusals."""

from __future__ import annotations

import math

import pytest

from certbench.denoising import (
    DDPM_CIFAR10_UNET,
    DENOISER_PRESETS,
    DenoiserConfigError,
    DiffusionDenoiserConfig,
    DnCNNConfig,
    denoiser_shapes,
    parse_denoiser_config,
)
from certbench.errors import ManifestError

SMALL_UNET = {
    "sample_size": 32,
    "block_out_channels": [16, 32],
    "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
    "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
    "norm_num_groups": 8,
}


def diffusion(**unet: object) -> dict[str, object]:
    return {"kind": "diffusion", "unet": {**SMALL_UNET, **unet}}


def test_a_valid_block_parses_into_its_kind():
    parsed = parse_denoiser_config({**diffusion(dropout=0.1), "beta_schedule": "cosine"})
    assert isinstance(parsed, DiffusionDenoiserConfig)
    assert parsed.unet.block_out_channels == (16, 32) and parsed.num_train_timesteps == 1000
    assert parse_denoiser_config({"kind": "dncnn", "depth": 5}) == DnCNNConfig(depth=5)
    # what a manifest stores reads back as the same configuration
    assert parse_denoiser_config(parsed.model_dump(mode="json")) == parsed


@pytest.mark.parametrize(
    ("block", "named"),
    [
        (diffusion(class_embed_type="timestep"), "'class_embed_type' is not allowed"),
        (diffusion(pretrained=True), "'pretrained' is not allowed"),
        (diffusion(checkpoint_path="/etc/passwd"), "'checkpoint_path' is not allowed"),
        ({**diffusion(), "url": "https://example.org/unet.bin"}, "'url' is not allowed"),
        ({"kind": "dncnn", "file": "weights.pt"}, "'file' is not allowed"),
        ({"kind": "dncnn", "pretrained_cfg_overlay": {}}, "'pretrained_cfg_overlay' is not"),
        (diffusion(down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"]), "down_block_types"),
        (diffusion(block_out_channels=[10**12, 32]), "less than or equal to 1024"),
        (diffusion(out_channels=5), "out_channels must be in_channels"),
        (diffusion(block_out_channels=[16]), "one entry per level"),
        (diffusion(norm_num_groups=5), "not divisible"),
        (diffusion(layers_per_block=True), "layers_per_block"),
        ({**diffusion(), "num_train_timesteps": 10**9}, "num_train_timesteps"),
        ({**diffusion(), "beta_schedule": "squaredcos_cap_v2"}, "beta_schedule"),
        ({"kind": "dncnn", "depth": 10**6}, "depth"),
        ({"kind": "memnet"}, "'diffusion', 'dncnn'"),
        ({"depth": 17}, "kind"),
    ],
)
def test_hostile_or_wrong_blocks_are_refused_naming_the_key(block, named):
    with pytest.raises(DenoiserConfigError, match=named) as caught:
        parse_denoiser_config(block)
    assert isinstance(caught.value, ManifestError)  # the API's 422 for manifests


def test_an_unknown_key_refusal_lists_the_allowed_keys():
    with pytest.raises(DenoiserConfigError) as caught:
        parse_denoiser_config(diffusion(num_class_embeds=10))
    message = str(caught.value)
    assert message.startswith("invalid denoiser: denoiser.unet: 'num_class_embeds' is not allowed")
    assert "allowed keys: sample_size, in_channels" in message


def test_the_ddpm_preset_is_ho_et_als_cifar10_network():
    """Ho et al. (NeurIPS 2020, Appendix B): "Our CIFAR10 model has 35.7 million parameters",
    counted here on the meta device (no memory)."""
    config = DENOISER_PRESETS["ddpm-cifar10-32"]
    assert isinstance(config, DiffusionDenoiserConfig) and config.unet == DDPM_CIFAR10_UNET
    shapes = denoiser_shapes(config, sigma=0.25, input_size=(3, 32, 32))
    assert all(name.startswith("denoiser.unet.") for name in shapes)
    parameters = sum(math.prod(shape) for shape in shapes.values())
    assert round(parameters / 1e6, 1) == 35.7


def test_salman_et_als_dncnn_presets():
    """microsoft/denoised-smoothing, code/architectures.py: ``cifar_dncnn`` 17 layers of 64
    features, ``cifar_dncnn_wide`` of 128."""
    assert DENOISER_PRESETS["dncnn"] == DnCNNConfig(depth=17, features=64)
    assert DENOISER_PRESETS["dncnn-wide"] == DnCNNConfig(depth=17, features=128)
