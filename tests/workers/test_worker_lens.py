"""The Fourier-lens stage (Fridovich-Keil et al. 2022) in the pipeline: shards on their own
queue, merged records equal to one direct ``lens_records`` call under any sharding, exactly-once
recording, cancel, fresh re-runs, leaderboard figures, REST sort keys and the model page."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import typer
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.main import create_app
from certbench.cli.lens import register
from certbench.data.sources import load_images
from certbench.lens.lens import (
    LensRecord,
    lens_plan,
    lens_records,
    read_lens_metadata,
    read_lens_records,
    summarize,
)
from models.core.settings import Settings, get_settings
from models.db.entities import LeaderboardEntry, MetricValue, StageResult, StageShard
from models.db.states import Reason, SubmissionState
from models.stages import registry
from models.stages.base import RunContext
from models.stages.fourier_lens.stage import lens_spec
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds, storage
from tests.support.stages import (
    BENCH_SEED,
    count_shards,
    fresh,
    load_stage_benchmark,
    model_files,
    results_by_unit,
    run_delivering_twice,
    run_keeping_the_seed_secret,
    run_unit,
    submit,
    unpinned_hashes,
    validated_item,
)
from tests.support.workers import (
    CIFAR10_CLASSES,
    SOURCE_SIZE,
    TEST_SETS,
    load_benchmark,
    revealed_seed,
    tiny_definition,
    tiny_model,
    write_hub_folder,
)
from workers.app import app
from workers.errors import ShardCancelled
from workers.names import QUEUE, RUN_SHARD, VALIDATE

S = SubmissionState
STAGE = "fourier_lens"
LENS_QUEUE = "certbench.lens"
STEPS, NOISE = 10, 2


def lens_block(dataset: Path, **changes: Any) -> dict[str, Any]:
    """Two Fourier pairs of 10 images, two Jacobian images, and the smoothed variant: 6 base
    and 4 smoothed work units over the 4 images of the tiny ``clean`` config."""
    block: dict[str, Any] = {
        "repo": "local/tiny",
        "folder": str(dataset),
        "config": TEST_SETS[0],
        "source_size": SOURCE_SIZE,
        "kinds": ["amplitude", "phase", "jacobian"],
        "paths": 2,
        "steps": STEPS,
        "jacobian_images": 2,
        "smoothed": True,
        "noise_samples": NOISE,
    }
    block.update(changes)
    return block


@pytest.fixture
def lens_benchmark(session: Session, dataset: Path) -> str:
    return load_stage_benchmark(session, dataset, STAGE, lens_block(dataset))


def _direct(
    dataset: Path, unit: str, run_seed: int, model_seed: int = 3, noise: int = NOISE
) -> list[LensRecord]:
    """One unsharded ``lens_records`` call with the stage's protocol: the pairs from the
    benchmark's public seed, the noise from the run's seed."""
    from certbench.lens.lens import LensProtocol

    images = load_images(dataset, config=TEST_SETS[0])
    kinds = ("amplitude", "phase") + (("jacobian",) if unit == "base" else ())
    protocol = LensProtocol(
        paths=2, steps=STEPS, jacobian_images=2, kinds=kinds, noise_samples=noise,
        sigma=0.25 if unit == "smoothed" else None,
    )  # fmt: skip
    return lens_records(
        tiny_model(seed=model_seed), images.as_float(), images.labels,
        protocol=protocol, seed=run_seed, pairs_seed=BENCH_SEED,
        indices=images.indices, batch_size=7,
    )  # fmt: skip


def _same(a: LensRecord, b: LensRecord) -> bool:
    """Equal records; floats to 1e-6 (a forward's round-off may change with the batch shape)."""
    for field in dataclasses.fields(LensRecord):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, float):
            if not (math.isnan(x) and math.isnan(y)) and not math.isclose(x, y, rel_tol=1e-6):
                return False
        elif x != y:
            return False
    return True


def _merged(session: Session, settings: Settings, sid: int) -> dict[str, list[LensRecord]]:
    return {
        unit: read_lens_records(storage.resolve(settings.artifacts_dir, r.records_path))
        for unit, r in results_by_unit(session, sid, STAGE).items()
    }


