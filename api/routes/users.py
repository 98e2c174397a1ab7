"""``/api/v1/me``: who the token belongs to and the quota left."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentUser, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.schemas.user import MePublic, UserPublic
from api.services.submissions import quota

router = APIRouter(tags=["users"], responses=ERROR_RESPONSES)


@router.get("/me", response_model=MePublic)
def me(session: SessionDep, settings: SettingsDep, user: CurrentUser) -> MePublic:
    """The caller's account and quota usage."""
    return MePublic(
        **UserPublic.of(user).model_dump(), quota=quota(session, user, settings=settings)
    )
