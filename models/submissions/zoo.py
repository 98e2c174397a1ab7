"""The model zoo: which entries' weights may be downloaded, by whom, and publishing them.

A submitter may publish an entry's weights under an SPDX licence (``certbench.data.licenses``), at
submission or later. Anyone may then download them once the entry is a finished, public and
visible leaderboard entry. Nobody else ever gets the weights of an entry whose submitter did not
publish them: a private or hidden entry of another user answers 404 exactly like a missing one
(``models.submissions.queries.get_visible``), a visible entry whose weights are not published
answers 403. Owners and admins may download the weights they can already see, in any state, as long
as the file is still stored (a rejected upload's bytes are deleted,
``models.submissions.artifacts``).

Only the submitter can publish (it is their licence to grant); an admin can withdraw published
weights (a takedown) but not publish someone else's.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.orm import Session

from models.core.errors import NotFoundError, PermissionDeniedError
from models.core.settings import Settings
from models.db.entities import Role, Submission, User
from models.db.states import SubmissionState
from models.submissions import storage
from models.submissions.intake import check_publication
from models.submissions.queries import get_visible

log = logging.getLogger(__name__)


def publicly_downloadable(submission: Submission) -> bool:
    """Whether anyone, signed in or not, may download this entry's weights."""
    return (
        submission.weights_public
        and submission.weights_license is not None
        and submission.state == SubmissionState.FINISHED
        and not submission.is_private
        and not submission.hidden
    )


def set_publication(
    session: Session,
    submission_id: int,
    *,
    by: User,
    public: bool,
    license: str | None,
) -> Submission:
    """Publish (``public``) or withdraw an entry's weights; ``license`` None keeps the stored
    licence. Commits. Raises NotFoundError (not the caller's), PermissionDeniedError (an admin
    publishing someone else's weights), IntakeError (unknown licence, or none to publish under).
    """
    submission = get_visible(session, submission_id, viewer=by, owner_only=True)
    is_owner = by.id == submission.user_id
    if not is_owner and (public or license is not None):
        raise PermissionDeniedError(
            f"only the submitter of entry {submission_id} can publish its weights or choose "
            "their licence; an admin can only withdraw them (public: false)",
            code="not_owner",
        )
    public, canonical = check_publication(public, license or submission.weights_license)
    submission.weights_public = public
    submission.weights_license = canonical
    session.commit()
    log.info(
        "weights of submission %s %s by %s (licence %s)",
        submission_id,
        "published" if public else "withdrawn",
        by.name,
        canonical,
    )
    return submission


def downloadable(session: Session, submission_id: int, *, viewer: User | None) -> Submission:
    """The submission whose weights ``viewer`` may download.

    Raises NotFoundError for a submission the viewer cannot see at all (another user's private
    or hidden entry: the same answer as a missing one), PermissionDeniedError for a visible
    entry whose weights are not (yet) public.
    """
    submission = get_visible(session, submission_id, viewer=viewer)
    if viewer is not None and (viewer.role == Role.ADMIN or viewer.id == submission.user_id):
        return submission
    if publicly_downloadable(submission):
        return submission
    if not submission.weights_public:
        reason = f"the submitter of entry {submission_id} has not published its weights"
    else:
        reason = (
            f"entry {submission_id} is {submission.state.value}; published weights are served "
            "once the entry has finished"
        )
    raise PermissionDeniedError(reason, code="weights_not_public")


def weights_path(submission: Submission, *, settings: Settings) -> Path:
    """Where the submission's weights file is stored. Raises NotFoundError when its bytes are
    gone (a rejected upload's are deleted) or the file is missing."""
    relpath = submission.artifact.weights_path
    path = storage.resolve(settings.artifacts_dir, relpath) if relpath is not None else None
    if path is None or not path.is_file():
        raise NotFoundError(
            f"the weights of entry {submission.id} are not stored on this server",
            code="weights_missing",
        )
    return path
