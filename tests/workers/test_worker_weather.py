"""The worst-case weather stage (Wang et al., NeurIPS 2022 ML Safety Workshop) in the pipeline:
shards on their own queue, records equal to one direct call of the core, leaderboard metrics over
REST, the model-page section and its example panels, exactly-once recording, cancel, fresh rerun,
and a perturbation set violation reported as a failure."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.main import create_app
from certbench.cli.weather import RECORDS, register
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.smoothing.records import read_metadata, read_table
from certbench.stats.terms import figure_interval, terms_from_table
from certbench.weather import attack
from certbench.weather.attack import attack_base, attack_smoothed
from certbench.weather.examples import read_examples
from certbench.weather.records import read_weather_records, summarize_weather
from certbench.weather.search import AttackConfig
from certbench.weather.terms import weather_terms
from certbench.weather.threat import Particles, WeatherSet
from models.boards.uncertainty import terms_relpath
from models.core.settings import Settings, get_settings
from models.db.entities import LeaderboardEntry, StageResult
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.stages import registry
from models.stages.weather_attack.protocol import WeatherAttackError
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds, storage
from tests.support.stages import (
    BENCH_SEED,
    MODEL_SEED,
    certify_calls,
    count_shards,
    fresh,
    left_to_the_engine,
    load_stage_benchmark,
    model_files,
    results_by_unit,
    run_delivering_twice,
    run_keeping_the_seed_secret,
    run_unit,
    submit,
    unpinned_hashes,
    validated_item,
    write_model_labelled_dataset,
)
from tests.support.workers import (
    SOURCE_SIZE,
    TEST_SETS,
    revealed_seed,
    tiny_model,
)
from workers.app import app
from workers.names import AGGREGATE, QUEUE, RUN_SHARD, VALIDATE

S = SubmissionState
STAGE = "weather_attack"
WEATHER_QUEUE = "certbench.weather"
CONFIG = AttackConfig(steps=2, restarts=1, seed=BENCH_SEED)


def weather_block(dataset: Path, **changes: Any) -> dict[str, Any]:
    """The stage over the tiny ``clean`` config: 2 images, rain and snow at severity 1 (the
    fast protocol: 2 PGD steps, 1 restart, 2 noise vectors), 1 example image."""
    block: dict[str, Any] = {
        "repo": "local/tiny",
        "folder": str(dataset),
        "config": TEST_SETS[0],
        "source_size": SOURCE_SIZE,
        "weathers": ["rain", "snow"],
        "severities": [1],
        "steps": 2,
        "restarts": 1,
        "smoothed": True,
        "noise_samples": 2,
        "examples": 1,
    }
    block.update(changes)
    return block


@pytest.fixture
def weather_dataset(tmp_path: Path) -> Path:
    """The tiny layout labelled with the model's own clean predictions, so every image starts
    correct and the attack has something to break."""
    return write_model_labelled_dataset(tmp_path / "weather-dataset", seed=11)


def _load(session: Session, dataset: Path, **changes: Any) -> str:
    return load_stage_benchmark(session, dataset, STAGE, weather_block(dataset, **changes))


def _results(session: Session, sid: int) -> dict[str, StageResult]:
    return results_by_unit(session, sid, STAGE)


def _merged(settings: Settings, results: dict[str, StageResult], kind: str) -> list[Any]:
    """The merged records of every unit of one kind, in (weather, severity, index) order."""
    units = [u for u, r in results.items() if r.summary["kind"] == kind]
    records = [
        r
        for unit in units
        for r in read_weather_records(
            storage.resolve(settings.artifacts_dir, results[unit].records_path)
        )
    ]
    return sorted(records, key=lambda r: (r.weather, r.severity, r.index))


def _images(dataset: Path) -> Any:
    return load_images(dataset, config=TEST_SETS[0], subset=Subset(skip=2))


def _direct_base(dataset: Path, run_seed: int, config: AttackConfig = CONFIG) -> list[Any]:
    """One direct call of the core on the stage's 2 images, both weathers at once: restart 0
    from the benchmark's public seed, later restarts from the run's seed."""
    images = _images(dataset)
    return attack_base(
        tiny_model(seed=MODEL_SEED), images.images, images.labels, weathers=("rain", "snow"),
        severities=(1,), config=config, indices=images.indices, batch_size=64,
        run_seed=run_seed,
    )  # fmt: skip


def _direct_smoothed(dataset: Path, run_seed: int) -> list[Any]:
    """As ``_direct_base`` for the smoothed classifier: the noise from the run's seed."""
    images = _images(dataset)
    return attack_smoothed(
        tiny_model(seed=MODEL_SEED), images.images, images.labels, sigma=0.25,
        weathers=("rain", "snow"), severities=(1,), config=CONFIG, noise_samples=2, n0=4,
        n=16, alpha=0.001, indices=images.indices, batch_size=64, run_seed=run_seed,
    )  # fmt: skip


