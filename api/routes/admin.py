"""``/api/v1/admin``: users and tokens, moderation (hide, flag, baseline), re-runs, benchmarks.

Every route depends on ``AdminUser``: 401 without a token, 403 for non-admins.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, status

from api.deps import AdminUser, QueueDep, RowId, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.schemas.benchmark import BenchmarkPublic
from api.schemas.submission import ModerationUpdate, RerunRequest, SubmissionPublic
from api.schemas.user import TokenCreate, TokenIssued, UserCreate, UserPublic
from api.services import leaderboards as catalog_service
from api.services import submissions as submission_service
from models.benchmarks.definitions import definition_folders
from models.benchmarks.folders import network_folder_problems
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.errors import BenchmarkDefinitionError
from models.db import accounts
from models.db.base import utcnow
from models.submissions.queries import set_moderation

router = APIRouter(prefix="/admin", tags=["admin"], responses=ERROR_RESPONSES)


@router.post("/users", response_model=UserPublic, status_code=status.HTTP_201_CREATED)
def create_user(session: SessionDep, _admin: AdminUser, body: UserCreate) -> UserPublic:
    """Create a user (409 if the name is taken)."""
    user = accounts.create_user(session, name=body.name, role=body.role, email=body.email)
    return UserPublic.of(user)


@router.get("/users", response_model=list[UserPublic])
def list_users(session: SessionDep, _admin: AdminUser) -> list[UserPublic]:
    """Every user."""
    return [UserPublic.of(u) for u in accounts.list_users(session)]


@router.post(
    "/users/{user_id}/tokens", response_model=TokenIssued, status_code=status.HTTP_201_CREATED
)
def create_token(
    session: SessionDep, _admin: AdminUser, user_id: RowId, body: TokenCreate
) -> TokenIssued:
    """Issue a token for a user; the secret is in this response only."""
    user = accounts.get_user(session, user_id=user_id)
    expires = utcnow() + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    issued = accounts.create_token(session, user=user, label=body.label, expires_at=expires)
    token = issued.token
    return TokenIssued(
        id=token.id,
        user_id=user.id,
        prefix=token.prefix,
        label=token.label,
        token=issued.secret,
        created_at=token.created_at,
        expires_at=token.expires_at,
    )


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(session: SessionDep, _admin: AdminUser, token_id: RowId) -> None:
    """Revoke a token; it stops working at once."""
    accounts.revoke_token(session, token_id=token_id)


@router.patch("/submissions/{submission_id}", response_model=SubmissionPublic)
def moderate(
    session: SessionDep,
    settings: SettingsDep,
    _admin: AdminUser,
    submission_id: RowId,
    body: ModerationUpdate,
) -> SubmissionPublic:
    """Hide an entry, flag it (with a reason shown on the leaderboard), or mark a baseline."""
    submission = set_moderation(session, submission_id, **body.model_dump(exclude_unset=True))
    return submission_service.public(
        session, submission, viewer=_admin, settings=settings, events=True
    )


@router.post(
    "/submissions/{submission_id}/rerun",
    response_model=SubmissionPublic,
    status_code=status.HTTP_202_ACCEPTED,
)
def rerun(
    session: SessionDep,
    settings: SettingsDep,
    queue: QueueDep,
    _admin: AdminUser,
    submission_id: RowId,
    body: RerunRequest | None = None,
) -> SubmissionPublic:
    """Send a finished/failed/rejected/cancelled submission back through the pipeline."""
    fresh = body.fresh if body is not None else False
    return submission_service.rerun(
        session, queue, submission_id, fresh=fresh, settings=settings, admin=_admin
    )


@router.put("/benchmarks", response_model=BenchmarkPublic)
def load_benchmark(
    session: SessionDep,
    settings: SettingsDep,
    _admin: AdminUser,
    definition: Annotated[dict[str, Any], Body(description="a benchmark definition document")],
) -> BenchmarkPublic:
    """Create or update a benchmark from a definition (same format as the packaged files).

    Its data folders must stay in CERTBENCH_DATASETS_DIR: relative, without ``..``, and not
    through a symbolic link out of it (absolute folders only from a file loaded on the service
    machine, ``certbench benchmarks load``); 422 ``bad_benchmark_definition`` naming the field."""
    parsed = parse_definition(json.dumps(definition), source="request body")
    assert settings.datasets_dir is not None  # filled by Settings
    problems = network_folder_problems(definition_folders(parsed), settings.datasets_dir)
    if problems:
        raise BenchmarkDefinitionError("request body: " + "; ".join(problems))
    benchmark = upsert_benchmark(session, parsed)
    return catalog_service.benchmark(session, benchmark.name, viewer=_admin)
