"""A denoised smoothing entry end to end on the embedded stack (issue 33 §2): a LeNet-5 trained
without noise and a tiny DDPM (``certbench train --recipe ddpm --classifier``) submitted as one
entry through the REST API, certified by a real ``certbench worker --embedded`` process,
reproduced record for record by ``certbench certify --seed <revealed>``, rebuilt by the zoo's
``load_model``, shown on the leaderboard as ``diffusion · lenet5`` with what built each part.

The stack and its benchmark (12 demo test images, n0 = 10, n = 200, one shard) are the timm
test's (``tests/workers/test_worker_library_architectures.py``). Sized for seconds: the
classifier trains two epochs, the U-Net (``unet-tiny``) one epoch on 512 images; accuracy is not
asserted here (``tests/denoising/test_denoised_certification.py`` measures the gain).
"""

from __future__ import annotations

from pathlib import Path

import diffusers
import httpx
import pytest
import torch
import typer
from typer.testing import CliRunner

from certbench import __version__
from certbench.cli.train import register as register_train
from certbench.client import Client
from certbench.client.zoo import load_model as zoo_model
from certbench.denoising import DenoisedClassifier
from certbench.nets import load_manifest
from certbench.nets import load_model as load_local
from certbench.nets.cost import manifest_cost
from models.db.engine import session_scope
from tests.support import timing
from tests.support.service_factories import make_user
from tests.workers.test_worker_library_architectures import (  # the same stack and benchmark
    BENCHMARK,
    N0,
    SIGMA,
    N,
    Stack,
    assert_cli_reproduces,
    stack,
)

__all__ = ["stack"]  # the imported module fixture, used by name below

pytestmark = [pytest.mark.slow, pytest.mark.memory(gib=2)]


def train(data: Path, out: Path) -> tuple[Path, Path]:
    """A clean LeNet-5, then a tiny DDPM composed in front of it: the composed folder's files."""
    group = typer.Typer()
    group.callback()(lambda: None)
    register_train(group)
    common = ["--dataset", str(data), "--benchmark", BENCHMARK, "--sigma", str(SIGMA),
              "--seed", "1", "--threads", "1", "--eval-split", "none"]  # fmt: skip
    runs = [
        ["--recipe", "gaussian", "--arch", "lenet5", "--train-sigma", "0", "--epochs", "2",
         "--batch-size", "32", "--lr", "0.05", "--out", str(out / "clean")],
        ["--recipe", "ddpm", "--denoiser", "unet-tiny", "--epochs", "1", "--batch-size", "8",
         "--lr", "2e-3", "--limit", "512", "--classifier", str(out / "clean"), "--out",
         str(out / "ddpm")],
    ]  # fmt: skip
    for args in runs:
        result = CliRunner().invoke(group, ["train", *args, *common])
        assert result.exit_code == 0, result.output
    return out / "ddpm" / "model.safetensors", out / "ddpm" / "manifest.json"


def test_a_denoised_entry_is_certified_end_to_end_and_reproduced(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the zoo's download cache
    weights, manifest = train(stack.data, tmp_path)
    spec = load_manifest(manifest)
    assert spec.denoiser is not None and spec.denoiser.kind == "diffusion"

    with session_scope(stack.settings) as session:
        _, token = make_user(session, "alice-denoised")
    with Client(stack.url, token) as client:
        created = client.submit(weights, manifest, weights_public=True, weights_license="MIT")
        assert created.state == "submitted", created
        done = client.wait(created.id, interval=0.5, max_interval=2, timeout=timing.seconds(300))
        assert done.state == "finished", (done, stack.worker.tail())
        results = client.results(created.id).raw
        zoo = zoo_model(BENCHMARK, created.id, client=client)
    (stage,) = [s for s in results["stages"] if s["stage"] == "certification"]
    assert stage["protocol"]["architecture"] == {
        "name": "lenet5", "library": "certbench", "version": __version__,
    }  # fmt: skip
    assert stage["protocol"]["denoiser"] == {
        "kind": "diffusion", "library": "diffusers", "version": diffusers.__version__,
    }  # fmt: skip
    cost = manifest_cost(spec)  # the U-Net's FLOPs and the classifier's, per noise sample
    assert stage["protocol"]["network"] == cost.to_dict()
    assert results["summary"]["flops_per_image"] == cost.flops_per_sample * (N0 + N)

    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=stack.url, headers=bearer, timeout=timing.seconds(60)) as web:
        page = web.get(f"/models/{created.id}").text
        assert "<code>diffusion · lenet5</code>" in page
        assert f"denoiser built by <code>diffusers {diffusers.__version__}</code>" in page
        board = web.get(f"/api/v1/leaderboards/{BENCHMARK}", params={"denoiser": "diffusion"})
        assert [row["architecture"] for row in board.json()["rows"]] == ["diffusion · lenet5"]
        seed = web.get(f"/api/v1/submissions/{created.id}").json()["seed"]["value"]
        stored = web.get(f"/api/v1/results/{created.id}/records/clean").content

    assert_cli_reproduces(stack, weights, manifest, seed, stored, tmp_path)

    local = load_local(weights, spec)
    assert isinstance(zoo, DenoisedClassifier) and isinstance(local, DenoisedClassifier)
    images = torch.rand((4, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(zoo(images), local(images))
    figures = results["results"][0]
    print(f"\ndiffusion · lenet5 ({figures['count']} images): smoothed clean accuracy "
          f"{figures['clean_accuracy']:.3f}, certified accuracy {figures['certified_accuracy']}, "
          f"ACR {figures['acr']:.3f}; {cost.parameters:,} parameters, per certified image "
          f"{results['summary']['flops_per_image']:.3g} FLOPs and "
          f"{results['summary']['seconds_per_image']:.3f} CPU-seconds")  # fmt: skip
