"""Pages kept with the board counter (issue 35 §1): the web leaderboard's rows rendered once per
board snapshot, its benchmark frame, ``GET /api/v1/benchmarks`` and the compare page.

Each kept page must be byte for byte what a fresh render gives (the row macro called with the
page's values; the process's caches dropped), must follow every committed change of what it
shows (a new entry, a hidden or private entry, a definition change), and must never hand one
viewer what was built for another: a private entry rendered for its owner stays out of everyone
else's pages, lists and comparisons.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import product

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import event
from sqlalchemy.orm import Session

from api.schemas.benchmark import BenchmarkSummary
from api.services import leaderboard_page as page_service
from api.services import leaderboards as lb_service
from api.web import leaderboard_table
from api.web.auth import COOKIE_NAME
from api.web.leaderboard_view import Filters
from models.boards import snapshots
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.engine import get_engine
from models.db.entities import Submission, User
from models.submissions.queries import rerun, set_moderation
from tests.support.analysis_factories import Family, SavedFamilies, definition


def _seven_models(fam: Family) -> None:
    for model, accuracy in enumerate((0.5, 0.62, 0.78, 0.86), start=1):
        fam.model(model, 0.25, accuracy)
    fam.model(5, 0.5, 0.6)
    fam.model(6, 0.25, 0.66, private=True)  # alice's, on both benchmarks
    fam.model(7, 0.25, 0.78)  # model 3's counts: "tied with" model 3's rank


@pytest.fixture
def family(session: Session, settings: Settings, saved_families: SavedFamilies) -> Family:
    """Six public models (bob's) and one private (alice's), each on the clean and the OOD
    benchmark: ER cells on the OOD board, "tied with #k" marks from stored records."""
    return Family.built_once(session, settings, saved_families, _seven_models)


VIEWS = [
    Filters(),
    Filters(sort="cert_acc_000", order="asc", page=2, per_page=2),
    Filters(sigma=0.25),
    Filters(search="MODEL-0"),
    Filters(sort="model_name"),
    Filters(sort="macr", page=2, per_page=3),
]


#: An ER cell with a value (a row without a fit has an empty ``data-value``).
ER_CELL = re.compile(r'data-key="effective_robustness" data-value="[-0-9]')


def _token(family: Family, who: str) -> str:
    return family.headers[who]["Authorization"].removeprefix("Bearer ")


def _get(client: TestClient, url: str, family: Family, who: str | None = None) -> str:
    headers = {"Cookie": f"{COOKIE_NAME}={_token(family, who)}"} if who else {}
    response = client.get(url, headers=headers)
    assert response.status_code == 200, (url, who, response.text[:500])
    return response.text


def _fresh(client: TestClient, url: str, family: Family, who: str | None = None) -> str:
    """The page as a process with no snapshot, kept row or kept page renders it."""
    snapshots.forget()
    return _get(client, url, family, who)


def _row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-id="(\d+)"', html)]


@contextmanager
def _statements(settings: Settings) -> Iterator[list[str]]:
    """The SQL statements this process sends to the database meanwhile."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    engine = get_engine(settings)
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_rows_rendered_once_per_snapshot_equal_the_row_macro_with_the_pages_values(
    session: Session, settings: Settings, family: Family
) -> None:
    root = session.query(User).filter_by(name="root").one()
    seen: Counter[str] = Counter()
    for name, view, viewer in product(("cifar10-c", "cifar10"), VIEWS, (None, family.alice, root)):
        frame = leaderboard_table.frame(session, name)
        label = frame.sort_keys[view.sort]
        query = view.query()
        planned = page_service.plan(session, name, query, viewer=viewer, settings=settings,
                                    effective_robustness=True)  # fmt: skip
        public = page_service.leaderboard(session, name, query, viewer=viewer, settings=settings,
                                          effective_robustness=True)  # fmt: skip
        expected = leaderboard_table.fresh_rows(public, frame.columns, label)
        assert leaderboard_table.rows(planned, frame.columns, label) == expected, (name, view)
        kept = [planned.page.memo.get(("row_html", r.submission_id)) for r in planned.page.rows]
        assert all(kept), "every row of the page is kept with the snapshot"
        assert leaderboard_table.rows(planned, frame.columns, label) == expected  # from the memo
        seen["rows"] += len(_row_ids(expected))
        seen["tie"] += expected.count('class="badge tie"')
        seen["er"] += len(ER_CELL.findall(expected))
    # the comparison covered tie badges and ER cells, not only their absence
    assert seen["rows"] > 100 and seen["tie"] > 5 and seen["er"] > 10, seen


