"""Helpers shared by the tests of evaluation stages in the pipeline (Fourier lens, worst-case
weather, Fourier sensitivity, commit-reveal): a benchmark with one stage block, submissions of
the tiny model, the stage's task messages, shard and result rows, a stage's ``run`` called
directly on a work item, and the checks that a run's secret seed stays out of everything
readable until the run ends. ``docs/architecture/stages.md`` ("Testing a stage in process")
shows them with the worker tests' fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.entities import RunSeed, StageResult, StageShard, Submission
from models.db.states import SubmissionState
from models.runs.shards import plan_item
from models.stages import registry
from models.stages.base import RunContext
from models.stages.work import WorkItem, get_work_item
from models.submissions import run_seeds, storage
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
from workers.names import RUN_SHARD, VALIDATE

MODEL_SEED = 3
BENCH_SEED = 7
"""The tiny benchmark's public seed (``tiny_definition``'s default)."""


def write_model_labelled_dataset(root: Path, *, seed: int, model_seed: int = MODEL_SEED) -> Path:
    """The tiny layout (random images, both test sets) labelled with the tiny model's own clean
    predictions, so every image starts correct and an attack has something to break (a random
    network is right on random labels only by chance)."""
    rng = np.random.default_rng(seed)
    model = tiny_model(seed=model_seed).eval()
    for config in TEST_SETS:
        images = rng.integers(0, 256, size=(SOURCE_SIZE, 3, 32, 32), dtype=np.uint8)
        with torch.no_grad():
            labels = model(torch.from_numpy(images).float() / 255).argmax(1).numpy()
        write_hub_folder(root, config, images, labels, class_names=CIFAR10_CLASSES)
    return root


def load_stage_benchmark(
    session: Session, dataset: Path, stage: str, block: dict[str, Any], *, seed: int = BENCH_SEED
) -> str:
    """The tiny benchmark (public seed ``seed``) with one stage block; returns its name."""
    definition = tiny_definition(dataset, seed=seed)
    definition["stages"] = {stage: block}
    load_benchmark(session, definition)
    return definition["name"]


def submit(
    session: Session, settings: Settings, tmp_path: Path, model_seed: int = MODEL_SEED
) -> int:
    """Submit the tiny model initialised with ``model_seed`` and queue its validation."""
    weights = weights_bytes(tiny_model(seed=model_seed), tmp_path / f"upload-{model_seed}")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    app.send_task(VALIDATE, args=[sid])
    return sid


def fresh(session: Session, sid: int) -> Submission:
    """The submission as the database holds it now."""
    session.expire_all()
    return session.get(Submission, sid)


def is_shard(message: Any, stage: str, sid: int | None = None, index: int | None = None) -> bool:
    """Whether a task message runs a shard of ``stage`` (of submission ``sid``, index ``index``)."""
    return (
        message.name == RUN_SHARD
        and message.args[1] == stage
        and (sid is None or message.args[0] == sid)
        and (index is None or message.args[3] == index)
    )


def run_delivering_twice(worker: Any, stage: str, sid: int, unit: str) -> list[object]:
    """Run every task, delivering the submission's first ``unit`` shard of ``stage`` twice (as
    after a lost acknowledgement); the outcomes of that shard's deliveries."""

    def twice(message: Any) -> bool:
        return is_shard(message, stage, sid, 0) and message.args[2] == unit

    worker.run_next()
    for message in worker.pending():
        worker.take()
        worker.execute(message)
        if twice(message):
            worker.execute(message)
    worker.run_all()
    return [outcome for message, outcome in worker.ran if twice(message)]


def count_shards(session: Session, stage: str, sid: int | None = None) -> int:
    """Recorded shards of ``stage`` (of one submission, or of all)."""
    query = select(func.count()).select_from(StageShard).where(StageShard.stage == stage)
    if sid is not None:
        query = query.where(StageShard.submission_id == sid)
    return session.scalar(query)


def unpinned_hashes(dataset: Path, config: str = TEST_SETS[0]) -> dict[str, str]:
    """What a stage result computed on a config of a local folder without a pin records
    (``models.stages.inputs.data_hashes``): the content hash, the kind of source, no pin."""
    from certbench.data.provenance import config_sha256

    return {
        "sha256": config_sha256(dataset, config),
        "source": "local Hub-layout folder",
        "verified": "unpinned",
    }


