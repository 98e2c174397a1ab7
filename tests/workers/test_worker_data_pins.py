"""Pinned test-set data (issue 11 §3): definitions pin content hashes, the worker checks the bytes
it loads, fails a run on other bytes with ``dataset_mismatch``, and every result records what
it was computed on (shown on the model page)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.main import create_app
from certbench.data.pins import CIFAR10
from certbench.data.provenance import config_sha256, find_local_paths
from models.benchmarks.sources import TestSetSpec, hub_mirror
from models.catalog.benchmarks import get_benchmark, parse_definition
from models.core.errors import BenchmarkDefinitionError, DatasetMismatchError
from models.core.settings import Settings
from models.db.entities import StageResult, Submission
from models.db.states import Reason, SubmissionState
from models.stages import inputs
from models.stages.work import get_work_item
from tests.support.workers import (
    CIFAR10_CLASSES,
    SOURCE_SIZE,
    TEST_SETS,
    create_submission,
    load_benchmark,
    manifest,
    tiny_definition,
    tiny_model,
    weights_bytes,
    write_hub_folder,
)
from workers.app import app
from workers.names import VALIDATE

S = SubmissionState
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _pinned(dataset: Path, **provenance: Any) -> dict[str, Any]:
    """The tiny definition with each test set pinned to the sha256 of its config's shard."""
    definition = tiny_definition(dataset)
    definition["provenance"] = {"generator": "test", "generation_seed": 0, **provenance}
    for test_set in definition["test_sets"]:
        test_set["provenance"] = {"sha256": config_sha256(dataset, test_set["config"])}
    return definition


def _run(
    session: Session, settings: Settings, tmp_path: Path, worker, *, model_seed: int = 0
) -> Submission:
    weights = weights_bytes(tiny_model(seed=model_seed), tmp_path / f"upload-{model_seed}")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    session.expire_all()
    return session.get(Submission, sid)


def _results(session: Session, sid: int) -> dict[str, StageResult]:
    rows = session.query(StageResult).filter_by(submission_id=sid, stage="certification")
    return {r.unit: r for r in rows}


def test_a_pinned_dataset_is_verified_and_its_hashes_recorded_and_shown(
    settings, session, dataset, worker, tmp_path
):
    definition = _pinned(dataset)
    load_benchmark(session, definition)
    stored = {ts.name: ts.provenance for ts in get_benchmark(session, "tiny").test_sets}
    assert stored["clean"] == {"generator": "test", "generation_seed": 0,
                               "sha256": config_sha256(dataset, "clean")}  # fmt: skip
    submission = _run(session, settings, tmp_path, worker)
    assert submission.state == S.FINISHED, submission.message
    for name, row in _results(session, submission.id).items():
        assert row.data_hashes == {
            "sha256": config_sha256(dataset, name),
            "verified": "sha256",
            "source": "local Hub-layout folder",
        }
        assert find_local_paths(json.dumps(row.data_hashes)) == []
    with TestClient(create_app(settings)) as client:
        page = client.get(f"/models/{submission.id}").text
        body = client.get(f"/api/v1/results/{submission.id}").json()
        served = client.get("/api/v1/benchmarks/tiny").json()["test_sets"]
    assert {t["name"]: t["provenance"] for t in served} == stored
    for name in TEST_SETS:
        assert config_sha256(dataset, name) in page
    hashes = {s["unit"]: s["data_hashes"]["sha256"] for s in body["stages"]}
    assert hashes == {name: config_sha256(dataset, name) for name in TEST_SETS}


def test_an_unpinned_dataset_still_records_its_hash(settings, session, dataset, worker, tmp_path):
    load_benchmark(session, tiny_definition(dataset))
    submission = _run(session, settings, tmp_path, worker)
    assert submission.state == S.FINISHED
    row = _results(session, submission.id)["shifted"]
    assert row.data_hashes["verified"] == "unpinned"
    assert row.data_hashes["sha256"] == config_sha256(dataset, "shifted")


def test_a_tampered_dataset_fails_the_run_with_dataset_mismatch(
    settings, session, dataset, worker, tmp_path
):
    load_benchmark(session, _pinned(dataset))
    pinned = config_sha256(dataset, "shifted")
    inputs.images_for.cache_clear()  # an earlier test of this process may have decoded it
    # Same shape and labels, one pixel changed: only the content hash can tell.
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(4, 3, 32, 32), dtype=np.uint8)
    images[0, 0, 0, 0] ^= 1
    write_hub_folder(dataset, "shifted", images, [0, 1, 2, 3], class_names=CIFAR10_CLASSES)
    tampered = config_sha256(dataset, "shifted")
    assert tampered != pinned
    submission = _run(session, settings, tmp_path, worker)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.DATASET_MISMATCH == "dataset_mismatch"
    assert "'shifted'" in submission.message
    assert pinned in submission.message and tampered in submission.message
    assert _results(session, submission.id) == {}


def test_a_sha256_pin_on_a_hub_source_cannot_be_skipped(tmp_path):
    spec = TestSetSpec(id=1, name="fog_s1", source="some-org/cifar10-c", config="fog_s1",
                       revision=None, split="test", subset_skip=20, subset_limit=None,
                       num_images=500, sha256="0" * 64)  # fmt: skip
    with pytest.raises(DatasetMismatchError, match=r"cannot be checked.*hub_commit"):
        inputs.data_hashes(spec)
    pinned = TestSetSpec(**{**spec.__dict__, "hub_commit": COMMIT, "revision": COMMIT})
    assert inputs.data_hashes(pinned) == {
        "source": "some-org/cifar10-c",
        "revision": COMMIT,
        "verified": "hub_commit",
    }