def test_the_page_is_a_fresh_render_and_follows_entries_moderation_privacy_and_definitions(
    client: TestClient, session: Session, settings: Settings, family: Family
) -> None:
    url = "/leaderboards/cifar10-c?sort=macr"
    private = family.ids[(6, 0.25)][1]
    # the owner first: her private row is rendered and kept with the snapshot
    assert private in _row_ids(_get(client, url, family, "alice"))
    for who in (None, "bob"):
        assert private not in _row_ids(_get(client, url, family, who)), who
    assert private in _row_ids(_get(client, url, family, "admin"))
    kept = _get(client, url, family)
    with _statements(settings) as sent:
        again = _get(client, url, family)
    assert sent and all("board_versions" in s for s in sent), "kept: only the counter is read"
    assert kept == again == _fresh(client, url, family)

    _, new = family.model(8, 0.25, 0.7)
    assert new in _row_ids(kept := _get(client, url, family))
    assert kept == _fresh(client, url, family)

    set_moderation(session, new, hidden=True)
    assert new not in _row_ids(kept := _get(client, url, family))
    assert new in _row_ids(_get(client, url, family, "admin"))
    assert kept == _fresh(client, url, family)

    public = family.ids[(1, 0.25)][1]
    session.get_one(Submission, public).is_private = True
    session.commit()
    assert public not in _row_ids(kept := _get(client, url, family))
    assert public in _row_ids(_get(client, url, family, "bob"))  # the owner's
    assert public not in _row_ids(_get(client, url, family, "alice"))
    assert kept == _fresh(client, url, family)

    changed = definition("cifar10-c", {"fog": "low", "noise": "high"})
    changed |= {"version": 2, "title": "CIFAR-10-C renamed", "description": "A new description."}
    upsert_benchmark(session, parse_definition(json.dumps(changed)))
    kept = _get(client, url, family)
    assert "CIFAR-10-C renamed" in kept and "A new description." in kept
    assert kept == _fresh(client, url, family)


def _listing(session: Session, settings: Settings, viewer: User | None) -> str:
    """What the route answered before it was kept: the summaries serialised as FastAPI does."""
    _, page = lb_service.benchmark_summaries(
        session, viewer=viewer, offset=0, limit=50, settings=settings
    )
    return TypeAdapter(list[BenchmarkSummary]).dump_json(page).decode()


def _counts(body: str) -> dict[str, int]:
    return {b["name"]: b["entries"] for b in json.loads(body)}


def test_the_benchmark_list_is_kept_per_viewer_class_and_follows_changes(
    client: TestClient, session: Session, settings: Settings, family: Family
) -> None:
    alice = client.get("/api/v1/benchmarks", headers=family.headers["alice"])
    anonymous = client.get("/api/v1/benchmarks")
    assert alice.headers["x-total-count"] == anonymous.headers["x-total-count"] == "2"
    assert _counts(alice.text)["cifar10-c"] == _counts(anonymous.text)["cifar10-c"] + 1
    assert alice.text == _listing(session, settings, family.alice)
    assert anonymous.text == _listing(session, settings, None)
    bob = client.get("/api/v1/benchmarks", headers=family.headers["bob"])
    assert bob.text == anonymous.text  # bob sees no private entry of his: the same counts

    with _statements(settings) as sent:
        again = client.get("/api/v1/benchmarks")
    assert again.text == anonymous.text
    assert not [s for s in sent if "leaderboard_entries" in s], "kept: nothing is counted again"

    family.model(8, 0.25, 0.7, clean=False)
    after = client.get("/api/v1/benchmarks").text
    assert _counts(after)["cifar10-c"] == _counts(anonymous.text)["cifar10-c"] + 1
    assert after == _listing(session, settings, None)
    changed = definition("cifar10", {"clean": None}, lens=True) | {"version": 2, "title": "Clean"}
    upsert_benchmark(session, parse_definition(json.dumps(changed)))
    after = client.get("/api/v1/benchmarks").text
    assert json.loads(after)[0]["title"] == "Clean"
    assert after == _listing(session, settings, None)


def test_the_compare_page_is_kept_per_viewer_and_entry_set_and_follows_changes(
    client: TestClient, session: Session, settings: Settings, family: Family
) -> None:
    public, private = family.ids[(1, 0.25)][1], family.ids[(6, 0.25)][1]
    assert public is not None and private is not None
    url = f"/compare?id={public}&id={private}"
    mine = _get(client, url, family, "alice")  # built for the owner of the private entry
    assert "Signed in as <strong>alice</strong>" in mine
    for who in (None, "bob"):
        headers = {"Cookie": f"{COOKIE_NAME}={_token(family, who)}"} if who else {}
        assert client.get(url, headers=headers).status_code == 404, who
        figure = client.get(f"/compare/figures/compare-cert-acc.svg?id={public}&id={private}",
                            headers=headers)  # fmt: skip
        assert figure.status_code == 404, who
    admin = _get(client, url, family, "admin")
    assert "Signed in as <strong>root</strong>" in admin and "alice</strong>" not in admin
    with _statements(settings) as sent:
        again = _get(client, url, family, "alice")
    assert again == mine and not [s for s in sent if "stage_results" in s], "kept"
    assert mine == _fresh(client, url, family, "alice")

    both_public = f"/compare?id={public}&id={family.ids[(2, 0.25)][1]}"
    kept = _get(client, both_public, family)
    assert kept == _get(client, both_public, family) == _fresh(client, both_public, family)
    set_moderation(session, public, hidden=True)
    assert client.get(both_public).status_code == 404  # the kept page went with the counter
    assert client.get(url, headers={"Cookie": f"{COOKIE_NAME}={_token(family, 'alice')}"}
                      ).status_code == 404  # fmt: skip

    running, other = family.ids[(3, 0.25)][1], family.ids[(4, 0.25)][1]
    assert running is not None and other is not None
    rerun(session, running, fresh=False, settings=settings)  # its results arrive unannounced
    unfinished = f"/compare?id={running}&id={other}"
    first = _get(client, unfinished, family)
    with _statements(settings) as sent:
        assert _get(client, unfinished, family) == first
    assert not all("board_versions" in s for s in sent), "built again while an entry is unfinished"
