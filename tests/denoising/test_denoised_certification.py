"""A diffusion denoiser raises the certified accuracy of a classifier trained without noise.

Carlini et al. (ICLR 2023, arXiv:2206.10550): an off-the-shelf classifier, never trained under
noise, certifies robustness once a diffusion model's one-shot denoising runs in front of it. On
the demo digits a tiny DDPM (Ho et al. 2020's L_simple; ``unet-tiny``, a two-level
``UNet2DModel`` of 16 and 32 channels, one epoch in batches of 8) and a WRN-10-1 trained three
epochs on clean images are written as one denoised submission by
``certbench.training.compose_submission`` (one safetensors file of ``denoiser.*`` and
``classifier.*`` tensors, the manifest with its ``denoiser`` block), loaded back through
``certbench.nets.load_model``, and certified with randomized smoothing at σ = 0.5 beside the
classifier alone (Cohen et al.'s CERTIFY, n0 = 8, n = 64, α = 0.001, 37 test images). The
learning rate is 2·10⁻³ instead of Ho et al.'s 2·10⁻⁴: 179 steps, not 800,000. About 40 s of
one CPU core.
"""

from __future__ import annotations

import json

import pytest
import torch

from certbench.data.demo import write_demo_dataset
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.denoising import DenoisedClassifier
from certbench.nets import load_manifest, load_model
from certbench.smoothing import certify, summarize
from certbench.training import compose_submission
from certbench.training.config import RunOptions
from certbench.training.denoiser_recipes import DenoiserTrainConfig
from certbench.training.denoiser_trainer import train_denoiser
from certbench.training.trainer import TrainConfig, train

SIGMA = 0.5
RADIUS = 0.25


@pytest.mark.slow
def test_a_ddpm_in_front_of_a_clean_classifier_certifies_more(tmp_path):
    threads = torch.get_num_threads()
    demo = write_demo_dataset(tmp_path / "demo").out
    options = RunOptions(progress=False, eval_split=None, threads=1)
    try:
        clean = TrainConfig(
            recipe="gaussian", dataset=str(demo), arch="wrn",
            arch_kwargs={"depth": 10, "widen_factor": 1}, sigma=SIGMA, train_sigma=0.0,
            epochs=3, batch_size=16, lr=0.05,
        )  # fmt: skip
        classifier_run = train(clean, tmp_path / "classifier", options)
        ddpm = DenoiserTrainConfig(
            recipe="ddpm", dataset=str(demo), denoiser="unet-tiny", sigma=SIGMA, epochs=1,
            batch_size=8, lr=2e-3,
        )  # fmt: skip
        denoiser_run = train_denoiser(ddpm, tmp_path / "ddpm", options)

        classifier = load_model(classifier_run.weights, load_manifest(classifier_run.manifest))
        weights, manifest_path = compose_submission(classifier_run.out, denoiser_run.out)
        denoised = load_model(weights, load_manifest(manifest_path))
        assert isinstance(denoised, DenoisedClassifier)
        card = json.loads(denoiser_run.card.read_text())
        assert denoised.denoiser.timestep == card["timestep"] == 259  # type: ignore[union-attr]

        test = load_images(demo, split="test", subset=Subset(skip=10))
        certified = {}
        for name, model in (("classifier", classifier), ("denoised", denoised)):
            records = certify(
                model, test.as_float(), test.labels, sigma=SIGMA, n0=8, n=64, alpha=0.001
            )
            certified[name] = summarize(records).certified_accuracy[RADIUS]
    finally:
        torch.set_num_threads(threads)
    assert certified["denoised"] >= certified["classifier"] + 0.1, certified
