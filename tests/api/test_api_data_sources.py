"""The API and the pages say where test-set data really comes from (issue 12 §4).

A test set with a local ``folder`` is "local folder (content SHA-256 …)", never its path and
never "<repo> (Hub)"; a Hub test set shows its repo and the revision loaded (the pinned commit
when there is one, else "latest revision, not pinned").
"""

from __future__ import annotations

import json
from html import unescape

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.data_sources import DataSourcePublic
from models.catalog.benchmarks import packaged_definitions, parse_definition, upsert_benchmark
from tests.support.service_factories import tiny_definition

SECRET = "/srv/private-mount/datasets-xyz"
SHA = "ab" * 32
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_local_folder_is_named_by_its_content_hash() -> None:
    source = DataSourcePublic.of(
        repo="uoft-cs/cifar10", folder=SECRET, revision=None, provenance={"sha256": SHA}, name="t"
    )
    assert source.kind == "local_folder" and source.repo is None and source.pinned
    assert source.label == f"local folder (content SHA-256 {SHA[:12]}…)"
    assert "Hub" not in source.label and SECRET not in source.model_dump_json()
    unpinned = DataSourcePublic.of(
        repo="uoft-cs/cifar10", folder="cifar10", revision=None, provenance={}, name="t"
    )
    assert unpinned.label == "local folder (content not pinned)" and not unpinned.pinned


@pytest.mark.parametrize(
    ("revision", "provenance", "label", "pinned"),
    [
        (None, {"hub_commit": COMMIT}, f"uoft-cs/cifar10 on the Hub at commit {COMMIT[:12]}", True),
        (COMMIT, {}, f"uoft-cs/cifar10 on the Hub at commit {COMMIT[:12]}", True),
        ("v1.0", {}, "uoft-cs/cifar10 on the Hub at revision v1.0", False),
        (None, {}, "uoft-cs/cifar10 on the Hub (latest revision, not pinned)", False),
    ],
)
def test_hub_source_names_repo_and_revision(
    revision: str | None, provenance: dict, label: str, pinned: bool
) -> None:
    source = DataSourcePublic.of(
        repo="uoft-cs/cifar10", folder=None, revision=revision, provenance=provenance, name="t"
    )
    assert source.kind == "hub" and source.repo == "uoft-cs/cifar10"
    assert source.revision == (revision or provenance.get("hub_commit"))
    assert source.label == label and source.pinned is pinned
    assert source.where() == label.removeprefix("uoft-cs/cifar10 on the ")


@pytest.fixture
def sources(session: Session) -> None:
    definition = tiny_definition("srcs", sets=3)
    local, pinned, latest = definition["test_sets"]
    local.update(folder=SECRET, provenance={"sha256": SHA})
    pinned.update(provenance={"hub_commit": COMMIT})
    assert "folder" not in latest and "revision" not in latest
    upsert_benchmark(session, parse_definition(json.dumps(definition)))
    session.commit()


def test_rest_states_each_test_sets_source(client: TestClient, sources: None) -> None:
    bench = client.get("/api/v1/benchmarks/srcs").json()
    by_name = {t["name"]: t["source"] for t in bench["test_sets"]}
    assert by_name["set0"] == {
        "kind": "local_folder",
        "repo": None,
        "revision": None,
        "sha256": SHA,
        "pinned": True,
        "label": f"local folder (content SHA-256 {SHA[:12]}…)",
    }
    assert by_name["set1"]["revision"] == COMMIT and by_name["set1"]["pinned"] is True
    assert by_name["set2"]["label"] == "certbench/srcs on the Hub (latest revision, not pinned)"
    listed = next(b for b in client.get("/api/v1/benchmarks").json() if b["name"] == "srcs")
    assert [t["source"] for t in listed["test_sets"]] == [s["label"] for s in by_name.values()]
    dataset = next(
        d for d in client.get("/api/v1/datasets").json() if d["repo"] == "certbench/srcs"
    )
    assert [s["label"] for s in dataset["sources"]] == [s["label"] for s in by_name.values()]


