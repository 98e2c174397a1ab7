"""The base-classifier robustness stage (Muthukumar et al. 2025, arXiv:2501.18098) over HTTP:
leaderboard columns, sorting, the results' ``robustness`` block and the benchmark's protocol, never
exposing local paths."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.schemas.result import RobustnessPublic
from models.boards.leaderboard import robustness_result
from models.catalog.benchmarks import get_benchmark, parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.entities import Benchmark, LeaderboardEntry, User
from models.db.states import SubmissionState
from models.runs import shards
from models.runs.results import complete_submission
from models.stages.pd_robustness.stage import RobustnessResult
from models.submissions import lifecycle as pipeline
from models.submissions.intake import create_submission
from tests.support.api import Actors
from tests.support.service_factories import (
    RobustnessPlan,
    finished_submission,
    record_robustness_shard,
    record_shard,
    tiny_definition,
    upload,
)

S = SubmissionState
NAME = "tinyrobust"
LOCAL_FOLDER = "/srv/private/datasets/tinyrobust-clean"
BANK_SHA256 = "ab" * 32
ROBUSTNESS = {
    "repo": "certbench/tinyrobust",
    "folder": LOCAL_FOLDER,
    "config": "clean",
    "source_size": 6,
    "anchors": "tiny_k2_s0.safetensors",
    "k": 2,
    "anchor_seed": 0,
    "eps": [8, 16],
    "n_iter": 5,
    "n_target_classes": 3,
    "projection": "exact",
    "weighting": "pd",
}
#: Per entry (3 attacked images): clean-correct images, and per ε how many survive ℓ∞ APGD,
#: ℓ∞ APGD + lazy PD projection, and PD-aware APGD (``service_factories.RobustnessPlan``).
PLANS: dict[str, RobustnessPlan] = {
    "sturdy": (3, {8: (1, 3, 3), 16: (0, 2, 3)}),  # pd 8: 3/3, 16: 2/3
    "middling": (3, {8: (1, 2, 3), 16: (0, 1, 2)}),  # pd 8: 2/3, 16: 1/3
    "brittle": (2, {8: (0, 1, 1), 16: (0, 0, 1)}),  # pd 8: 1/3, 16: 0
}
#: Certification quality: the macr order (middling, brittle, sturdy) differs from the pd order.
QUALITY = {"sturdy": 1 / 3, "middling": 1.0, "brittle": 2 / 3, "legacy": 0.5}


def _definition(*, version: int, robust: bool) -> str:
    definition = tiny_definition(NAME, version=version)
    if robust:
        definition["robustness"] = ROBUSTNESS
    return json.dumps(definition)


def _finish(
    session: Session, benchmark: Benchmark, user: User, settings: Settings, name: str, seed: int
) -> int:
    """Validate → queue → certify and attack shards → aggregate, as the workers do."""
    sid = create_submission(
        session,
        user=user,
        benchmark=benchmark,
        upload=upload(seed=seed, name=name),
        settings=settings,
    ).id
    assert pipeline.transition(
        session, sid, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    assert pipeline.transition(session, sid, from_states={S.VALIDATING}, to_state=S.QUEUED)
    assert pipeline.transition(
        session, sid, from_states={S.QUEUED}, to_state=S.RUNNING, settings=settings
    )
    for spec in shards.plan(session, sid, settings=settings, stage="certification"):
        record_shard(session, sid, spec, settings=settings, quality=QUALITY[name])
    for spec in shards.plan(session, sid, settings=settings, stage="pd_robustness"):
        assert record_robustness_shard(
            session, sid, spec, PLANS[name], settings=settings, anchors_sha256=BANK_SHA256
        )
    assert complete_submission(session, sid, settings=settings)
    return sid


@pytest.fixture
def robust(session: Session, settings: Settings, actors: Actors) -> dict[str, int]:
    """``legacy`` finished before the benchmark gained the stage (v1 → v2); the rest after."""
    alice = session.get(User, actors.alice_id)
    benchmark = upsert_benchmark(session, parse_definition(_definition(version=1, robust=False)))
    ids = {"legacy": _finish(session, benchmark, alice, settings, "legacy", seed=10)}
    benchmark = upsert_benchmark(session, parse_definition(_definition(version=2, robust=True)))
    for seed, name in enumerate(PLANS, start=11):
        ids[name] = _finish(session, benchmark, alice, settings, name, seed=seed)
    return ids


def _names(client: TestClient, **params: str) -> list[str]:
    response = client.get(f"/api/v1/leaderboards/{NAME}", params=params)
    assert response.status_code == 200, response.text
    return [row["model_name"] for row in response.json()["rows"]]


def test_leaderboard_rows_carry_the_robustness_columns(
    client: TestClient, session: Session, robust: dict[str, int]
):
    rows = {r["model_name"]: r for r in client.get(f"/api/v1/leaderboards/{NAME}").json()["rows"]}
    assert set(rows) == {"legacy", "sturdy", "middling", "brittle"}
    for name, (clean, per_eps) in PLANS.items():
        metrics = rows[name]["metrics"]
        assert metrics["base_accuracy"] == pytest.approx(clean / 3)
        assert metrics["linf_acc_8"] == pytest.approx(per_eps[8][0] / 3)
        assert metrics["linf_acc_16"] == pytest.approx(per_eps[16][0] / 3)
        assert metrics["pd_acc_8"] == pytest.approx(min(per_eps[8][1:]) / 3)
        assert metrics["pd_acc_16"] == pytest.approx(min(per_eps[16][1:]) / 3)
        entry = session.get(LeaderboardEntry, robust[name])
        assert metrics["pd_acc_8"] == entry.pd_acc_8 and metrics["linf_acc_16"] == entry.linf_acc_16
    legacy = rows["legacy"]["metrics"]
    for key in ("base_accuracy", "linf_acc_8", "linf_acc_16", "pd_acc_8", "pd_acc_16"):
        assert legacy[key] is None, key
    assert legacy["macr"] > 0  # certified like any other entry
    board = client.get(f"/api/v1/leaderboards/{NAME}").json()
    assert all(board["higher_is_better"][k] for k in ("pd_acc_8", "linf_acc_16", "base_accuracy"))


def test_sorting_by_robustness_puts_unmeasured_entries_last(
    client: TestClient, robust: dict[str, int]
):
    assert _names(client) == ["middling", "brittle", "legacy", "sturdy"]  # by mACR
    assert _names(client, sort="pd_acc_8") == ["sturdy", "middling", "brittle", "legacy"]
    assert _names(client, sort="pd_acc_8", order="asc") == [
        "brittle",
        "middling",
        "sturdy",
        "legacy",
    ]
    assert _names(client, sort="pd_acc_16", order="desc") == [
        "sturdy",
        "middling",
        "brittle",
        "legacy",
    ]
    # ties (ℓ∞ 8/255: sturdy = middling = 1/3) fall back to submission id
    assert _names(client, sort="linf_acc_8") == ["sturdy", "middling", "brittle", "legacy"]
    assert _names(client, sort="base_accuracy", order="asc") == [
        "brittle",
        "sturdy",
        "middling",
        "legacy",
    ]
    page = client.get(f"/api/v1/leaderboards/{NAME}", params={"sort": "pd_acc_8", "limit": 1})
    assert page.json()["rows"][0]["rank"] == 1 and page.json()["total"] == 4
    bad = client.get(f"/api/v1/leaderboards/{NAME}", params={"sort": "pd_acc_4"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_sort"
    assert "pd_acc_16" in bad.json()["message"]  # names the keys this benchmark has


def test_results_carry_the_robustness_block_without_paths(
    client: TestClient, session: Session, settings: Settings, robust: dict[str, int]
):
    response = client.get(f"/api/v1/results/{robust['middling']}")
    assert response.status_code == 200
    body = response.json()
    block = body["robustness"]
    stored = robustness_result(session, robust["middling"])
    assert block["base_accuracy"] == pytest.approx(1.0) == stored.base_accuracy
    assert block["linf_acc_8"] == pytest.approx(1 / 3) and block["pd_acc_8"] == pytest.approx(2 / 3)
    assert block["linf_acc_16"] == 0.0 and block["pd_acc_16"] == pytest.approx(1 / 3)
    assert block["count"] == 3 and block["seconds"] == pytest.approx(1.5)
    assert block["evaluator_version"] == stored.evaluator_version
    figures = block["figures"]
    assert figures["pd_projected_accuracy_8"] == pytest.approx(2 / 3)
    assert figures["pd_aware_accuracy_8"] == pytest.approx(1.0)
    assert figures["pd_aware_accuracy_16"] == pytest.approx(2 / 3)
    # d_PD of the ℓ∞ examples found: images 1 and 2 at 8/255, all three at 16/255
    assert figures["linf_pd_threat_median_8"] == pytest.approx(0.25)
    assert figures["linf_pd_threat_median_16"] == pytest.approx(0.2)
    protocol = block["protocol"]
    assert protocol["k"] == 2 and protocol["eps"] == [8, 16] and protocol["num_images"] == 3
    assert protocol["anchors_sha256"] == BANK_SHA256 and protocol["weighting"] == "pd"
    assert "folder" not in protocol
    text = response.text
    assert LOCAL_FOLDER not in text and "records_path" not in text
    assert stored.records_path not in text and str(settings.artifacts_dir) not in text
    # the leaderboard summary carries the same numbers
    assert body["summary"]["pd_acc_8"] == block["pd_acc_8"]


def test_results_robustness_is_null_when_not_measured(
    client: TestClient, robust: dict[str, int], entries_without_stage: int
):
    legacy = client.get(f"/api/v1/results/{robust['legacy']}").json()
    assert legacy["robustness"] is None and legacy["summary"]["pd_acc_8"] is None
    assert [r["test_set"] for r in legacy["results"]] == ["set0", "set1"]
    plain = client.get(f"/api/v1/results/{entries_without_stage}").json()
    assert plain["robustness"] is None and plain["summary"]["base_accuracy"] is None


@pytest.fixture
def entries_without_stage(session: Session, settings: Settings, actors: Actors) -> int:
    return finished_submission(
        session,
        user=session.get(User, actors.bob_id),
        benchmark=get_benchmark(session, "tiny"),
        settings=settings,
        seed=40,
        name="plain",
    )


def test_benchmark_shows_the_protocol_without_the_local_folder(
    client: TestClient, robust: dict[str, int]
):
    bench = client.get(f"/api/v1/benchmarks/{NAME}")
    assert bench.status_code == 200
    protocol = bench.json()["robustness"]
    assert protocol["repo"] == "certbench/tinyrobust" and protocol["anchors"].endswith(
        ".safetensors"
    )
    assert protocol["eps"] == [8, 16] and protocol["subset_skip"] == 2
    assert "folder" not in protocol and LOCAL_FOLDER not in bench.text
    listing = client.get("/api/v1/benchmarks")
    assert LOCAL_FOLDER not in listing.text
    by_name = {b["name"]: b for b in listing.json()}
    assert by_name["tiny"]["robustness"] is None
    assert by_name[NAME]["robustness"] == protocol


def test_openapi_documents_the_new_fields(client: TestClient):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    metrics = schema["Metrics"]["properties"]
    assert "1/255" in metrics["pd_acc_8"]["description"]
    assert "not smoothed" in metrics["base_accuracy"]["description"]
    assert "Muthukumar" in metrics["pd_acc_16"]["description"]
    assert "robustness" in schema["ResultsPublic"]["properties"]
    assert "robustness" in schema["BenchmarkPublic"]["properties"]
    sort = next(
        p
        for p in client.get("/openapi.json").json()["paths"]["/api/v1/leaderboards/{benchmark}"][
            "get"
        ]["parameters"]
        if p["name"] == "sort"
    )
    assert "pd_acc_8" in json.dumps(sort)


def test_nan_figures_become_null():
    """Rows stored before the summary wrote null for "no ℓ∞ example" hold NaN; JSON has none."""
    result = RobustnessResult(
        submission_id=1,
        evaluator_version="v",
        protocol={**ROBUSTNESS, "anchors_sha256": BANK_SHA256},
        base_accuracy=1.0,
        linf_acc_8=1.0,
        linf_acc_16=None,
        pd_acc_8=1.0,
        pd_acc_16=None,
        figures={"clean_accuracy": 1.0, "count": 3.0, "linf_pd_threat_median_8": math.nan},
        count=3,
        seconds=1.0,
        records_path="records/1/_robustness.parquet",
    )
    public = RobustnessPublic.of(result)
    assert public.figures["linf_pd_threat_median_8"] is None
    assert "folder" not in public.protocol
    assert "NaN" not in public.model_dump_json() and "records" not in public.model_dump_json()
