"""certbench train --recipe ddpm | denoiser-mse: the objectives, the run, its files, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import typer
from safetensors.torch import load_file
from torch import nn
from typer.testing import CliRunner, Result

from certbench.augment.seeds import RandomStream
from certbench.cli.denoiser_training import DENOISER_RECIPE_NAMES
from certbench.cli.train import register
from certbench.data.demo import write_demo_dataset
from certbench.denoising import (
    DenoisedClassifier,
    DiffusionDenoiser,
    DnCNN,
    NoiseSchedule,
    load_denoiser,
)
from certbench.denoising.config import DnCNNConfig
from certbench.errors import TrainingError
from certbench.nets import load_manifest, load_model
from certbench.training.config import RunOptions
from certbench.training.denoiser_recipes import (
    DENOISER_RECIPES,
    DenoiserTrainConfig,
    ddpm_loss,
    mse_loss,
)
from certbench.training.denoiser_trainer import train_denoiser

OPTIONS = RunOptions(progress=False, eval_split=None, threads=1)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_dataset(tmp_path_factory.mktemp("demo")).out


def test_the_cli_offers_every_denoiser_recipe():
    assert tuple(DENOISER_RECIPES) == DENOISER_RECIPE_NAMES


class TrueNoise(nn.Module):
    """Test-only U-Net stand-in that returns the ε the forward process used, recovered from
    x_t, the clean batch and the schedule: (x_t − √ᾱ_t x₀)/√(1 − ᾱ_t)."""

    def __init__(self, clean: torch.Tensor, schedule: NoiseSchedule) -> None:
        super().__init__()
        self.clean, self.schedule = clean, schedule
        self.steps: list[torch.Tensor] = []

    def forward(self, x_t: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        self.steps.append(steps)
        alpha_bar = torch.from_numpy(self.schedule.alphas_cumprod)[steps].view(-1, 1, 1, 1)
        x_start = self.clean.double() * 2 - 1
        return ((x_t.double() - alpha_bar.sqrt() * x_start) / (1 - alpha_bar).sqrt()).float()


def test_the_ddpm_objective_is_ho_et_als_simple_loss():
    """L_simple = E‖ε − ε_θ(√ᾱ_t x₀ + √(1 − ᾱ_t) ε, t)‖²: zero for the true noise, E‖ε‖² = 1 for
    a predictor that always says 0; t drawn over all the schedule's steps."""
    schedule = NoiseSchedule.named("linear", 1000)
    clean = torch.rand((64, 3, 8, 8), generator=torch.Generator().manual_seed(0))
    oracle = TrueNoise(clean, schedule)
    loss = ddpm_loss(DiffusionDenoiser(oracle, schedule, 0.5), clean, RandomStream(7), 0.5)
    assert float(loss) < 1e-9
    steps = oracle.steps[0]
    assert steps.dtype == torch.long and int(steps.min()) >= 0 and int(steps.max()) < 1000
    assert len(steps.unique()) > 50  # uniform over 1,000 steps, not one level

    class Zero(nn.Module):
        def forward(self, x_t: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            return torch.zeros_like(x_t)

    zero = ddpm_loss(DiffusionDenoiser(Zero(), schedule, 0.5), clean, RandomStream(7), 0.5)
    assert float(zero) == pytest.approx(1.0, abs=0.05)


def test_the_mse_objective_is_salman_et_als():
    """L_MSE = E‖D(x + δ) − x‖², δ ~ N(0, σ²I): for the identity (an untrained DnCNN) it is the
    mean of (σ·noise)² over the step's own noise stream."""
    clean = torch.rand((4, 3, 8, 8), generator=torch.Generator().manual_seed(0))
    loss = mse_loss(DnCNN(depth=4, features=4), clean, RandomStream(11), 0.5)
    noise = RandomStream(11).normal(clean.shape)
    torch.testing.assert_close(loss, (0.5 * noise).pow(2).mean())


def test_recipe_and_denoiser_must_agree(demo, tmp_path):
    learned_variance = {
        "kind": "diffusion",
        "unet": {"sample_size": 32, "out_channels": 6, "block_out_channels": [8],
                 "down_block_types": ["DownBlock2D"], "up_block_types": ["UpBlock2D"],
                 "norm_num_groups": 4},
    }  # fmt: skip
    cases = [
        ({"recipe": "ddpm", "denoiser": learned_variance}, "learned variance"),
        ({"recipe": "ddpm", "denoiser": "dncnn"}, "trains a 'diffusion' denoiser"),
        ({"recipe": "denoiser-mse", "denoiser": "unet-demo"}, "trains a 'dncnn' denoiser"),
        ({"recipe": "denoiser-mse", "denoiser": "memnet"}, "unknown denoiser preset"),
        ({"recipe": "diffusion"}, "unknown denoiser recipe"),
    ]
    for overrides, phrase in cases:
        config = DenoiserTrainConfig(**{"dataset": str(demo), **overrides})  # type: ignore[arg-type]
        with pytest.raises(TrainingError, match=phrase):
            train_denoiser(config, tmp_path / "bad", OPTIONS)


def small_mse(demo, epochs: int) -> DenoiserTrainConfig:
    return DenoiserTrainConfig(
        recipe="denoiser-mse", dataset=str(demo), denoiser="dncnn-demo", sigma=0.5,
        epochs=epochs, batch_size=16, limit=64,
    )  # fmt: skip


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(demo, tmp_path):
    straight = train_denoiser(small_mse(demo, 2), tmp_path / "straight", OPTIONS)
    train_denoiser(small_mse(demo, 2), tmp_path / "resumed", OPTIONS, until_epoch=1)
    resumed_options = RunOptions(**{**vars(OPTIONS), "resume": True})
    resumed = train_denoiser(small_mse(demo, 2), tmp_path / "resumed", resumed_options)
    first, second = load_file(str(straight.weights)), load_file(str(resumed.weights))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_the_cli_trains_a_denoiser_into_a_loadable_folder(demo, tmp_path):
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    out = tmp_path / "dncnn"
    args = [
        "train", "--recipe", "denoiser-mse", "--denoiser", '{"kind": "dncnn", "depth": 5, '
        '"features": 16}', "--dataset", str(demo), "--out", str(out), "--sigma", "0.5",
        "--epochs", "2", "--batch-size", "16", "--limit", "128", "--eval-limit", "32",
        "--threads", "1",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "epochs done: 2/2" in result.output and "eval_denoised_mse" in result.output
    card = json.loads((out / "denoiser.json").read_text())
    assert card["denoiser"] == {"kind": "dncnn", "depth": 5, "features": 16}
    assert card["smoothing"] == {"sigma": 0.5} and card["benchmark"] == "demo-digits"
    tensors = load_file(str(out / "denoiser.safetensors"))
    assert all(key.startswith("denoiser.dncnn.") for key in tensors)
    stripped = {key.removeprefix("denoiser."): value for key, value in tensors.items()}
    load_denoiser(stripped, DnCNNConfig(depth=5, features=16), sigma=0.5, input_size=(3, 32, 32))
    epochs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    last = [record for record in epochs if record["event"] == "epoch"][-1]
    assert last["eval_denoised_mse"] < last["eval_noisy_mse"]  # it denoises
    assert last["lr"] == pytest.approx(1e-4)  # Salman et al.'s ×0.1 after a third of the run

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--resume" in again.output
    kwarg = CliRunner().invoke(app, [*args, "--arch-kwarg", "depth=10"])
    assert kwarg.exit_code == 2 and "--arch-kwarg apply to the classifier recipes" in kwarg.output
    classifier = ["train", "--recipe", "gaussian", "--dataset", str(demo), "--out",
                  str(tmp_path / "c"), "--denoiser", "dncnn"]  # fmt: skip
    wrong = CliRunner().invoke(app, classifier)
    assert wrong.exit_code == 2 and "--denoiser applies to --recipe ddpm" in wrong.output


def test_the_cli_composes_a_denoised_submission_with_a_trained_classifier(demo, tmp_path):
    """``--classifier FOLDER``: the denoiser goes in front of a ``certbench train`` classifier,
    and ``--out`` gets model.safetensors + manifest.json that load as denoiser · classifier."""
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    common = ["--dataset", str(demo), "--epochs", "1", "--batch-size", "16", "--limit", "64",
              "--eval-split", "none", "--threads", "1", "--sigma", "0.5"]  # fmt: skip

    def run(recipe: str, out: Path, *extra: str) -> Result:
        return CliRunner().invoke(app, ["train", "--recipe", recipe, "--out", str(out), *common,
                                        *extra])  # fmt: skip

    classifier = tmp_path / "lenet"
    result = run("gaussian", classifier, "--arch", "lenet5")
    assert result.exit_code == 0, result.output
    missing = run("denoiser-mse", tmp_path / "x", "--classifier", str(tmp_path))
    assert missing.exit_code == 2
    assert "holds no model.safetensors or manifest.json" in missing.output
    assert not (tmp_path / "x" / "train_log.jsonl").exists()  # refused before training
    wrong = run("gaussian", tmp_path / "y", "--classifier", str(classifier))
    assert wrong.exit_code == 2 and "--classifier applies to --recipe ddpm" in wrong.output

    out = tmp_path / "denoised"
    result = run("denoiser-mse", out, "--denoiser", "dncnn-demo", "--classifier", str(classifier))
    assert result.exit_code == 0, result.output
    assert "denoised submission (denoiser · classifier)" in result.output
    manifest = load_manifest(out / "manifest.json")
    assert manifest.denoiser == DnCNNConfig(depth=6, features=32)
    assert manifest.smoothing.sigma == 0.5 and manifest.architecture.name == "lenet5"
    assert str(manifest.metadata.paper_url) == "https://arxiv.org/abs/2003.01908"
    model = load_model(out / "model.safetensors", manifest)
    assert isinstance(model, DenoisedClassifier)
    plain = load_model(
        classifier / "model.safetensors", load_manifest(classifier / "manifest.json")
    )
    x = torch.rand((2, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model.classifier(x), plain(x))
