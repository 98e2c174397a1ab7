"""Fourier sensitivity analysis: the basis, the perturbation, records through CERTIFY, heatmaps."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from certbench.errors import CertificationError, RecordsError, SensitivityError
from certbench.fourier.basis import (
    basis_image,
    basis_stack,
    canonical,
    distinct_points,
    grid_offsets,
    mirror,
    perturb,
    perturbation_signs,
    spectrum_support,
)
from certbench.fourier.heatmap import Heatmap, assemble_heatmap, band_means, summarize_heatmap
from certbench.fourier.records import read_sensitivity_records, write_sensitivity_records
from certbench.fourier.sensitivity import (
    PROTOCOLS,
    SensitivityRecord,
    get_protocol,
    protocol_from_dict,
    sensitivity_records,
)
from certbench.fourier.spectral import BAND_EDGES, frequency_band
from certbench.smoothing.core import certify

SIZE = 32
ALL_CELLS = [(i, j) for i in range(-16, 16) for j in range(-16, 16)]
SELF_MIRRORED = {(0, 0), (0, -16), (-16, 0), (-16, -16)}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscribing the shared CPU cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- basis


def test_every_basis_image_has_unit_norm_and_its_two_element_spectrum() -> None:
    for point in ALL_CELLS:
        u = basis_image(point, SIZE)
        assert u.dtype == torch.float64 and u.shape == (SIZE, SIZE)
        assert float(u.norm()) == pytest.approx(1.0, abs=1e-12), point
        expected = {point} if point in SELF_MIRRORED else {point, mirror(point, SIZE)}
        assert len(expected) == (1 if point in SELF_MIRRORED else 2)
        assert spectrum_support(u) == expected, point
        assert torch.equal(u, basis_image(mirror(point, SIZE), SIZE)), point


def test_distinct_basis_images_are_orthonormal() -> None:
    points = distinct_points(SIZE)
    flat = basis_stack(points, SIZE).reshape(len(points), -1)
    gram = flat @ flat.T
    assert torch.allclose(gram, torch.eye(len(points), dtype=torch.float64), atol=1e-12)


def test_basis_matches_the_closed_form_of_yin_et_al() -> None:
    """sqrt(d²)·Re(IFFT) of 0.5±0.5j at a mirror pair is (cos θ − sin θ)/d, θ = 2π(im + jn)/d."""
    m, n = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    for i, j in [(3, 5), (-7, 2), (-16, 9), (0, -1), (-16, -16), (0, 0)]:
        rep = canonical((i, j), SIZE)
        theta = 2 * math.pi * (rep[0] * m + rep[1] * n).double() / SIZE
        closed = (torch.cos(theta) - torch.sin(theta)) / SIZE
        assert torch.allclose(basis_image((i, j), SIZE), closed, atol=1e-12)


def test_distinct_points_cover_the_grid_once_per_mirror_pair() -> None:
    for stride, count in ((1, 514), (2, 130)):
        points = distinct_points(SIZE, stride)
        assert len(points) == count == len(set(points))
        offsets = set(grid_offsets(SIZE, stride).tolist())
        cells = {c for p in points for c in (p, mirror(p, SIZE))}
        assert cells == {(i, j) for i in offsets for j in offsets}
        assert all(canonical(p, SIZE) == p for p in points)
    assert grid_offsets(SIZE, 2).tolist() == list(range(-16, 16, 2))
    assert 0 in grid_offsets(SIZE, 3) and -16 not in grid_offsets(SIZE, 3)


def test_points_off_the_grid_are_clear_errors() -> None:
    with pytest.raises(SensitivityError, match=r"\[-16, 15\]"):
        basis_image((16, 0), SIZE)
    with pytest.raises(SensitivityError, match="stride"):
        grid_offsets(SIZE, 0)


def test_band_edges_are_thirds_of_nyquist() -> None:
    assert pytest.approx((16 / 3, 32 / 3)) == BAND_EDGES
    assert [frequency_band(f) for f in (0, 5.3, 16 / 3, 10.6, 32 / 3, 22.7)] == [
        "low", "low", "mid", "mid", "high", "high",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- perturbation


def test_each_channel_moves_by_epsilon_along_the_basis_image() -> None:
    x = torch.rand(6, 3, SIZE, SIZE)
    u = basis_image((2, -9), SIZE)
    for mode in ("independent", "shared"):
        signs = perturbation_signs((2, -9), range(6), channels=3, mode=mode, seed=1)
        assert set(np.unique(signs)) <= {-1, 1}
        delta = (perturb(x, u, signs, 4.0) - x).double()
        assert torch.allclose(delta.norm(dim=(-2, -1)), torch.full((6, 3), 4.0).double(), atol=1e-4)
        expected = 4.0 * torch.as_tensor(signs, dtype=torch.float64)[:, :, None, None] * u
        assert torch.allclose(delta, expected, atol=1e-6)
        if mode == "shared":
            assert (signs == signs[:, :1]).all()
    independent = perturbation_signs((2, -9), range(40), channels=3, mode="independent", seed=1)
    assert (independent != independent[:, :1]).any()  # channels do get their own signs


def test_signs_depend_only_on_seed_point_and_image() -> None:
    both = perturbation_signs((1, 1), [4, 9], channels=3, mode="independent", seed=5)
    alone = perturbation_signs((1, 1), [9], channels=3, mode="independent", seed=5)
    assert np.array_equal(both[1:], alone)
    other = [perturbation_signs((1, 1), range(64), channels=3, mode="independent", seed=s)
             for s in (5, 6)]  # fmt: skip
    assert not np.array_equal(*other)


def test_certify_accepts_perturbed_inputs_only_when_asked() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 3))
    x = torch.full((1, 3, 4, 4), 1.1)
    with pytest.raises(CertificationError, match=r"\[0, 1\]"):
        certify(model, x, [0], sigma=0.25, n0=5, n=10)
    assert len(certify(model, x, [0], sigma=0.25, n0=5, n=10, check_range=False)) == 1
    with pytest.raises(CertificationError, match="NaN"):
        certify(model, x * float("nan"), [0], sigma=0.25, n0=5, n=10, check_range=False)


# ----------------------------------------------------------------------------- one-frequency model


class OneFrequency(nn.Module):
    """Linear, 3 classes: l0 = 2, l1 = s, l2 = −s with s = Σ_c ⟨U_p, x_c⟩.

    Class 0 wins iff |s| < 2. Images orthogonal to U_p are class 0; ±4·U_p on any channel signs
    makes |s| ≥ 4, and every other basis image leaves s unchanged (orthogonality).
    """

    def __init__(self, point: tuple[int, int]) -> None:
        super().__init__()
        u = basis_image(point, SIZE).float()
        self.linear = nn.Linear(3 * SIZE * SIZE, 3)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.weight[1] = u.repeat(3, 1, 1).flatten()
            self.linear.weight[2] = -u.repeat(3, 1, 1).flatten()
            self.linear.bias.copy_(torch.tensor([2.0, 0.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.reshape(len(x), -1))


def orthogonal_images(point: tuple[int, int], count: int) -> torch.Tensor:
    """Images around 0.5 with no component along U_point (per channel), inside [0, 1]."""
    u = basis_image(point, SIZE)
    gen = torch.Generator().manual_seed(0)
    x = 0.5 + 0.05 * torch.randn(count, 3, SIZE, SIZE, generator=gen, dtype=torch.float64)
    x -= (x * u).sum(dim=(-2, -1), keepdim=True) * u
    assert float(x.min()) >= 0 and float(x.max()) <= 1
    return x.float()


def low_cells(values: np.ndarray, frequencies: np.ndarray, below: float) -> set[tuple[int, int]]:
    return {(int(frequencies[a]), int(frequencies[b])) for a, b in np.argwhere(values < below)}


def test_base_map_of_a_one_frequency_model_is_low_exactly_at_its_point_and_mirror() -> None:
    point = (3, 5)
    x = orthogonal_images(point, 4)
    protocol = PROTOCOLS["paper"]
    records = sensitivity_records(
        OneFrequency(point), x, [0] * 4, range(4), protocol.points(), protocol, sigma=None
    )
    assert len(records) == 514 * 4 and all(r.certified is None for r in records)
    heatmap = assemble_heatmap(records)
    assert heatmap.acr is None and (heatmap.images == 4).all()
    assert low_cells(heatmap.base_accuracy, heatmap.frequencies, 1.0) == {(3, 5), (-3, -5)}
    assert heatmap.base_accuracy[19, 21] == heatmap.base_accuracy[13, 11] == 0.0
    summary = summarize_heatmap(heatmap)
    assert summary["base_accuracy"]["min"] == {"value": 0.0, "point": [-3, -5]}
    assert summary["base_accuracy"]["bands"]["low"] == 1.0  # |(3, 5)| = 5.83 is mid
    assert summary["base_accuracy"]["bands"]["mid"] < 1.0


def test_smoothed_map_of_a_one_frequency_model_is_low_exactly_at_its_point_and_mirror() -> None:
    point = (4, -6)
    x = orthogonal_images(point, 2)
    protocol = get_protocol("quick", n0=10, n=40)
    records = sensitivity_records(
        OneFrequency(point), x, [0, 0], [0, 1], protocol.points(), protocol, sigma=0.25
    )
    heatmap = assemble_heatmap(records, stride=2)
    assert heatmap.acr is not None and heatmap.accuracy is not None
    assert low_cells(heatmap.acr, heatmap.frequencies, 1e-9) == {(4, -6), (-4, 6)}
    assert low_cells(heatmap.base_accuracy, heatmap.frequencies, 1.0) == {(4, -6), (-4, 6)}
    assert all(r.certified.n == 40 and r.certified.n0 == 10 for r in records)
    assert np.nanmin(np.where(heatmap.acr > 0, heatmap.acr, np.nan)) > 0.2


# ----------------------------------------------------------------------------- determinism


def small_cnn() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(16, 4),
    )  # fmt: skip


def comparable(records: list[SensitivityRecord]) -> list[tuple]:
    """Records without wall-clock seconds, sorted by (point, image)."""
    out = []
    for r in records:
        c = None if r.certified is None else replace(r.certified, seconds=0.0)
        out.append((r.u, r.v, r.index, replace(r, certified=c)))
    return sorted(out, key=lambda t: t[:3])


def test_records_do_not_depend_on_sharding_or_batch_size() -> None:
    model = small_cnn()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(5, 3, SIZE, SIZE, generator=gen)
    labels, indices = [0, 1, 2, 3, 1], [10, 20, 30, 40, 50]
    points = [(0, 0), (1, 2), (-16, 5), (7, -3), (15, 15)]
    protocol = get_protocol("paper", n0=8, n=30)
    kw = {"sigma": 0.5, "test_set": "cifar10/test", "seed": 7}
    whole = sensitivity_records(model, x, labels, indices, points, protocol, batch_size=64, **kw)
    assert len(whole) == 25
    shards = []
    mirrored = [mirror(p, SIZE) for p in points[1:3]]  # same basis images, other cells
    plan = [([points[3], points[0]], [4, 1, 0]), ([points[3], points[0]], [2, 3]),
            ([*mirrored, points[4]], [0, 1, 2, 3, 4])]  # fmt: skip
    for pts, rows in plan:
        shards += sensitivity_records(
            model, x[rows], [labels[r] for r in rows], [indices[r] for r in rows], pts, protocol,
            batch_size=7, **kw,
        )  # fmt: skip
    assert comparable(shards) == comparable(whole)
    other_seed = sensitivity_records(
        model, x, labels, indices, points, protocol, **{**kw, "seed": 8}
    )
    assert comparable(other_seed) != comparable(whole)


def test_paper_and_quick_protocols_differ_only_in_their_parameters() -> None:
    model = small_cnn()
    x = torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    common = {"n0": 5, "n": 20, "images": 3, "skip": 1, "stride": 8}
    paper, quick = get_protocol("paper", **common), get_protocol("quick", **common)
    assert paper.name == "paper+custom" and "not the paper" in paper.description
    assert paper.points() == quick.points() and len(paper.points()) == 10
    runs = [
        sensitivity_records(model, x, [0, 1, 2], [0, 1, 2], p.points(), p, sigma=0.25)
        for p in (paper, quick)
    ]
    assert comparable(runs[0]) == comparable(runs[1])


def test_shipped_protocols() -> None:
    paper, quick = PROTOCOLS["paper"], PROTOCOLS["quick"]
    assert (paper.n0, paper.n, paper.alpha, paper.images, paper.stride, paper.epsilon) == (
        100, 100_000, 0.001, 200, 1, 4.0,
    )  # fmt: skip
    assert paper.forward_passes() == 514 * 200 * 100_100
    assert quick.forward_passes() == 130 * 100 * 10_100 and "NOT the paper" in quick.description
    with pytest.raises(SensitivityError, match="unknown; use one of"):
        get_protocol("fast")
    with pytest.raises(SensitivityError, match="stride"):
        protocol_from_dict({"name": "x", "stride": 0})


# ----------------------------------------------------------------------------- heatmap, files


def fake_record(point: tuple[int, int], index: int, correct: bool) -> SensitivityRecord:
    return SensitivityRecord(
        u=point[0], v=point[1], index=index, label=0, signs=(1, -1, 1), epsilon=4.0,
        base_prediction=0 if correct else 1, base_correct=correct,
    )  # fmt: skip


def test_assembly_refuses_overlapping_shards_and_off_grid_records() -> None:
    records = [fake_record((2, 2), 0, True), fake_record((-2, -2), 0, True)]
    with pytest.raises(SensitivityError, match="appears twice"):
        assemble_heatmap(records)
    with pytest.raises(SensitivityError, match="stride-2 grid"):
        assemble_heatmap([fake_record((1, 2), 0, True)], stride=2)
    partial = assemble_heatmap([fake_record((2, 2), 0, False), fake_record((2, 2), 1, True)])
    assert partial.base_accuracy[18, 18] == partial.base_accuracy[14, 14] == 0.5
    assert np.isnan(partial.base_accuracy).sum() == 1024 - 2
    as_json = partial.to_dict()
    assert as_json["base_accuracy"][18][18] == 0.5 and as_json["base_accuracy"][0][0] is None


def test_band_means_follow_the_radial_frequency_of_each_cell() -> None:
    freqs = grid_offsets(SIZE)
    radial = np.hypot(freqs[:, None], freqs[None, :])
    empty = np.zeros((32, 32))
    heatmap = Heatmap(SIZE, freqs, radial, None, None, empty)
    means = band_means(heatmap, radial)
    for band, (lo, hi) in {
        "low": (0, 16 / 3),
        "mid": (16 / 3, 32 / 3),
        "high": (32 / 3, 99),
    }.items():
        cells = radial[(radial >= lo) & (radial < hi)]
        assert means[band] == pytest.approx(cells.mean())
    assert means["low"] < means["mid"] < means["high"]


def test_records_round_trip_through_parquet(tmp_path) -> None:
    model = small_cnn()
    x = torch.rand(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    protocol = get_protocol("paper", n0=4, n=12)
    smoothed = sensitivity_records(model, x, [0, 3], [5, 6], [(1, 1), (0, 0)], protocol, sigma=0.5)
    base = sensitivity_records(model, x, [0, 3], [5, 6], [(1, 1)], protocol, sigma=None)
    for records in (smoothed, base):
        path = write_sensitivity_records(records, tmp_path / "r.parquet", {"seed": 0})
        assert read_sensitivity_records(path) == records
    with pytest.raises(RecordsError, match="missing columns"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"u": [1]}), tmp_path / "foreign.parquet")
        read_sensitivity_records(tmp_path / "foreign.parquet")


def test_heatmap_figures_are_written_as_png_and_svg(tmp_path) -> None:
    """The CLI's map files come from the web pages' spec (``certbench.figures``)."""
    from certbench.figures import fourier_heatmap_figure, save

    freqs = grid_offsets(SIZE, 2)
    values = np.linspace(0, 1, 256).reshape(16, 16)
    values[0, 0] = np.nan
    heatmap = Heatmap(SIZE, freqs, values, values * 0.8, values, np.full((16, 16), 4))
    spec = fourier_heatmap_figure(heatmap, kind="acr", name="model (#1)", epsilon=4.0)
    png, svg = save(spec, tmp_path / "acr")
    assert png.read_bytes().startswith(b"\x89PNG") and svg.suffix == ".svg"
    text = svg.read_text()
    assert "ACR (ℓ2 radius)" in text and "cycles/image" in text and text.count("<svg") == 1
    base = fourier_heatmap_figure(heatmap, kind="base_accuracy", name="m", epsilon=4.0)
    scale = base["layer"][1]["encoding"]["color"]["scale"]
    assert scale["domain"] == [0.0, 1.0] and scale["domainMid"] == 0.5
    with pytest.raises(ValueError, match="no 'nope' map"):
        fourier_heatmap_figure(heatmap, kind="nope", name="m", epsilon=4.0)


def test_bad_inputs_are_clear_errors() -> None:
    model, protocol = small_cnn(), PROTOCOLS["quick"]
    x = torch.rand(2, 3, SIZE, SIZE)
    run = {"protocol": protocol, "sigma": None}
    with pytest.raises(SensitivityError, match=r"in \[0, 1\]"):
        sensitivity_records(model, x * 255, [0, 1], [0, 1], [(0, 2)], **run)
    with pytest.raises(SensitivityError, match="label 7 is out of range for a model with 4"):
        sensitivity_records(model, x, [0, 7], [0, 1], [(0, 2)], **run)
    with pytest.raises(SensitivityError, match="given twice"):
        sensitivity_records(model, x, [0, 1], [0, 1], [(0, 2), (0, -2)], **run)
    with pytest.raises(SensitivityError, match="distinct"):
        sensitivity_records(model, x, [0, 1], [3, 3], [(0, 2)], **run)
