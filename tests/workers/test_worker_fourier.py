"""The Fourier sensitivity stage in the pipeline: shards of grid points on their own queue,
merged records equal to one direct ``sensitivity_records`` call for any sharding and batch size,
exactly-once recording, cancellation, fresh re-runs, REST and the web pages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.main import create_app
from certbench.cli.fourier import register
from certbench.data.image_set import Subset
from certbench.data.provenance import config_sha256
from certbench.data.sources import load_images
from certbench.fourier import sensitivity
from certbench.fourier.heatmap import assemble_heatmap, summarize_heatmap
from certbench.fourier.protocol import get_protocol
from certbench.fourier.records import read_sensitivity_records
from certbench.fourier.sensitivity import sensitivity_records
from certbench.fourier.terms import sensitivity_terms
from certbench.smoothing.records import read_metadata
from certbench.stats.terms import figure_interval
from models.boards.interval_backfill import backfill_entry, entries_to_backfill
from models.boards.uncertainty import terms_relpath
from models.db.entities import MetricValue, StageResult, Submission
from models.db.states import Reason, SubmissionState
from models.stages import inputs, registry
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds, storage
from tests.support.stages import (
    certify_calls,
    count_shards,
    fresh,
    is_shard,
    left_to_the_engine,
    model_files,
    results_by_unit,
    run_keeping_the_seed_secret,
    submit,
    unpinned_hashes,
)
from tests.support.workers import (
    TEST_SETS,
    CancelOnFirstForward,
    load_benchmark,
    revealed_seed,
    tiny_definition,
    tiny_model,
)
from workers.app import app
from workers.names import QUEUE, VALIDATE

S = SubmissionState
STAGE = "fourier_sensitivity"
FOURIER_QUEUE = "certbench.fourier"
SEED = 7  # tiny_definition's benchmark seed
#: stride 8 on the 32 × 32 grid: offsets {−16, −8, 0, 8}, 16 cells, 10 distinct basis images.
POINTS = 10


def tiny_fourier(dataset: Path, **changes: Any) -> dict[str, Any]:
    """A quick-protocol block over the tiny ``clean`` config: 2 images, n0 = 4, n = 16."""
    block: dict[str, Any] = {
        "protocol": "quick",
        "repo": "local/tiny",
        "folder": str(dataset),
        "config": TEST_SETS[0],
        "source_size": 4,
        "skip": 2,
        "n0": 4,
        "n": 16,
        "stride": 8,
        "points_per_shard": 3,
    }
    block.update(changes)
    return block


def _benchmark(session: Session, dataset: Path, **changes: Any) -> None:
    definition = tiny_definition(dataset)
    definition["stages"] = {STAGE: tiny_fourier(dataset, **changes)}
    load_benchmark(session, definition)


def _is_fourier(message: Any) -> bool:
    return is_shard(message, STAGE)


def _result(session: Session, sid: int) -> StageResult | None:
    return results_by_unit(session, sid, STAGE).get("")


def _fourier_shards(session: Session, sid: int) -> int:
    return count_shards(session, STAGE, sid)


def _timeless(records: list[Any]) -> list[Any]:
    """Records in their order, without CERTIFY's wall-clock seconds (the one timing field)."""
    return [
        replace(r, certified=None if r.certified is None else replace(r.certified, seconds=0.0))
        for r in records
    ]


def _direct(dataset: Path, *, sigma: float | None, seed: int, model_seed: int = 3) -> list[Any]:
    """One unsharded call of the core on the same images, points, run seed and stream key."""
    images = load_images(dataset, config=TEST_SETS[0], subset=Subset(skip=2))
    protocol = get_protocol("quick", n0=4, n=16, stride=8, skip=2, images=2)
    return sensitivity_records(
        tiny_model(seed=model_seed),
        images.as_float(),
        images.labels,
        images.indices,
        protocol.points(32),
        protocol,
        seed,
        sigma=sigma,
        test_set=f"{TEST_SETS[0]}/test",
        batch_size=64,
    )