def test_a_hub_commit_pin_is_the_revision_a_worker_loads(settings, session, dataset):
    definition = tiny_definition(dataset)
    definition["test_sets"][0]["provenance"] = {"hub_commit": COMMIT}
    load_benchmark(session, definition)
    benchmark = get_benchmark(session, "tiny")
    weights = weights_bytes(tiny_model(), dataset.parent / "w")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    item = get_work_item(session, sid, settings=settings)
    assert [(t.revision, t.hub_commit) for t in item.test_sets] == [(COMMIT, COMMIT), (None, None)]
    assert benchmark.test_sets[0].provenance == {"hub_commit": COMMIT}
    definition["test_sets"][0]["revision"] = "main"
    with pytest.raises(BenchmarkDefinitionError, match=r"differs from provenance\.hub_commit"):
        parse_definition(json.dumps(definition))


def test_a_pin_must_look_like_a_hash(dataset):
    definition = tiny_definition(dataset)
    definition["test_sets"][0]["provenance"] = {"sha256": "/tmp/not-a-hash"}
    with pytest.raises(BenchmarkDefinitionError, match="sha256"):
        parse_definition(json.dumps(definition))
    definition["test_sets"][0]["provenance"] = {"protocol": "equations"}
    with pytest.raises(BenchmarkDefinitionError, match="protocol"):
        parse_definition(json.dumps(definition))


def _cifar10_copy(folder: Path, *, seed: int) -> str:
    """A local copy laid out like uoft-cs/cifar10 at its pinned commit (`hf download` layout:
    ``plain_text/test-00000-of-00001.parquet``, columns ``img``/``label``); returns the
    SHA-256 of the test shard, the value a pin over this copy holds."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(SOURCE_SIZE, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, SOURCE_SIZE)
    shard = write_hub_folder(folder, "plain_text", images, labels, class_names=CIFAR10_CLASSES,
                             data_dir="", image_column="img")  # fmt: skip
    assert shard == folder / CIFAR10.files["test"][0]
    return config_sha256(folder, None, "test")


def _hub_pinned(dataset: Path, sha256: str) -> dict[str, Any]:
    """One test set read from the Hub repo uoft-cs/cifar10, pinned by commit and content."""
    definition = tiny_definition(dataset)
    definition["bands"] = {}
    definition["test_sets"] = [{
        "name": "clean", "repo": "uoft-cs/cifar10", "source_size": SOURCE_SIZE,
        "provenance": {"hub_commit": CIFAR10.commit, "sha256": sha256},
    }]  # fmt: skip
    return definition


def test_a_pinned_hub_test_set_reads_its_local_copy_verified_by_the_pin(
    settings, session, dataset, worker, tmp_path
):
    copy = hub_mirror("uoft-cs/cifar10", settings)
    pinned = _cifar10_copy(tmp_path / "elsewhere", seed=1)  # the bytes the definition pins
    load_benchmark(session, _hub_pinned(dataset, pinned))
    weights = weights_bytes(tiny_model(seed=9), tmp_path / "w")
    planned = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    (spec,) = get_work_item(session, planned, settings=settings).test_sets
    assert (spec.source, spec.revision) == ("uoft-cs/cifar10", CIFAR10.commit)  # no copy yet
    assert _cifar10_copy(copy, seed=1) == pinned
    (spec,) = get_work_item(session, planned, settings=settings).test_sets
    assert (spec.source, spec.revision, spec.local_copy_of) == (str(copy), None, "uoft-cs/cifar10")
    inputs.images_for.cache_clear()
    submission = _run(session, settings, tmp_path, worker, model_seed=1)
    assert submission.state == S.FINISHED, submission.message
    assert _results(session, submission.id)["clean"].data_hashes == {
        "source": "uoft-cs/cifar10",
        "copy": "local Hub-layout folder",
        "sha256": pinned,
        "verified": "sha256",
    }
    found = _cifar10_copy(copy, seed=2)  # the copy changes: other images, same layout
    inputs.images_for.cache_clear()
    failed = _run(session, settings, tmp_path, worker, model_seed=2)
    assert failed.state == S.FAILED and failed.reason == Reason.DATASET_MISMATCH
    assert f"local copy of uoft-cs/cifar10 on this worker has sha256 {found}" in failed.message
    assert f"pins {pinned} (Hub commit {CIFAR10.commit})" in failed.message
    assert "`certbench datasets fetch cifar10 --force`" in failed.message
    assert str(copy) not in failed.message


def test_a_stage_block_pin_must_agree_with_its_revision(dataset):
    definition = tiny_definition(dataset)
    definition["stages"] = {"fourier_sensitivity": {
        "protocol": "quick", "repo": "uoft-cs/cifar10", "revision": "main",
        "provenance": {"hub_commit": CIFAR10.commit},
    }}  # fmt: skip
    with pytest.raises(BenchmarkDefinitionError, match=r"differs from provenance\.hub_commit"):
        parse_definition(json.dumps(definition))


def test_a_result_records_one_set_of_hashes_for_all_its_shards():
    from models.core.errors import StorageError
    from models.stages.base import recorded_data_hashes

    a = {"sha256": "a" * 64, "source": "local Hub-layout folder", "verified": "unpinned"}
    b = {**a, "sha256": "b" * 64}
    assert recorded_data_hashes([a, None, dict(a)], where="x") == a  # None: an older shard
    assert recorded_data_hashes([None], where="x") == {}
    with pytest.raises(StorageError, match=r"the shards of unit 'u' were computed on different"):
        recorded_data_hashes([a, b], where="unit 'u'")
