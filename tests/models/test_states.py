"""The submission state machine table."""

from __future__ import annotations

import itertools

from models.db.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    SubmissionState,
    can_transition,
)

S = SubmissionState


def test_happy_path_is_legal():
    path = [S.SUBMITTED, S.VALIDATING, S.QUEUED, S.RUNNING, S.FINISHED]
    assert all(can_transition(a, b) for a, b in itertools.pairwise(path))


def test_every_active_state_can_be_cancelled_and_failed():
    for state in ACTIVE_STATES:
        assert can_transition(state, S.CANCELLED)
        assert can_transition(state, S.FAILED)


def test_terminal_states_only_rerun():
    for state in TERMINAL_STATES:
        assert TRANSITIONS[state] <= {S.SUBMITTED}
    assert TRANSITIONS[S.DUPLICATE] == frozenset()
    assert not can_transition(S.FINISHED, S.RUNNING)
    assert not can_transition(S.QUEUED, S.REJECTED)


def test_table_covers_every_state():
    assert set(TRANSITIONS) == set(SubmissionState)
    assert set(SubmissionState) == ACTIVE_STATES | TERMINAL_STATES