def _timeless(records: list[Any]) -> list[Any]:
    """CERTIFY records carry wall-clock seconds; everything else must be equal."""
    return [dataclasses.replace(r, seconds=0.0) for r in records]


def test_weather_shards_run_on_their_queue_and_fill_leaderboard_and_page(
    settings, session, weather_dataset, worker, tmp_path, monkeypatch
):
    calls = certify_calls(monkeypatch, attack)
    _load(session, weather_dataset)
    sid = submit(session, settings, tmp_path)
    # 4 certify + 2 images × (rain-1, snow-1, smoothed-rain-1, smoothed-snow-1) + 1 example
    assert worker.run_next() == "13 shard(s) enqueued"
    queued = [(m.queue, m.args[2]) for m in worker.pending() if m.name == RUN_SHARD]
    assert [q for q, _ in queued] == [QUEUE] * 4 + [WEATHER_QUEUE] * 9
    assert [u for q, u in queued if q == WEATHER_QUEUE] == [
        "rain-1", "rain-1", "snow-1", "snow-1", "smoothed-rain-1", "smoothed-rain-1",
        "smoothed-snow-1", "smoothed-snow-1", "examples",
    ]  # fmt: skip
    worker.run_all()
    submission = fresh(session, sid)
    assert submission.state == S.FINISHED, submission.message
    assert "worst-case weather" in submission.message
    assert left_to_the_engine(calls), calls  # CERTBENCH_WEATHER_BATCH_SIZE: attack only
    assert [m.name for m, _ in worker.ran][-1] == AGGREGATE

    # merged records (1-image shards) equal one direct, unsharded call of the core
    results = _results(session, sid)
    assert set(results) == {"rain-1", "snow-1", "smoothed-rain-1", "smoothed-snow-1", "examples"}
    clean = unpinned_hashes(weather_dataset)  # every unit attacked the same clean bytes
    assert all(r.data_hashes == clean for r in results.values())
    base, smoothed = _merged(settings, results, "base"), _merged(settings, results, "smoothed")
    seed = revealed_seed(session, sid)
    assert base == _direct_base(weather_dataset, seed)
    assert _timeless(smoothed) == _timeless(_direct_smoothed(weather_dataset, seed))
    rows = summarize_weather(base).rows
    assert all(r["worst_case_accuracy"] <= r["random_accuracy"] for r in rows)
    assert not all(r.robust for r in base)  # the attack really broke something

    # leaderboard figures = the core's summary of those records
    figures = summarize_weather(base).figures
    attacked = summarize_weather(smoothed).figures
    entry = session.get(LeaderboardEntry, sid)
    expected = {
        "weather_worst_rain": figures["worst_case_accuracy_rain"],
        "weather_worst_snow": figures["worst_case_accuracy_snow"],
        "weather_random_rain": figures["random_accuracy_rain"],
        "weather_random_snow": figures["random_accuracy_snow"],
        "weather_random": (figures["random_accuracy_rain"] + figures["random_accuracy_snow"]) / 2,
        "weather_cert_acc_000": attacked["attacked_certified_accuracy_0"],
        "weather_cert_acc_025": attacked["attacked_certified_accuracy_0.25"],
        "weather_acr": attacked["attacked_acr"],
    }
    assert {k: entry.metrics[k] for k in expected} == pytest.approx(expected)
    # each with its 95 % interval over the images: Clopper-Pearson for one set (rain-1), the
    # cluster bootstrap for means over sets; the per-image terms stored for paired tests
    terms = {**weather_terms(base), **weather_terms(smoothed)}
    for key, name in (
        ("weather_worst_rain", "worst_case_accuracy_rain"),
        ("weather_random", "random_accuracy"),
        ("weather_acr", "attacked_acr"),
    ):
        found = figure_interval(terms[name])
        assert (entry.metrics[f"{key}_ci_low"], entry.metrics[f"{key}_ci_high"]) == (
            pytest.approx(found.low), pytest.approx(found.high))  # fmt: skip
        assert found.low <= expected[key] <= found.high
    assert figure_interval(terms["worst_case_accuracy_rain"]).method == "clopper-pearson"
    assert figure_interval(terms["random_accuracy"]).method == "cluster bootstrap"
    stored = read_table(storage.resolve(
        settings.artifacts_dir, terms_relpath(registry.get(STAGE), sid)))  # fmt: skip
    assert set(terms_from_table(stored)) == {*expected, "weather_worst"}
    row = results["rain-1"].summary
    assert row["gap"] == pytest.approx(row["random_accuracy"] - row["worst_case_accuracy"])
    assert results["rain-1"].protocol["perturbation_set"]["particles"] == 20
    assert "folder" not in results["rain-1"].protocol
    assert results["smoothed-snow-1"].protocol["certify"] == {
        "sigma": 0.25, "n0": 4, "n": 16, "alpha": 0.001,
    }  # fmt: skip

    # the example panel: the same attack as the records, drawn next to the merged records
    examples = read_examples(
        storage.resolve(settings.artifacts_dir, results["examples"].records_path)
    )
    by_set = {(r.weather, r.index): r for r in base}
    assert sorted(e.weather for e in examples) == ["rain", "snow"]
    for e in examples:
        assert e.index == 0 and e.attacked_prediction == by_set[e.weather, 0].attacked_prediction
        assert e.random_prediction == by_set[e.weather, 0].random_prediction
    files = results["examples"].summary["files"]
    assert set(files) == {"examples-rain-1.png", "examples-snow-1.png"}
    png = storage.resolve(settings.artifacts_dir, files["examples-rain-1.png"])
    assert (
        png.parent
        == storage.resolve(settings.artifacts_dir, results["examples"].records_path).parent
    )

    with TestClient(create_app(settings)) as client:
        rows = client.get("/api/v1/leaderboards/tiny?sort=weather_worst_rain").json()["rows"]
        assert [r["submission_id"] for r in rows] == [sid]
        assert rows[0]["metrics"]["weather_worst_rain"] == pytest.approx(
            expected["weather_worst_rain"]
        )
        assert client.get("/api/v1/leaderboards/tiny?sort=weather_acr&order=asc").status_code == 200
        stages = client.get(f"/api/v1/results/{sid}").json()["stages"]
        assert {s["unit"] for s in stages if s["stage"] == STAGE} == set(results)
        html = client.get(f"/models/{sid}").text
        section = html[html.index('id="weather-attack"') :]
        section = section[: section.index("</section>")]
        assert 'data-weather="rain" data-severity="1"' in section
        assert 'data-weather="snow" data-severity="1"' in section
        assert f"{expected['weather_worst_rain'] * 100:.1f}%" in section
        assert 'id="weather-bars"' in section
        assert f"public seed {BENCH_SEED}" in section and "this run's noise seed" in section
        url = f"/models/{sid}/files/{STAGE}/examples-rain-1.png"
        assert f'src="{url}"' in section
        assert str(settings.artifacts_dir) not in html and str(weather_dataset) not in html
        served = client.get(url)
        assert served.status_code == 200 and served.headers["content-type"] == "image/png"
        assert served.content == png.read_bytes() and served.content[:8] == b"\x89PNG\r\n\x1a\n"
        board = client.get("/leaderboards/tiny").text
        assert 'data-key="weather_worst_rain"' in board and 'data-key="weather_acr"' in board


