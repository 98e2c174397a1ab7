"""Hub layout writer, checksums, card and the publishing plan (no network needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.repocard import metadata_load

from certbench.errors import GeneratorError, PublishError
from generators import hub, hub_publish

CLASSES = [f"class{i}" for i in range(10)]


def _write(out: Path, config: str = "fc01_a2_s1", n: int = 6, **overrides) -> Path:
    rng = np.random.default_rng(0)
    kwargs = {
        "images": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        "labels": np.arange(n) % 10,
        "class_names": CLASSES,
        "columns": {
            "severity": np.full(n, 3, np.int32),
            "alpha": np.full(n, 0.5, np.float32),
            "corruption": np.array(["fog"] * n),
        },
        "source_index": np.arange(100, 100 + n),
        "metadata": {"seed": 0},
    }
    kwargs.update(overrides)
    return hub.write_config(out, config, **kwargs)


def test_write_config_round_trips_and_records_a_checksum(tmp_path: Path) -> None:
    images = np.random.default_rng(1).integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    shard = _write(tmp_path, images=images)
    assert shard == tmp_path / "data" / "fc01_a2_s1" / "test-00000-of-00001.parquet"
    record = hub.read_checksum(tmp_path, "fc01_a2_s1")
    assert record["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert record["num_rows"] == 6 and record["metadata"] == {"seed": 0}
    assert hub.config_complete(tmp_path, "fc01_a2_s1", metadata={"seed": 0})
    assert not hub.config_complete(tmp_path, "fc01_a2_s1", metadata={"seed": 1})
    hub.write_card(
        tmp_path,
        hub.build_card(configs=["fc01_a2_s1"], pretty_name="T", body="# T", license="other"),
    )
    ds = datasets.load_dataset(str(tmp_path), "fc01_a2_s1", split="test")
    assert ds.features["label"].names == CLASSES
    assert ds.features["severity"] == datasets.Value("int32")
    assert ds[2]["corruption"] == "fog" and ds[2]["source_index"] == 102
    np.testing.assert_array_equal(np.asarray(ds[2]["image"]), images[2])
    assert pq.ParquetFile(shard).metadata.row_group(0).num_rows <= hub.ROW_GROUP_SIZE


def test_tampered_or_torn_configs_are_not_complete(tmp_path: Path) -> None:
    shard = _write(tmp_path)
    shard.write_bytes(shard.read_bytes()[:-10])
    assert not hub.config_complete(tmp_path, "fc01_a2_s1")
    _write(tmp_path)
    hub.checksum_path(tmp_path, "fc01_a2_s1").write_text("{not json")
    assert not hub.config_complete(tmp_path, "fc01_a2_s1")
    assert not hub.config_complete(tmp_path, "never_written")


def test_failed_write_leaves_no_partial_state(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path)

    def broken(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        _write(tmp_path)
    folder = hub.config_dir(tmp_path, "fc01_a2_s1")
    # the old shard may stay, but without its marker it no longer counts as complete
    assert not hub.checksum_path(tmp_path, "fc01_a2_s1").exists()
    assert not hub.config_complete(tmp_path, "fc01_a2_s1")
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"images": np.zeros((6, 3, 32, 32), np.uint8)}, r"\(N, H, W, 3\)"),
        ({"images": np.zeros((6, 32, 32, 3), np.float32)}, "uint8"),
        ({"labels": np.full(6, 10)}, "does not fit the 10 class names"),
        ({"labels": np.zeros(5, int)}, r"shape \(6,\)"),
        ({"columns": {"label": np.zeros(6)}}, "reserved"),
        ({"columns": {"x": np.zeros(6, complex)}}, "cannot store"),
        ({"columns": {"x": np.zeros(5)}}, r"columns\['x'\] has shape"),
        ({"source_index": np.zeros(6, float)}, "source_index"),
        ({"metadata": {"x": object()}}, "JSON"),
    ],
)
def test_bad_inputs_raise_clear_errors(tmp_path: Path, overrides: dict, match: str) -> None:
    with pytest.raises(GeneratorError, match=match):
        _write(tmp_path, **overrides)
    assert not hub.config_complete(tmp_path, "fc01_a2_s1")


@pytest.mark.parametrize("name", ["fc0.5", "a b", "", "../x", "-x"])
def test_config_names_must_be_dotless_identifiers(tmp_path: Path, name: str) -> None:
    with pytest.raises(GeneratorError, match="not a valid config name"):
        _write(tmp_path, config=name)


def test_card_yaml_lists_every_config(tmp_path: Path) -> None:
    names = ["fc01_a0p5_s1", "fc02_a3_s2"]
    card = hub.build_card(
        configs=names, pretty_name="X-F", body="Body text", license="other", include_all=True
    )
    readme = hub.write_card(tmp_path, card)
    meta = metadata_load(readme)
    assert [c["config_name"] for c in meta["configs"]] == [*names, "all"]
    assert meta["configs"][0]["data_files"] == [
        {"split": "test", "path": "data/fc01_a0p5_s1/test-*.parquet"}
    ]
    assert meta["license"] == "other" and "Body text" in readme.read_text()


# ------------------------------------------------------------------------------ publishing


def _folder(tmp_path: Path) -> Path:
    _write(tmp_path, "fc01_a2_s1")
    _write(tmp_path, "fc02_a2_s1")
    hub.write_card(
        tmp_path,
        hub.build_card(
            configs=["fc01_a2_s1", "fc02_a2_s1"], pretty_name="T", body="x", license="other"
        ),
    )
    hub.figure_path(tmp_path, "grid.png").write_bytes(b"\x89PNG fake figure")
    (tmp_path / "data" / "fc01_a2_s1" / ".partial.tmp").write_bytes(b"junk")
    return tmp_path


def _remote(f: hub_publish.LocalFile, *, lfs: bool, same: bool) -> RepoFile:
    sha = f.sha256 if same else "0" * 64
    blob = f.git_sha1 if same else "1" * 40
    info = {"path": f.path_in_repo, "size": f.size, "oid": blob}
    if lfs:
        info["lfs"] = {"size": f.size, "oid": sha, "pointerSize": 130}
    return RepoFile(**info)


def test_local_files_hash_what_the_hub_compares(tmp_path: Path) -> None:
    files = {f.path_in_repo: f for f in hub_publish.local_files(_folder(tmp_path))}
    assert set(files) == {
        "README.md",
        "images/grid.png",
        "data/fc01_a2_s1/test-00000-of-00001.parquet",
        "data/fc01_a2_s1/checksum.json",
        "data/fc02_a2_s1/test-00000-of-00001.parquet",
        "data/fc02_a2_s1/checksum.json",
    }
    readme = files["README.md"]
    content = (tmp_path / "README.md").read_bytes()
    assert readme.git_sha1 == hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def test_plan_skips_identical_files_and_bounds_commits(tmp_path: Path) -> None:
    files = hub_publish.local_files(_folder(tmp_path))
    by_path = {f.path_in_repo: f for f in files}
    shard1 = by_path["data/fc01_a2_s1/test-00000-of-00001.parquet"]
    remote = {
        shard1.path_in_repo: _remote(shard1, lfs=True, same=True),
        "README.md": _remote(by_path["README.md"], lfs=False, same=True),
        "images/grid.png": _remote(by_path["images/grid.png"], lfs=False, same=False),
        "old/file.txt": RepoFile(path="old/file.txt", size=1, oid="2" * 40),
        ".gitattributes": RepoFile(path=".gitattributes", size=1, oid="3" * 40),
    }
    limit = max(f.size for f in files)
    plan = hub_publish.plan_publish(
        files, remote, repo="o/n", revision="main", max_commit_bytes=limit
    )
    assert sorted(plan.unchanged) == ["README.md", shard1.path_in_repo]
    uploads = [f.path_in_repo for f in plan.uploads]
    assert "images/grid.png" in uploads and len(uploads) == len(files) - 2
    assert all(sum(f.size for f in c) <= limit or len(c) == 1 for c in plan.commits)
    assert len(plan.commits) >= 2
    assert plan.remote_only == ["old/file.txt"]
    # a changed README is always uploaded last, after the data it describes
    remote.pop("README.md")
    plan = hub_publish.plan_publish(
        files, remote, repo="o/n", revision="main", max_commit_bytes=1 << 30
    )
    assert len(plan.commits) == 1 and plan.commits[-1][-1].path_in_repo == "README.md"


def test_publish_refuses_incomplete_folders_and_bad_repo_ids(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with pytest.raises(PublishError, match="ORG/NAME"):
        hub_publish.publish(folder, "no-slash", dry_run=True)
    hub.checksum_path(folder, "fc02_a2_s1").unlink()
    with pytest.raises(PublishError, match="incomplete"):
        hub_publish.publish(folder, "o/n", dry_run=True)
    with pytest.raises(PublishError, match="not a generated dataset folder"):
        hub_publish.publish(tmp_path / "data", "o/n", dry_run=True)


def test_dry_run_plans_every_file_without_network(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lines: list[str] = []
    result = hub_publish.publish(_folder(tmp_path), "o/n", dry_run=True, log=lines.append)
    assert result.dry_run and not result.plan.remote_checked
    assert len(result.plan.uploads) == 6
    assert any("+ README.md" in line for line in lines)
    assert "dry run: would upload 6 files" in result.summary()


@pytest.mark.parametrize("level", [0, 6])
def test_png_encoder_output_decodes_identically(level: int) -> None:
    import io

    from PIL import Image

    images = np.random.default_rng(4).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    images[0] = 7  # flat image: compressible
    for blob, image in zip(hub.encode_png(images, level=level), images, strict=True):
        with Image.open(io.BytesIO(blob)) as decoded:
            decoded.verify()  # chunk CRCs and structure
        with Image.open(io.BytesIO(blob)) as decoded:
            assert decoded.format == "PNG" and decoded.mode == "RGB"
            np.testing.assert_array_equal(np.asarray(decoded), image)
    sizes = [len(b) for b in hub.encode_png(images[:1], level=6)]
    assert sizes[0] < 200  # deflate is really applied at level > 0


class FakeHubApi:
    """The Hub calls ``publish`` makes, answered from memory: a repo is a list of commits, each
    the full tree after it (LFS entries carry the sha256 ``same_as`` compares)."""

    def __init__(self) -> None:
        self.commits: list[tuple[str, dict[str, hub_publish.LocalFile]]] = []

    def repo_exists(self, repo: str, **kwargs: object) -> bool:
        return bool(self.commits)

    def create_repo(self, repo: str, **kwargs: object) -> None:
        self.commits.append((hashlib.sha1(b"initial").hexdigest(), {}))

    def repo_info(self, repo: str, **kwargs: object):
        from types import SimpleNamespace

        return SimpleNamespace(sha=self.commits[-1][0])

    def list_repo_tree(self, repo: str, *, revision: str, **kwargs: object) -> list[RepoFile]:
        tree = dict(self.commits)[revision]
        return [
            RepoFile(path=p, size=f.size, oid=f.git_sha1,
                     lfs={"size": f.size, "oid": f.sha256, "pointerSize": 130})
            for p, f in tree.items()
        ]  # fmt: skip

    def create_commit(self, repo: str, *, operations, parent_commit: str, **kwargs: object):
        from types import SimpleNamespace

        assert parent_commit == self.commits[-1][0]
        tree = dict(self.commits[-1][1])
        for op in operations:
            path = Path(op.path_or_fileobj)
            tree[op.path_in_repo] = hub_publish.LocalFile(
                op.path_in_repo, path, path.stat().st_size, hub.sha256_file(path),
                hub_publish.git_blob_sha1(path),
            )  # fmt: skip
        oid = hashlib.sha1(f"commit {len(self.commits)}".encode()).hexdigest()
        self.commits.append((oid, tree))
        return SimpleNamespace(oid=oid)


def test_publish_names_full_commit_ids_also_when_nothing_changed(tmp_path: Path) -> None:
    folder, api, lines = _folder(tmp_path), FakeHubApi(), []
    first = hub_publish.publish(folder, "o/n", max_commit_bytes=1 << 30, log=lines.append, api=api)
    head = api.commits[-1][0]
    assert len(head) == 40 and first.head == head and first.commit_ids == [head]
    assert f"commit 1/1 {head}: 6 files" in lines
    assert f"o/n@main is at commit {head}" in first.summary()
    assert f"certbench benchmarks pin DEFINITION --data FOLDER --hub-commit {head}" in (
        first.summary()
    )
    lines.clear()
    again = hub_publish.publish(folder, "o/n", max_commit_bytes=1 << 30, log=lines.append, api=api)
    assert again.plan.uploads == [] and again.commit_ids == [] and len(api.commits) == 2
    assert again.head == head and f"o/n@main is at commit {head}" in again.summary()
    assert lines == [f"o/n@main is at commit {head}: 6 files already identical there; 0 to upload"]
