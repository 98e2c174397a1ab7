"""The model zoo from Python against the real served app: ``certbench.client.zoo.download`` and
``load_model`` fetch published weights, verify their SHA-256 (a corrupted file on the server or
in the cache is refused), return the model the service evaluated, and never give anyone else's
unpublished weights."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from certbench.client import Client, HashMismatchError, NotFound, PermissionDenied
from certbench.client.zoo import ZooError, download, load_model
from certbench.nets.architectures import build_classifier
from models.db.engine import session_scope
from models.db.entities import Submission
from models.submissions import storage
from tests.support.client import Live, model_files

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def _published_entry(live: Live, folder: Path, *, seed: int = 0, **flags: object) -> int:
    """A finished entry of alice with her weights published under MIT (unless ``flags`` say
    otherwise)."""
    weights, manifest_path = model_files(folder, seed=seed)
    options = {"weights_public": True, "weights_license": "MIT", **flags}
    with Client(live.url, live.alice) as alice:
        created = alice.submit(weights, manifest_path, **options)  # type: ignore[arg-type]
    live.finish(created.id)
    return created.id


def _stored_path(live: Live, entry: int) -> Path:
    with session_scope(live.settings) as session:
        relpath = session.get_one(Submission, entry).artifact.weights_path
        return storage.resolve(live.settings.artifacts_dir, relpath)


def test_load_model_returns_the_evaluated_model(live: Live, tmp_path: Path):
    entry = _published_entry(live, tmp_path / "upload", seed=3)
    model = load_model("tiny", entry, server=live.url)
    torch.manual_seed(3)  # the model whose weights service_factories.weights_bytes(3) saved
    original = build_classifier("cifar_resnet20", num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    original.eval()
    images = torch.rand((4, 3, 32, 32), generator=torch.Generator().manual_seed(1))
    assert not model.training
    with torch.no_grad():
        assert torch.equal(model(images), original(images))
    with pytest.raises(ZooError, match="benchmark 'tiny', not 'cifar10'"):
        load_model("cifar10", entry, server=live.url)


def test_download_verifies_and_reuses_the_cache(live: Live, tmp_path: Path):
    entry = _published_entry(live, tmp_path / "upload")
    stored = _stored_path(live, entry).read_bytes()
    with Client(live.url) as anonymous:
        first = download(entry, client=anonymous)
        assert first.downloaded and first.weights.read_bytes() == stored
        assert first.weights.name == f"{hashlib.sha256(stored).hexdigest()}.safetensors"
        assert first.entry.license == "MIT" and first.entry.benchmark == "tiny"
        again = download(entry, client=anonymous)
        assert not again.downloaded and again.weights == first.weights
        first.weights.write_bytes(b"tampered" + stored[8:])
        repaired = download(entry, client=anonymous)
        assert repaired.downloaded and repaired.weights.read_bytes() == stored
        out = download(entry, client=anonymous, out=tmp_path / "mine")
    assert out.weights == tmp_path / "mine" / f"tiny-entry-{entry}.safetensors"
    assert out.manifest.read_text().count('"cifar_resnet20"') == 1


def test_a_corrupted_download_is_refused_and_not_kept(live: Live, tmp_path: Path):
    entry = _published_entry(live, tmp_path / "upload")
    path = _stored_path(live, entry)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # bit rot in the server's storage: same size, other bytes
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    with Client(live.url) as anonymous, pytest.raises(HashMismatchError) as err:
        download(entry, client=anonymous, out=out)
    assert "corrupted" in str(err.value) and str(entry) in str(err.value)
    assert not out.exists() or list(out.iterdir()) == []
    with pytest.raises(HashMismatchError):
        load_model("tiny", entry, server=live.url)


def test_unpublished_and_private_weights_are_refused_to_others(live: Live, tmp_path: Path):
    unpublished = _published_entry(
        live, tmp_path / "a", seed=1, weights_public=False, weights_license=None
    )
    private = _published_entry(live, tmp_path / "b", seed=2, private=True)
    for token in (None, live.bob):
        with Client(live.url, token) as other:
            with pytest.raises(PermissionDenied) as refused:
                download(unpublished, client=other, out=tmp_path / "x")
            assert refused.value.code == "weights_not_public"
            with pytest.raises(NotFound):
                download(private, client=other, out=tmp_path / "x")
            with pytest.raises(NotFound):
                other.download_weights(private, tmp_path / "x" / "w", sha256="0" * 64)
    assert not (tmp_path / "x").exists() or list((tmp_path / "x").iterdir()) == []
    with Client(live.url, live.alice) as owner:
        own = download(unpublished, client=owner, out=tmp_path / "own")
        assert own.entry.license is None and own.weights.is_file()
        assert load_model("tiny", private, client=owner) is not None