def test_pages_never_call_a_local_folder_the_hub(client: TestClient, sources: None) -> None:
    local = f"local folder (content SHA-256 {SHA[:12]}…)"
    pages = {
        url: unescape(client.get(url).text)
        for url in ("/", "/datasets", "/datasets/certbench/srcs", "/leaderboards/srcs")
    }
    for url, html in pages.items():
        assert local in html, url
        assert f"Hub at commit {COMMIT[:12]}" in html, url
        assert "Hub (latest revision, not pinned)" in html, url
        assert ">Hub</a>)" not in html, url  # the old "repo (Hub)" link
    row = pages["/datasets"].split('data-repo="certbench/srcs"')[1].split("</tr>")[0]
    assert f'title="SHA-256 {SHA}"' in row and 'data-kind="local_folder"' in row


def test_no_response_names_the_local_path(client: TestClient, sources: None) -> None:
    for url in (
        "/api/v1/benchmarks",
        "/api/v1/benchmarks/srcs",
        "/api/v1/datasets",
        "/",
        "/datasets",
        "/datasets/certbench/srcs",
        "/leaderboards/srcs",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert "private-mount" not in response.text, url


def test_generated_data_is_labelled_so_and_has_no_hub_link() -> None:
    source = DataSourcePublic.of(
        repo="certbench/demo-digits",
        folder="demo-digits",
        revision=None,
        provenance={"sha256": SHA},
        name="clean",
    )
    assert source.kind == "generated" and source.repo is None and source.pinned
    assert source.label.startswith("generated on this server: ")
    assert "certbench datasets demo" in source.label and "Hub" not in source.where()
    assert source.hub_url is None


@pytest.fixture
def local_only(session: Session) -> None:
    """The packaged demo benchmark (its data generated here) and one read from local folders."""
    upsert_benchmark(session, {d.name: d for d in packaged_definitions()}["demo-digits"])
    definition = tiny_definition("folders", sets=2)
    for test_set in definition["test_sets"]:
        test_set.update(folder=SECRET, provenance={"sha256": SHA})
    upsert_benchmark(session, parse_definition(json.dumps(definition)))
    session.commit()


@pytest.mark.parametrize(
    ("repo", "kind"),
    [("certbench/demo-digits", "generated"), ("certbench/folders", "local_folder")],
)
def test_data_not_read_from_the_hub_gets_no_hub_link_or_snippet(
    client: TestClient, local_only: None, repo: str, kind: str
) -> None:
    listed = {d["repo"]: d for d in client.get("/api/v1/datasets").json()}
    assert listed[repo]["hub_url"] is None and listed[repo]["load_example"] is None
    assert {s["kind"] for s in listed[repo]["sources"]} == {kind}
    bench = repo.removeprefix("certbench/")
    test_sets = client.get(f"/api/v1/benchmarks/{bench}").json()["test_sets"]
    assert [t["hub_url"] for t in test_sets] == [None] * len(test_sets)
    page = unescape(client.get(f"/datasets/{repo}").text)
    assert "huggingface.co" not in page and "load_dataset" not in page
    assert "Published on the Hugging Face Hub" not in page
    assert "Not read from the Hugging Face Hub" in page
    sources = page.split('id="data-sources"')[1].split("</p>")[0]
    assert f'data-kind="{kind}"' in sources and 'data-kind="hub"' not in sources
    row = unescape(client.get("/datasets").text).split(f'data-repo="{repo}"')[1].split("</tr>")[0]
    assert "huggingface.co" not in row and "load_dataset" not in row and "not on the Hub" in row


def test_demo_dataset_page_says_it_is_generated_here(client: TestClient, local_only: None) -> None:
    page = unescape(client.get("/datasets/certbench/demo-digits").text)
    sources = page.split('id="data-sources"')[1].split("</p>")[0]
    assert "generated on this server: scikit-learn's handwritten digits" in sources
    # no local copy yet in this test's data dir: the page says who writes it, not "set folder"
    assert "certbench serve</code> writes it" in page and "set <code>folder</code>" not in page


def test_hub_data_keeps_its_link_and_snippet(client: TestClient, sources: None) -> None:
    """A repo read from the Hub for at least one test set links there and shows load_dataset."""
    page = unescape(client.get("/datasets/certbench/srcs").text)
    assert 'href="https://huggingface.co/datasets/certbench/srcs"' in page
    assert "Published on the Hugging Face Hub" in page
    assert 'load_dataset("certbench/srcs", "set0", split="test")' in page
