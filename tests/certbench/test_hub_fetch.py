"""``certbench datasets fetch``: Hub ids and aliases, where copies go, the pinned revision of
the packaged datasets and the check of their bytes, and a clear failure without network (no
half-written copy left behind).

No test downloads: a stand-in for ``snapshot_download`` writes the real layout of
``uoft-cs/cifar10`` (``plain_text/<split>-00000-of-00001.parquet``), and pins computed over the
written bytes stand in for the real SHA-256 values, which only the real files have.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from certbench.cli.datasets import register
from certbench.data import fetch as hub_fetch
from certbench.data.fetch import default_datasets_dir, fetch_dataset, hub_repo, mirror_path
from certbench.data.pins import CIFAR10, PinnedSource
from certbench.errors import DataSourceError
from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    random_images,
    random_labels,
    write_hub_folder,
)


def test_aliases_and_ids():
    assert hub_repo("cifar10") == "uoft-cs/cifar10"
    assert hub_repo("cifar100") == "uoft-cs/cifar100"
    assert hub_repo("certbench/cifar10-c") == "certbench/cifar10-c"
    for bad in ("a/b/c", "../x", "x/..", "org/"):
        with pytest.raises(DataSourceError, match="not a Hub dataset id"):
            hub_repo(bad)
    with pytest.raises(DataSourceError, match="did you mean cifar10"):
        hub_repo("cifr10")
    assert mirror_path("cifar10", Path("/d")) == Path("/d/uoft-cs/cifar10")


def test_the_default_datasets_dir_follows_the_service_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("CERTBENCH_DATASETS_DIR", raising=False)
    monkeypatch.delenv("CERTBENCH_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_datasets_dir() == (tmp_path / "certbench-data" / "datasets").resolve()
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "data"))
    assert default_datasets_dir() == tmp_path / "data" / "datasets"
    monkeypatch.setenv("CERTBENCH_DATASETS_DIR", str(tmp_path / "elsewhere"))
    assert default_datasets_dir() == tmp_path / "elsewhere"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_ENDPOINT at a local port nobody listens on: every Hub request is refused at once."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")


def test_without_network_the_fetch_fails_clearly(tmp_path: Path, offline_hub: None):
    with pytest.raises(DataSourceError) as caught:
        fetch_dataset("cifar10", tmp_path)
    message = str(caught.value)
    assert "could not download uoft-cs/cifar10" in message
    assert "hf download uoft-cs/cifar10 --repo-type dataset" in message
    assert str(tmp_path / "uoft-cs" / "cifar10") in message  # where to put a copy
    assert not (tmp_path / "uoft-cs" / "cifar10").exists()


def test_an_existing_copy_is_kept(tmp_path: Path, offline_hub: None):
    copy = tmp_path / "certbench" / "cifar10-c"
    copy.mkdir(parents=True)
    fetched = fetch_dataset("certbench/cifar10-c", tmp_path)
    assert fetched.already_there and fetched.path == copy and fetched.verified == ()


def test_an_existing_copy_of_a_pinned_dataset_must_hold_the_pinned_bytes(
    tmp_path: Path, offline_hub: None
):
    copy = tmp_path / "uoft-cs" / "cifar10"
    copy.mkdir(parents=True)
    with pytest.raises(DataSourceError) as caught:
        fetch_dataset("cifar10", tmp_path)
    message = str(caught.value)
    assert f"not the pinned commit {CIFAR10.commit}" in message
    assert "test split: plain_text/test-00000-of-00001.parquet is missing" in message
    assert "`certbench datasets fetch cifar10 --force`" in message
    _write_cifar10_layout(copy)  # the real layout, but not the real bytes
    with pytest.raises(DataSourceError, match=r"has sha256 [0-9a-f]{64}, pinned 841389e6"):
        fetch_dataset("cifar10", tmp_path)


def _write_cifar10_layout(folder: Path) -> None:
    """Both splits of ``uoft-cs/cifar10`` as `hf download` lays them out (tiny, random)."""
    for split, seed in (("train", 1), ("test", 2)):
        write_hub_folder(folder, "plain_text", random_images(4, seed=seed),
                         random_labels(4, 10, seed=seed), class_names=CIFAR10_CLASSES,
                         split=split, data_dir="", image_column="img")  # fmt: skip


def _pin_of(folder: Path) -> PinnedSource:
    """The real commit of ``uoft-cs/cifar10`` with the SHA-256 of the files in ``folder``."""
    files = {split: (path, hub_fetch._sha256(folder / path)) for split, (path, _) in
             CIFAR10.files.items()}  # fmt: skip
    return PinnedSource(CIFAR10.repo, CIFAR10.commit, files)


BRANCH_HEAD = "f" * 40
"""The commit the stand-in Hub resolves a branch name to."""


class FakeHub:
    """The two Hub calls a fetch makes, answered from a prepared folder; records what was asked:
    ``dataset_info`` resolves a revision (a commit id stays itself), ``snapshot_download``
    copies the folder."""

    def __init__(self, served: Path) -> None:
        self.served = served
        self.asked: list[str | None] = []
        self.calls: list[dict[str, Any]] = []

    def dataset_info(self, repo_id: str, *, revision: str | None = None) -> Any:
        from types import SimpleNamespace

        self.asked.append(revision)
        commit = revision if revision and len(revision) == 40 else BRANCH_HEAD
        return SimpleNamespace(id=repo_id, sha=commit)

    def snapshot_download(self, repo_id: str, **kwargs: Any) -> str:
        import shutil

        self.calls.append({"repo_id": repo_id, **kwargs})
        shutil.copytree(self.served, kwargs["local_dir"], dirs_exist_ok=True)
        return str(kwargs["local_dir"])


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    import huggingface_hub

    served = tmp_path / "served"
    _write_cifar10_layout(served)
    hub = FakeHub(served)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda: hub)
    return hub


def test_a_packaged_dataset_is_downloaded_at_its_pinned_commit_and_checked(
    tmp_path: Path, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(hub_fetch, "pinned_source", lambda repo: _pin_of(fake_hub.served))
    fetched = fetch_dataset("cifar10", tmp_path / "datasets")
    assert [(c["repo_id"], c["revision"], c["repo_type"]) for c in fake_hub.calls] == [
        ("uoft-cs/cifar10", "0b2714987fa478483af9968de7c934580d0bb9a2", "dataset")
    ]
    copy = tmp_path / "datasets" / "uoft-cs" / "cifar10"
    assert fetched == hub_fetch.FetchedDataset(
        "uoft-cs/cifar10", copy, already_there=False, revision=CIFAR10.commit,
        verified=("test", "train"),
    )  # fmt: skip
    assert (copy / "plain_text" / "test-00000-of-00001.parquet").is_file()
    assert not copy.with_name("cifar10.partial").exists()
    again = fetch_dataset("cifar10", tmp_path / "datasets")  # kept, and checked again
    assert again.already_there and again.verified == ("test", "train")
    assert len(fake_hub.calls) == 1


def test_downloaded_bytes_that_differ_from_the_pin_are_not_put_in_place(
    tmp_path: Path, fake_hub: FakeHub
):
    with pytest.raises(DataSourceError) as caught:
        fetch_dataset("cifar10", tmp_path / "datasets")
    message = str(caught.value)
    assert f"downloaded uoft-cs/cifar10@{CIFAR10.commit}, but its files are not" in message
    assert "pinned 841389e6f2d64f28bf17310e430aebac20ec3ba611a3c5e231dc93c645ce84de" in message
    assert "pinned 8428b53a88a11ac374111006708df51469e315a22ac6d66470afd9c78d2ae883" in message
    assert not (tmp_path / "datasets" / "uoft-cs" / "cifar10").exists()
    assert not (tmp_path / "datasets" / "uoft-cs" / "cifar10.partial").exists()


def test_another_repo_or_revision_is_downloaded_as_asked_without_a_pin_check(
    tmp_path: Path, fake_hub: FakeHub
):
    other = fetch_dataset("certbench/cifar10-c", tmp_path)
    asked = fetch_dataset("cifar10", tmp_path, revision="refs/pr/3")
    assert fake_hub.asked == [None, "refs/pr/3"]
    assert [c["revision"] for c in fake_hub.calls] == [BRANCH_HEAD, BRANCH_HEAD]  # as resolved
    assert (other.revision, other.verified) == (BRANCH_HEAD, ())
    assert (asked.revision, asked.verified) == (BRANCH_HEAD, ())


def test_the_command_checks_every_name_first_and_reports_failures(
    tmp_path: Path, offline_hub: None
):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    bad = runner.invoke(
        app, ["datasets", "fetch", "cifar10", "nonsense", "--datasets-dir", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "unknown dataset 'nonsense'" in bad.output
    failed = runner.invoke(app, ["datasets", "fetch", "cifar10", "--datasets-dir", str(tmp_path)])
    assert failed.exit_code == 2 and "could not download uoft-cs/cifar10" in failed.output
    (tmp_path / "org" / "set").mkdir(parents=True)
    done = runner.invoke(app, ["datasets", "fetch", "org/set", "--datasets-dir", str(tmp_path)])
    assert done.exit_code == 0 and "org/set: already there" in done.output
    (tmp_path / "uoft-cs" / "cifar100").mkdir(parents=True)
    stale = runner.invoke(app, ["datasets", "fetch", "cifar100", "--datasets-dir", str(tmp_path)])
    assert stale.exit_code == 2 and "datasets fetch cifar100 --force" in stale.output


def test_the_command_prints_the_revision_and_the_splits_checked(
    tmp_path: Path, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(hub_fetch, "pinned_source", lambda repo: _pin_of(fake_hub.served))
    app = typer.Typer()
    register(app)
    args = ["datasets", "fetch", "cifar10", "--datasets-dir", str(tmp_path)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert f"uoft-cs/cifar10@{CIFAR10.commit}: downloaded at" in done.output
    assert "(test, train: sha256 matches the pin)" in done.output


def test_fetch_into_a_definition_folder(tmp_path: Path, offline_hub: None):
    """``--folder``: the copy a test set's ``folder`` names (under the datasets dir), the fix the
    service prints for such a folder."""
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    root = ["--datasets-dir", str(tmp_path)]
    failed = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "b-local", *root])
    assert failed.exit_code == 2 and "could not download x/b" in failed.output
    assert str(tmp_path / "b-local") in " ".join(failed.output.split())  # where a copy goes
    assert not (tmp_path / "b-local").exists()
    (tmp_path / "b-local").mkdir()
    done = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "b-local", *root])
    assert done.exit_code == 0 and f"x/b: already there at {tmp_path / 'b-local'}" in done.output
    two = runner.invoke(app, ["datasets", "fetch", "x/a", "x/b", "--folder", "b", *root])
    assert two.exit_code == 2 and "--folder takes one dataset" in two.output
    climbing = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "../up", *root])
    assert climbing.exit_code == 2 and "without '..'" in climbing.output


def test_demo_into_a_definition_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    neither = runner.invoke(app, ["datasets", "demo"])
    assert neither.exit_code == 2 and "exactly one of --out and --folder" in neither.output
    monkeypatch.setenv("CERTBENCH_DATASETS_DIR", str(tmp_path / "sets"))
    done = runner.invoke(app, ["datasets", "demo", "--folder", "digits"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "sets" / "digits" / "README.md").is_file()
