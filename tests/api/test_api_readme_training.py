"""The README's CPU training example gives a model the server accepts (issue 25 §3: its
manifest named benchmark ``"digits"`` and the upload was refused with benchmark_mismatch). The
example's settings (``certbench datasets demo --out data/digits``, ``train --recipe gaussian
--arch wrn --arch-kwarg depth=10 --arch-kwarg widen_factor=1 --sigma 0.5``), shortened to one
epoch on 32 images, then the upload through the REST API."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from certbench.data import write_demo_dataset
from certbench.training import RunOptions, TrainConfig, train
from certbench.training.trainer import TrainResult
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.core.settings import Settings
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import multipart


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> TrainResult:
    """The example's run, once for both database backends."""
    root = tmp_path_factory.mktemp("readme")
    digits = write_demo_dataset(root / "data" / "digits").out
    threads = torch.get_num_threads()
    try:
        return train(
            TrainConfig(
                recipe="gaussian", dataset=str(digits), arch="wrn",
                arch_kwargs={"depth": 10, "widen_factor": 1}, sigma=0.5, epochs=1,
                batch_size=16, lr=0.05, limit=32,
            ),
            root / "runs" / "digits" / "gaussian",
            RunOptions(progress=False, eval_split=None, threads=1),
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)


def test_the_readme_cpu_example_is_accepted_by_the_demo_benchmark(
    client: TestClient, actors: Actors, settings: Settings, session: Session, trained: TrainResult
):
    manifest = json.loads(trained.manifest.read_text())
    assert manifest["benchmark"] == "demo-digits"
    upsert_benchmark(session, {d.name: d for d in packaged_definitions()}["demo-digits"])
    response = client.post(
        "/api/v1/submissions",
        headers=actors.alice,
        **multipart(trained.weights.read_bytes(), manifest),
    )
    assert response.status_code == 202, response.text
    assert response.json()["benchmark"] == "demo-digits"
    assert drain_validations(settings) == [response.json()["id"]]
