"""Benchmarks, datasets, leaderboards, results and records downloads over HTTP."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import User
from tests.support.api import Actors
from tests.support.service_factories import finished_submission


@pytest.fixture
def entries(session: Session, settings: Settings, actors: Actors) -> dict[str, int]:
    benchmark = get_benchmark(session, "tiny")
    alice, bob = session.get(User, actors.alice_id), session.get(User, actors.bob_id)
    return {
        "weak": finished_submission(
            session, user=alice, benchmark=benchmark, settings=settings, seed=1,
            quality=1 / 3, name="weak-net",
        ),
        "best": finished_submission(
            session, user=bob, benchmark=benchmark, settings=settings, seed=2,
            quality=1.0, name="best-net", sigma=0.5,
        ),
        "private": finished_submission(
            session, user=alice, benchmark=benchmark, settings=settings, seed=3,
            quality=2 / 3, name="mine-only", private=True,
        ),
    }  # fmt: skip


def test_benchmarks_and_datasets(client: TestClient, entries: dict[str, int]):
    benchmarks = client.get("/api/v1/benchmarks").json()
    tiny = next(b for b in benchmarks if b["name"] == "tiny")
    assert tiny["entries"] == 2 and tiny["sigmas"] == [0.25, 0.5]
    assert tiny["protocol"] == {"version": "test-v1", "n0": 4, "n": 16, "alpha": 0.001, "seed": 0}
    assert [t["name"] for t in tiny["test_sets"]] == ["set0", "set1"]
    assert tiny["test_sets"][0]["hub_url"] == "https://huggingface.co/datasets/certbench/tiny"
    assert client.get("/api/v1/benchmarks/tiny").json()["entries"] == 2
    assert client.get("/api/v1/benchmarks/nope").status_code == 404
    datasets = client.get("/api/v1/datasets").json()
    assert datasets == [
        {
            "repo": "certbench/tiny",
            "hub_url": "https://huggingface.co/datasets/certbench/tiny",
            "benchmarks": ["tiny"],
            "configs": ["set0", "set1"],
            "load_example": 'from datasets import load_dataset; ds = load_dataset("certbench/tiny",'
            ' "set0", split="test")',
            "sources": [
                {
                    "kind": "hub",
                    "repo": "certbench/tiny",
                    "revision": None,
                    "sha256": None,
                    "pinned": False,
                    "label": "certbench/tiny on the Hub (latest revision, not pinned)",
                }
            ],
        }
    ]


def test_leaderboard_sorting_filters_paging(
    client: TestClient, actors: Actors, entries: dict[str, int]
):
    url = "/api/v1/leaderboards/tiny"
    board = client.get(url).json()
    assert [r["model_name"] for r in board["rows"]] == ["best-net", "weak-net"]
    assert board["total"] == 2 and board["rows"][0]["rank"] == 1
    top = board["rows"][0]
    assert top["metrics"]["macr"] > board["rows"][1]["metrics"]["macr"]
    assert top["owner"] == "bob" and top["paper_url"] == "https://example.org/paper"
    assert top["authors"] == ["A. Author"] and top["protocol_version"] == "test-v1"
    assert board["higher_is_better"]["abstain_rate"] is False
    asc = client.get(url, params={"sort": "macr", "order": "asc"}).json()
    assert [r["model_name"] for r in asc["rows"]] == ["weak-net", "best-net"]
    assert [r["model_name"] for r in client.get(url, params={"sigma": 0.5}).json()["rows"]] == [
        "best-net"
    ]
    page2 = client.get(url, params={"offset": 1, "limit": 1}).json()
    assert [r["rank"] for r in page2["rows"]] == [2] and page2["total"] == 2
    assert client.get(url, params={"search": "weak"}).json()["total"] == 1
    owner = client.get(url, headers=actors.alice).json()
    assert "mine-only" in [r["model_name"] for r in owner["rows"]]
    bogus = client.get(url, params={"sort": "bogus"})
    assert bogus.status_code == 422 and bogus.json()["code"] == "invalid_sort"
    assert "mACR = macr" in bogus.json()["message"]  # the keys with the labels they answer to
    # issue 34 §7: the label a column shows sorts too, in any case, and the answer names the key
    assert board["sort"] == "macr" and board["sort_label"] == "mACR"  # two test sets: mean ACR
    for typed in ("mACR", "macr", "ACR", " acr"):
        aliased = client.get(url, params={"sort": typed}).json()
        assert (aliased["sort"], aliased["sort_label"]) == ("macr", "mACR"), typed
        assert [r["submission_id"] for r in aliased["rows"]] == [
            r["submission_id"] for r in board["rows"]
        ]
    radius = client.get(url, params={"sort": "R = 0.5", "order": "asc"}).json()
    assert (radius["sort"], radius["sort_label"]) == ("cert_acc_050", "r = 0.5")
    for params, code in (
        ({"order": "sideways"}, 422),
        ({"limit": 0}, 422),
        ({"limit": 10_000}, 422),
        ({"offset": -1}, 422),
        ({"sigma": "abc"}, 422),
    ):
        response = client.get(url, params=params)
        assert response.status_code == code, params
        assert response.json()["code"] == "invalid_request"
    missing = client.get("/api/v1/leaderboards/nope")
    assert missing.status_code == 404 and "known benchmarks" in missing.json()["message"]


def test_results_and_records(client: TestClient, actors: Actors, entries: dict[str, int]):
    results = client.get(f"/api/v1/results/{entries['best']}").json()
    assert results["state"] == "finished" and results["summary"]["test_sets"] == 2
    assert [r["test_set"] for r in results["results"]] == ["set0", "set1"]
    first = results["results"][0]
    assert first["count"] == 3 and first["acr"] == pytest.approx(0.75)
    assert first["certified_accuracy"]["0.5"] == pytest.approx(1.0)
    assert first["protocol_version"] == "test-v1" and first["evaluator_version"]
    download = client.get(first["records_url"])
    assert download.status_code == 200
    table = pq.read_table(io.BytesIO(download.content))
    assert table.num_rows == 3 and set(table.column("correct").to_pylist()) == {True}
    assert client.get(f"/api/v1/results/{entries['best']}/records/nope").status_code == 404
    private = entries["private"]
    assert client.get(f"/api/v1/results/{private}").status_code == 404
    assert client.get(f"/api/v1/results/{private}/records/set0").status_code == 404
    assert client.get(f"/api/v1/results/{private}", headers=actors.alice).status_code == 200
    assert client.get(f"/api/v1/results/{private}", headers=actors.bob).status_code == 404


def test_facets_and_pa_distribution(client: TestClient, actors: Actors, entries: dict[str, int]):
    facets = client.get("/api/v1/leaderboards/tiny/facets").json()
    assert facets == {"architectures": ["cifar_resnet20"], "venues": [], "sigmas": [0.25, 0.5]}
    assert client.get("/api/v1/leaderboards/nope/facets").status_code == 404
    row = client.get("/api/v1/leaderboards/tiny").json()["rows"][0]["metrics"]
    # best-net: every image correct with n_y/n = 15/16 on both test sets
    for key in ("pa_q10", "pa_q25", "pa_median", "pa_q75", "pa_q90"):
        assert row[key] == pytest.approx(15 / 16)
    weak = client.get(f"/api/v1/results/{entries['weak']}").json()["summary"]
    assert weak["pa_q10"] <= weak["pa_median"] <= weak["pa_q90"]
    assert weak["pa_q10"] == pytest.approx(3 / 16)
