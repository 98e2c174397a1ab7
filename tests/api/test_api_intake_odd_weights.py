"""Uploads an attack campaign got accepted (202) although no run could use them (issue 35 §4): a
safetensors header that names a tensor twice and a preprocessing std float32 cannot divide by are
refused at intake, each with its own code, and nothing is stored; NaN or infinite weights need
the values, so validation refuses them (``tests/workers/test_worker_validation.py``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.db.entities import Submission
from tests.support.api import Actors
from tests.support.odd_weights import with_duplicate
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"


def _count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Submission))


@pytest.mark.parametrize("other_offsets", [False, True], ids=["same-bytes", "other-bytes"])
def test_a_tensor_named_twice_is_refused_at_intake(
    client: TestClient, actors: Actors, session: Session, other_offsets: bool
):
    blob = with_duplicate(weights_bytes(), other_offsets=other_offsets)
    response = client.post(URL, headers=actors.alice, **multipart(blob, manifest()))
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "duplicate_tensor_name"
    assert "twice" in response.json()["message"]
    assert _count(session) == 0


@pytest.mark.parametrize(
    ("preprocessing", "words"),
    [
        ({"std": [1e-300] * 3}, "std[0] = 1e-300 is below float32's smallest normal"),
        ({"std": [0.25, 1e-45, 0.25]}, "std[1] = 1e-45 is below float32's smallest normal"),
        ({"mean": [0.5, 0.5, 1e39]}, "mean[2] = 1e+39 is beyond float32's range"),
        ({"std": [1e300] * 3}, "std[0] = 1e+300 is beyond float32's range"),
    ],
)
def test_preprocessing_float32_cannot_normalise_with_is_refused_at_intake(
    client: TestClient, actors: Actors, session: Session, preprocessing: dict, words: str
):
    document = manifest()
    document["preprocessing"] = document["preprocessing"] | preprocessing
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), document))
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "bad_preprocessing"
    assert words in response.json()["message"]
    assert _count(session) == 0


def test_a_tiny_but_normal_std_is_left_to_validation(
    client: TestClient, actors: Actors, session: Session
):
    """A std float32 holds (1e-37) is the submitter's declared normalisation: intake takes it,
    and validation's forward pass judges the outputs (``non_finite_output`` if they overflow)."""
    document = manifest()
    document["preprocessing"] = document["preprocessing"] | {"std": [1e-37] * 3}
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), document))
    assert response.status_code == 202, response.text
    assert _count(session) == 1
