"""The packaged demo benchmark: its definition, its data generated where it is missing and
checked against the pinned hash, and its packaged reference entries."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import pytest
import torch
from sqlalchemy.orm import Session

from certbench.data.demo import demo_images
from certbench.data.provenance import config_sha256
from certbench.nets.loading import load_manifest, load_model
from models.benchmarks.generated import (
    GENERATED,
    ensure_for_folders,
    ensure_for_work_item,
    ensure_generated,
)
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.catalog.reference_entries import packaged_references
from models.core.errors import DatasetMismatchError
from models.core.settings import Settings
from models.db.entities import Submission
from models.stages.inputs import data_hashes, images_for
from models.stages.work import get_work_item
from models.submissions.intake import Upload, create_submission
from tests.support.service_factories import make_user

pytestmark = pytest.mark.memory(gib=1)

DEMO = "demo-digits"


def _definition():
    return {d.name: d for d in packaged_definitions()}[DEMO]


def test_the_demo_definition_is_cheap_and_says_it_is_a_demo():
    demo = _definition()
    assert "demo: not comparable with papers" in demo.title
    assert "not comparable with papers" in demo.description
    assert demo.num_classes == 10 and demo.sigmas == [0.5, 1.0]
    protocol = demo.protocol
    assert (protocol.n0, protocol.n, protocol.alpha) == (100, 1000, 0.001)
    (clean,) = demo.test_sets
    assert clean.folder == DEMO and clean.num_images(protocol) == 91  # every 4th of 364
    assert clean.provenance is not None and clean.provenance.sha256 is not None
    assert set(demo.stages) == {"fourier_sensitivity"}
    fourier = demo.stage_block("fourier_sensitivity")
    assert fourier is not None and fourier.smoothed is False  # the base classifier's map only


def test_the_generated_test_split_has_the_pinned_hash(tmp_path: Path):
    settings = Settings(data_dir=tmp_path)
    folder = ensure_generated(DEMO, settings)
    assert folder == settings.datasets_dir / DEMO
    pinned = _definition().test_sets[0].provenance.sha256
    assert config_sha256(folder, None, "test") == pinned
    # Written once: a second call leaves the folder (and its files' times) alone.
    stamp = (folder / "README.md").stat().st_mtime_ns
    assert ensure_generated(DEMO, settings) == folder
    assert (folder / "README.md").stat().st_mtime_ns == stamp
    assert not [p for p in settings.datasets_dir.iterdir() if p.name.startswith(".")]


def _generate(data_dir: str) -> str:
    return str(ensure_generated(DEMO, Settings(data_dir=Path(data_dir))))


def test_concurrent_writers_leave_one_complete_copy(tmp_path: Path):
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        paths = pool.map(_generate, [str(tmp_path)] * 2)
    settings = Settings(data_dir=tmp_path)
    assert set(paths) == {str(settings.datasets_dir / DEMO)}
    assert config_sha256(paths[0], None, "test") == _definition().test_sets[0].provenance.sha256
    assert sorted(p.name for p in settings.datasets_dir.iterdir()) == [DEMO]  # no scratch left


def test_folders_that_are_not_generated_data_sets_are_left_alone(tmp_path: Path):
    settings = Settings(data_dir=tmp_path)
    assert ensure_for_folders(["cifar10-c", None, "/elsewhere/demo"], settings) == []
    assert not settings.datasets_dir.exists()
    assert set(GENERATED) == {DEMO}


def _demo_submission(session: Session, settings: Settings) -> Submission:
    benchmark = upsert_benchmark(session, _definition())
    reference = next(r for r in packaged_references() if r.benchmark == DEMO)
    manifest = load_manifest(reference.manifest)
    return create_submission(
        session,
        user=make_user(session, "dora")[0],
        benchmark=benchmark,
        upload=Upload(
            weights=reference.weights,
            manifest=manifest.model_dump(mode="json"),
            model_name=manifest.metadata.name,
            architecture=manifest.architecture.name,
            sigma=manifest.smoothing.sigma,
        ),
        settings=settings,
    )


def test_a_worker_missing_the_folder_writes_it_and_the_pin_verifies(
    session: Session, settings: Settings
):
    submission = _demo_submission(session, settings)
    item = get_work_item(session, submission.id, settings=settings)
    (spec,) = item.test_sets
    assert spec.source == str(settings.datasets_dir / DEMO) and spec.sha256 is not None
    assert not Path(spec.source).exists()  # nothing generated it on this "machine" yet
    assert ensure_for_work_item(item, settings) == [DEMO]
    assert data_hashes(spec)["verified"] == "sha256"
    images = images_for(spec)
    assert len(images) == 91 and images.indices[1] - images.indices[0] == 4
    assert ensure_for_work_item(item, settings) == []  # present now: nothing to do


def test_a_wrong_copy_is_caught_by_the_pin(session: Session, settings: Settings):
    submission = _demo_submission(session, settings)
    item = get_work_item(session, submission.id, settings=settings)
    (spec,) = item.test_sets
    folder = Path(spec.source)
    folder.parent.mkdir(parents=True)
    # Another data set in the same place: the train split written as the test split.
    ensure_generated(DEMO, Settings(data_dir=settings.data_dir / "other"))
    shutil.copytree(settings.data_dir / "other" / "datasets" / DEMO, folder)
    shard = folder / "data" / "test-00000-of-00001.parquet"
    shutil.copyfile(folder / "data" / "train-00000-of-00001.parquet", shard)
    assert ensure_for_work_item(item, settings) == []  # present, so not rewritten
    with pytest.raises(DatasetMismatchError, match="pins"):
        data_hashes(spec)


def test_the_packaged_references_load_as_submissions_of_the_demo():
    references = {r.key: r for r in packaged_references() if r.benchmark == DEMO}
    assert set(references) == {"gaussian-sigma1", "no-noise"}
    images, _ = demo_images()
    for reference in references.values():
        manifest = load_manifest(reference.manifest)
        assert manifest.benchmark == DEMO and manifest.architecture.name == "lenet5"
        assert manifest.smoothing.sigma in _definition().sigmas
        assert "(reference)" in manifest.metadata.name
        model = load_model(reference.weights, manifest)
        with torch.no_grad():
            logits = model(torch.from_numpy(images[:8]).float() / 255)
        assert logits.shape == (8, 10) and torch.isfinite(logits).all()
