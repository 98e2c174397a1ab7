"""What `publish` would upload never names a local path; sources are Hub ids or content hashes.

Every generator (cifar-f, cifar-c, cifar-c-bar, weather, import cifar-c) runs through the CLI on
a source under pytest's absolute temporary folder; then every file of the publish plan (cards,
checksums, parquet shards, figures) is searched for that folder's path, and every text file for
any absolute or home path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from certbench.data.provenance import find_local_paths
from certbench.errors import PublishError
from generators import commands, corruption_commands, hub, hub_publish
from tests.support.cifar_f_sources import write_cifar10

N = 4


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:  # keeps sub-commands as named commands
        pass

    commands.register(cli)
    corruption_commands.register(cli)
    return cli


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("local-source"), n=N)


def write_release(folder: Path) -> Path:
    """A two-corruption stand-in for the official CIFAR-10-C numpy release."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(folder / "labels.npy", np.tile(rng.integers(0, 10, N), 5).astype(np.uint8))
    for name in ("gaussian_noise", "frost"):
        np.save(folder / f"{name}.npy", rng.integers(0, 256, (5 * N, 32, 32, 3), dtype=np.uint8))
    return folder


GENERATORS = {
    "cifar-f": ["generate", "cifar-f", "--alphas", "2", "--fcs", "4", "--severities", "1"],
    "cifar-c": ["generate", "cifar-c", "--corruptions", "fog,frost", "--severities", "1"],
    "cifar-c-bar": ["generate", "cifar-c-bar", "--corruptions", "blue_noise_sample"],
    "weather": ["generate", "weather", "--corruptions", "rain", "--severities", "2"],
}


def published(out: Path) -> list[hub_publish.LocalFile]:
    files = hub_publish.local_files(out)
    assert any(f.path_in_repo == "README.md" for f in files)
    assert any(f.path_in_repo.endswith(hub.CHECKSUM_NAME) for f in files)
    return files


def assert_no_local_path(files: list[hub_publish.LocalFile], *local: Path) -> None:
    for f in files:
        data = f.local.read_bytes()
        for path in local:
            assert str(path).encode() not in data, f"{f.path_in_repo} names {path}"
        if f.local.suffix in (".md", ".json"):
            assert find_local_paths(data.decode()) == [], f.path_in_repo


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_generated_cards_and_checksums_name_no_local_path(
    app: typer.Typer, source: Path, tmp_path: Path, generator: str
) -> None:
    out = tmp_path / "out"
    args = [*GENERATORS[generator], "--dataset", "cifar10", "--source", str(source)]
    if generator == "cifar-c-bar":
        args += ["--severities", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--limit", str(N)])
    assert result.exit_code == 0, result.output
    files = published(out)
    assert_no_local_path(files, source, tmp_path)
    card = (out / "README.md").read_text()
    assert "local torchvision CIFAR folder" in card
    checksum = next(f for f in files if f.path_in_repo.endswith(hub.CHECKSUM_NAME))
    metadata = json.loads(checksum.local.read_text())["metadata"]
    assert metadata["source_sha256"] in card  # the content hash pins the local source
    if generator == "cifar-c":
        assert "24.4 vs 30.8" in card and "weaker" in card  # procedural frost and its gap


def test_imported_release_names_no_local_path(app: typer.Typer, source: Path, tmp_path: Path):
    release = write_release(tmp_path / "CIFAR-10-C")
    out = tmp_path / "out"
    args = ["import", "cifar-c", "--src", str(release), "--out", str(out)]
    result = CliRunner().invoke(
        app, [*args, "--corruptions", "gaussian_noise", "--severities", "1"]
    )
    assert result.exit_code == 0, result.output
    assert_no_local_path(published(out), release, tmp_path)
    assert "official numpy release" in (out / "README.md").read_text()


def test_publish_refuses_a_card_that_names_a_local_path(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    release = write_release(tmp_path / "release")
    out = tmp_path / "out"
    args = ["import", "cifar-c", "--src", str(release), "--out", str(out), "--severities", "1"]
    assert CliRunner().invoke(app, [*args, "--corruptions", "gaussian_noise"]).exit_code == 0
    readme = out / "README.md"
    readme.write_text(readme.read_text() + "\nSource: /home/alice/cifar-10-batches-py\n")
    with pytest.raises(PublishError, match=re.escape("names the local path '/home/alice")):
        hub_publish.publish(out, "my-org/cifar10-c", dry_run=True, log=lambda _: None)


@pytest.mark.parametrize("generator", ["cifar-f", "cifar-c-bar", "weather"])
def test_the_hub_source_is_read_and_recorded_at_the_pinned_commit(
    app: typer.Typer,
    source: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    generator: str,
) -> None:
    """Without --source and --revision, a generator reads uoft-cs/cifar10 at the commit the
    packaged definitions pin, and the card and checksums name that commit (no download: the
    stand-in loader serves the local test source and records what it was asked for)."""
    from certbench.data.pins import CIFAR10
    from certbench.data.sources import load_images
    from generators import cifar_f_build, corruption_sets

    asked: list[tuple[str, str | None]] = []

    def hub_stand_in(name: str, **kwargs: object):
        asked.append((name, kwargs.get("revision")))
        return load_images(source, split="test", subset=kwargs.get("subset"))

    for module in (cifar_f_build, corruption_sets):
        monkeypatch.setattr(module, "load_images", hub_stand_in)
    args = [*GENERATORS[generator], "--dataset", "cifar10", "--limit", str(N)]
    if generator == "cifar-c-bar":
        args += ["--severities", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert asked == [("cifar10", CIFAR10.commit)]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "uoft-cs/cifar10" in card and CIFAR10.commit in card
    other = [*args, "--out", str(tmp_path / "other"), "--revision", "main"]
    assert CliRunner().invoke(app, other).exit_code == 0
    assert asked[-1] == ("cifar10", "main")  # an explicit revision wins
