"""The REST leaderboard's JSON is the public model's JSON, byte for byte (issue 27 §1).

The route splices rows serialised once per board snapshot (``api.services.leaderboard_page``);
these tests hold the bytes equal to ``LeaderboardPublic.model_dump_json()`` across sorts, orders,
pages, filters and viewers, with effective robustness (an OOD board) and "tied with #k" marks
(paired tests on stored records), and after the board changes under a memoised row.
"""

from __future__ import annotations

import json
from itertools import product

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.services.leaderboard_page import leaderboard, leaderboard_json
from models.boards.leaderboard import LeaderboardQuery
from models.core.settings import Settings
from models.db.entities import User
from models.submissions.queries import set_moderation
from tests.support.analysis_factories import Family


@pytest.fixture
def family(session: Session, settings: Settings) -> Family:
    fam = Family(session, settings)
    for model, accuracy in enumerate((0.5, 0.62, 0.78, 0.86), start=1):
        fam.model(model, 0.25, accuracy)
    fam.model(5, 0.5, 0.6)
    fam.model(6, 0.25, 0.66, private=True)
    return fam


QUERIES = [
    dict(sort=sort, order=order, offset=offset, limit=3)
    for sort, order, offset in product(
        ("macr", "cert_acc_000", "model_name", "sigma", "submitted"), ("desc", "asc"), (0, 2)
    )
] + [
    dict(sigma=0.25, limit=4),
    dict(search="MODEL-0", limit=50),
    dict(architecture="cifar_resnet20", offset=1, limit=2),
    dict(offset=100),
]


def _both(session: Session, settings: Settings, name: str, query: dict, viewer: User | None):
    q = LeaderboardQuery(**query)  # type: ignore[arg-type]
    expected = leaderboard(session, name, q, viewer=viewer, settings=settings,
                           effective_robustness=True).model_dump_json()  # fmt: skip
    return leaderboard_json(session, name, q, viewer=viewer, settings=settings), expected


def test_the_route_serves_the_models_json_byte_for_byte_and_follows_changes(
    client: TestClient, session: Session, settings: Settings, family: Family
) -> None:
    viewers = (None, family.alice, session.query(User).filter_by(name="root").one())
    seen = {"er": 0, "tie": 0, "rows": 0}
    for name, query, viewer in product(("cifar10-c", "cifar10"), QUERIES, viewers):
        got, expected = _both(session, settings, name, query, viewer)
        assert got.decode() == expected, (name, query, viewer and viewer.name)
        for row in json.loads(got)["rows"]:
            seen["rows"] += 1
            seen["er"] += row["effective_robustness"] is not None
            seen["tie"] += row["tie"] is not None
    # the comparison covered rows with ER cells and with tie marks, not only empty fields
    assert seen["rows"] > 100 and seen["er"] > 20 and seen["tie"] > 20, seen

    url = "/api/v1/leaderboards/cifar10-c"
    params = {"sort": "macr", "limit": 50}
    first = client.get(url, params=params)
    assert first.status_code == 200
    assert first.text == _both(session, settings, "cifar10-c", params, None)[1]
    hidden = first.json()["rows"][0]["submission_id"]
    set_moderation(session, hidden, hidden=True)
    after = client.get(url, params=params).json()
    assert hidden not in {r["submission_id"] for r in after["rows"]}
    assert after["total"] == first.json()["total"] - 1
    assert after["rows"][0]["rank"] == 1
