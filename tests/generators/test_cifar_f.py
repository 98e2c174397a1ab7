"""CIFAR-F generator: both protocols' maths, determinism, the 192-set grid, Hub round trips,
resume after a crash, and agreement with a literal per-image port of the released algorithm."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from certbench.data.sources import load_images
from certbench.errors import DataSourceError, GeneratorError
from certbench.fourier import spectral
from generators import cifar_f as cf
from generators import cifar_f_build as build
from generators import hub, streams
from tests.support.cifar_f_sources import (
    CIFAR10_CLASSES,
    natural_images,
    write_cifar10,
    write_cifar100,
    write_hub_folder,
)

P, R = cf.Protocol.PAPER, cf.Protocol.REFERENCE


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.from_numpy(natural_images(24, seed=3))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("cifar10"), n=24)


def _keys(n: int, key: int = 11) -> np.ndarray:
    return streams.image_keys(key, np.arange(n))


# ------------------------------------------------------------------------------ the maths


@pytest.mark.parametrize("alpha", cf.ALPHAS)
@pytest.mark.parametrize("severity", cf.SEVERITIES)
def test_paper_perturbation_has_l2_norm_eps_before_quantisation(
    images: torch.Tensor, alpha: float, severity: int
) -> None:
    eps = cf.EPS_BY_SEVERITY[severity]
    x_f = cf.paper_perturb(images, cf.paper_mask_rfft(7, alpha), cf.draw_paper(_keys(24)), eps)
    x = images.to(torch.float64) / 255
    norms = torch.linalg.vector_norm((x_f - x).flatten(1), dim=1)
    torch.testing.assert_close(norms, torch.full_like(norms, eps), rtol=1e-12, atol=1e-12)


def test_paper_noise_equals_the_centred_hermitian_formulation(images: torch.Tensor) -> None:
    """The rfft fast path is exactly IFFT(hermitian_symmetrise(δ)) in the centred layout."""
    x = images[:4].to(torch.float64) / 255
    draws = cf.draw_paper(_keys(4))
    noise = cf.paper_noise(images[:4], cf.paper_mask_rfft(5, 2.0), draws)
    # Rebuild δ on the centred grid from the formula, placing each draw at its bin.
    amp = torch.fft.rfft2(x).abs().clamp(20, 200) * cf.paper_mask_rfft(5, 2.0)
    half = torch.polar(amp * (0.8 + 0.4 * draws.amplitude), 2 * np.pi * draws.phase)
    half = spectral.hermitian_rfft_columns(half, 32)
    full = torch.zeros((4, 3, 32, 32), dtype=torch.complex128)
    full[..., :17] = half
    mirror = spectral.mirror_index(32)
    for col in range(17, 32):  # columns -v are the conjugates of columns v
        full[..., :, col] = torch.conj(half[..., mirror, 32 - col])
    centred = torch.fft.fftshift(full, dim=(-2, -1))
    assert torch.equal(spectral.hermitian_symmetrise(centred), centred)
    expected = spectral.ifft2c(centred)
    assert expected.imag.abs().max() < 1e-12
    torch.testing.assert_close(noise, expected.real, rtol=0, atol=1e-12)
    # and the amplitude law holds at the kept bins: |δ| = clip(|F|)·mask·U(0.8, 1.2)
    mask = cf.paper_mask(5, 2.0)
    centred_amp = spectral.fft2c(x).abs().clamp(20, 200) * mask
    _, self_conjugate = spectral.hermitian_half(32)
    ratio = (centred.abs() / centred_amp)[..., ~self_conjugate]  # those keep A·cos(phase)
    assert ratio.min() >= 0.8 - 1e-9
    assert ratio.max() <= 1.2 + 1e-9


def _peak_contrast(profile: torch.Tensor, f_c: int) -> float:
    """Peak of the ring band f_c±1 over the median level away from it (r ≥ 2, |r - f_c| ≥ 3)."""
    radii = torch.arange(len(profile))
    away = profile[(radii >= 2) & ((radii - f_c).abs() >= 3)]
    return float(profile[f_c - 1 : f_c + 2].max() / away.median())


@pytest.mark.parametrize("protocol", [P, R])
def test_radial_spectrum_peaks_at_fc_for_alpha3_and_spreads_for_alpha05(
    images: torch.Tensor, protocol: cf.Protocol
) -> None:
    """Paper: the perturbation's radial spectrum has its global maximum exactly at f_c for α=3.
    Reference: |IFFT| and the [0, 1] clip add a strong low-frequency component (r < 2) and the
    mask is centred one bin off DC, so there the ring shows as a local peak at f_c±1."""
    from generators.cifar_f_card import mean_radial_spectra

    idx = torch.arange(len(images))
    for f_c in (5, 8, 13):
        sharp = mean_radial_spectra(
            images, idx, cf.CifarFSpec(f_c, 3.0, 3), protocol=protocol, key=5
        )
        broad = mean_radial_spectra(
            images, idx, cf.CifarFSpec(f_c, 0.5, 3), protocol=protocol, key=5
        )
        if protocol is P:
            assert int(torch.argmax(sharp)) == f_c
            assert _peak_contrast(sharp, f_c) > 20
            assert _peak_contrast(broad, f_c) < 4
        else:
            assert abs(int(torch.argmax(sharp[2:])) + 2 - f_c) <= 1
            assert _peak_contrast(sharp, f_c) > 2.5
        assert _peak_contrast(sharp, f_c) > 1.5 * _peak_contrast(broad, f_c)


def test_paper_mask_matches_the_formula_and_reference_mask_the_subpixel_rule() -> None:
    mask = cf.paper_mask(4, 2.0)
    assert mask[16, 16] == pytest.approx(1 / 25)  # DC: f = 0, (|0 - 4| + 1)^-2
    assert mask[16, 20] == pytest.approx(1.0)  # f = 4 exactly
    ref = cf.reference_mask(4, 2.0)
    assert ref[15, 19] == 1.0  # centre (15, 15), ring of radius 4
    # bin (15, 15): nearest sub-point (±0.5, ±0.5) lies sqrt(0.5) from the centre
    assert ref[15, 15] == pytest.approx(1 / (1 + 4 - np.sqrt(0.5)) ** 2)


# ------------------------------------------------------------------------------ literal port


def _literal_min_frequency(i: int, j: int, f_c: float) -> float:
    d, d_min = [], 1000.0
    for ii in (i - 0.5, i, i + 0.5):
        for jj in (j - 0.5, j, j + 0.5):
            r = np.sqrt((ii - 15) ** 2 + (jj - 15) ** 2)
            d.append(r - f_c)
            d_min = min(d_min, abs(r - f_c))
    return 0.0 if min(d) * max(d) <= 0 else d_min


def _literal_released(
    x_u8: np.ndarray, f_c: float, alpha: float, eps: float, n_uniform: np.ndarray, phase: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """generate_fft.py, type 'fourier', for one image, with its two random draws injected:
    ``n_uniform`` = np.random.uniform(0.8, 1.2, size=(3, 32, 32)) and
    ``phase`` = np.random.uniform(3, 32, 32) (i.e. 32 values in [3, 32))."""
    mask = np.ones((32, 32))
    for i in range(32):
        for j in range(32):
            mask[i, j] = 1 / (_literal_min_frequency(i, j, f_c) + 1) ** alpha
    x = (torch.from_numpy(x_u8).float() / 255).numpy()  # torchvision ToTensor
    # numpy < 2 (what the release ran on) promoted float32 FFTs to complex128
    spectrum = np.fft.fftshift(np.fft.fft2(x.astype(np.float64)))  # all axes, as released
    n_abs = np.minimum(np.maximum(np.abs(spectrum), 20), 200) * mask * n_uniform
    n_pha = phase * 2 * np.pi
    noise = np.zeros_like(spectrum)
    noise.real = n_abs * np.cos(n_pha)
    noise.imag = n_abs * np.sin(n_pha)
    spectrum += noise
    restored = np.clip(np.abs(np.fft.ifft2(np.fft.ifftshift(spectrum))), 0.0, 1.0)
    delta = restored - x
    delta = delta / np.linalg.norm(delta) * eps
    x_f = delta + x
    return x_f, np.clip((x_f * 255).astype(int), 0, 255)


@pytest.mark.parametrize(("f_c", "alpha", "severity"), [(1, 0.5, 1), (7, 2.0, 2), (16, 3.0, 3)])
def test_reference_protocol_matches_literal_port_of_released_code(
    images: torch.Tensor, f_c: int, alpha: float, severity: int
) -> None:
    eps = cf.EPS_BY_SEVERITY[severity]
    n = 6
    rng = np.random.default_rng(f_c)
    draws = cf.ReferenceDraws(
        amplitude=torch.from_numpy(rng.uniform(0.8, 1.2, size=(n, 3, 32, 32))),
        phase=torch.from_numpy(np.stack([rng.uniform(3, 32, 32) for _ in range(n)])),
    )
    ours = cf.reference_perturb(images[:n], cf.reference_mask(f_c, alpha), draws, eps)
    ours_u8 = cf.quantise_reference(ours)
    for i in range(n):
        lit_float, lit_u8 = _literal_released(
            images[i].numpy(), f_c, alpha, eps, draws.amplitude[i].numpy(), draws.phase[i].numpy()
        )
        np.testing.assert_allclose(ours[i].numpy(), lit_float, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(ours_u8[i].numpy(), lit_u8.astype(np.uint8))


def test_reference_draws_have_the_released_ranges() -> None:
    draws = cf.draw_reference(_keys(50))
    assert draws.amplitude.shape == (50, 3, 32, 32) and draws.phase.shape == (50, 32)
    assert draws.amplitude.min() >= 0.8 and draws.amplitude.max() < 1.2
    assert draws.phase.min() >= 3 and draws.phase.max() < 32
    assert draws.phase.std() == pytest.approx(29 / np.sqrt(12), rel=0.1)


# ------------------------------------------------------------------------------ determinism


@pytest.mark.parametrize("protocol", [P, R])
def test_output_is_identical_for_any_batch_size_and_subset(
    images: torch.Tensor, protocol: cf.Protocol
) -> None:
    idx = torch.arange(100, 100 + len(images))
    spec = cf.CifarFSpec(6, 1.0, 2)
    full = cf.corrupt(images, idx, spec, protocol=protocol, seed=4, batch_size=24)
    for batch_size in (1, 5, 7):
        again = cf.corrupt(images, idx, spec, protocol=protocol, seed=4, batch_size=batch_size)
        assert torch.equal(full, again)
    part = cf.corrupt(images[9:13], idx[9:13], spec, protocol=protocol, seed=4)
    assert torch.equal(part, full[9:13])  # an image's stream depends on its index only
    other_seed = cf.corrupt(images, idx, spec, protocol=protocol, seed=5)
    assert (other_seed != full).float().mean() > 0.5
    other_set = cf.corrupt(images, idx, cf.CifarFSpec(6, 1.0, 3), protocol=protocol, seed=4)
    assert not torch.equal(other_set, full)


# ------------------------------------------------------------------------------ grid & names


def test_grid_has_192_sets_with_unique_dotless_names() -> None:
    specs = cf.grid()
    names = [s.name for s in specs]
    assert len(specs) == 192 and len(set(names)) == 192
    assert all(re.fullmatch(r"fc(0[1-9]|1[0-6])_a(0p5|1|2|3)_s[123]", n) for n in names)
    assert cf.CifarFSpec(5, 2.0, 3).name == "fc05_a2_s3"
    assert {s.eps for s in specs} == {8.0, 10.0, 12.0}
    extra = cf.grid([0.1, 0.3, 0.5], [1], [1], extra_alphas=True)
    assert [s.name for s in extra] == ["fc01_a0p1_s1", "fc01_a0p3_s1", "fc01_a0p5_s1"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alphas": [0.7]}, r"alpha \[0\.7\]"),
        ({"alphas": [0.1]}, "extra-alphas"),
        ({"fcs": [0]}, r"f_c \[0\]"),
        ({"fcs": [17]}, r"f_c \[17\]"),
        ({"severities": [4]}, r"severity \[4\]"),
        ({"severities": []}, "severity is empty"),
    ],
)
def test_grid_rejects_unknown_values(kwargs: dict, match: str) -> None:
    with pytest.raises(GeneratorError, match=match):
        cf.grid(**kwargs)


# ------------------------------------------------------------------------------ sources


def test_source_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(DataSourceError, match="does not exist"):
        build.load_source("cifar10", tmp_path / "missing", revision=None, limit=None)
    with pytest.raises(DataSourceError, match="must have shape"):  # torchvision rows of 16x16
        build.load_source(
            "cifar10", write_cifar10(tmp_path / "tv16", n=4, size=16), revision=None, limit=None
        )
    write_hub_folder(
        tmp_path / "hub16",
        "default",
        natural_images(4, size=16),
        [0, 1, 2, 3],
        class_names=CIFAR10_CLASSES,
    )
    with pytest.raises(GeneratorError, match=r"shape \(3, 16, 16\)"):
        build.load_source("cifar10", tmp_path / "hub16", revision=None, limit=None)
    c100 = write_cifar100(tmp_path / "c100", n=4)
    with pytest.raises(GeneratorError, match="100 classes but --dataset cifar10 needs 10"):
        build.load_source("cifar10", c100, revision=None, limit=None)
    with pytest.raises(GeneratorError, match="dataset='svhn'"):
        build.load_source("svhn", c100, revision=None, limit=None)


# ------------------------------------------------------------------------------ generation


def test_generated_folder_round_trips_through_datasets_and_certbench_data(
    source: Path, tmp_path: Path
) -> None:
    clean = build.load_source("cifar10", source, revision=None, limit=10)
    specs = cf.grid([2.0, 0.5], [5], [3])
    report = build.generate(clean, tmp_path, specs, dataset="cifar10", seed=1, batch_size=4)
    assert report.written == ["fc05_a0p5_s3", "fc05_a2_s3"] and report.images_written == 20
    hub.write_card(
        tmp_path, hub.build_card(configs=report.written, pretty_name="t", body="x", license="other")
    )
    expected = cf.corrupt(clean.images, clean.indices, specs[1], seed=1, dataset="cifar10")
    ds = datasets.load_dataset(str(tmp_path), "fc05_a2_s3", split="test")
    assert len(ds) == 10
    assert ds.features["label"].names == list(CIFAR10_CLASSES)
    row = ds[3]
    assert (row["f_c"], row["alpha"], row["eps"], row["severity"]) == (5, 2.0, 12.0, 3)
    assert row["source_index"] == 3 and row["label"] == int(clean.labels[3])
    np.testing.assert_array_equal(np.asarray(row["image"]), expected[3].permute(1, 2, 0).numpy())
    loaded = load_images(tmp_path, config="fc05_a2_s3")
    assert torch.equal(loaded.images, expected)
    assert torch.equal(loaded.labels, clean.labels) and torch.equal(loaded.indices, clean.indices)
    assert set(loaded.extra) == {"f_c", "alpha", "eps", "severity"}
    assert np.all(loaded.extra["alpha"] == 2.0)


def test_cifar100_keeps_fine_and_coarse_labels(tmp_path: Path) -> None:
    src = write_cifar100(tmp_path / "src", n=6)
    clean = build.load_source("cifar100", src, revision=None, limit=None)
    build.generate(clean, tmp_path / "out", cf.grid([3.0], [2], [1]), dataset="cifar100")
    loaded = load_images(tmp_path / "out", config="fc02_a3_s1")
    assert len(loaded.class_names) == 100 and len(loaded.coarse_class_names or ()) == 20
    assert torch.equal(loaded.coarse_labels, clean.coarse_labels)


@pytest.mark.slow
def test_all_192_configs_written_with_names_and_metadata(source: Path, tmp_path: Path) -> None:
    clean = build.load_source("cifar10", source, revision=None, limit=2)
    specs = cf.grid()
    report = build.generate(clean, tmp_path, specs, dataset="cifar10", protocol=R, seed=9)
    assert len(report.written) == 192
    from certbench.data.sources import list_configs

    assert list_configs(tmp_path) == [s.name for s in specs]
    for spec in specs:
        meta = hub.read_checksum(tmp_path, spec.name)["metadata"]
        assert (meta["f_c"], meta["alpha"], meta["eps"], meta["severity"]) == (
            spec.f_c,
            spec.alpha,
            spec.eps,
            spec.severity,
        )
        assert meta["protocol"] == "reference" and meta["seed"] == 9
        table = pq.read_table(hub.shard_path(tmp_path, spec.name), columns=["f_c", "alpha"])
        assert set(table.column("f_c").to_pylist()) == {spec.f_c}
    readme = (tmp_path / "README.md").read_text()
    assert "reference" in readme and "seed: `9`" in readme and "bibtex" in readme
    assert (tmp_path / "images" / "sample_grid.png").stat().st_size > 1000
    assert (tmp_path / "images" / "radial_spectrum.png").stat().st_size > 1000


# ------------------------------------------------------------------------------ resume


class _Crash(RuntimeError):
    pass


def test_resume_after_a_crash_mid_set(source: Path, tmp_path: Path, monkeypatch) -> None:
    clean = build.load_source("cifar10", source, revision=None, limit=12)
    specs = cf.grid([1.0], [2, 9, 14], [1])
    uninterrupted = tmp_path / "ref"
    build.generate(clean, uninterrupted, specs, dataset="cifar10", batch_size=5, card=False)

    out = tmp_path / "out"

    def crash_mid_second_set(config: str, done: int, total: int) -> None:
        if config == specs[1].name and done == 5:  # after the first batch of set 2
            raise _Crash

    with pytest.raises(_Crash):
        build.generate(
            clean,
            out,
            specs,
            dataset="cifar10",
            batch_size=5,
            progress=crash_mid_second_set,
            card=False,
        )
    assert hub.config_complete(out, specs[0].name)
    assert not hub.config_complete(out, specs[1].name)
    assert not hub.shard_path(out, specs[1].name).exists()

    # a crash while the shard is being written leaves neither shard nor marker nor temp file
    real_write = pq.write_table

    def torn_write(table, where, **kwargs):
        real_write(table.slice(0, 3), where, **kwargs)
        raise _Crash

    monkeypatch.setattr(pq, "write_table", torn_write)
    with pytest.raises(_Crash):
        build.generate(clean, out, specs, dataset="cifar10", batch_size=5, card=False)
    monkeypatch.setattr(pq, "write_table", real_write)
    folder = hub.config_dir(out, specs[1].name)
    assert not folder.exists() or list(folder.iterdir()) == []

    report = build.generate(clean, out, specs, dataset="cifar10", batch_size=5, card=False)
    assert report.skipped == [specs[0].name]
    assert report.written == [specs[1].name, specs[2].name]
    for spec in specs:
        got = pq.read_table(hub.shard_path(out, spec.name)).to_pydict()
        want = pq.read_table(hub.shard_path(uninterrupted, spec.name)).to_pydict()
        assert got == want


def test_tampered_or_foreign_sets_are_regenerated(source: Path, tmp_path: Path) -> None:
    clean = build.load_source("cifar10", source, revision=None, limit=4)
    specs = cf.grid([3.0], [4], [2])
    build.generate(clean, tmp_path, specs, dataset="cifar10", seed=0, card=False)
    assert build.generate(
        clean, tmp_path, specs, dataset="cifar10", seed=0, card=False
    ).skipped == ["fc04_a3_s2"]
    shard = hub.shard_path(tmp_path, "fc04_a3_s2")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert build.generate(
        clean, tmp_path, specs, dataset="cifar10", seed=0, card=False
    ).written == ["fc04_a3_s2"]
    # another seed must not reuse sets made with seed 0
    assert build.generate(
        clean, tmp_path, specs, dataset="cifar10", seed=1, card=False
    ).written == ["fc04_a3_s2"]
    assert hub.read_checksum(tmp_path, "fc04_a3_s2")["metadata"]["seed"] == 1
