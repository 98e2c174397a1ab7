"""Where a test set's images really come from, as the API and the pages state it.

A benchmark definition names a Hub repository for every test set (``repo``) and may point the
workers at a local copy instead (``folder``, which wins when set). Showing the repo alone would
say "uoft-cs/cifar10 (Hub)" for data read from a folder on this server, so every test set carries
its source: a Hub repo with the revision loaded (the pinned commit when the definition pins one),
a local folder identified by the SHA-256 of its content (never by its path, which is this
deployment's business), or a data set this server generates itself (the demo's digits,
``models.benchmarks.generated``), whose ``repo`` is a name only: nothing is published under it.
Only a Hub source gets a Hub link (:attr:`DataSourcePublic.hub_url`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from models.benchmarks.data_pins import pinned_revision
from models.benchmarks.generated import GENERATED, generated_name

#: A Hub dataset's page.
HUB_URL = "https://huggingface.co/datasets/{repo}"

#: Hex digits of a hash or commit shown in a one-line label (the full value is in the fields).
SHORT_HASH = 12
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class DataSourcePublic(BaseModel):
    """Where this server reads a test set's images from."""

    kind: Literal["hub", "local_folder", "generated"] = Field(
        description="hub: downloaded from the Hugging Face Hub; local_folder: a folder on this "
        "server (its path is not published); generated: written on this server by certbench "
        "itself (the demo data), not published anywhere"
    )
    repo: str | None = Field(description="the Hub dataset read (kind hub), else null")
    revision: str | None = Field(
        description="the Hub revision loaded: the pinned commit (provenance.hub_commit) or the "
        "definition's revision; null for the latest revision or a local folder"
    )
    sha256: str | None = Field(
        description="SHA-256 of the config's content that the workers check before using it "
        "(provenance.sha256); null when the definition pins none"
    )
    pinned: bool = Field(
        description="the bytes are fixed: a content hash, or a Hub commit id as revision"
    )
    label: str = Field(
        description="one line for people, e.g. 'local folder (content SHA-256 3f2a…)', "
        "'uoft-cs/cifar10 on the Hub at commit 0b2714…' or 'generated on this server by "
        "`certbench datasets demo` (…)'",
        examples=["uoft-cs/cifar10 on the Hub at commit 0b2714987fbe"],
    )

    @property
    def hub_url(self) -> str | None:
        """The Hub page of the data read, for a Hub source only: a local folder or generated
        data may bear a repo name that nobody published."""
        return HUB_URL.format(repo=self.repo) if self.kind == "hub" else None

    def where(self) -> str:
        """The label without the repo, for a page that names the repo next to it."""
        if self.kind != "hub":
            return self.label
        return "Hub" + self.label.removeprefix(f"{self.repo} on the Hub")

    @classmethod
    def of(
        cls,
        *,
        repo: str,
        folder: str | None,
        revision: str | None,
        provenance: Mapping[str, Any],
        name: str,
    ) -> DataSourcePublic:
        """The source of a test set from its definition fields (``folder`` wins over ``repo``,
        as in ``models.benchmarks.sources.dataset_source``)."""
        sha256 = provenance.get("sha256")
        generated = generated_name(folder)
        if generated is not None:
            return cls(
                kind="generated",
                repo=None,
                revision=None,
                sha256=sha256,
                pinned=sha256 is not None,
                label=f"generated on this server: {GENERATED[generated].description}",
            )
        if folder:
            label = (
                f"local folder (content SHA-256 {sha256[:SHORT_HASH]}…)"
                if sha256
                else "local folder (content not pinned)"
            )
            return cls(
                kind="local_folder",
                repo=None,
                revision=None,
                sha256=sha256,
                pinned=sha256 is not None,
                label=label,
            )
        loaded = pinned_revision(revision, provenance, name=name)
        commit = loaded is not None and _COMMIT.match(loaded) is not None
        if loaded is None:
            where = "latest revision, not pinned"
        elif commit:
            where = f"at commit {loaded[:SHORT_HASH]}"
        else:
            where = f"at revision {loaded}"
        return cls(
            kind="hub",
            repo=repo,
            revision=loaded,
            sha256=sha256,
            pinned=commit or sha256 is not None,
            label=f"{repo} on the Hub {where}" if loaded else f"{repo} on the Hub ({where})",
        )
