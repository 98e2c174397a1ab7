"""Sort keys are the REST field names and carry the column labels (issue 12 §4).

``?sort=KEY`` ranks by the figure named KEY in the rows' ``metrics``; the benchmark lists its
keys with their column labels (``sort_keys``); the page says "sorted by <label>" under the
column with that label; a key the benchmark lacks is a 422 naming the valid ones, in REST and
on the web page, never an empty or unordered ranking.
"""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.boards.leaderboard import SUBMISSION_SORTS
from models.catalog.benchmarks import get_benchmark, parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.entities import User
from tests.support.api import Actors
from tests.support.service_factories import finished_submission, tiny_definition

URL = "/api/v1/leaderboards/tiny"


@pytest.fixture
def entries(session: Session, settings: Settings, actors: Actors) -> list[int]:
    benchmark = get_benchmark(session, "tiny")
    alice = session.get(User, actors.alice_id)
    return [
        finished_submission(
            session, user=alice, benchmark=benchmark, settings=settings, seed=seed,
            quality=quality, name=f"net-{seed}", sigma=sigma,
        )
        for seed, quality, sigma in ((1, 0.2, 0.25), (2, 0.9, 0.5), (3, 0.6, 0.25))
    ]  # fmt: skip


def _keys(client: TestClient) -> dict[str, str]:
    return client.get("/api/v1/benchmarks/tiny").json()["sort_keys"]


def test_benchmark_lists_its_own_sort_keys_with_labels(
    client: TestClient, entries: list[int]
) -> None:
    keys = _keys(client)
    assert keys["macr"] == "mACR"  # two test sets: the mean over them
    assert keys["cert_acc_050"] == "r = 0.5" and keys["sigma"] == "σ"
    assert {"clean_accuracy", "pa_q10", "pa_q90", "abstain_rate"} <= set(keys)
    assert set(SUBMISSION_SORTS) <= set(keys)
    assert {"band_low", "band_high"} <= set(keys)
    # tiny has no mid band and no robustness, Fourier or weather stage
    for absent in ("band_mid", "pd_acc_8", "base_accuracy", "fourier_acr_low", "weather_random"):
        assert absent not in keys
    assert "acr" not in keys  # no alias: a key is a field name


def test_every_metric_key_sorts_the_field_of_that_name(
    client: TestClient, entries: list[int]
) -> None:
    keys = _keys(client)
    higher = client.get(URL).json()["higher_is_better"]
    for key in set(keys) - set(SUBMISSION_SORTS):
        for order in ("desc", "asc"):
            board = client.get(URL, params={"sort": key, "order": order}).json()
            assert board["total"] == len(entries)
            values = [row["metrics"][key] for row in board["rows"]]
            assert all(value is not None for value in values), key
            assert values == sorted(values, reverse=order == "desc"), (key, order)
        assert key in higher


@pytest.mark.parametrize("key", ["acr_low", "band_mid", "pd_acc_8", "no_such_figure"])
def test_a_key_the_benchmark_lacks_is_a_422_naming_the_valid_keys(
    client: TestClient, entries: list[int], key: str
) -> None:
    response = client.get(URL, params={"sort": key})
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_sort"
    message = body["message"]
    assert f"sort={key!r} is not a sort key of benchmark 'tiny'" in message
    listed = message.split("valid keys: ", 1)[1].split(", ")
    assert listed == list(_keys(client))


def test_web_page_names_the_sorted_column_by_its_label(
    client: TestClient, entries: list[int]
) -> None:
    keys = _keys(client)
    for key in ("macr", "cert_acc_050", "abstain_rate", "pa_median"):
        html = client.get(f"/leaderboards/tiny?sort={key}").text
        head = re.search(rf'<th [^>]*data-key="{key}"[^>]*>(.*?)</th>', html, re.S)
        assert head is not None, key
        assert keys[key] in head.group(1)
        assert re.search(
            rf'<span id="sorted-by" data-key="{key}">sorted by {re.escape(keys[key])} '
            r"\((best|worst) first\)</span>",
            html,
        ), key
    html = client.get("/leaderboards/tiny?sort=abstain_rate&order=asc").text
    assert "sorted by abstain (best first)" in html  # lower is better
    html = client.get("/leaderboards/tiny?sort=submitted").text
    assert "sorted by Submitted (newest first)" in html
    html = client.get("/leaderboards/tiny?sort=clean_accuracy").text  # a REST-only figure
    assert "sorted by clean (best first)" in html


def test_web_page_refuses_a_key_the_benchmark_lacks(client: TestClient, entries: list[int]) -> None:
    response = client.get("/leaderboards/tiny?sort=band_mid")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    text = response.text.replace("&#39;", "'")
    assert "sort='band_mid' is not a sort key of benchmark 'tiny'" in text
    assert "valid keys: " + ", ".join(_keys(client)) in text


def test_one_test_set_heads_macr_as_acr_and_says_so(client: TestClient, session: Session) -> None:
    """On a benchmark with one test set (the demo's shape) the mean over test sets is that set's
    ACR: the column says ACR, its tooltip names the field ``macr`` it sorts by, which is the
    same field as on every other benchmark; ``acr`` is no key but the column's label, which
    sorts by that key (issue 34 §7: ``?sort=acr`` answered 422 on the demo board)."""
    upsert_benchmark(session, parse_definition(json.dumps(tiny_definition("single", sets=1))))
    session.commit()
    keys = client.get("/api/v1/benchmarks/single").json()["sort_keys"]
    assert keys["macr"] == "ACR" and "acr" not in keys
    html = unescape(client.get("/leaderboards/single?sort=macr").text)
    head = re.search(r'<th [^>]*data-key="macr"[^>]*title="([^"]*)"[^>]*>(.*?)</th>', html, re.S)
    assert head is not None
    title, label = head.groups()
    assert "ACR" in label and "mACR" not in label
    assert "of the one test set" in title and "mean over test sets (mACR)" in title
    assert "REST field and sort key: macr" in title
    assert "sorted by ACR (best first)" in html
    aliased = client.get("/api/v1/leaderboards/single", params={"sort": "acr"})
    assert aliased.status_code == 200, aliased.text
    assert (aliased.json()["sort"], aliased.json()["sort_label"]) == ("macr", "ACR")
