"""Uncertainty beyond certification (issue 11 §4), on the PD stage's figures: every figure in
REST carries its 95 % interval (Clopper-Pearson over the clean subset's images), a leaderboard
sorted by a robustness figure marks ties by exact McNemar, the compare endpoint and the web
compare page test those figures, and the backfill restores what the aggregate stored."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from certbench.stats.intervals import clopper_pearson
from models.boards.interval_backfill import backfill_entry, entries_to_backfill
from models.boards.uncertainty import terms_relpath
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.entities import MetricValue, User
from models.db.states import SubmissionState
from models.runs import shards
from models.runs.results import complete_submission
from models.stages import registry
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.intake import create_submission
from tests.support.service_factories import (
    RobustnessPlan,
    record_robustness_shard,
    record_shard,
    tiny_definition,
    upload,
)

S = SubmissionState
NAME = "widerobust"
IMAGES = 60
ROBUSTNESS = {
    "repo": "certbench/widerobust",
    "folder": "/srv/private/widerobust",
    "config": "clean",
    "source_size": 2 * IMAGES,
    "anchors": "tiny_k2_s0.safetensors",
    "k": 2,
    "eps": [8, 16],
    "n_iter": 5,
    "n_target_classes": 3,
}
#: Clean-correct images, and per ε how many survive ℓ∞, projected and PD-aware APGD (the first
#: ones by position): ℓ∞ ∩ PD at 8/255 is 58, 56 and 20 of 60.
PLANS: dict[str, RobustnessPlan] = {
    "strong": (60, {8: (30, 58, 58), 16: (10, 40, 40)}),
    "close": (60, {8: (30, 56, 56), 16: (10, 38, 38)}),
    "weak": (50, {8: (5, 20, 20), 16: (0, 5, 5)}),
}
KEYS = ("base_accuracy", "linf_acc_8", "pd_acc_8", "linf_acc_16", "pd_acc_16")


def _finish(session: Session, settings: Settings, user: User, name: str, seed: int) -> int:
    """Validate → queue → certify and attack shards → aggregate, as the workers do."""
    benchmark = upsert_benchmark(session, parse_definition(_definition()))
    sid = create_submission(
        session, user=user, benchmark=benchmark, upload=upload(seed=seed, name=name),
        settings=settings,
    ).id  # fmt: skip
    moves = [(S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED), (S.QUEUED, S.RUNNING)]
    for old, new in moves:
        assert pipeline.transition(session, sid, from_states={old}, to_state=new,
                                   settings=settings)  # fmt: skip
    for spec in shards.plan(session, sid, settings=settings, stage="certification"):
        record_shard(session, sid, spec, settings=settings)
    for spec in shards.plan(session, sid, settings=settings, stage="pd_robustness"):
        assert record_robustness_shard(
            session, sid, spec, PLANS[name], settings=settings, anchors_sha256="ab" * 32
        )
    assert complete_submission(session, sid, settings=settings)
    return sid


def _definition() -> str:
    definition = tiny_definition(NAME)
    definition["robustness"] = ROBUSTNESS
    return json.dumps(definition)


@pytest.fixture
def robust(session: Session, settings: Settings, actors) -> dict[str, int]:
    alice = session.get(User, actors.alice_id)
    return {name: _finish(session, settings, alice, name, seed) for seed, name in
            enumerate(PLANS, start=20)}  # fmt: skip


def _expected(plan: RobustnessPlan, key: str) -> int:
    """How many of the 60 images count for the figure ``key`` under ``plan``."""
    clean, per_eps = plan
    if key == "base_accuracy":
        return clean
    kind, _, eps = key.split("_")
    linf, projected, aware = per_eps[int(eps)]
    return min(clean, linf) if kind == "linf" else min(clean, projected, aware)


def test_every_robustness_figure_carries_its_clopper_pearson_interval(
    client: TestClient, robust: dict[str, int]
):
    rows = client.get(f"/api/v1/leaderboards/{NAME}").json()["rows"]
    for row in rows:
        metrics, plan = row["metrics"], PLANS[row["model_name"]]
        for key in KEYS:
            hits = _expected(plan, key)
            low, high = clopper_pearson(hits, IMAGES)
            assert metrics[key] == pytest.approx(hits / IMAGES), key
            assert (metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"]) == (low, high), key
            assert metrics["intervals"][key] == {"ci_low": low, "ci_high": high}
        assert "macr" in metrics["intervals"]  # certification's as before
    summary = client.get(f"/api/v1/results/{robust['weak']}").json()["summary"]
    assert summary["intervals"]["pd_acc_16"]["ci_high"] == clopper_pearson(5, IMAGES)[1]


def test_a_robustness_sort_marks_ties_by_exact_mcnemar(client: TestClient, robust: dict[str, int]):
    rows = client.get(f"/api/v1/leaderboards/{NAME}", params={"sort": "pd_acc_8"}).json()["rows"]
    assert [r["model_name"] for r in rows] == ["strong", "close", "weak"]
    strong, close, weak = rows
    assert strong["tie"] is None
    # 2 discordant images (58 against 56): p = 0.5, tied; 38 discordant: a clear difference
    assert close["tied_with"] == 1 and close["tie"]["test"]["p_value"] == pytest.approx(0.5)
    assert close["tie"]["test"]["method"] == "exact mcnemar"
    assert close["tie"]["test"]["metric"] == "pd_acc_8"
    assert weak["tied_with"] is None and weak["tie"]["rank_above"] == 2
    assert weak["tie"]["test"]["p_value"] < 1e-9
    page = client.get(f"/leaderboards/{NAME}", params={"sort": "pd_acc_8"}).text
    assert page.count('data-tied-with="1"') == 1
    low, high = clopper_pearson(20, IMAGES)  # weak's ℓ∞ ∩ PD accuracy: its interval on hover
    cell = page[page.index(f'data-key="pd_acc_8" data-value="{20 / IMAGES}"') :].split(">")[0]
    assert f"95 % interval over images: {low * 100:.1f}% – {high * 100:.1f}%" in cell


def test_compare_tests_the_robustness_figures(client: TestClient, robust: dict[str, int]):
    a, b = robust["strong"], robust["weak"]
    body = client.get(f"/api/v1/leaderboards/{NAME}/compare?ids={a},{b}").json()
    tests = {t["metric"]: t for t in body["pairs"][0]["tests"]}
    assert [k for k in tests if k in KEYS] == list(KEYS)  # in the stage's column order
    pd8 = tests["pd_acc_8"]
    assert pd8["method"] == "exact mcnemar" and not pd8["tied"]
    assert (pd8["estimate_a"], pd8["estimate_b"]) == (58 / IMAGES, 20 / IMAGES)
    assert pd8["difference"]["estimate"] == pytest.approx(38 / IMAGES)
    page = client.get(f"/compare?id={a}&id={b}").text
    assert 'data-metric="pd_acc_8"' in page and 'data-metric="base_accuracy"' in page


def test_the_backfill_restores_the_robustness_intervals_and_terms(
    session: Session, settings: Settings, robust: dict[str, int]
):
    sid = robust["close"]
    stage = registry.get("pd_robustness")
    terms = storage.resolve(settings.artifacts_dir, terms_relpath(stage, sid))
    stored = terms.read_bytes()

    def bounds() -> dict[str, float | None]:
        session.expire_all()
        rows = session.scalars(
            select(MetricValue).where(
                MetricValue.submission_id == sid, MetricValue.stage == stage.name
            )
        )
        return {m.key: m.value for m in rows if "_ci_" in m.key}

    fresh = bounds()
    assert set(fresh) == {f"{k}{s}" for k in KEYS for s in ("_ci_low", "_ci_high")}
    session.execute(
        delete(MetricValue).where(MetricValue.submission_id == sid, MetricValue.key.in_(fresh))
    )
    session.commit()
    terms.unlink()
    assert entries_to_backfill(session) == [sid]  # certification's bounds are still there
    assert backfill_entry(session, sid, settings=settings) is None
    assert bounds() == fresh and terms.read_bytes() == stored
    assert entries_to_backfill(session) == []


def test_a_stage_figure_on_other_images_is_left_out_of_a_comparison(
    client: TestClient, settings: Settings, robust: dict[str, int]
):
    """Entries whose robustness subsets differ (the stage's protocol changed between them) are
    still compared on certification; their robustness figures cannot be paired."""
    a, b = robust["strong"], robust["close"]
    path = storage.resolve(settings.artifacts_dir, terms_relpath(registry.get("pd_robustness"), b))
    table = pq.read_table(path)
    shifted = table.set_column(
        table.column_names.index("index"), "index", pc.add(table.column("index"), 1)
    )
    pq.write_table(shifted, path)
    body = client.get(f"/api/v1/leaderboards/{NAME}/compare?ids={a},{b}")
    assert body.status_code == 200, body.text
    metrics = [t["metric"] for t in body.json()["pairs"][0]["tests"]]
    assert "macr" in metrics and not set(KEYS) & set(metrics)