SEEDS = (2**127 + 12345, 2**127 + 67890)
"""Two fixed 128-bit run seeds, as the service draws them (fixed: the checks are exact)."""


def test_the_records_change_with_the_run_seed_and_nothing_else(
    settings, session, weather_dataset, worker, tmp_path
):
    """Restart 0 is the public random weather; restart 1's start, SmoothAdv's and CERTIFY's
    noise are the run seed's. Another run (submission, attempt, commitment, batch size) with
    the same seed gives the same records; another seed changes them, never the random weather."""
    _load(session, weather_dataset, restarts=2)
    sid = submit(session, settings, tmp_path)
    drawn = validated_item(worker, session, settings, sid)
    assert drawn.seed_kind == "secret" and drawn.seed.bit_length() > 64  # p(fail) = 2^-64
    item = dataclasses.replace(drawn, seed=SEEDS[0])
    other_run = dataclasses.replace(
        item, submission_id=item.submission_id + 100, attempt=item.attempt + 1,
        seed_commitment=run_seeds.commitment("0x" + "0" * 32),
    )  # fmt: skip
    reseeded = dataclasses.replace(item, seed=SEEDS[1])

    def records(work: Any, kind: str, name: str, batch_size: int = 64) -> list[Any]:
        units = [f"{kind}rain-1", f"{kind}snow-1"]
        folders = [(unit, tmp_path / name / unit) for unit in units]
        paths = [p for u, f in folders for p in run_unit(work, STAGE, u, f, settings, batch_size)]
        return [r for path in paths for r in read_weather_records(path)]

    smoothed = records(item, "smoothed-", "mine")
    assert _timeless(smoothed) == _timeless(_direct_smoothed_two_restarts(weather_dataset))
    assert _timeless(smoothed) == _timeless(records(other_run, "smoothed-", "other", 1))
    theirs = records(reseeded, "smoothed-", "reseeded")
    assert [r.objective for r in theirs] != [r.objective for r in smoothed]

    base = records(item, "", "base")
    config = AttackConfig(steps=2, restarts=2, seed=BENCH_SEED)
    assert base == _direct_base(weather_dataset, SEEDS[0], config)
    assert base == records(other_run, "", "base-other", 1)
    reseeded_base = records(reseeded, "", "base-reseeded")
    assert [r.random_prediction for r in reseeded_base] == [r.random_prediction for r in base]
    assert any(r.restarts_run == 2 for r in base)  # restart 1 ran: the run seed's start
    assert [r.attacked_loss for r in reseeded_base] != [r.attacked_loss for r in base]


