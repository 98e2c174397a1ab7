"""Values kept with the board counter (``models.boards.snapshots.derived``, issue 35 §1): built
once per counter value and key, rebuilt after any committed change of what a board shows, never
kept when the builder says so, and never shared between viewers who see different entries."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from models.boards import snapshots
from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import Role, User
from models.submissions.queries import set_moderation
from tests.support.service_factories import finished_submission, load_tiny, make_user


@pytest.fixture
def entry(session: Session, settings: Settings) -> int:
    load_tiny(session)
    alice, _ = make_user(session, "alice")
    return finished_submission(
        session, user=alice, benchmark=get_benchmark(session, "tiny"), settings=settings, seed=1
    )


def test_a_value_is_built_once_per_counter_value_and_key(session: Session, entry: int) -> None:
    builds: list[str] = []

    def build(label: str) -> str:
        builds.append(label)
        return f"{label}-{len(builds)}"

    first = snapshots.derived(session, ("listing", 1), lambda: build("a"))
    assert snapshots.derived(session, ("listing", 1), lambda: build("a")) == first == "a-1"
    assert snapshots.derived(session, ("listing", 2), lambda: build("b")) == "b-2"  # another key
    set_moderation(session, entry, flagged=True, flag_reason="check")  # moves the counter
    assert snapshots.derived(session, ("listing", 1), lambda: build("a")) == "a-3"
    assert builds == ["a", "b", "a"]

    unkept = [snapshots.derived(session, "busy", lambda: build("c"), keep=lambda _: False)
              for _ in range(2)]  # fmt: skip
    assert unkept == ["c-4", "c-5"], "a value its builder refuses to keep is built every time"
    snapshots.forget()
    assert snapshots.derived(session, ("listing", 1), lambda: build("a")) == "a-6"


def test_viewers_share_a_key_only_when_they_see_the_same_entries(session: Session) -> None:
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    root, _ = make_user(session, "root", Role.ADMIN)
    other_admin = User(id=root.id + 100, name="ops", role=Role.ADMIN)
    keys = {snapshots.viewer_key(v) for v in (None, alice, bob, root)}
    assert len(keys) == 4, "anonymous, each user and the admins see different entries"
    assert snapshots.viewer_key(other_admin) == snapshots.viewer_key(root)  # admins see all
