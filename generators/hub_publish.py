"""Publishing a generated Hub-layout folder (``generators.hub``) to a Hugging Face dataset repo.

It uploads exactly the files of that layout (README.md, ``images/**``, ``data/**``) and nothing
else, after checking every config's checksum and that no text file names a local path. Files
the Hub already holds (same LFS sha256 or git blob id) are skipped; the rest go in commits of
bounded size (``plan_publish``), each made against the head that was planned (``publish``), so
a concurrent push fails instead of being overwritten.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled
from huggingface_hub.hf_api import RepoFile

from certbench.data import find_local_paths
from certbench.errors import PublishError
from generators.hub import config_complete, sha256_file


@dataclass(frozen=True)
class LocalFile:
    """A file of the folder to publish, with both hashes the Hub can report for it."""

    path_in_repo: str
    local: Path
    size: int
    sha256: str
    git_sha1: str

    def same_as(self, remote: RepoFile | None) -> bool:
        """True when the Hub already holds these bytes (LFS sha256 or git blob id matches)."""
        if remote is None:
            return False
        if remote.lfs is not None:
            return remote.lfs.sha256 == self.sha256
        return remote.blob_id == self.git_sha1


@dataclass
class PublishPlan:
    """Files to upload grouped into commits of bounded size, and what is left alone."""

    repo: str
    revision: str
    commits: list[list[LocalFile]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    remote_only: list[str] = field(default_factory=list)
    remote_checked: bool = True

    @property
    def uploads(self) -> list[LocalFile]:
        return [f for commit in self.commits for f in commit]


@dataclass
class PublishResult:
    """What :func:`publish` did (or, with ``dry_run``, would do)."""

    plan: PublishPlan
    dry_run: bool
    created_repo: bool = False
    commit_ids: list[str] = field(default_factory=list)
    head: str | None = None
    """The full commit id of the branch after publishing (also when nothing was uploaded): what
    ``certbench benchmarks pin --hub-commit`` takes."""

    def summary(self) -> str:
        plan = self.plan
        size = sum(f.size for f in plan.uploads) / 1e6
        if self.dry_run:
            return (
                f"dry run: would upload {len(plan.uploads)} files ({size:.1f} MB) to "
                f"{plan.repo}@{plan.revision} in {len(plan.commits)} commits; remote state not "
                "checked (no network)."
            )
        return (
            f"{plan.repo}@{plan.revision}: uploaded {len(plan.uploads)} files ({size:.1f} MB) in "
            f"{len(self.commit_ids)} commits"
            + (" (repo created)" if self.created_repo else "")
            + f", skipped {len(plan.unchanged)} identical files"
            + (
                f", left {len(plan.remote_only)} Hub-only files untouched"
                if plan.remote_only
                else ""
            )
            + f". {plan.repo}@{plan.revision} is at commit {self.head}; pin a definition to it "
            f"with `certbench benchmarks pin DEFINITION --data FOLDER --hub-commit {self.head}`."
        )


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file (what the Hub reports for non-LFS files)."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def local_files(folder: str | Path) -> list[LocalFile]:
    """The publishable files: README.md, images/**, data/** (no temp or hidden files).

    Raises:
        PublishError: the folder is not a generated dataset, a config is incomplete or its
            checksum does not verify (an interrupted run must be resumed before publishing), or
            a text file (card, checksum) names a local path.
    """
    root = Path(folder)
    if not (root / "README.md").is_file() or not (root / "data").is_dir():
        raise PublishError(
            f"{str(root)!r} is not a generated dataset folder: expected README.md and data/; "
            "run `certbench generate ...` first."
        )
    broken = [c for c in _config_folders(root) if not config_complete(root, c)]
    if broken:
        raise PublishError(
            f"{len(broken)} config(s) in {str(root)!r} are incomplete or fail their checksum "
            f"(e.g. {broken[:3]}); re-run the generator to finish them before publishing."
        )
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if rel.parts[0] not in ("data", "images") and rel.as_posix() != "README.md":
            continue
        _refuse_local_paths(path, rel)
        files.append(
            LocalFile(
                path_in_repo=rel.as_posix(),
                local=path,
                size=path.stat().st_size,
                sha256=sha256_file(path),
                git_sha1=git_blob_sha1(path),
            )
        )
    return files


TEXT_SUFFIXES = (".md", ".json", ".yaml", ".yml", ".txt", ".csv")


def _refuse_local_paths(path: Path, rel: Path) -> None:
    """Published text must not name local paths (they leak user names and pin nothing)."""
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return
    found = find_local_paths(path.read_text(encoding="utf-8", errors="replace"))
    if found:
        raise PublishError(
            f"{rel.as_posix()} names the local path {found[0]!r}; published files must record "
            "a source by Hub id + revision or content hash. Re-generate the card with this "
            "certbench version (or edit the file) before publishing."
        )


def _config_folders(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data").iterdir() if p.is_dir())


def plan_publish(
    files: Sequence[LocalFile],
    remote: Mapping[str, RepoFile] | None,
    *,
    repo: str,
    revision: str,
    max_commit_bytes: int,
) -> PublishPlan:
    """Group the files that differ from ``remote`` into commits of at most ``max_commit_bytes``.

    ``remote=None`` means "unknown" (dry run): every file is planned. README.md goes in the last
    commit so the card never lists configs whose files are not on the Hub yet.
    """
    if max_commit_bytes < 1:
        raise PublishError(f"max_commit_bytes must be positive, got {max_commit_bytes}.")
    plan = PublishPlan(repo=repo, revision=revision, remote_checked=remote is not None)
    pending = []
    for f in files:
        if remote is not None and f.same_as(remote.get(f.path_in_repo)):
            plan.unchanged.append(f.path_in_repo)
        else:
            pending.append(f)
    pending.sort(key=lambda f: (f.path_in_repo == "README.md", f.path_in_repo))
    batch: list[LocalFile] = []
    used = 0
    for f in pending:
        if batch and used + f.size > max_commit_bytes:
            plan.commits.append(batch)
            batch, used = [], 0
        batch.append(f)
        used += f.size
    if batch:
        plan.commits.append(batch)
    if remote is not None:
        local = {f.path_in_repo for f in files}
        plan.remote_only = sorted(p for p in remote if p not in local and p != ".gitattributes")
    return plan


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level errors of whichever HTTP client huggingface_hub uses."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # that client is simply not installed
        for attr in ("TransportError", "ConnectionError", "Timeout"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


def _publish_errors() -> tuple[type[BaseException], ...]:
    """What a publish may raise that ``_hub_error`` turns into a PublishError."""
    return (*_transport_errors(), HfHubHTTPError, LocalTokenNotFoundError)


def _hub_error(err: BaseException, repo: str) -> PublishError:
    if isinstance(err, OfflineModeIsEnabled):
        return PublishError(
            f"cannot publish {repo!r}: HF_HUB_OFFLINE is set. Unset it on a machine with network "
            "access, or use --dry-run to see the plan."
        )
    if isinstance(err, LocalTokenNotFoundError):
        return PublishError(
            "no Hugging Face token found: run `hf auth login` or set HF_TOKEN, then retry."
        )
    if isinstance(err, HfHubHTTPError):
        status = err.response.status_code if err.response is not None else None
        if status in (401, 403):
            return PublishError(
                f"the Hub refused access to {repo!r} (HTTP {status}): log in with a token that "
                "can write to it (`hf auth login` or HF_TOKEN)."
            )
        if status in (409, 412):
            return PublishError(
                f"{repo!r} changed on the Hub while publishing (HTTP {status}); re-run the "
                "command to publish on top of the new head."
            )
        return PublishError(f"the Hub rejected the upload to {repo!r}: {err}")
    return PublishError(
        f"cannot reach the Hugging Face Hub to publish {repo!r} ({type(err).__name__}: {err}); "
        "check the network (or HF_ENDPOINT), or use --dry-run to see the plan offline."
    )


def publish(
    folder: str | Path,
    repo: str,
    *,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
    max_commit_bytes: int = 1 << 30,
    log: Callable[[str], None] = print,
    api: HfApi | None = None,
) -> PublishResult:
    """Upload a generated folder to the dataset repo ``repo`` (created if needed).

    Files identical on the Hub (same LFS sha256 or git blob id) are skipped; the rest go in
    commits of bounded size, each made with ``parent_commit`` = the head we planned against, so
    a concurrent push makes the commit fail instead of being silently overwritten.

    Raises:
        PublishError: bad folder or repo id, no network, no/invalid token, concurrent change.
    """
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise PublishError(f"--repo {repo!r} must be ORG/NAME, e.g. my-org/cifar10-f.")
    branch = revision or "main"
    files = local_files(folder)
    if dry_run:
        plan = plan_publish(
            files, None, repo=repo, revision=branch, max_commit_bytes=max_commit_bytes
        )
        for i, commit in enumerate(plan.commits, 1):
            log(
                f"commit {i}/{len(plan.commits)}: {len(commit)} files, "
                f"{sum(f.size for f in commit)} bytes"
            )
            for f in commit:
                log(f"  + {f.path_in_repo} ({f.size} bytes, sha256 {f.sha256[:12]})")
        return PublishResult(plan=plan, dry_run=True)
    try:
        return _publish_online(api or HfApi(), files, repo, branch, private, max_commit_bytes, log)
    except _publish_errors() as err:
        raise _hub_error(err, repo) from err


def _publish_online(
    api: HfApi,
    files: list[LocalFile],
    repo: str,
    branch: str,
    private: bool,
    max_commit_bytes: int,
    log: Callable[[str], None],
) -> PublishResult:
    created = False
    if not api.repo_exists(repo, repo_type="dataset"):
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        created = True
        log(f"created dataset repo {repo} ({'private' if private else 'public'})")
    if branch != "main":
        api.create_branch(repo, branch=branch, repo_type="dataset", exist_ok=True)
    head = api.repo_info(repo, repo_type="dataset", revision=branch).sha
    remote = {
        entry.path: entry
        for entry in api.list_repo_tree(repo, repo_type="dataset", revision=head, recursive=True)
        if isinstance(entry, RepoFile)
    }
    plan = plan_publish(
        files, remote, repo=repo, revision=branch, max_commit_bytes=max_commit_bytes
    )
    result = PublishResult(plan=plan, dry_run=False, created_repo=created, head=head)
    log(
        f"{repo}@{branch} is at commit {head}: {len(plan.unchanged)} files already identical "
        f"there; {len(plan.uploads)} to upload"
    )
    for i, commit in enumerate(plan.commits, 1):
        info = api.create_commit(
            repo,
            operations=[CommitOperationAdd(f.path_in_repo, f.local) for f in commit],
            commit_message=f"certbench publish ({i}/{len(plan.commits)}): {len(commit)} files",
            repo_type="dataset",
            revision=branch,
            parent_commit=head,
        )
        head = info.oid
        result.commit_ids.append(head)
        result.head = head
        log(f"commit {i}/{len(plan.commits)} {head}: {len(commit)} files")
    return result
