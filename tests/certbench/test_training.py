"""certbench train: recipe losses, schedule, checkpoints (no pickle), resume, outputs, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import typer
from safetensors.torch import load_file
from torch import nn
from typer.testing import CliRunner

from certbench.augment.seeds import RandomStream
from certbench.cli.train import RECIPE_NAMES, register
from certbench.data.demo import write_demo_dataset
from certbench.data.sources import load_images
from certbench.errors import TrainingError
from certbench.nets.loading import load_manifest, load_model
from certbench.training.checkpoint import load_checkpoint, save_checkpoint
from certbench.training.data import TrainBatches, make_views
from certbench.training.recipes import RECIPES, get_recipe, recipe_loss
from certbench.training.schedule import Schedule, build_optimizer
from certbench.training.trainer import RunOptions, TrainConfig, train

pytestmark = pytest.mark.memory(gib=1.25)

TINY = {"arch": "wrn", "arch_kwargs": {"depth": 10, "widen_factor": 1}}


@pytest.fixture(autouse=True)
def one_thread():
    """One thread: deterministic kernels and no spin-waiting on a small shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_dataset(tmp_path_factory.mktemp("demo")).out


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
    )


def views_for(recipe_name: str, batch: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.rand((batch, get_recipe(recipe_name).num_views, 3, 8, 8), generator=g)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_gives_a_finite_loss_and_gradients(name):
    recipe, model = get_recipe(name), tiny_model()
    lbd, eta = recipe.default_weights("cifar10")
    labels = torch.arange(6) % 10
    result = recipe_loss(
        recipe,
        model,
        views_for(name),
        labels,
        sigma=0.25,
        stream=RandomStream(0),
        lbd=lbd,
        eta=eta,
    )
    result.loss.backward()
    assert torch.isfinite(result.loss) and 0 <= int(result.correct) <= 6
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_gaussian_without_noise_is_cross_entropy_on_the_image():
    model, views = tiny_model(), views_for("gaussian")
    labels = torch.arange(6)
    result = recipe_loss(
        get_recipe("gaussian"),
        model,
        views,
        labels,
        sigma=0.0,
        stream=RandomStream(0),
        lbd=None,
        eta=None,
    )
    torch.testing.assert_close(result.loss, nn.functional.cross_entropy(model(views[:, 0]), labels))


def seen_inputs(name: str, batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs a recipe feeds the model, and the clean views they came from."""
    recipe, views = get_recipe(name), views_for(name, batch)
    captured = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        captured.append(x)
        return torch.zeros(x.shape[0], 10, requires_grad=True)

    lbd, eta = recipe.default_weights("cifar10")
    recipe_loss(
        recipe,
        forward,
        views,
        torch.zeros(batch, dtype=torch.int64),
        sigma=0.25,
        stream=RandomStream(3),
        lbd=lbd,
        eta=eta,
    )
    clean = views.transpose(0, 1)[:, None].expand(
        recipe.num_views, recipe.noise_samples, *views.transpose(0, 1).shape[1:]
    )
    return captured[0], clean.reshape(-1, *views.shape[2:])


def test_jsd_recipes_put_noise_on_about_half_of_the_inputs():
    inputs, clean = seen_inputs("fouriermix-jsd")
    noisy = (inputs - clean).flatten(1).abs().amax(dim=1) > 0
    assert inputs.shape[0] == 3 * 64 and 0.35 < noisy.float().mean() < 0.65


@pytest.mark.parametrize("name", ["gaussian", "gaussian-jsd", "augmix-hcr", "fouriermix-hcr"])
def test_other_recipes_put_noise_on_every_input(name):
    inputs, clean = seen_inputs(name)
    recipe = get_recipe(name)
    assert inputs.shape[0] == recipe.num_views * recipe.noise_samples * 64
    assert ((inputs - clean).flatten(1).abs().amax(dim=1) > 0).all()
    assert (inputs - clean).std() == pytest.approx(0.25, rel=0.05)


def test_view_count_mismatch_is_refused():
    with pytest.raises(TrainingError, match="3 view"):
        recipe_loss(
            get_recipe("augmix-jsd"),
            tiny_model(),
            views_for("gaussian"),
            torch.zeros(6, dtype=torch.int64),
            sigma=0.25,
            stream=RandomStream(0),
            lbd=12.0,
            eta=None,
        )


def test_cli_recipe_list_matches_the_registry():
    assert tuple(RECIPES) == RECIPE_NAMES
    with pytest.raises(TrainingError, match="fouriermix-hcr"):
        get_recipe("fouriermix")


def test_paper_schedule_decays_at_100_and_150_of_200_epochs():
    schedule = Schedule()
    assert schedule.milestone_epochs() == [100, 150]
    optimizer, scheduler = build_optimizer(nn.Linear(2, 2), schedule)
    lrs = []
    for _ in range(200):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == lrs[99] == 0.1
    assert lrs[100] == pytest.approx(0.01) and lrs[149] == pytest.approx(0.01)
    assert lrs[150] == pytest.approx(0.001) and lrs[199] == pytest.approx(0.001)
    assert optimizer.defaults["momentum"] == 0.9 and optimizer.defaults["weight_decay"] == 1e-4
    assert Schedule(epochs=10).milestone_epochs() == [5, 8]


def trained_state(steps: int = 3):
    model = tiny_model()
    optimizer, scheduler = build_optimizer(model, Schedule(epochs=4))
    for _ in range(steps):
        loss = model(torch.rand(4, 3, 8, 8)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def test_checkpoint_round_trip_restores_model_optimizer_and_scheduler(tmp_path):
    model, optimizer, scheduler = trained_state()
    folder = save_checkpoint(
        tmp_path, epoch=3, model=model, optimizer=optimizer, scheduler=scheduler, config={"a": 1}
    )
    for name in ("model.safetensors", "optimizer.safetensors"):
        head = (folder / name).read_bytes()[:2]
        assert head[:1] != b"\x80" and head != b"PK"  # neither pickle nor a torch.save zip
        assert load_file(str(folder / name))  # plain safetensors
    json.loads((folder / "state.json").read_text())
    fresh = tiny_model()
    for p in fresh.parameters():
        p.data.zero_()
    opt2, sched2 = build_optimizer(fresh, Schedule(epochs=4))
    restored = load_checkpoint(tmp_path, model=fresh, optimizer=opt2, scheduler=sched2)
    assert restored.epoch == 3 and restored.config == {"a": 1}
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for p1, p2 in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(
            optimizer.state[p1]["momentum_buffer"], opt2.state[p2]["momentum_buffer"]
        )
    assert sched2.last_epoch == scheduler.last_epoch
    assert sched2.get_last_lr() == scheduler.get_last_lr()
    assert sched2.milestones == scheduler.milestones


def test_a_torn_checkpoint_is_refused(tmp_path):
    model, optimizer, scheduler = trained_state()
    folder = save_checkpoint(
        tmp_path, epoch=1, model=model, optimizer=optimizer, scheduler=scheduler, config={}
    )
    (folder / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(TrainingError, match="interrupted write"):
        load_checkpoint(tmp_path, model=model, optimizer=optimizer, scheduler=scheduler)


def config(demo, **overrides) -> TrainConfig:
    values = {
        "recipe": "gaussian",
        "dataset": str(demo),
        "epochs": 2,
        "batch_size": 32,
        "lr": 0.05,
        "limit": 96,
        **TINY,
    }
    values.update(overrides)
    return TrainConfig(**values)


OPTIONS = RunOptions(progress=False, eval_limit=64, threads=1)


def weights_of(path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


#: The resume check per kind of randomness a recipe draws: Gaussian noise only, AugMix's PIL
#: operations (loader side), FourierMix's spectral noise with the HCR's noise copies.
RESUME_CASES = {
    "gaussian": {},
    "augmix-jsd": {"batch_size": 16, "limit": 32},
    "fouriermix-hcr": {"batch_size": 16, "limit": 32},
}


@pytest.mark.parametrize("recipe", list(RESUME_CASES))
def test_resumed_run_ends_with_the_same_weights_as_an_uninterrupted_one(demo, tmp_path, recipe):
    cfg = config(demo, recipe=recipe, **RESUME_CASES[recipe])
    whole = train(cfg, tmp_path / "whole", OPTIONS)
    first = train(cfg, tmp_path / "split", OPTIONS, until_epoch=1)
    assert first.epochs_done == 1
    after_one = weights_of(first.weights)
    rest = train(cfg, tmp_path / "split", RunOptions(**{**vars(OPTIONS), "resume": True}))
    assert rest.epochs_done == 2
    a, b = weights_of(whole.weights), weights_of(rest.weights)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(after_one[k], a[k]) for k in a)


def test_outputs_load_as_a_submission_and_the_log_is_json_lines(demo, tmp_path):
    result = train(config(demo, epochs=1, sigma=0.5), tmp_path / "run", OPTIONS)
    manifest = load_manifest(result.manifest)
    assert manifest.smoothing.sigma == 0.5 and manifest.architecture.name == "wrn"
    assert manifest.num_classes == 10 and manifest.preprocessing.std == (1.0, 1.0, 1.0)
    train_images = load_images(demo, split="train").images[:96].double() / 255
    assert manifest.preprocessing.mean[0] == pytest.approx(float(train_images.mean()), abs=1e-4)
    model = load_model(result.weights, manifest)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    records = [json.loads(line) for line in result.log.read_text().splitlines()]
    assert [r["event"] for r in records] == ["start", "epoch", "end"]
    epoch = records[1]
    assert epoch["lr"] == pytest.approx(0.05) and epoch["images_per_second"] > 0
    assert 0 <= epoch["eval_noisy_accuracy"] <= 1 and epoch["train_loss"] > 0


def test_views_do_not_depend_on_the_number_of_dataloader_workers(demo, tmp_path):
    cfg = config(demo, recipe="fouriermix-jsd", epochs=1, batch_size=16, limit=32)
    no_workers = train(cfg, tmp_path / "w0", RunOptions(**{**vars(OPTIONS), "workers": 0}))
    workers = train(cfg, tmp_path / "w2", RunOptions(**{**vars(OPTIONS), "workers": 2}))
    a, b = weights_of(no_workers.weights), weights_of(workers.weights)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_existing_checkpoint_needs_resume_and_the_same_settings(demo, tmp_path):
    train(config(demo, epochs=1, limit=32), tmp_path / "run", OPTIONS)
    with pytest.raises(TrainingError, match="--resume"):
        train(config(demo, epochs=1, limit=32), tmp_path / "run", OPTIONS)
    resume = RunOptions(**{**vars(OPTIONS), "resume": True})
    with pytest.raises(TrainingError, match="sigma"):
        train(config(demo, epochs=1, limit=32, sigma=0.5), tmp_path / "run", resume)


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"recipe": "mixup"}, "unknown recipe"),
        ({"sigma": 0.0}, "sigma"),
        ({"batch_size": 1}, "batch_size"),
        ({"epochs": 0}, "epochs"),
        ({"normalize": "zscore"}, "normalize"),
        ({"batch_size": 512}, "lower --batch-size"),
    ],
)
def test_bad_settings_are_refused_with_the_fix(demo, tmp_path, overrides, phrase):
    with pytest.raises(TrainingError, match=phrase):
        train(config(demo, **overrides), tmp_path / "bad", OPTIONS)


def test_cli_trains_and_reports_errors_in_one_line(demo, tmp_path):
    app = typer.Typer()
    app.callback()(lambda: None)  # a command group, as in `certbench`
    register(app)
    args = [
        "train", "--recipe", "gaussian", "--dataset", str(demo), "--out", str(tmp_path / "c"),
        "--arch", "wrn", "--arch-kwarg", "depth=10", "--arch-kwarg", "widen_factor=1",
        "--epochs", "1", "--batch-size", "16", "--limit", "32", "--eval-limit", "16",
        "--threads", "1",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "epochs done: 1/1" in result.output
    # The demo data's card names its benchmark: the README's example is submittable as written.
    assert load_manifest(tmp_path / "c" / "manifest.json").benchmark == "demo-digits"
    assert "manifest benchmark: 'demo-digits'" in result.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--resume" in again.output
    bad = CliRunner().invoke(app, [*args[:-2], "--arch-kwarg", "depth"])
    assert bad.exit_code == 2 and "NAME=VALUE" in bad.output


def test_registering_the_train_command_imports_no_torch():
    code = (
        "import sys, typer; from certbench.cli.train import register; "
        "register(typer.Typer()); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fp16_autocast_is_refused_for_want_of_loss_scaling(demo, tmp_path):
    fp16 = RunOptions(**{**vars(OPTIONS), "amp": "fp16"})
    with pytest.raises(TrainingError, match="loss scaling"):
        train(config(demo), tmp_path / "fp16", fp16)


def test_views_made_on_the_training_device_equal_the_loader_views():
    """The GPU-side path (views built in the training loop) gives the loader's views."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (8, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels, indices = torch.arange(8) % 10, torch.arange(100, 108)
    recipe = get_recipe("fouriermix-hcr")
    key = (3, [5, 1, 7])
    in_loader = TrainBatches(images, labels, indices, recipe, seed=4)[key]
    deferred = TrainBatches(images, labels, indices, recipe, seed=4, gpu_views=True)[key]
    views = make_views(recipe, deferred["base"], deferred["seeds"])
    assert torch.equal(views, in_loader["views"]) and views.shape == (3, 3, 3, 32, 32)
    assert torch.equal(views[:, 0], deferred["base"].float() / 255)
    with pytest.raises(TrainingError, match="FourierMix only"):
        TrainBatches(images, labels, indices, get_recipe("augmix-jsd"), seed=4, gpu_views=True)


def test_gpu_augmentation_needs_a_gpu(demo, tmp_path):
    options = RunOptions(**{**vars(OPTIONS), "device": "cpu", "augment_device": "cuda"})
    with pytest.raises(TrainingError, match="augment-device"):
        train(config(demo, recipe="fouriermix-jsd", epochs=1, limit=32), tmp_path / "g", options)
