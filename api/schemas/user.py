"""Request and response shapes of users and their API tokens (``/api/v1/me``, ``/admin/users``):
who a user is, their daily quotas, and a token shown once at creation. Handlers return the Public
shapes so token hashes never leak."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from models.db.entities import Role, User


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    role: Role = Role.SUBMITTER
    email: str | None = Field(default=None, max_length=254)


class UserPublic(BaseModel):
    id: int
    name: str
    role: Role
    is_active: bool
    created_at: datetime

    @classmethod
    def of(cls, user: User) -> UserPublic:
        return cls(
            id=user.id,
            name=user.name,
            role=user.role,
            is_active=user.is_active,
            created_at=user.created_at,
        )


class QuotaPublic(BaseModel):
    submissions_today: int
    submissions_per_day: int
    unsuccessful_today: int
    unsuccessful_per_day: int
    active: int
    concurrent: int
    forward_passes_today: int = Field(
        description="estimated forward passes charged to your submissions of the last 24 hours "
        "(cancelled or failed runs: the part they computed; rejected uploads and duplicates: "
        "nothing)"
    )
    flops_today: int = Field(
        description="the same charges in FLOPs: each submission's forward passes × its "
        "network's FLOPs per sample (counted on the meta device at intake); what the daily "
        "compute quota counts"
    )
    flops_per_day: int = Field(
        description="the daily compute quota in FLOPs (CERTBENCH_QUOTA_FLOPS_PER_DAY); admins "
        "are exempt"
    )


class MePublic(UserPublic):
    quota: QuotaPublic


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(default="", max_length=64)
    expires_in_days: int | None = Field(default=None, gt=0, le=3650)


class TokenIssued(BaseModel):
    """Returned once at creation: ``token`` is the secret and is not stored anywhere."""

    id: int
    user_id: int
    prefix: str
    label: str
    token: str
    created_at: datetime
    expires_at: datetime | None
