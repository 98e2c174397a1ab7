"""Uncertainty in the service (issue 11 §4): every certification figure in REST carries its 95 %
interval, leaderboard rows are marked "tied with #k", the compare endpoint and the web pages
show the paired tests, all from the stored per-image records."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from certbench.smoothing.records import read_table
from certbench.stats.entry_intervals import compare_terms, figure_intervals, image_terms
from certbench.stats.intervals import compare_acr, compare_certified_accuracy
from models.db.entities import StageResult, User
from models.stages.certification.intervals import TERMS_UNIT, interval_keys
from models.submissions import storage
from tests.support.service_factories import finished_submission, load_tiny

SIZE = 120  # 60 images per test set (skip 2), 2 test sets (bands low and high)


@pytest.fixture
def board(session, settings, actors):
    """Entries on a 2-set benchmark: two with identical records (strong), one weaker."""
    bench = load_tiny(session, name="wide", size=SIZE)
    alice = session.get(User, actors.alice_id)
    ids = {
        name: finished_submission(
            session,
            user=alice,
            benchmark=bench,
            settings=settings,
            seed=seed,
            quality=quality,
            name=name,
        )
        for name, seed, quality in (("strong", 1, 1.0), ("twin", 2, 1.0), ("weak", 3, 0.34))
    }
    return ids


def _tables(session, settings, sid):
    rows = session.query(StageResult).filter_by(submission_id=sid, stage="certification")
    return {
        r.unit: read_table(storage.resolve(settings.artifacts_dir, r.records_path)) for r in rows
    }


def test_every_certification_figure_carries_its_interval(client, session, settings, board):
    rows = client.get("/api/v1/leaderboards/wide").json()["rows"]
    weak = next(r for r in rows if r["submission_id"] == board["weak"])["metrics"]
    assert set(weak["intervals"]) == set(interval_keys())
    for key, interval in weak["intervals"].items():
        assert interval["ci_low"] == weak[f"{key}_ci_low"]  # sibling fields, same numbers
        if key == "band_mid":  # the benchmark has no mid band: not measured
            assert interval == {"ci_low": None, "ci_high": None} and weak[key] is None
            continue
        assert interval["ci_low"] <= weak[key] <= interval["ci_high"], key
    # The stored bounds are those of the records, recomputed here independently.
    expected = figure_intervals(
        _tables(session, settings, board["weak"]), groups={"low": ["set0"], "high": ["set1"]}
    )
    assert weak["intervals"]["macr"] == {"ci_low": expected.acr.low, "ci_high": expected.acr.high}
    assert weak["intervals"]["cert_acc_050"]["ci_high"] == expected.certified_accuracy[0.5].high
    assert weak["intervals"]["pa_median"]["ci_low"] == expected.pa_quantiles[0.5].low
    assert weak["intervals"]["band_high"]["ci_low"] == expected.groups["high"].low
    assert weak["macr_ci_high"] > weak["macr_ci_low"]

    results = client.get(f"/api/v1/results/{board['weak']}").json()
    per_set = results["results"][0]["intervals"]
    assert per_set["certified_accuracy"]["0"]["method"] == "clopper-pearson"
    assert per_set["acr"]["ci_low"] <= results["results"][0]["acr"] <= per_set["acr"]["ci_high"]
    assert 0 < per_set["pa_band_half_width"] < 0.2
    assert results["summary"]["intervals"]["macr"] == weak["intervals"]["macr"]
    terms = storage.test_set_records_relpath(board["weak"], TERMS_UNIT)
    assert storage.resolve(settings.artifacts_dir, terms).is_file()


def test_rows_are_marked_tied_with_the_entry_above(client, board):
    rows = client.get("/api/v1/leaderboards/wide", params={"sort": "macr"}).json()["rows"]
    assert [r["submission_id"] for r in rows] == [board["strong"], board["twin"], board["weak"]]
    first, twin, weak = rows
    assert first["tied_with"] is None and first["tie"] is None
    assert twin["tied_with"] == 1 and twin["tie"]["tied"] and twin["tie"]["test"]["p_value"] == 1.0
    assert twin["tie"]["test"]["metric"] == "macr"
    assert weak["tied_with"] is None and not weak["tie"]["tied"]
    assert weak["tie"]["rank_above"] == 2 and weak["tie"]["test"]["p_value"] < 0.05
    # The first row of a later page is compared with the last row of the page before.
    page = client.get("/api/v1/leaderboards/wide", params={"limit": 1, "offset": 1}).json()
    assert page["rows"][0]["rank"] == 2 and page["rows"][0]["tied_with"] == 1
    by_radius = client.get("/api/v1/leaderboards/wide", params={"sort": "cert_acc_050"}).json()
    assert by_radius["rows"][2]["tie"]["test"]["metric"] == "cert_acc_050"
    by_sigma = client.get("/api/v1/leaderboards/wide", params={"sort": "sigma"}).json()
    assert all(r["tie"] is None for r in by_sigma["rows"])  # no paired test for σ


def test_compare_endpoint_runs_paired_tests_from_the_records(client, session, settings, board):
    a, b = board["strong"], board["weak"]
    body = client.get(f"/api/v1/leaderboards/wide/compare?ids={a},{b}").json()
    assert [e["submission_id"] for e in body["entries"]] == [a, b]
    (pair,) = body["pairs"]
    tests = {t["metric"]: t for t in pair["tests"]}
    assert list(tests) == [
        "macr",
        "cert_acc_000",
        "cert_acc_025",
        "cert_acc_050",
        "cert_acc_075",
        "cert_acc_100",
        "clean_accuracy",
        "abstain_rate",
        "band_low",
        "band_high",
    ]
    ta, tb = _tables(session, settings, a), _tables(session, settings, b)
    # two test sets sharing their images: the paired cluster bootstrap of the per-image means
    clean = compare_terms(image_terms(ta), image_terms(tb), "clean")
    assert tests["clean_accuracy"]["p_value"] == clean.p_value
    assert tests["clean_accuracy"]["method"] == "paired cluster bootstrap"
    reference = compare_acr(ta, tb)
    assert tests["macr"]["p_value"] == reference.p_value and not tests["macr"]["tied"]
    assert tests["macr"]["difference"]["estimate"] == pytest.approx(reference.difference.estimate)
    assert tests["cert_acc_000"]["p_value"] == compare_certified_accuracy(ta, tb, 0.0).p_value
    twins = client.get(
        "/api/v1/leaderboards/wide/compare",
        params={"ids": [a, board["twin"]], "radius": [0.3]},
    ).json()
    assert [t["metric"] for t in twins["pairs"][0]["tests"]] == [
        "macr",
        "certified_accuracy@0.3",
        "clean_accuracy",
        "abstain_rate",
        "band_low",
        "band_high",
    ]
    assert all(t["tied"] for t in twins["pairs"][0]["tests"])
    three = client.get(f"/api/v1/leaderboards/wide/compare?ids={a}&ids={b}&ids={board['twin']}")
    assert len(three.json()["pairs"]) == 3


def test_compare_refuses_what_it_cannot_test(client, board):
    a = board["strong"]
    one = client.get(f"/api/v1/leaderboards/wide/compare?ids={a}")
    assert one.status_code == 422 and "2 to 10" in one.json()["message"]
    bad = client.get(f"/api/v1/leaderboards/wide/compare?ids={a},x")
    assert bad.status_code == 422 and "'x'" in bad.json()["message"]
    missing = client.get(f"/api/v1/leaderboards/wide/compare?ids={a},99999")
    assert missing.status_code == 404
    other = client.get(f"/api/v1/leaderboards/tiny/compare?ids={a},{board['weak']}")
    assert other.status_code == 404 and "not an entry of 'tiny'" in other.json()["message"]


def test_web_pages_show_ties_intervals_and_paired_tests(client, board):
    page = client.get("/leaderboards/wide").text
    assert 'data-tied-with="1"' in page and "tied with #1" in page
    assert "95 % interval over images" in page
    model = client.get(f"/models/{board['weak']}").text
    assert 'id="summary-intervals"' in model
    compare = client.get(f"/compare?id={board['strong']}&id={board['weak']}").text
    assert 'id="paired-tests"' in compare and 'data-metric="macr"' in compare
    assert ">differ <" in compare


def test_clean_accuracy_ties_use_exact_mcnemar_on_one_test_set(client, session, settings, actors):
    """On a benchmark of one test set the smoothed classifier's clean accuracy (correct on
    2/3 of the images against 1/3) is compared image by image with exact McNemar."""
    bench = load_tiny(session, name="single", size=SIZE, sets=1)
    alice = session.get(User, actors.alice_id)
    ids = [
        finished_submission(
            session,
            user=alice,
            benchmark=bench,
            settings=settings,
            seed=seed,
            quality=quality,
            name=name,
        )
        for name, seed, quality in (("good", 4, 0.67), ("poor", 5, 0.34))
    ]
    rows = client.get("/api/v1/leaderboards/single", params={"sort": "clean_accuracy"}).json()
    good, poor = rows["rows"]
    assert [good["submission_id"], poor["submission_id"]] == ids
    test = poor["tie"]["test"]
    ((_, ta),), ((_, tb),) = (_tables(session, settings, i).items() for i in ids)
    a, b = ta.column("correct").to_numpy(), tb.column("correct").to_numpy()
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    assert (test["metric"], test["method"]) == ("clean_accuracy", "exact mcnemar")
    assert test["p_value"] == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue)
    assert poor["tied_with"] is None and test["p_value"] < 0.05
    body = client.get(f"/api/v1/leaderboards/single/compare?ids={ids[0]},{ids[1]}").json()
    tests = {t["metric"]: t for t in body["pairs"][0]["tests"]}
    assert tests["clean_accuracy"]["p_value"] == test["p_value"]
    assert tests["abstain_rate"]["method"] == "exact mcnemar"