@pytest.mark.parametrize(
    ("points_per_shard", "batch_size", "units"), [(3, "7", 4), (None, None, 1)]
)
def test_fourier_shards_run_on_their_queue_and_merge_into_one_direct_run(
    settings, session, dataset, worker, tmp_path, monkeypatch, points_per_shard, batch_size, units
):
    if batch_size is not None:
        monkeypatch.setenv("CERTBENCH_FOURIER_BATCH_SIZE", batch_size)
    calls = certify_calls(monkeypatch, sensitivity)
    _benchmark(session, dataset, points_per_shard=points_per_shard)
    sid = submit(session, settings, tmp_path)
    assert worker.run_next() == f"{4 + units} shard(s) enqueued"  # 4 certify (1 image each)
    queued = [(m.queue, m.args[1]) for m in worker.pending()]
    assert queued == [(QUEUE, "certification")] * 4 + [(FOURIER_QUEUE, STAGE)] * units
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FINISHED, submission.message
    assert "Fourier sensitivity (quick+custom protocol): 10 basis images × 2 images" in (
        submission.message
    )
    fourier_outcomes = [out for m, out in worker.ran if _is_fourier(m)]
    assert sum(int(o.split()[1]) for o in fourier_outcomes) == POINTS * 2
    assert left_to_the_engine(calls), calls  # CERTBENCH_FOURIER_BATCH_SIZE: base map only

    result = _result(session, sid)
    merged = read_sensitivity_records(storage.resolve(settings.artifacts_dir, result.records_path))
    direct = _direct(dataset, sigma=0.25, seed=revealed_seed(session, sid))
    # any sharding and batch size: the records of one direct call, in its order
    assert _timeless(merged) == _timeless(direct)
    assert all(r.certified is not None and r.certified.n == 16 for r in merged)
    heatmap = assemble_heatmap(direct, size=32, stride=8)
    bands = summarize_heatmap(heatmap)
    assert result.summary["heatmap"] == heatmap.to_dict()
    assert result.summary["bands"] == bands
    assert result.summary["label"] == "quick+custom" and result.count == POINTS * 2
    assert result.data_hashes == unpinned_hashes(dataset)
    view = run_seeds.view(session, session.get(Submission, sid))
    assert "folder" not in result.protocol and result.seeds == {
        "seed": view.value,
        "seed_kind": "secret",
        "seed_commitment": view.commitment,
        "stream": "clean/test",
    }
    metrics = {
        m.key: m.value
        for m in session.scalars(
            select(MetricValue).where(MetricValue.submission_id == sid, MetricValue.stage == STAGE)
        )
    }
    figures = {
        **{f"fourier_acr_{b}": bands["acr"]["bands"][b] for b in ("low", "mid", "high")},
        **{f"fourier_base_{b}": bands["base_accuracy"]["bands"][b] for b in ("low", "mid", "high")},
    }
    # each band mean with its bootstrap interval over the images, from the direct records
    terms = sensitivity_terms(direct, size=32)
    bounds = {}
    for key in figures:
        name, band = key.removeprefix("fourier_").split("_")
        found = figure_interval(terms[f"{'acr' if name == 'acr' else 'base_accuracy'}:{band}"])
        bounds |= {f"{key}_ci_low": found.low, f"{key}_ci_high": found.high}
        assert found.low <= figures[key] <= found.high
    assert metrics == pytest.approx({**figures, **bounds})


def test_shards_name_the_commitment_until_the_run_ends_then_records_reveal_the_seed(
    settings, session, dataset, worker, tmp_path
):
    """Fourier-sensitivity shard files carry the run seed's commitment only, never the seed,
    while the run goes on; the merged records carry the revealed seed (issue 11 §1)."""
    _benchmark(session, dataset, points_per_shard=5)
    sid = submit(session, settings, tmp_path)
    checked = run_keeping_the_seed_secret(worker, session, settings, sid, STAGE)
    assert len(checked) == 2  # two shards of 5 points, each seen before the run ended
    view = run_seeds.view(session, fresh(session, sid))
    merged = storage.resolve(settings.artifacts_dir, _result(session, sid).records_path)
    revealed = {"seed": view.value, "seed_commitment": view.commitment, "seed_kind": "secret"}
    assert read_metadata(merged).items() >= revealed.items()


