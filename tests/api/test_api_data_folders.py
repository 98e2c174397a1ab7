"""``PUT /api/v1/admin/benchmarks`` keeps every data folder inside CERTBENCH_DATASETS_DIR (issue
35 §3: ``folder: ../../../etc`` was loaded, and the public hint then told users to run
``certbench datasets demo --folder ../../../etc``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from models.core.settings import Settings
from tests.support.api import Actors
from tests.support.service_factories import tiny_definition


def _with_folder(folder: str, *, stage: bool = False) -> dict[str, Any]:
    document = tiny_definition("foldered")
    if stage:
        document["stages"] = {
            "fourier_sensitivity": {"protocol": "quick", "repo": "x/y", "folder": folder}
        }
    else:
        document["test_sets"][0]["folder"] = folder
    return document


@pytest.mark.parametrize(
    ("folder", "stage", "said"),
    [
        ("../../../etc", False, "`..` segment"),
        ("data/../../etc", False, "`..` segment"),
        ("../../../etc", True, "`..` segment"),
        ("/etc", False, "absolute path is not accepted over the API"),
        ("/srv/cifar10", True, "absolute path is not accepted over the API"),
    ],
)
def test_a_folder_out_of_the_data_directory_is_refused(
    client: TestClient, actors: Actors, folder: str, stage: bool, said: str
):
    document = _with_folder(folder, stage=stage)
    refused = client.put("/api/v1/admin/benchmarks", headers=actors.admin, json=document)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "bad_benchmark_definition"
    assert said in refused.json()["message"]
    assert client.get("/api/v1/benchmarks/foldered").status_code == 404  # nothing stored


def test_a_folder_linked_out_of_the_data_directory_is_refused(
    client: TestClient, actors: Actors, settings: Settings, tmp_path: Path
):
    assert settings.datasets_dir is not None
    settings.datasets_dir.mkdir(parents=True, exist_ok=True)
    (tmp_path / "outside").mkdir()
    (settings.datasets_dir / "linked").symlink_to(tmp_path / "outside")
    document = _with_folder("linked/cifar10")
    refused = client.put("/api/v1/admin/benchmarks", headers=actors.admin, json=document)
    assert refused.status_code == 422 and "symbolic link" in refused.json()["message"]
    assert str(tmp_path) not in refused.text
    inside = client.put(
        "/api/v1/admin/benchmarks", headers=actors.admin, json=_with_folder("cifar10-c/v1")
    )
    assert inside.status_code == 200, inside.text
