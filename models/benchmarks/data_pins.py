"""Pinned test-set data: a benchmark definition names exactly the bytes each test set must be.

A definition's ``provenance`` block (defaults for every test set) and each test set's own
``provenance`` (overrides) say how the data was made and which bytes it is; a stage block that
reads images (``repo``/``folder``: PD robustness, Fourier sensitivity, Fourier lens, weather
attack) pins them with its own ``provenance`` the same way (no defaults apply to it):

- ``generator``, ``generator_version``, ``protocol`` (CIFAR-F: ``paper`` or ``reference``),
  ``generation_seed``, ``source`` and ``source_revision`` (the base dataset it was built from):
  descriptive, shown with the benchmark;
- ``sha256``: the SHA-256 of the config's parquet shard
  (``certbench.data.provenance.config_sha256``),
  checked by the worker on the copy it reads (a local Hub-layout folder, or the local copy of a
  Hub repo that ``certbench datasets fetch`` writes);
- ``hub_commit``: a Hub commit id; the worker loads the test set at that revision, and the Hub
  serves a commit's files immutably. When the repo's local copy exists and a ``sha256`` pin can
  verify it, the worker reads the copy instead (``models.benchmarks.sources.locate_source``): the
  hash, not the folder, says which bytes it holds.

Verification applies only where a pin is set (hashes of data that cannot be downloaded where a
definition is written are left unset). A test set whose pin cannot be checked where it is loaded
(a ``sha256`` for a Hub source without ``hub_commit``) fails rather than run unchecked. This
module is light (pydantic only); the check itself runs where images are loaded
(``models.stages.inputs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: What a verified result says about its data (``StageResult.data_hashes["verified"]``).
VERIFIED_SHA256 = "sha256"
VERIFIED_COMMIT = "hub_commit"
UNPINNED = "unpinned"


class DataPin(BaseModel):
    """The ``provenance`` block of a definition or of one test set (all fields optional)."""

    model_config = ConfigDict(extra="forbid")

    generator: str | None = Field(default=None, max_length=64)
    # provenance is stored and compared, not run; its numbers are bounded like every other
    # number of a definition (JSON readers and PostgreSQL's bigint stop at 2⁶³)
    generator_version: Annotated[int, Field(ge=0, le=2**31 - 1)] | str | None = None
    protocol: Literal["paper", "reference"] | None = Field(
        default=None,
        description="CIFAR-F protocol: the paper's equations or the released generate_fft.py",
    )
    generation_seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    source: str | None = Field(default=None, max_length=256)
    source_revision: str | None = Field(default=None, max_length=64)
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    hub_commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = None


def merged_pin(default: DataPin | None, own: DataPin | None) -> dict[str, Any]:
    """A test set's effective provenance: its own fields over the definition's defaults, without
    unset ones (the stored ``TestSet.provenance``)."""
    merged: dict[str, Any] = {}
    for block in (default, own):
        if block is not None:
            merged.update(block.model_dump(exclude_none=True))
    return merged


def pinned_revision(
    revision: str | None, provenance: Mapping[str, Any], *, name: str
) -> str | None:
    """The revision to load: the test set's ``revision``, or its pinned ``hub_commit``.

    Raises ValueError when both are set and differ (the definition contradicts itself).
    """
    commit = provenance.get("hub_commit")
    if commit and revision and revision != commit:
        raise ValueError(
            f"test set {name!r}: revision {revision!r} differs from provenance.hub_commit "
            f"{commit!r}; give one revision"
        )
    return revision or commit