def test_the_revealed_seed_reproduces_the_fourier_records_with_the_cli(
    settings, session, dataset, worker, tmp_path
):
    """``certbench fourier-heatmap --seed <revealed>`` with the stage's protocol gives the
    stored records bit for bit (every column but CERTIFY's wall-clock seconds)."""
    _benchmark(session, dataset, points_per_shard=3)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    seed = run_seeds.view(session, fresh(session, sid)).value
    weights, manifest_path = model_files(tmp_path / "cli")
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:  # keeps fourier-heatmap a named sub-command
        pass

    register(cli)
    out = tmp_path / "cli-fourier"
    result = CliRunner().invoke(cli, [
        "fourier-heatmap", "--weights", str(weights), "--manifest", str(manifest_path),
        "--dataset", str(dataset), "--config", TEST_SETS[0], "--protocol", "quick",
        "--skip", "2", "--images", "2", "--n0", "4", "--n", "16", "--stride", "8",
        "--device", "cpu", "--seed", seed, "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = storage.resolve(settings.artifacts_dir, _result(session, sid).records_path)
    mine, theirs = pq.read_table(out / "records.parquet"), pq.read_table(stored)
    columns = [c for c in theirs.column_names if c != "seconds"]
    assert theirs.num_rows == POINTS * 2
    assert mine.select(columns).equals(theirs.select(columns))


def test_pinned_stage_images_are_verified_and_other_bytes_fail_the_run(
    settings, session, dataset, worker, tmp_path
):
    pinned = config_sha256(dataset, TEST_SETS[0])
    _benchmark(session, dataset, points_per_shard=None, provenance={"sha256": pinned})
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert _result(session, sid).data_hashes == {**unpinned_hashes(dataset), "verified": "sha256"}
    with TestClient(create_app(settings)) as client:
        page = client.get(f"/models/{sid}").text
    assert '<tr data-test-set="Fourier sensitivity heatmaps: images">' in page and pinned in page

    definition = tiny_definition(dataset)
    definition["version"] = 2  # the same block pinned to other bytes
    definition["stages"] = {STAGE: tiny_fourier(dataset, provenance={"sha256": "0" * 64})}
    load_benchmark(session, definition)
    other = submit(session, settings, tmp_path, model_seed=4)
    worker.run_all()
    failed = fresh(session, other)
    assert failed.state == S.FAILED and failed.reason == Reason.DATASET_MISMATCH
    assert "stage images '_fourier_sensitivity'" in failed.message
    assert f"has sha256 {pinned} but the benchmark definition pins {'0' * 64}" in failed.message
    assert _result(session, other) is None


def test_a_redelivered_fourier_shard_is_recorded_once(settings, session, dataset, worker, tmp_path):
    _benchmark(session, dataset)
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    twice = None
    for message in worker.pending():
        worker.take()
        worker.execute(message)
        if _is_fourier(message) and twice is None:
            twice = message
            worker.execute(message)  # delivered again, e.g. after a lost acknowledgement
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    outcomes = [out for m, out in worker.ran if m == twice]
    assert outcomes == ["recorded: 6 perturbed image(s)", "already recorded"]
    assert _fourier_shards(session, sid) == 4
    assert _result(session, sid).count == POINTS * 2


def test_cancel_stops_a_running_fourier_shard(
    settings, session, dataset, worker, tmp_path, monkeypatch
):
    _benchmark(session, dataset)
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    while (message := worker.take()) is not None and not _is_fourier(message):
        worker.execute(message)  # the certification shards: the submission is running
    assert message is not None and fresh(session, sid).state == S.RUNNING
    wrapped = CancelOnFirstForward(tiny_model(seed=3), settings, sid)
    monkeypatch.setattr(inputs, "model_for", lambda item, device: wrapped)
    outcome = worker.execute(message)
    assert outcome.startswith("cancelled: fourier_sensitivity shard 0"), outcome
    assert wrapped.calls == 1  # stopped at the first progress report, not after the shard
    assert _fourier_shards(session, sid) == 0
    assert fresh(session, sid).state == S.CANCELLED
    folder = storage.resolve(settings.artifacts_dir, f"records/{sid}/_{STAGE}")
    assert not list(folder.rglob("shard-*.parquet"))


def test_a_fresh_rerun_drops_fourier_shards_results_and_files(
    settings, session, dataset, worker, tmp_path
):
    _benchmark(session, dataset)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    records = storage.resolve(settings.artifacts_dir, _result(session, sid).records_path)
    before = read_sensitivity_records(records)
    assert pipeline.reset_for_rerun(session, sid, fresh=True, settings=settings)
    assert _result(session, sid) is None and _fourier_shards(session, sid) == 0
    assert not records.exists()
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert _fourier_shards(session, sid) == 4
    # a fresh rerun draws a new secret seed (commit-reveal): the records of that seed
    again = _direct(dataset, sigma=0.25, seed=revealed_seed(session, sid))
    assert _timeless(read_sensitivity_records(records)) == _timeless(again)
    assert len(again) == len(before)


def test_a_base_only_map_skips_smoothing_and_leaves_the_acr_columns_empty(
    settings, session, dataset, worker, tmp_path
):
    _benchmark(session, dataset, smoothed=False, points_per_shard=None)
    sid = submit(session, settings, tmp_path)
    assert worker.run_next() == "5 shard(s) enqueued"  # the whole base map is one shard
    worker.run_all()
    result = _result(session, sid)
    merged = read_sensitivity_records(storage.resolve(settings.artifacts_dir, result.records_path))
    # no timing field without CERTIFY
    assert merged == _direct(dataset, sigma=None, seed=revealed_seed(session, sid))
    assert all(r.certified is None for r in merged)
    assert result.summary["heatmap"]["acr"] is None and result.summary["sigma"] is None
    values = {
        m.key: m.value
        for m in session.scalars(select(MetricValue).where(MetricValue.stage == STAGE))
    }
    assert [values[f"fourier_acr_{b}"] for b in ("low", "mid", "high")] == [None] * 3
    assert all(values[f"fourier_base_{b}"] is not None for b in ("low", "mid", "high"))


def test_heatmaps_reach_rest_the_leaderboard_and_the_web_pages(
    settings, session, dataset, worker, tmp_path
):
    _benchmark(session, dataset)
    first = submit(session, settings, tmp_path, model_seed=3)
    second = submit(session, settings, tmp_path, model_seed=4)
    worker.run_all()
    assert fresh(session, first).state == fresh(session, second).state == S.FINISHED
    stored = _result(session, first).summary
    with TestClient(create_app(settings), raise_server_exceptions=True) as client:
        body = client.get(f"/api/v1/results/{first}").json()
        fourier = [s for s in body["stages"] if s["stage"] == STAGE]
        assert len(fourier) == 1 and fourier[0]["unit"] == ""
        heatmap = fourier[0]["summary"]["heatmap"]
        assert heatmap["frequencies"] == [-16, -8, 0, 8]
        assert heatmap["acr"] == stored["heatmap"]["acr"] and len(heatmap["acr"]) == 4
        assert fourier[0]["summary"]["protocol"]["n"] == 16
        assert "folder" not in fourier[0]["protocol"]

        for key in ("fourier_acr_low", "fourier_base_mid"):
            board = client.get("/api/v1/leaderboards/tiny", params={"sort": key}).json()
            rows = {r["submission_id"]: r["metrics"][key] for r in board["rows"]}
            values = [r["metrics"][key] for r in board["rows"]]
            assert values == sorted(values, reverse=True)  # sorted by the stage's figure
            wanted = session.get(MetricValue, (first, key)).value
            assert rows[first] == pytest.approx(wanted)

        board_html = client.get("/leaderboards/tiny", params={"sort": "fourier_acr_mid"}).text
        for band in ("low", "mid", "high"):  # smoothed map: ACR columns; base figures REST-only
            assert f'data-key="fourier_acr_{band}"' in board_html
            assert f'data-key="fourier_base_{band}"' not in board_html

        page = client.get("/compare", params=[("id", first), ("id", second)])
        assert page.status_code == 200
        html = page.text
        assert 'id="compare-fourier"' in html and 'data-kind="acr"' in html
        assert "Signs: per-image" in html  # both maps drawn under the paper's convention
        for chart in ("compare-fourier-0", "compare-fourier-1", "compare-fourier-diff-1"):
            assert f'id="{chart}"' in html

        page = client.get(f"/models/{first}")
        assert page.status_code == 200
        html = page.text
        assert 'id="fourier-sensitivity"' in html and "not the paper" in html
        # the sign convention is stated (issue 26 §2): the paper's release, one sign per image
        assert "signs: per-image" in html and "published heatmaps" in html
        for chart in ("fourier-acr", "fourier-base-accuracy"):  # ACR and base maps
            assert f'data-figure="{chart}"' in html
        assert 'id="fourier-bands"' in html and "A Spectral View of Randomized Smoothing" in html


def test_the_backfill_restores_the_band_intervals_and_terms(
    settings, session, dataset, worker, tmp_path
):
    """An entry merged before the stage stored intervals gets exactly what the aggregate
    stores, from its merged records (``certbench results backfill-intervals``)."""
    _benchmark(session, dataset, points_per_shard=5)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    terms = storage.resolve(settings.artifacts_dir, terms_relpath(registry.get(STAGE), sid))
    stored = terms.read_bytes()

    def bounds() -> dict[str, float | None]:
        session.expire_all()
        rows = session.scalars(
            select(MetricValue).where(MetricValue.submission_id == sid, MetricValue.stage == STAGE)
        )
        return {m.key: m.value for m in rows if "_ci_" in m.key}

    fresh = bounds()
    assert len(fresh) == 12  # 6 band means × (low, high)
    session.execute(delete(MetricValue).where(MetricValue.key.in_(fresh)))
    session.commit()
    terms.unlink()
    assert entries_to_backfill(session) == [sid]
    assert backfill_entry(session, sid, settings=settings) is None
    assert bounds() == fresh and terms.read_bytes() == stored
