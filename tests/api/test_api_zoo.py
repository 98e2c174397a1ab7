"""The model zoo over REST: publishing weights under a licence (at submission, PATCH), who may
download them (``/api/v1/entries/{id}``, ``/weights``, ``/manifest``), and the links on
leaderboard rows, results and submissions. Private weights never reach anyone but their owner
and admins; another user's private or hidden entry answers exactly like a missing one."""

from __future__ import annotations

import hashlib
from html import unescape

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import Submission, User
from models.submissions import storage
from models.submissions.queries import set_moderation
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import finished_submission, manifest, multipart, weights_bytes

SUBMISSIONS = "/api/v1/submissions"
ENTRIES = "/api/v1/entries"


def _finished(session: Session, settings: Settings, *, seed: int = 1, **kw: object) -> int:
    alice = session.query(User).filter_by(name="alice").one()
    return finished_submission(
        session, user=alice, benchmark=get_benchmark(session, "tiny"), settings=settings,
        seed=seed, **kw,
    )  # fmt: skip


def _stored_bytes(session: Session, settings: Settings, submission_id: int) -> bytes:
    submission = session.get_one(Submission, submission_id)
    return storage.resolve(settings.artifacts_dir, submission.artifact.weights_path).read_bytes()


def test_submit_with_published_weights_canonicalises_the_licence(
    client: TestClient, actors: Actors, settings: Settings
):
    form = multipart(weights_bytes(), manifest(), weights_public=True, weights_license=" cc-by-4.0")
    response = client.post(SUBMISSIONS, headers=actors.alice, **form)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["weights_public"] is True and body["weights_license"] == "CC-BY-4.0"
    assert body["weights"] is None, "not downloadable before the entry has finished"
    assert drain_validations(settings) == [body["id"]]
    early = client.get(f"{ENTRIES}/{body['id']}/weights")
    assert early.status_code == 403 and early.json()["code"] == "weights_not_public"
    assert "submitted" in early.json()["message"]


def test_publishing_needs_a_known_licence_and_nothing_is_stored_otherwise(
    client: TestClient, actors: Actors, settings: Settings
):
    missing = client.post(
        SUBMISSIONS, headers=actors.alice, **multipart(weights_bytes(), manifest(),
                                                      weights_public=True),
    )  # fmt: skip
    assert missing.status_code == 422 and missing.json()["code"] == "license_required"
    unknown = client.post(
        SUBMISSIONS,
        headers=actors.alice,
        **multipart(weights_bytes(), manifest(), weights_public=True, weights_license="Apache2"),
    )
    assert unknown.status_code == 422 and unknown.json()["code"] == "invalid_license"
    assert "did you mean Apache-2.0" in unknown.json()["message"]
    assert client.get(SUBMISSIONS, headers=actors.alice).json()["total"] == 0
    assert drain_validations(settings) == []
    incoming = settings.artifacts_dir / "incoming"
    assert not incoming.exists() or list(incoming.iterdir()) == []
    assert not (settings.artifacts_dir / "weights").exists()