def _direct_smoothed_two_restarts(dataset: Path) -> list[Any]:
    images = _images(dataset)
    return attack_smoothed(
        tiny_model(seed=MODEL_SEED), images.images, images.labels, sigma=0.25,
        weathers=("rain", "snow"), severities=(1,), noise_samples=2, n0=4, n=16, alpha=0.001,
        config=AttackConfig(steps=2, restarts=2, seed=BENCH_SEED), indices=images.indices,
        run_seed=SEEDS[0],
    )  # fmt: skip


def test_shards_name_the_commitment_and_merged_records_reveal_the_seed(
    settings, session, weather_dataset, worker, tmp_path
):
    _load(session, weather_dataset)
    sid = submit(session, settings, tmp_path)
    checked = run_keeping_the_seed_secret(worker, session, settings, sid, STAGE)
    assert len(checked) == 9  # 8 one-image attack shards and the examples, before the end
    view = run_seeds.view(session, fresh(session, sid))
    revealed = {"seed": view.value, "seed_kind": "secret", "seed_commitment": view.commitment}
    results = _results(session, sid)
    assert len(results) == 5
    seeds = {**revealed, "weather_seed": BENCH_SEED}
    for unit, result in results.items():
        weather, _, severity = unit.removeprefix("smoothed-").partition("-")
        stream = {} if unit == "examples" else {"stream": f"{weather}/{severity}"}
        assert result.seeds == {**seeds, **stream}, unit
        path = storage.resolve(settings.artifacts_dir, result.records_path)
        assert read_metadata(path).items() >= seeds.items(), unit


def test_the_revealed_seed_reproduces_the_weather_records_with_the_cli(
    settings, session, weather_dataset, worker, tmp_path
):
    """``certbench weather-attack --seed <revealed> --weather-seed <benchmark seed>`` gives the
    stored records of the base (2 restarts: restart 1 from the run seed) and smoothed units."""
    _load(session, weather_dataset, restarts=2, examples=0)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    seed = run_seeds.view(session, fresh(session, sid)).value
    results = _results(session, sid)
    weights, manifest_path = model_files(tmp_path / "cli")
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:  # keeps weather-attack a named sub-command
        pass

    register(cli)
    for kind, extra in (("base", []), ("smoothed", ["--smoothed"])):
        out = tmp_path / f"cli-{kind}"
        result = CliRunner().invoke(cli, [
            "weather-attack", "--weights", str(weights), "--manifest", str(manifest_path),
            "--dataset", str(weather_dataset), "--config", TEST_SETS[0], "--skip", "2",
            "--weather", "rain,snow", "--severities", "1", "--steps", "2", "--restarts", "2",
            "--n0", "4", "--n", "16", "--alpha", "0.001", "--noise-samples", "2",
            "--seed", seed, "--weather-seed", str(BENCH_SEED), "--device", "cpu",
            "--out", str(out), *extra,
        ])  # fmt: skip
        assert result.exit_code == 0, result.output
        mine, stored = read_weather_records(out / RECORDS[kind]), _merged(settings, results, kind)
        if kind == "smoothed":
            mine, stored = _timeless(mine), _timeless(stored)
        assert mine == stored, kind


