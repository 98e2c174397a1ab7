"""Gaussian augmentation buys certified robustness that clean training lacks (the digits demo).

Cohen et al. (2019): the base classifier of a smoothed model must be trained under the noise it
is certified with. On the demo digits a small WRN-10-1 with BatchNorm, trained three epochs with
and without N(0, σ²) noise, is certified with randomized smoothing at σ = 0.5; the noise-trained
one must certify clearly more test images at radius 0.25. (At σ = 0.25 the 4×4-block digits are
too easy to separate the two: each 8×8 value is repeated 16 times, which averages the noise.)
"""

from __future__ import annotations

import pytest
import torch

from certbench.data.demo import write_demo_dataset
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.nets.loading import load_manifest, load_model
from certbench.smoothing.core import certify
from certbench.smoothing.metrics import summarize
from certbench.training.trainer import RunOptions, TrainConfig, train

SIGMA = 0.5


@pytest.mark.slow
def test_gaussian_training_certifies_more_than_clean_training(tmp_path):
    threads = torch.get_num_threads()
    demo = write_demo_dataset(tmp_path / "demo").out
    test = load_images(demo, split="test", subset=Subset(skip=5))
    certified = {}
    try:
        for train_sigma in (0.0, SIGMA):
            cfg = TrainConfig(
                recipe="gaussian",
                dataset=str(demo),
                arch="wrn",
                arch_kwargs={"depth": 10, "widen_factor": 1},
                sigma=SIGMA,
                train_sigma=train_sigma,
                epochs=3,
                batch_size=16,
                lr=0.05,
            )
            options = RunOptions(progress=False, eval_split=None, threads=1)
            result = train(cfg, tmp_path / f"noise_{train_sigma}", options)
            model = load_model(result.weights, load_manifest(result.manifest))
            records = certify(
                model, test.as_float(), test.labels, sigma=SIGMA, n0=8, n=64, alpha=0.001
            )
            certified[train_sigma] = summarize(records).certified_accuracy[0.25]
    finally:
        torch.set_num_threads(threads)
    assert certified[SIGMA] >= certified[0.0] + 0.1, certified