def test_published_weights_of_a_finished_entry_are_downloadable_by_anyone(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    entry = _finished(session, settings, weights_public=True, weights_license="MIT")
    stored = _stored_bytes(session, settings, entry)
    sha = hashlib.sha256(stored).hexdigest()
    info = client.get(f"{ENTRIES}/{entry}")
    assert info.status_code == 200, info.text
    assert info.json()["benchmark"] == "tiny" and info.json()["license"] == "MIT"
    assert info.json()["sha256"] == sha and info.json()["size_bytes"] == len(stored)
    download = client.get(info.json()["weights_url"])
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["x-weights-sha256"] == sha
    assert download.headers["x-weights-license"] == "MIT"
    assert "no-store" not in download.headers.get("cache-control", "")
    assert download.content == stored
    manifest_doc = client.get(info.json()["manifest_url"])
    assert manifest_doc.status_code == 200 and manifest_doc.json() == info.json()["manifest"]
    link = {
        "public": True,
        "license": "MIT",
        "url": f"{ENTRIES}/{entry}/weights",
        "manifest_url": f"{ENTRIES}/{entry}/manifest",
        "sha256": sha,
        "size_bytes": len(stored),
    }
    row = client.get("/api/v1/leaderboards/tiny").json()["rows"][0]
    assert row["submission_id"] == entry and row["weights"] == link
    assert client.get(f"/api/v1/results/{entry}").json()["weights"] == link
    assert client.get(f"{SUBMISSIONS}/{entry}", headers=actors.alice).json()["weights"] == link


def test_unpublished_weights_are_for_their_owner_and_admins_only(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    entry = _finished(session, settings)
    stored = _stored_bytes(session, settings, entry)
    for headers in ({}, actors.bob):
        refused = client.get(f"{ENTRIES}/{entry}/weights", headers=headers)
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "weights_not_public"
        assert "has not published" in refused.json()["message"]
        assert client.get(f"{ENTRIES}/{entry}", headers=headers).status_code == 403
        assert client.get(f"{ENTRIES}/{entry}/manifest", headers=headers).status_code == 403
    for headers in (actors.alice, actors.admin):
        own = client.get(f"{ENTRIES}/{entry}/weights", headers=headers)
        assert own.status_code == 200 and own.content == stored
        assert "no-store" in own.headers["cache-control"]
        assert "x-weights-license" not in own.headers
    assert client.get("/api/v1/leaderboards/tiny").json()["rows"][0]["weights"] is None
    assert client.get(f"/api/v1/results/{entry}").json()["weights"] is None


def test_private_and_hidden_entries_answer_like_missing_ones(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    private = _finished(session, settings, seed=1, private=True, weights_public=True,
                        weights_license="MIT")  # fmt: skip
    hidden = _finished(session, settings, seed=2, weights_public=True, weights_license="MIT")
    set_moderation(session, hidden, hidden=True)
    missing = 999_999
    for headers in ({}, actors.bob):
        for path in ("", "/weights", "/manifest"):
            absent = client.get(f"{ENTRIES}/{missing}{path}", headers=headers)
            assert absent.status_code == 404
            for entry in (private, hidden):
                response = client.get(f"{ENTRIES}/{entry}{path}", headers=headers)
                assert response.status_code == 404, response.text
                assert response.json() == {
                    **absent.json(),
                    "message": absent.json()["message"].replace(str(missing), str(entry)),
                }
    assert client.get(f"{ENTRIES}/{private}/weights", headers=actors.alice).status_code == 200
    assert client.get(f"{ENTRIES}/{hidden}/weights", headers=actors.admin).status_code == 200


def test_owner_publishes_and_withdraws_with_patch(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    entry = _finished(session, settings)
    url = f"{SUBMISSIONS}/{entry}/weights"
    no_licence = client.patch(url, headers=actors.alice, json={"public": True})
    assert no_licence.status_code == 422 and "needs a licence" in no_licence.json()["message"]
    for spelling in ("mit", "WTFPL"):
        bad = client.patch(url, headers=actors.alice, json={"public": True, "license": spelling})
        assert bad.status_code == 422 and "'CC-BY-4.0'" in bad.json()["message"]
    not_a_flag = client.patch(url, headers=actors.alice, json={"public": "true", "license": "MIT"})
    assert not_a_flag.status_code == 422
    mit = {"public": True, "license": "MIT"}
    assert client.patch(url, headers=actors.bob, json=mit).status_code == 404
    assert client.patch(url, json=mit).status_code == 401
    admin = client.patch(url, headers=actors.admin, json=mit)
    assert admin.status_code == 403 and admin.json()["code"] == "not_owner"
    assert client.get(f"{ENTRIES}/{entry}/weights").status_code == 403
    published = client.patch(url, headers=actors.alice, json=mit)
    assert published.status_code == 200, published.text
    assert published.json()["weights"]["license"] == "MIT"
    assert client.get(f"{ENTRIES}/{entry}/weights").status_code == 200
    withdrawn = client.patch(url, headers=actors.admin, json={"public": False})
    assert withdrawn.status_code == 200 and withdrawn.json()["weights"] is None
    assert withdrawn.json()["weights_license"] == "MIT", "withdrawing keeps the licence"
    assert client.get(f"{ENTRIES}/{entry}/weights").status_code == 403
    relicensed = client.patch(url, headers=actors.alice, json={"public": True, "license": "0BSD"})
    assert relicensed.status_code == 200 and relicensed.json()["weights"]["license"] == "0BSD"
    assert client.get(f"{ENTRIES}/{entry}/weights").headers["x-weights-license"] == "0BSD"


def test_owner_learns_when_the_weights_are_no_longer_stored(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    entry = _finished(session, settings, weights_public=True, weights_license="MIT")
    submission = session.get_one(Submission, entry)
    storage.resolve(settings.artifacts_dir, submission.artifact.weights_path).unlink()
    gone = client.get(f"{ENTRIES}/{entry}/weights")
    assert gone.status_code == 404 and gone.json()["code"] == "weights_missing"
    assert str(settings.artifacts_dir) not in gone.text


def test_model_page_links_published_weights_and_their_licence(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    published = _finished(session, settings, seed=1, weights_public=True,
                          weights_license="CC-BY-4.0")  # fmt: skip
    unpublished = _finished(session, settings, seed=2)
    page = client.get(f"/models/{published}").text
    zoo = page[page.index('id="weights-download"') :].split("</dd>")[0]
    assert f'href="{ENTRIES}/{published}/weights" download' in zoo
    assert f'href="{ENTRIES}/{published}/manifest" download' in zoo
    assert "https://spdx.org/licenses/CC-BY-4.0.html" in zoo and ">CC-BY-4.0</a>" in zoo
    assert f'load_model("tiny", {published}, server="http://testserver")' in unescape(zoo)
    other = client.get(f"/models/{unpublished}").text
    zoo = other[other.index('id="weights-download"') :].split("</dd>")[0]
    assert "weights not published" in zoo and f"{ENTRIES}/" not in zoo