@pytest.mark.parametrize("shard_size", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_lens_shards_run_on_their_queue_and_merge_to_one_direct_run(
    settings, session, lens_benchmark, dataset, worker, tmp_path, monkeypatch, shard_size
):
    monkeypatch.setenv("CERTBENCH_SHARD_SIZE", str(shard_size))
    get_settings.cache_clear()
    sized = get_settings()
    sid = submit(session, sized, tmp_path)
    lens_shards = -(-6 // shard_size) + -(-4 // shard_size)
    certify_shards = 2 * -(-2 // shard_size)
    assert worker.run_next() == f"{certify_shards + lens_shards} shard(s) enqueued"
    queued = [(m.name, m.queue) for m in worker.pending()]
    assert queued == [(RUN_SHARD, QUEUE)] * certify_shards + [(RUN_SHARD, LENS_QUEUE)] * lens_shards
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FINISHED, submission.message
    assert "Fourier lens (paper+custom): 6 path(s)" in submission.message

    merged = _merged(session, sized, sid)
    assert set(merged) == {"base", "smoothed"}
    rows = results_by_unit(session, sid, "fourier_lens")
    assert {u: r.data_hashes for u, r in rows.items()} == {
        "base": unpinned_hashes(dataset),
        "smoothed": unpinned_hashes(dataset),
    }
    for unit in ("base", "smoothed"):
        direct = _direct(dataset, unit, revealed_seed(session, sid))
        assert len(merged[unit]) == len(direct) == (6 if unit == "base" else 4)
        assert _all_same(merged[unit], direct), (unit, merged[unit], direct)

    entry = session.get(LeaderboardEntry, sid)
    base = [r for r in merged["base"] if r.kind == "amplitude"]
    # the headline HFF is the released code's (Nyquist bin left out), the equation's beside it
    assert entry.hff_amplitude == pytest.approx(sum(r.hff_released for r in base) / 2)
    assert entry.metrics["hff_amplitude_nyquist"] == pytest.approx(sum(r.hff for r in base) / 2)
    assert entry.cd_amplitude == pytest.approx(sum(r.cd for r in base) / 2)
    jac = [r.jacobian_sq for r in merged["base"] if r.kind == "jacobian"]
    assert entry.jacobian_norm == pytest.approx(math.sqrt(sum(jac) / 2))
    smoothed = [r.hff_released for r in merged["smoothed"] if r.kind == "phase"]
    assert entry.metrics["hff_phase_smoothed"] == pytest.approx(sum(smoothed) / 2)
    # kinds the protocol leaves out are stored as "not measured"
    assert entry.hff_pixel_within is None and entry.metrics["hff_pixel_between_smoothed"] is None
    # every figure carries the Gaussian interval of the lens summary (Fridovich-Keil et al.,
    # NeurIPS 2022, §4)
    for unit, suffix in (("base", ""), ("smoothed", "_smoothed")):
        for name, estimate in summarize(merged[unit]).metrics.items():
            key = f"{name}{suffix}"
            low, high = entry.metrics[f"{key}_ci_low"], entry.metrics[f"{key}_ci_high"]
            assert (low, high) == (pytest.approx(estimate.low), pytest.approx(estimate.high))
    assert entry.metrics["hff_pixel_within_ci_low"] is None


def test_the_smoothed_records_change_with_the_run_seed_and_nothing_else(
    settings, session, dataset, worker, tmp_path
):
    """The smoothed unit's noise is the run seed's: another seed redraws it on the same paths;
    another run (submission, attempt, commitment, batch size) with the same seed gives the same
    records; the base unit (softmax paths, exact Jacobian) draws nothing from it. Two fixed
    128-bit seeds (8 noise draws per image, so the random ResNet's votes vary along a path)."""
    load_stage_benchmark(session, dataset, STAGE, lens_block(dataset, noise_samples=8))
    sid = submit(session, settings, tmp_path)
    drawn = validated_item(worker, session, settings, sid)
    assert drawn.seed_kind == "secret" and drawn.seed.bit_length() > 64  # p(fail) = 2^-64
    item = dataclasses.replace(drawn, seed=2**127 + 12345)

    def records(work: Any, unit: str, name: str, batch_size: int = 64) -> list[LensRecord]:
        paths = run_unit(work, STAGE, unit, tmp_path / name, settings, batch_size)
        return [r for path in paths for r in read_lens_records(path)]

    mine = records(item, "smoothed", "mine")
    assert _all_same(mine, _direct(dataset, "smoothed", item.seed, noise=8))
    other_run = dataclasses.replace(
        item, submission_id=item.submission_id + 100, attempt=item.attempt + 1,
        seed_commitment=run_seeds.commitment("0x" + "0" * 32),
    )  # fmt: skip
    assert _all_same(mine, records(other_run, "smoothed", "other-run", batch_size=7))
    reseeded = dataclasses.replace(item, seed=2**127 + 67890)
    theirs = records(reseeded, "smoothed", "reseeded")
    assert [(r.source, r.target) for r in theirs] == [(r.source, r.target) for r in mine]
    assert [r.hff for r in theirs] != [r.hff for r in mine]  # other noise, other votes
    assert _all_same(records(item, "base", "base"), records(reseeded, "base", "base-reseeded"))


def test_shards_name_the_commitment_and_merged_records_reveal_the_seed(
    settings, session, lens_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    checked = run_keeping_the_seed_secret(worker, session, settings, sid, STAGE)
    assert len(checked) == 10  # every base and smoothed shard, checked before the run ended
    view = run_seeds.view(session, fresh(session, sid))
    revealed = {"seed": view.value, "seed_kind": "secret", "seed_commitment": view.commitment}
    results = results_by_unit(session, sid, STAGE)
    assert set(results) == {"base", "smoothed"}
    for result in results.values():
        assert result.seeds == {**revealed, "pairs_seed": BENCH_SEED}
        path = storage.resolve(settings.artifacts_dir, result.records_path)
        assert read_lens_metadata(path).items() >= {**revealed, "pairs_seed": BENCH_SEED}.items()


def test_the_revealed_seed_reproduces_the_lens_records_with_the_cli(
    settings, session, dataset, worker, tmp_path
):
    """``certbench fourier-lens --seed <revealed> --pairs-seed <benchmark seed>`` gives the
    stored records of both units (floats to 1e-6: the forward's batch shape differs); 8 noise
    draws per image, so the smoothed votes depend on the noise."""
    load_stage_benchmark(session, dataset, STAGE, lens_block(dataset, noise_samples=8))
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    seed = run_seeds.view(session, fresh(session, sid)).value
    merged = _merged(session, settings, sid)
    weights, manifest_path = model_files(tmp_path / "cli")
    cli = typer.Typer()
    register(cli)
    for unit, extra in (("smoothed", ["--smoothed"]), ("base", ["--kind", "jacobian"])):
        out = tmp_path / f"cli-{unit}"
        result = CliRunner().invoke(cli, [
            "fourier-lens", "--weights", str(weights), "--manifest", str(manifest_path),
            "--dataset", str(dataset), "--config", TEST_SETS[0], "--paths", "2", "--steps",
            str(STEPS), "--kind", "amplitude", "--kind", "phase", "--jacobian-images", "2",
            "--noise-samples", "8", "--seed", seed, "--pairs-seed", str(BENCH_SEED),
            "--device", "cpu", "--out", str(out), *extra,
        ])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert _all_same(read_lens_records(out / "records.parquet"), merged[unit]), unit
        assert read_lens_metadata(out / "records.parquet")["seed"] == str(int(seed, 16))


def _all_same(a: list[LensRecord], b: list[LensRecord]) -> bool:
    return len(a) == len(b) > 0 and all(_same(x, y) for x, y in zip(a, b, strict=True))


def test_a_redelivered_lens_shard_is_recorded_once(
    settings, session, lens_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    outcomes = run_delivering_twice(worker, STAGE, sid, "base")
    assert fresh(session, sid).state == S.FINISHED
    assert outcomes == ["recorded: 1 lens unit(s)", "already recorded"]
    assert count_shards(session, STAGE, sid) == 10


def test_cancel_stops_lens_shards_before_and_during_a_run(
    settings, session, lens_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    item = get_work_item(session, sid, settings=settings)
    stage = registry.get(STAGE)
    spec = next(s for s in stage_plan(item, settings) if s.unit == "base")
    target = tmp_path / "shard.parquet"

    def cancelled(done: int) -> None:
        raise ShardCancelled(f"cancelled after {done} unit(s)")

    context = RunContext(target, torch.device("cpu"), 1000, cancelled, settings)
    with pytest.raises(ShardCancelled):
        stage.run(item, spec, context)
    assert not target.exists()  # nothing written when the lease says stop

    pipeline.transition(
        session, sid, from_states={S.QUEUED}, to_state=S.CANCELLED, reason="cancelled_by_user"
    )
    outcomes = [worker.execute(m) for m in iter(worker.take, None)]
    assert outcomes and all(o.startswith("skipped") for o in outcomes)
    assert session.scalar(select(func.count()).select_from(StageShard)) == 0


def stage_plan(item, settings):
    from models.runs.shards import plan_item

    return plan_item(item, settings, stage=STAGE)


def test_a_fresh_rerun_drops_lens_shards_results_and_figures(
    settings, session, lens_benchmark, worker, tmp_path
):
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    files = [
        storage.resolve(settings.artifacts_dir, r.records_path)
        for r in session.scalars(select(StageResult).where(StageResult.stage == STAGE))
    ]
    assert len(files) == 2 and all(f.is_file() for f in files)
    assert pipeline.reset_for_rerun(session, sid, fresh=True, settings=settings)
    for table in (StageShard, StageResult, MetricValue):
        assert session.scalar(select(func.count()).select_from(table)) == 0
    assert not any(f.exists() for f in files)
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert session.get(LeaderboardEntry, sid).hff_amplitude is not None


def test_lens_figures_are_rest_fields_sort_keys_and_a_model_page_section(
    settings, session, lens_benchmark, worker, tmp_path
):
    first, second = submit(session, settings, tmp_path, 3), submit(session, settings, tmp_path, 4)
    worker.run_all()
    assert {fresh(session, s).state for s in (first, second)} == {S.FINISHED}
    values = {s: session.get(LeaderboardEntry, s).cd_phase for s in (first, second)}
    with TestClient(create_app(settings)) as client:
        for order in ("asc", "desc"):
            body = client.get(
                "/api/v1/leaderboards/tiny", params={"sort": "cd_phase", "order": order}
            ).json()
            got = [(r["submission_id"], r["metrics"]["cd_phase"]) for r in body["rows"]]
            assert sorted(got, key=lambda x: x[1], reverse=order == "desc") == got
            assert {sid: value for sid, value in got} == values
            assert body["higher_is_better"]["cd_phase"] is True
            assert body["higher_is_better"]["hff_amplitude"] is False
        row = body["rows"][0]["metrics"]
        assert {"hff_amplitude", "jacobian_norm", "hff_amplitude_smoothed"} <= row.keys()
        assert "hff_amplitude_nyquist" in row  # the equation's HFF, secondary (issue 26 §2)

        result = client.get(f"/api/v1/results/{first}").json()
        lens = {s["unit"]: s for s in result["stages"] if s["stage"] == "fourier_lens"}
        assert set(lens) == {"base", "smoothed"} and lens["smoothed"]["summary"]["sigma"] == 0.25
        assert "folder" not in lens["base"]["protocol"]
        figure = lens["base"]["summary"]["metrics"]["cd_phase"]
        assert figure["mean"] == pytest.approx(values[first]) and figure["count"] == 2

        html = client.get(f"/models/{first}").text
        section = html[html.index('id="fourier-lens"') :]
        section = section[: section.index("</section>")]
        assert 'id="lens-base"' in section and 'id="lens-smoothed"' in section
        assert f"{figure['mean']:.3f}" in section and "paper+custom" in section
        # headline HFF: the released code's (Nyquist bin left out); the equation's beside it
        summary = lens["base"]["summary"]
        assert summary["hff_convention"] == "nyquist-dropped"
        stored = session.scalars(
            select(StageResult).where(
                StageResult.submission_id == first,
                StageResult.stage == STAGE,
                StageResult.unit == "base",
            )
        ).one()
        records = read_lens_records(storage.resolve(settings.artifacts_dir, stored.records_path))
        amplitude = [r for r in records if r.kind == "amplitude"]
        assert summary["metrics"]["hff_amplitude"]["mean"] == pytest.approx(
            np.mean([r.hff_released for r in amplitude])
        )
        assert summary["nyquist"]["hff_amplitude_nyquist"]["mean"] == pytest.approx(
            np.mean([r.hff for r in amplitude])
        )
        assert "HFF, Nyquist kept (equation)" in section and 'data-key="nyquist"' in section
        assert "per unit pixel, [0,1] scale" in section  # the Jacobian's unit (§1)
        assert "2 Fourier pairs × 10 images" in section and "2 Jacobian images (exact)" in section
        assert "pixel pairs" not in section  # kinds the benchmark does not run are not described
        assert f"public seed {BENCH_SEED}" in section and "this run's noise seed" in section
        board = client.get("/leaderboards/tiny?sort=hff_amplitude&order=asc").text
        assert (
            'data-key="hff_amplitude"' in board and 'data-key="hff_amplitude_smoothed"' not in board
        )


def test_a_plan_that_contradicts_the_clean_set_fails_the_run(
    settings, session, dataset, worker, tmp_path
):
    """20 clean images, 2 of each class but 9 (which is missing): 36 between-class pairs where
    the definition (10 classes) promises 45; the first shard fails the run with the reason."""
    clean = tmp_path / "nine-classes"
    labels = np.minimum(np.arange(20) // 2, 8)
    images = np.random.default_rng(1).integers(0, 256, size=(20, 3, 32, 32), dtype=np.uint8)
    write_hub_folder(clean, "clean", images, labels, class_names=CIFAR10_CLASSES)
    definition = tiny_definition(dataset)
    block = lens_block(clean, kinds=["pixel_between"], pixel_pairs=1, smoothed=False)
    definition["stages"] = {"fourier_lens": {**block, "source_size": 20}}
    load_benchmark(session, definition)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FAILED, submission.message
    assert submission.reason == Reason.DATASET_UNAVAILABLE
    assert "36 work units" in submission.message and "stored 45" in submission.message


def test_stage_constants_match_the_core():
    from certbench.lens import lens as lens_core
    from certbench.lens import metrics as lens_metrics
    from models.stages.fourier_lens import stage as fourier_lens

    assert fourier_lens.KINDS == lens_metrics.KINDS
    assert fourier_lens.LENS_VERSION == lens_core.PROTOCOL_VERSION
    assert {k: kind for k, (kind, _) in lens_metrics.METRICS.items()} == fourier_lens.METRICS


def test_stored_plan_size_equals_lens_plan_on_balanced_cifar_labels():
    from certbench.lens.lens import LensProtocol
    from models.catalog.benchmarks import parse_definition
    from models.stages.fourier_lens.stage import FourierLens

    for classes, block in [
        (10, {"preset": "paper"}),
        (10, {"preset": "quick", "smoothed": True}),
        (100, {"preset": "quick", "pixel_pairs": 2}),
    ]:
        labels = torch.arange(10_000) % classes
        definition = tiny_definition(Path("/nowhere"))
        definition.update(num_classes=classes)
        block = {"repo": "uoft-cs/cifar10", **block}
        definition["stages"] = {"fourier_lens": block}
        parsed = parse_definition(__import__("json").dumps(definition))
        row = FourierLens().protocol_row(parsed.stage_block("fourier_lens"), parsed)
        spec = lens_spec(row, Settings(data_dir=Path("/nowhere")))
        for unit, size in row["units"].items():
            protocol: LensProtocol = spec.protocol(unit, 0.25)
            assert lens_plan(labels, protocol, 0).size == size, (classes, block, unit)
