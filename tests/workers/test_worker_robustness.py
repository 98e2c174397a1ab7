"""The robustness stage (Muthukumar et al. 2025, arXiv:2501.18098) in the pipeline: shards on their
own queue, anchors built once, records equal to one direct ``robust_accuracy`` run, leaderboard
columns, failures."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from certbench.cli.app import app as cli
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.pd.anchors import AnchorBank, build_anchor_bank
from certbench.pd.evaluation import RobustnessReport, robust_accuracy
from certbench.pd.threat import PDThreat
from certbench.smoothing.streams import derive_seed
from models.boards.leaderboard import robustness_result
from models.core.errors import StorageError
from models.core.settings import get_settings
from models.db.entities import LeaderboardEntry, StageShard
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.runs.results import merge_stage
from models.stages import registry
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds, storage
from tests.support.stages import (
    MODEL_SEED,
    fresh,
    is_shard,
    model_files,
    results_by_unit,
    run_keeping_the_seed_secret,
    submit,
    unpinned_hashes,
    write_model_labelled_dataset,
)
from tests.support.workers import (
    TEST_SETS,
    load_benchmark,
    revealed_seed,
    tiny_definition,
    tiny_model,
    tiny_robustness,
    write_tiny_train_split,
)
from workers.app import app
from workers.names import AGGREGATE, QUEUE, ROBUSTNESS_QUEUE, RUN_SHARD, VALIDATE

CERTIFY_SHARD = ROBUSTNESS_SHARD = RUN_SHARD  # one task runs every stage's shards


def _attack(message: Any, sid: int | None = None, index: int | None = None) -> bool:
    """Whether a message runs a PD-robustness shard (of ``sid``, shard ``index``)."""
    return is_shard(message, "pd_robustness", sid, index)


S = SubmissionState


@pytest.fixture
def robust_dataset(tmp_path: Path) -> Path:
    """The tiny layout, labelled with the model's own clean predictions so every image is
    attacked, plus a training split (the anchors' source)."""
    return write_tiny_train_split(write_model_labelled_dataset(tmp_path / "robust-dataset", seed=5))


@pytest.fixture
def robust_benchmark(session: Session, robust_dataset: Path) -> str:
    definition = tiny_definition(robust_dataset, robustness=tiny_robustness(robust_dataset))
    load_benchmark(session, definition)
    return "tiny"


FLAKY_RUN_SEED = 54482730199760047449467071480982578725
"""A run seed whose shards disagreed with the direct run before ``robust_accuracy`` fixed the
weights' layout: image 2's ℓ∞ d_PD at ε = 16/255 was 0.022213 on the channels-last model that the
certification shards had left in the worker's cache, 0.021873 on a freshly built model."""


def _direct_report(
    dataset: Path,
    bank: AnchorBank,
    seed: int,
    *,
    model: torch.nn.Module | None = None,
    window: slice = slice(None),
) -> RobustnessReport:
    """What one unsharded run of the protocol (run seed ``seed``) gives on the 2 clean-subset
    images (``window``: those of one shard) with ``model`` (default: a freshly built one)."""
    images = load_images(dataset, config=TEST_SETS[0], subset=Subset(skip=2))
    return robust_accuracy(
        model if model is not None else tiny_model(seed=MODEL_SEED),
        images.images[window],
        images.labels[window],
        anchors=PDThreat(bank),
        eps_list=(8 / 255, 16 / 255),
        n_iter=3,
        n_target_classes=1,
        seed=derive_seed(seed, "pd"),
        batch_size=64,
        indices=images.indices[window],
        pd_projection="exact",
    )


def test_the_attack_ignores_the_layout_certification_leaves_the_cached_model_in(robust_dataset):
    """A worker's shards share one cached model, which ``certify`` converts to channels-last;
    the direct run builds a contiguous one. The records must not depend on which it gets."""
    train = load_images(robust_dataset, config=TEST_SETS[0], split="train")
    bank = build_anchor_bank(
        train.images, train.labels, class_names=train.class_names, dataset="tiny", k=2, seed=0
    )
    certified = tiny_model(seed=MODEL_SEED).to(memory_format=torch.channels_last)
    shards = [
        _direct_report(robust_dataset, bank, FLAKY_RUN_SEED, model=certified, window=window)
        for window in (slice(0, 1), slice(1, 2))
    ]
    assert RobustnessReport.merge(shards) == _direct_report(robust_dataset, bank, FLAKY_RUN_SEED)


def test_robustness_shards_run_on_their_queue_and_fill_the_leaderboard(
    settings, session, robust_benchmark, robust_dataset, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    assert worker.run_next() == "6 shard(s) enqueued"  # 4 certify + 2 robustness (1 image each)
    queued = [(m.name, m.queue) for m in worker.pending()]
    assert queued == [(CERTIFY_SHARD, QUEUE)] * 4 + [(ROBUSTNESS_SHARD, ROBUSTNESS_QUEUE)] * 2
    bank_path = settings.anchors_dir / "tiny_k2_s0.safetensors"
    assert not bank_path.exists()
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FINISHED, submission.message
    assert submission.shards_done == submission.shards_total == 6
    assert "attacked 2 clean image(s)" in submission.message
    assert [m.name for m, _ in worker.ran][-1] == AGGREGATE

    bank = AnchorBank.load(bank_path)  # built once by the first robustness shard
    assert (bank.k, bank.seed, bank.images.shape[0], bank.split) == (2, 0, 20, "train")
    result = robustness_result(session, sid)
    assert result.protocol["anchors_sha256"] == hashlib.sha256(bank_path.read_bytes()).hexdigest()
    assert "folder" not in result.protocol and result.protocol["num_images"] == 2
    assert result.count == 2 and result.base_accuracy == 1.0
    row = results_by_unit(session, sid, "pd_robustness")[""]
    assert row.data_hashes == unpinned_hashes(robust_dataset)  # the bytes it attacked

    merged = RobustnessReport.read(storage.resolve(settings.artifacts_dir, result.records_path))
    # shards reproduce one direct run with the revealed run seed (not the benchmark's public 7)
    assert merged == _direct_report(robust_dataset, bank, revealed_seed(session, sid))
    figures = merged.summary()
    entry = session.get(LeaderboardEntry, sid)
    for tag in ("8", "16"):
        linf, pd = figures[f"linf_robust_accuracy_{tag}"], figures[f"pd_robust_accuracy_{tag}"]
        assert getattr(entry, f"linf_acc_{tag}") == getattr(result, f"linf_acc_{tag}") == linf
        assert getattr(entry, f"pd_acc_{tag}") == getattr(result, f"pd_acc_{tag}") == pd
        assert linf <= pd <= entry.base_accuracy
    assert entry.base_accuracy == result.base_accuracy
    assert figures["linf_robust_accuracy_16"] < 1.0  # the attacks really ran and broke images
    assert result.figures == pytest.approx(figures, nan_ok=True)


def test_a_redelivered_robustness_shard_is_recorded_once(
    settings, session, robust_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    for message in worker.pending():
        worker.take()
        worker.execute(message)
        if _attack(message, sid, 0):
            worker.execute(message)  # delivered twice, e.g. after a lost acknowledgement
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    outcomes = [out for m, out in worker.ran if _attack(m, sid, 0)]
    assert outcomes == ["recorded: 1 image(s) attacked", "already recorded"]
    rows = session.scalar(
        select(func.count())
        .select_from(StageShard)
        .where(StageShard.submission_id == sid, StageShard.stage == "pd_robustness")
    )
    assert rows == 2


def test_shards_name_the_commitment_until_the_run_ends_then_records_reveal_the_seed(
    settings, session, robust_benchmark, worker, tmp_path
):
    """Robustness shard files carry the run seed's commitment only, never the seed, while the
    run goes on; the merged records carry the revealed seed (commit-reveal, issue 11 §1)."""
    sid = submit(session, settings, tmp_path)
    checked = run_keeping_the_seed_secret(worker, session, settings, sid, "pd_robustness")
    assert len(checked) == 2  # one file per 1-image shard, each seen before the run ended
    view = run_seeds.view(session, fresh(session, sid))
    merged = storage.resolve(settings.artifacts_dir, robustness_result(session, sid).records_path)
    metadata = {k.decode(): v.decode() for k, v in pq.read_schema(merged).metadata.items()}
    assert metadata.items() >= {"seed": view.value, "seed_commitment": view.commitment}.items()


def test_the_revealed_seed_reproduces_the_robustness_records_with_the_cli(
    settings, session, robust_benchmark, robust_dataset, worker, tmp_path
):
    """``certbench robust-accuracy --seed <revealed>`` with the stage's protocol gives the
    stored per-image records bit for bit (every column, the d_PD floats included)."""
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    seed = run_seeds.view(session, fresh(session, sid)).value
    weights, manifest_path = model_files(tmp_path / "cli")
    out = tmp_path / "cli-robustness.parquet"
    result = CliRunner().invoke(cli, [
        "robust-accuracy", "--weights", str(weights), "--manifest", str(manifest_path),
        "--dataset", str(robust_dataset), "--config", TEST_SETS[0], "--skip", "2",
        "--anchors", str(settings.anchors_dir / "tiny_k2_s0.safetensors"), "--k", "2",
        "--eps", "8", "--eps", "16", "--n-iter", "3", "--n-target-classes", "1",
        "--projection", "exact", "--device", "cpu", "--seed", seed, "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = storage.resolve(settings.artifacts_dir, robustness_result(session, sid).records_path)
    mine, theirs = pq.read_table(out), pq.read_table(stored)
    assert theirs.num_rows == 4  # 2 images × 2 ε
    assert mine.replace_schema_metadata(None).equals(theirs.replace_schema_metadata(None))


def test_a_bank_that_contradicts_the_protocol_fails_the_run(
    settings, session, robust_benchmark, robust_dataset, worker, tmp_path
):
    train = load_images(robust_dataset, config=TEST_SETS[0], split="train")
    wrong = build_anchor_bank(
        train.images, train.labels, class_names=train.class_names, dataset="x", k=2, seed=9
    )
    wrong.save(settings.anchors_dir / "tiny_k2_s0.safetensors")
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.ANCHORS_UNAVAILABLE
    assert "seed 9 (protocol: 0)" in submission.message and "certbench anchors build" in (
        submission.message
    )
    assert session.get(LeaderboardEntry, sid) is None
    assert robustness_result(session, sid) is None


def test_a_missing_training_split_fails_with_dataset_unavailable(
    settings, session, dataset, worker, tmp_path
):
    load_benchmark(session, tiny_definition(dataset, robustness=tiny_robustness(dataset)))
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.DATASET_UNAVAILABLE
    assert "train" in submission.message
    assert not (settings.anchors_dir / "tiny_k2_s0.safetensors").exists()


def test_aggregation_refuses_shards_attacked_with_different_banks(
    settings, session, robust_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    while (message := worker.take()) is not None:
        if message.name != AGGREGATE:
            worker.execute(message)
    shard = session.scalars(
        select(StageShard).where(
            StageShard.submission_id == sid, StageShard.stage == "pd_robustness"
        )
    ).first()
    path = storage.resolve(settings.artifacts_dir, shard.records_path)
    table = pq.read_table(path)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    pq.write_table(table.replace_schema_metadata({**meta, "anchors_sha256": "0" * 64}), path)
    with pytest.raises(StorageError, match="different anchor banks"):
        item = get_work_item(session, sid, settings=settings)
        merge_stage(session, item, registry.get("pd_robustness"), settings=settings)
    assert robustness_result(session, sid) is None


def test_a_cancelled_submission_stops_its_robustness_shard(
    settings, session, robust_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    pipeline.transition(
        session, sid, from_states={S.QUEUED}, to_state=S.CANCELLED, reason="cancelled_by_user"
    )
    outcomes = [worker.execute(m) for m in iter(worker.take, None)]
    assert all(o.startswith("skipped") for o in outcomes)
    assert (
        session.scalar(
            select(func.count()).select_from(StageShard).where(StageShard.stage == "pd_robustness")
        )
        == 0
    )


def test_a_fresh_rerun_drops_robustness_shards_and_result(
    settings, session, robust_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    records = storage.resolve(settings.artifacts_dir, robustness_result(session, sid).records_path)
    assert records.is_file()
    assert pipeline.reset_for_rerun(session, sid, fresh=True, settings=settings)
    assert robustness_result(session, sid) is None
    assert (
        session.scalar(
            select(func.count()).select_from(StageShard).where(StageShard.stage == "pd_robustness")
        )
        == 0
    )
    assert not records.exists()
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert robustness_result(session, sid) is not None


def test_benchmarks_without_the_stage_leave_the_columns_empty(
    settings, session, benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    entry = session.get(LeaderboardEntry, sid)
    assert entry is not None and robustness_result(session, sid) is None
    assert [entry.base_accuracy, entry.linf_acc_8, entry.pd_acc_16] == [None, None, None]
    assert not any(_attack(m) for m, _ in worker.ran)


def test_robustness_shards_follow_their_own_size(
    settings, session, robust_benchmark, worker, tmp_path, monkeypatch
):
    monkeypatch.setenv("CERTBENCH_SHARD_SIZE", "2")
    monkeypatch.setenv("CERTBENCH_ROBUSTNESS_SHARD_SIZE", "1")
    get_settings.cache_clear()
    sized = get_settings()
    sid = submit(session, sized, tmp_path)
    assert worker.run_next() == "4 shard(s) enqueued"  # 2 certify (2 images each) + 2 robustness
    assert [
        s.stop - s.start for s in shards.plan(session, sid, settings=sized, stage="pd_robustness")
    ] == [1, 1]
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert robustness_result(session, sid).count == 2