def results_by_unit(session: Session, sid: int, stage: str) -> dict[str, StageResult]:
    """The stored results of one stage of a submission, by unit."""
    session.expire_all()
    rows = session.scalars(
        select(StageResult).where(StageResult.submission_id == sid, StageResult.stage == stage)
    )
    return {row.unit: row for row in rows}


def run_unit(
    item: WorkItem, stage: str, unit: str, target: Path, settings: Settings, batch_size: int = 64
) -> list[Path]:
    """Run every shard of ``unit`` with ``Stage.run`` as a worker would, into the folder
    ``target``; the records files, in shard order."""
    plugin = registry.get(stage)
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in (s for s in plan_item(item, settings, stage=stage) if s.unit == unit):
        path = target / f"shard-{shard.shard_index:04d}.parquet"
        context = RunContext(path, torch.device("cpu"), batch_size, lambda done: None, settings)
        plugin.run(item, shard, context)
        paths.append(path)
    return paths


def validated_item(worker: Any, session: Session, settings: Settings, sid: int) -> WorkItem:
    """Validate a queued submission (its shards queued) and read its work item."""
    worker.run_next()
    return get_work_item(session, sid, settings=settings)


def model_files(folder: Path, model_seed: int = MODEL_SEED) -> tuple[Path, Path]:
    """The submitted model as a CLI user has it: ``model.safetensors`` and ``model.json``."""
    weights_bytes(tiny_model(seed=model_seed), folder)
    document = folder / "model.json"
    document.write_text(json.dumps(manifest()))
    return folder / "model.safetensors", document


# ---- commit-reveal --------------------------------------------------------------------------


def seed_forms(text: str) -> list[str]:
    """Every way a secret seed could be written: as stored (0x-hex), bare hex, decimal."""
    return [text, text[2:], str(int(text, 16))]


def records_files(settings: Settings, sid: int) -> list[Path]:
    """Every file under the submission's records folder (shards, merged records, figures)."""
    folder = storage.resolve(settings.artifacts_dir, storage.submission_records_dir(sid))
    return sorted(p for p in folder.rglob("*") if p.is_file())


def run_keeping_the_seed_secret(
    worker: Any, session: Session, settings: Settings, sid: int, stage: str
) -> set[str]:
    """Run every queued task, checking between every two, until the run has finished, that no
    file of the submission's records holds its secret seed (in any written form) and that every
    shard file of ``stage`` names the seed's commitment. Returns the shard files checked."""
    view = run_seeds.view(session, fresh(session, sid))
    assert view is not None and view.kind == "secret" and view.value is None
    secret = session.get(RunSeed, sid).seed
    folder = registry.get(stage).folder("").split("/")[0]  # e.g. ``_robustness``
    checked: set[str] = set()
    while (message := worker.take()) is not None:
        worker.execute(message)
        if fresh(session, sid).state == SubmissionState.FINISHED:
            continue
        for path in records_files(settings, sid):
            content = path.read_bytes()
            leaked = [form for form in seed_forms(secret) if form.encode() in content]
            assert not leaked, f"{path.name} holds the secret seed after {message}"
            if folder in path.parts and path.name.startswith("shard-"):
                assert view.commitment.encode() in content, f"{path} lacks the commitment"
                checked.add(str(path))
    assert fresh(session, sid).state == SubmissionState.FINISHED, fresh(session, sid).message
    return checked


def certify_calls(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[dict[str, Any]]:
    """The keyword arguments of every CERTIFY call ``module`` makes (each call still runs)."""
    calls: list[dict[str, Any]] = []
    real = module.certify

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "certify", spy)
    return calls


def left_to_the_engine(calls: list[dict[str, Any]]) -> bool:
    """Whether every CERTIFY call left batch size, precision and compiling to the engine's
    device defaults (``certbench.smoothing.defaults``; issue 35 §7: the stages passed batch
    1000, fp32 and no compile, so a GPU worker ran fp32 batches of 1000)."""
    return bool(calls) and all(
        c.get("batch_size") is None and c.get("amp") == "auto" and c.get("compile") is None
        for c in calls
    )
