"""Response and request shapes of the model zoo (``models.submissions.zoo``): published weights of
an entry,
where to download them, and the owner's request to publish or withdraw them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from certbench.data import WEIGHTS_LICENSES
from models.db.entities import Submission
from models.db.states import SubmissionState
from models.submissions.zoo import publicly_downloadable

WEIGHTS_URL = "/api/v1/entries/{submission_id}/weights"
MANIFEST_URL = "/api/v1/entries/{submission_id}/manifest"
LICENSE_HELP = (
    "SPDX identifier of the licence the weights are published under, one of: "
    + ", ".join(WEIGHTS_LICENSES)
)


class WeightsLinkPublic(BaseModel):
    """Where anyone may download an entry's published weights (model zoo)."""

    public: bool = Field(default=True, description="always true: shown only for public weights")
    license: str = Field(description=LICENSE_HELP)
    url: str = Field(description="the safetensors file (application/octet-stream)")
    manifest_url: str = Field(description="the entry's JSON manifest")
    sha256: str = Field(description="SHA-256 of the weights file (hex); also X-Weights-SHA256")
    size_bytes: int

    @classmethod
    def of(cls, submission: Submission) -> WeightsLinkPublic | None:
        """The link when anyone may download the weights, else None."""
        if not publicly_downloadable(submission) or submission.weights_license is None:
            return None
        return cls(
            license=submission.weights_license,
            url=WEIGHTS_URL.format(submission_id=submission.id),
            manifest_url=MANIFEST_URL.format(submission_id=submission.id),
            sha256=submission.artifact.sha256,
            size_bytes=submission.artifact.size_bytes,
        )


class EntryWeightsPublic(BaseModel):
    """What a client needs before it downloads an entry's weights: the benchmark to check, the
    hash to verify, the manifest to build the model from, the licence."""

    submission_id: int
    benchmark: str
    model_name: str
    architecture: str
    sigma: float
    state: SubmissionState
    public: bool = Field(
        description="published by the submitter (false: only its owner and admins may download)"
    )
    license: str | None = Field(description=LICENSE_HELP + "; null when not published")
    sha256: str
    size_bytes: int
    manifest: dict[str, Any]
    weights_url: str
    manifest_url: str

    @classmethod
    def of(cls, submission: Submission) -> EntryWeightsPublic:
        artifact = submission.artifact
        return cls(
            submission_id=submission.id,
            benchmark=submission.benchmark.name,
            model_name=submission.model_name,
            architecture=submission.architecture,
            sigma=submission.sigma,
            state=submission.state,
            public=submission.weights_public,
            license=submission.weights_license,
            sha256=artifact.sha256,
            size_bytes=artifact.size_bytes,
            manifest=dict(artifact.manifest),
            weights_url=WEIGHTS_URL.format(submission_id=submission.id),
            manifest_url=MANIFEST_URL.format(submission_id=submission.id),
        )


WeightsLicense = Literal[WEIGHTS_LICENSES]  # type: ignore[valid-type]


class WeightsPublication(BaseModel):
    """``PATCH /api/v1/submissions/{id}/weights``: publish the weights under a licence, or
    withdraw them. Publishing names the licence every time (an SPDX identifier as spelled in
    the list)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "if": {"properties": {"public": {"const": True}}},
            "then": {"required": ["license"], "properties": {"license": {"type": "string"}}},
        },
    )

    public: bool = Field(
        description="true: anyone may download the weights once the entry has finished (if the "
        "entry itself is public); false: withdraw them"
    )
    license: WeightsLicense | None = Field(
        default=None,
        description=LICENSE_HELP + "; required to publish, optional (and kept) to withdraw",
    )

    @model_validator(mode="after")
    def _license_to_publish(self) -> WeightsPublication:
        if self.public and self.license is None:
            raise ValueError(
                "publishing the weights needs a licence: send e.g. "
                '{"public": true, "license": "CC-BY-4.0"}'
            )
        return self
