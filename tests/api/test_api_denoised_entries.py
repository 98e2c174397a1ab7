"""Denoised smoothing entries through the REST API and the web leaderboard (issue 33 §2).

A manifest's ``denoiser`` block is validated at intake like the rest of the manifest (hostile
keys refused by name, nothing stored), the weights' ``denoiser.*`` and ``classifier.*`` tensors
are checked against the composition built on the ``meta`` device, and the entry appears on the
leaderboard as ``denoiser · classifier`` with a filter on its denoiser.
"""

from __future__ import annotations

import torch
from fastapi.testclient import TestClient
from safetensors.torch import save
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from api.exports import architecture_label
from certbench.denoising import DenoisedClassifier, DnCNNConfig, build_denoiser
from certbench.nets import build_classifier
from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import Submission, User
from tests.support.api import Actors
from tests.support.service_factories import finished_submission, manifest, multipart

URL = "/api/v1/submissions"
SIGMA = 0.25
DNCNN = {"kind": "dncnn", "depth": 4, "features": 8}


def denoised_weights(depth: int = 4) -> bytes:
    torch.manual_seed(0)
    config = DnCNNConfig(depth=depth, features=8)
    denoiser = build_denoiser(config, sigma=SIGMA, input_size=(3, 32, 32))
    classifier = build_classifier("lenet5", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    model = DenoisedClassifier(denoiser, classifier)
    return save({k: v.contiguous() for k, v in model.state_dict().items()})


def denoised_manifest(block: object = DNCNN) -> dict[str, object]:
    document = manifest(sigma=SIGMA, name="dncnn in front of lenet5")
    return {**document, "architecture": {"name": "lenet5", "kwargs": {}}, "denoiser": block}


def count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Submission)) or 0


def test_a_denoised_submission_is_taken_in_as_denoiser_and_classifier(
    client: TestClient, actors: Actors, session: Session
):
    parts = multipart(denoised_weights(), denoised_manifest())
    response = client.post(URL, headers=actors.alice, **parts)
    assert response.status_code == 202, response.text
    stored = session.get(Submission, response.json()["id"])
    assert stored is not None and stored.architecture == "dncnn · lenet5"
    assert stored.artifact.manifest["denoiser"] == DNCNN


def test_a_hostile_or_unfit_denoiser_is_refused_and_nothing_is_stored(
    client: TestClient, actors: Actors, session: Session
):
    hostile = {**DNCNN, "checkpoint_path": "/etc/passwd"}
    parts = multipart(denoised_weights(), denoised_manifest(hostile))
    response = client.post(URL, headers=actors.alice, **parts)
    assert response.status_code == 422 and response.json()["code"] == "bad_manifest"
    assert "'checkpoint_path' is not allowed in a DnCNN configuration" in response.json()["message"]

    unet = {"kind": "diffusion", "unet": {"sample_size": 32, "block_out_channels": [8],
            "down_block_types": ["DownBlock2D"], "up_block_types": ["UpBlock2D"],
            "norm_num_groups": 4, "pretrained": True}}  # fmt: skip
    parts = multipart(denoised_weights(), denoised_manifest(unet))
    response = client.post(URL, headers=actors.alice, **parts)
    assert response.status_code == 422 and response.json()["code"] == "bad_manifest"
    assert "'pretrained' is not allowed" in response.json()["message"]

    deeper = denoised_manifest({**DNCNN, "depth": 5})
    response = client.post(URL, headers=actors.alice, **multipart(denoised_weights(), deeper))
    assert response.status_code == 422 and response.json()["code"] == "state_dict_mismatch"
    assert "denoiser.* tensors do not fit the manifest's dncnn denoiser" in response.text

    plain = manifest(sigma=SIGMA)
    plain["architecture"] = {"name": "lenet5", "kwargs": {}}
    response = client.post(URL, headers=actors.alice, **multipart(denoised_weights(), plain))
    assert response.status_code == 422 and "the manifest has no denoiser" in response.text
    assert count(session) == 0


def test_the_leaderboard_shows_the_composition_and_filters_on_the_denoiser(
    client: TestClient, actors: Actors, session: Session, settings: Settings
):
    tiny = get_benchmark(session, "tiny")
    alice = session.get(User, actors.alice_id)
    assert alice is not None
    ids = [
        finished_submission(
            session,
            user=alice,
            benchmark=tiny,
            settings=settings,
            seed=seed,
            quality=quality,
            name=f"net-{seed}",
        )
        for seed, quality in ((1, 0.3), (2, 0.8), (3, 0.5))
    ]
    labels = {ids[1]: "diffusion · cifar_resnet20", ids[2]: "dncnn · cifar_resnet20"}
    for submission_id, label in labels.items():
        session.execute(
            update(Submission).where(Submission.id == submission_id).values(architecture=label)
        )
    session.commit()

    def shown(**params: str) -> list[int]:
        response = client.get("/api/v1/leaderboards/tiny", params=params)
        assert response.status_code == 200, response.text
        return sorted(row["submission_id"] for row in response.json()["rows"])

    assert shown() == sorted(ids)
    assert shown(denoiser="none") == [ids[0]]
    assert shown(denoiser="any") == sorted(ids[1:])
    assert shown(denoiser="diffusion") == [ids[1]]
    assert shown(denoiser="dncnn") == [ids[2]]
    assert shown(architecture="diffusion · cifar_resnet20") == [ids[1]]
    assert client.get("/api/v1/leaderboards/tiny", params={"denoiser": "memnet"}).status_code == 422

    page = client.get("/leaderboards/tiny", params={"denoiser": "any"})
    assert page.status_code == 200
    assert "diffusion · cifar_resnet20" in page.text and "dncnn · cifar_resnet20" in page.text
    assert "net-1" not in page.text
    assert '<option value="any" selected>' in page.text


def test_exports_name_the_composition_as_the_leaderboard_does():
    """An export built from an entry's results (``api.exports.Entry.of_results``) labels its
    architecture as the leaderboard row does."""
    plain = denoised_manifest()
    assert architecture_label(plain) == "dncnn · lenet5"
    del plain["denoiser"]
    assert architecture_label(plain) == "lenet5"
