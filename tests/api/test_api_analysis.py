"""``/api/v1/analysis/{benchmark}/...`` on synthetic finished entries: the probit trend and ER
(Fridovich-Keil et al. 2022 §4) recovered from stored counts, σ groups never mixed, matching by
weights + model + σ, visibility, the metric-predictor table and the leaderboard's ER column."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.entities import StageResult
from models.submissions.queries import set_moderation
from tests.support.analysis_factories import (
    FOG,
    FOG_HALF,
    ID_ACC,
    IMAGES,
    NOISE,
    URL,
    Family,
    SavedFamilies,
    load_family,
)


def _six_models(fam: Family) -> None:
    for model, accuracy in enumerate(ID_ACC, start=1):
        fam.model(model, 0.25, accuracy)


@pytest.fixture
def family(session: Session, settings: Settings, saved_families: SavedFamilies) -> Family:
    """Six models on the fog and noise trends (built once per backend, restored per test)."""
    return Family.built_once(session, settings, saved_families, _six_models)


def _trend(body: dict, sigma: float, key: str) -> dict:
    group = next(g for g in body["groups"] if g["sigma"] == sigma)
    return next(t for t in group["trends"] if t["ood"]["key"] == key)


def test_the_probit_trend_is_recovered_from_stored_counts(client: TestClient, family: Family):
    body = client.get(URL.format("cifar10-c"), params={"sigma": 0.25}).json()
    assert body["id_benchmark"] == "cifar10" and body["ood_benchmarks"] == ["cifar10-c"]
    assert [g["sigma"] for g in body["groups"]] == [0.25]
    fog = _trend(body, 0.25, "cifar10-c/fog")
    fit = fog["fit"]
    assert fit["n"] == 6 and fit["r2"] > 0.999
    assert fit["slope"] == pytest.approx(FOG[1], abs=0.02)
    assert fit["intercept"] == pytest.approx(FOG[0], abs=0.02)
    for entry in fog["entries"]:
        er = entry["effective_robustness"]
        assert abs(er["value"]) < 0.03 and er["low"] < 0 < er["high"]
        ood = entry["ood_accuracy"]
        assert ood["low"] < ood["value"] < ood["high"] and ood["total"] == IMAGES
    noise = _trend(body, 0.25, "cifar10-c/noise")["fit"]
    assert noise["slope"] == pytest.approx(NOISE[1], abs=0.02)
    # a band of one test set is that test set; the aggregate pools both sets
    assert _trend(body, 0.25, "cifar10-c/band:low")["fit"] == fit
    aggregate = _trend(body, 0.25, "cifar10-c")
    assert aggregate["fit"]["n"] == 6
    first = aggregate["entries"][0]
    assert first["ood_accuracy"]["total"] == 2 * IMAGES


def test_entries_above_and_below_the_line_have_er_of_that_sign(client: TestClient, family: Family):
    _, above = family.model(7, 0.25, 0.66, shift=1.0)
    _, below = family.model(8, 0.25, 0.74, shift=-1.0)
    body = client.get(URL.format("cifar10-c"), params={"ood": "cifar10-c/fog"}).json()
    fog = _trend(body, 0.25, "cifar10-c/fog")
    assert fog["fit"]["n"] == 8
    entries = {e["submission_id"]: e["effective_robustness"] for e in fog["entries"]}
    assert entries[above]["low"] > 0 and entries[above]["accuracy_gain"] > 0
    assert entries[below]["high"] < 0
    ranked = [e["submission_id"] for e in fog["entries"]]
    assert ranked[0] == above and ranked[-1] == below  # listed by ER, highest first
    assert [t["ood"]["key"] for t in _group(body, 0.25)["trends"]] == ["cifar10-c/fog"]


def _group(body: dict, sigma: float) -> dict:
    return next(g for g in body["groups"] if g["sigma"] == sigma)


def test_fits_are_per_sigma_and_only_the_same_sigma_matches(client: TestClient, family: Family):
    half = [family.model(10 + i, 0.5, acc, trend=FOG_HALF) for i, acc in enumerate((0.4, 0.5, 0.6))]
    family.model(1, 0.5, None, clean=False)  # model 1's weights at another σ: no clean partner
    body = client.get(URL.format("cifar10-c"), params={"ood": "cifar10-c/fog"}).json()
    quarter, halves = _group(body, 0.25), _group(body, 0.5)
    assert (quarter["entries"], quarter["unmatched"]) == (6, 0)
    assert (halves["entries"], halves["unmatched"]) == (3, 1)
    fit = halves["trends"][0]["fit"]
    assert fit["n"] == 3 and fit["slope"] == pytest.approx(FOG_HALF[1], abs=0.03)
    pairs = {(e["id_submission_id"], e["submission_id"]) for e in halves["trends"][0]["entries"]}
    assert pairs == set(half)
    assert quarter["trends"][0]["fit"]["slope"] == pytest.approx(FOG[1], abs=0.02)
    only = client.get(URL.format("cifar10-c"), params={"sigma": 0.5}).json()
    assert [g["sigma"] for g in only["groups"]] == [0.5]


def test_private_entries_count_only_for_their_owner_and_admins(client: TestClient, family: Family):
    _, private = family.model(9, 0.25, 0.66, private=True)

    def fit_of(viewer: str | None) -> tuple[int, set[int]]:
        headers = family.headers[viewer] if viewer else {}
        body = client.get(URL.format("cifar10-c"), params={"ood": "cifar10-c"}, headers=headers)
        trend = _trend(body.json(), 0.25, "cifar10-c")
        return trend["fit"]["n"], {e["submission_id"] for e in trend["entries"]}

    for viewer, expected in ((None, 6), ("bob", 6), ("alice", 7), ("admin", 7)):
        n, ids = fit_of(viewer)
        assert n == expected and (private in ids) == (expected == 7), viewer

    board = client.get("/api/v1/leaderboards/cifar10-c", params={"limit": 200}).json()
    assert private not in {r["submission_id"] for r in board["rows"]}
    cells = [r["effective_robustness"] for r in board["rows"]]
    assert all(c is not None and c["n"] == 6 and c["sigma"] == 0.25 for c in cells)
    mine = client.get(
        "/api/v1/leaderboards/cifar10-c", params={"limit": 200}, headers=family.headers["alice"]
    ).json()
    assert {r["effective_robustness"]["n"] for r in mine["rows"]} == {7}
    clean = client.get("/api/v1/leaderboards/cifar10").json()
    assert all(r["effective_robustness"] is None for r in clean["rows"])  # ID has no ER


def test_the_leaderboard_er_equals_the_aggregate_trend(client: TestClient, family: Family):
    family.model(7, 0.25, 0.66, shift=1.0)
    body = client.get(URL.format("cifar10-c"), params={"ood": "cifar10-c"}).json()
    expected = {
        e["submission_id"]: e["effective_robustness"]["value"]
        for e in _trend(body, 0.25, "cifar10-c")["entries"]
    }
    board = client.get("/api/v1/leaderboards/cifar10-c", params={"sort": "cert_acc_000"}).json()
    got = {r["submission_id"]: r["effective_robustness"]["value"] for r in board["rows"]}
    assert got == pytest.approx(expected)
    response = client.get("/api/v1/leaderboards/cifar10-c", params={"sort": "effective_robustness"})
    assert response.status_code == 422  # computed on read: not a sort key


def test_the_leaderboard_er_follows_new_entries_and_moderation(
    client: TestClient, family: Family, session: Session
):
    def fitted() -> set[int]:
        rows = client.get("/api/v1/leaderboards/cifar10-c", params={"limit": 200}).json()["rows"]
        return {r["effective_robustness"]["n"] for r in rows}

    assert fitted() == {6}
    assert fitted() == {6}  # a repeated read (memoised) says the same
    family.model(7, 0.25, 0.66)
    assert fitted() == {7}
    hidden = family.ids[(2, 0.25)][1]
    set_moderation(session, hidden, hidden=True)
    assert fitted() == {6}


def test_which_metric_explains_robustness(client: TestClient, family: Family, session: Session):
    url = "/api/v1/analysis/cifar10/metric-predictors"
    body = client.get(url, params={"ood": "cifar10-c/fog"}).json()
    assert body["ood_benchmarks"] == ["cifar10-c"]  # the clean benchmark: the whole family
    group = _group(body, 0.25)
    assert group["metrics"] == ["id_accuracy", "hff_amplitude", "cd_amplitude"]
    assert group["lens_excluded"] == 0
    fits = {p["metric"]: p for p in group["rows"][0]["predictors"]}
    assert fits["cd_amplitude"]["r2"] is None  # every path scores CD 50: nothing to fit
    assert fits["hff_amplitude"]["r2"] == pytest.approx(1.0, abs=1e-9)
    assert fits["hff_amplitude"]["slope"] == pytest.approx(-10.0, rel=1e-6)
    assert fits["id_accuracy"]["slope"] == pytest.approx(FOG[1], abs=0.02)
    assert fits["id_accuracy"]["n"] == fits["hff_amplitude"]["n"] == 6

    # a lens figure computed under another protocol is left out of the metric fits
    clean_id = family.ids[(1, 0.25)][0]
    row = session.scalar(
        select(StageResult).where(
            StageResult.submission_id == clean_id, StageResult.stage == "fourier_lens"
        )
    )
    session.execute(
        update(StageResult)
        .where(StageResult.id == row.id)
        .values(protocol={**row.protocol, "fingerprint": "0" * 64})
    )
    session.commit()
    group = _group(client.get(url, params={"ood": "cifar10-c/fog"}).json(), 0.25)
    fits = {p["metric"]: p for p in group["rows"][0]["predictors"]}
    assert group["lens_excluded"] == 1
    assert (fits["hff_amplitude"]["n"], fits["id_accuracy"]["n"]) == (5, 6)


def test_base_accuracy_as_id_needs_it_measured(client: TestClient, family: Family):
    body = client.get(URL.format("cifar10-c"), params={"id": "base"}).json()
    assert body["id_accuracy"] == "base"
    assert all(g["entries"] == 0 for g in body["groups"])
    assert all(t["fit"] is None for g in body["groups"] for t in g["trends"])


@pytest.mark.parametrize(
    ("url", "params", "status", "text"),
    [
        (URL.format("nope"), {}, 404, "does not exist"),
        (URL.format("cifar10-c"), {"ood": "cifar10-c/rain"}, 404, "cifar10-c/fog"),
        (URL.format("cifar10-c"), {"id_benchmark": "orphan-c"}, 422, "same base dataset"),
        (URL.format("orphan-c"), {}, 404, "id_benchmark"),
        (URL.format("cifar10-c"), {"id": "both"}, 422, "id"),
    ],
)
def test_errors_say_what_to_fix(
    client: TestClient, session: Session, url: str, params: dict, status: int, text: str
):
    import json

    from models.catalog.benchmarks import parse_definition, upsert_benchmark
    from tests.support.analysis_factories import definition

    load_family(session)
    orphan = definition("orphan-c", {"fog": "low"})
    orphan["base_dataset"] = "svhn"
    upsert_benchmark(session, parse_definition(json.dumps(orphan)))
    response = client.get(url, params=params)
    assert response.status_code == status, response.text
    assert text in response.json()["message"]


def test_predictors_are_averaged_over_architectures_and_pooled_beside(
    client: TestClient, family: Family
):
    """Issue 26 §2: the table follows the paper (Fridovich-Keil et al. 2022, Tables 1–3): one
    fit per architecture, slope and R² averaged; a second architecture whose HFF sits 0.05
    higher on the same line slope keeps the averaged fit exact (m = −10, R² = 1) while one line
    through both architectures does not."""
    for model, accuracy in enumerate(ID_ACC[:4], start=20):
        family.model(model, 0.25, accuracy, architecture="lenet5", hff_offset=0.05)
    url = "/api/v1/analysis/cifar10/metric-predictors"
    group = _group(client.get(url, params={"ood": "cifar10-c/fog"}).json(), 0.25)
    assert group["architectures"] == {"cifar_resnet20": 6, "lenet5": 4}
    (row,) = group["rows"]
    fits = {p["metric"]: p for p in row["predictors"]}
    hff = fits["hff_amplitude"]
    assert hff["fitted"] == 2 and hff["n"] == 10
    assert hff["counts"] == {"cifar_resnet20": 6, "lenet5": 4}
    assert hff["slope"] == pytest.approx(-10.0, rel=1e-6) and hff["r2"] == pytest.approx(1.0)
    assert hff["architectures"]["lenet5"]["n"] == 4
    pooled = {p["metric"]: p for p in row["pooled"]}["hff_amplitude"]
    assert pooled["n"] == 10 and pooled["r2"] < 0.99

    page = client.get("/analysis/cifar10", params={"sigma": "0.25", "ood": "cifar10-c/fog"}).text
    assert 'id="pooled-predictor-table"' in page and "averaged (the paper's view)" in page
    assert "<code>lenet5</code> 4" in page