def test_example_files_are_served_only_for_visible_finished_entries(
    settings, session, weather_dataset, worker, tmp_path
):
    _load(session, weather_dataset, smoothed=False)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    url = f"/models/{sid}/files/{STAGE}/examples-snow-1.png"
    with TestClient(create_app(settings)) as client:
        assert client.get(url).status_code == 200
        for name in ("examples-snow-9.png", "..%2F..%2Fcertbench.db", "examples.parquet"):
            assert client.get(f"/models/{sid}/files/{STAGE}/{name}").status_code == 404
        assert client.get(f"/models/{sid}/files/pd_robustness/examples-snow-1.png").status_code == (
            404
        )
        submission = fresh(session, sid)
        submission.is_private = True
        session.commit()
        assert client.get(url).status_code == 404  # anonymous viewer, private entry
        submission.is_private = False
        submission.state = S.RUNNING  # e.g. a rerun in progress
        session.commit()
        assert client.get(url).status_code == 404


def test_any_sharding_gives_the_records_of_one_direct_call(
    settings, session, weather_dataset, worker, tmp_path, monkeypatch
):
    monkeypatch.setenv("CERTBENCH_SHARD_SIZE", "2")
    get_settings.cache_clear()
    sized = get_settings()
    _load(session, weather_dataset, smoothed=False, examples=0)
    sid = submit(session, sized, tmp_path)
    assert worker.run_next() == "4 shard(s) enqueued"  # 2 certify + rain-1, snow-1 (2 images)
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    results = _results(session, sid)
    assert set(results) == {"rain-1", "snow-1"}
    assert _merged(sized, results, "base") == _direct_base(
        weather_dataset, revealed_seed(session, sid)
    )
    entry = session.get(LeaderboardEntry, sid)
    assert entry.metrics["weather_cert_acc_000"] is None  # not smoothed: not measured


def test_a_redelivered_weather_shard_is_recorded_once(
    settings, session, weather_dataset, worker, tmp_path
):
    _load(session, weather_dataset, smoothed=False, examples=0)
    sid = submit(session, settings, tmp_path)
    outcomes = run_delivering_twice(worker, STAGE, sid, "rain-1")
    assert fresh(session, sid).state == S.FINISHED
    assert outcomes == ["recorded: 1 image(s) attacked", "already recorded"]
    assert count_shards(session, STAGE, sid) == 4  # rain-1 and snow-1, 2 one-image shards each


def test_a_cancelled_submission_stops_its_weather_shards(
    settings, session, weather_dataset, worker, tmp_path
):
    _load(session, weather_dataset)
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    pipeline.transition(
        session, sid, from_states={S.QUEUED}, to_state=S.CANCELLED, reason="cancelled_by_user"
    )
    outcomes = [worker.execute(m) for m in iter(worker.take, None)]
    assert outcomes and all(o.startswith("skipped") for o in outcomes)
    assert count_shards(session, STAGE) == 0


def test_a_fresh_rerun_drops_weather_shards_results_and_files(
    settings, session, weather_dataset, worker, tmp_path
):
    _load(session, weather_dataset, smoothed=False)
    sid = submit(session, settings, tmp_path)
    worker.run_all()
    results = _results(session, sid)
    files = [
        storage.resolve(settings.artifacts_dir, path)
        for path in (
            results["rain-1"].records_path,
            results["examples"].summary["files"]["examples-rain-1.png"],
        )
    ]
    assert all(f.is_file() for f in files)
    assert pipeline.reset_for_rerun(session, sid, fresh=True, settings=settings)
    assert _results(session, sid) == {}
    assert count_shards(session, STAGE) == 0
    assert not any(f.exists() for f in files)
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    assert fresh(session, sid).state == S.FINISHED
    assert set(_results(session, sid)) == {"rain-1", "snow-1", "examples"}


def test_leaving_the_perturbation_set_fails_the_submission(
    settings, session, weather_dataset, worker, tmp_path, monkeypatch
):
    """A broken projection (an attack bug) must end the run with the violated bound named,
    never store figures computed outside Δ."""
    project = WeatherSet.project

    def escape(self: WeatherSet, p: Particles) -> Particles:
        inside = project(self, p)
        return Particles(inside.ids, inside.centres + 100.0, inside.base, inside.offsets)

    monkeypatch.setattr(WeatherSet, "project", escape)
    _load(session, weather_dataset, smoothed=False, examples=0)
    sid = submit(session, settings, tmp_path)
    worker.run_next()
    with pytest.raises(WeatherAttackError, match="left the rain-1 perturbation set"):
        for message in iter(worker.take, None):
            worker.execute(message)
    submission = fresh(session, sid)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.WORKER_ERROR
    assert "left the rain-1 perturbation set" in submission.message
    assert "centres outside [-3, 35] px" in submission.message
    assert session.get(LeaderboardEntry, sid) is None and _results(session, sid) == {}
    planned = shards.plan(session, sid, settings=settings, stage=STAGE)
    assert [s.unit for s in planned] == ["rain-1", "rain-1", "snow-1", "snow-1"]
