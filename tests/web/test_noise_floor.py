"""Noise floors on difference maps (issue 26 §3). Two runs of one model differ per cell only by
their secret seeds (each image's perturbation sign at each grid point, the smoothing noise), so
a difference map of two seeds of one model must show no significant cell: with the family-wise
control stated on the page, no cell is marked in at least 95 % of simulated comparisons — paired
over shared images (accuracy and ACR maps) and from binomial intervals (different images). A real
difference is still found, and the compare page's difference maps carry the marks and the
noise floor in their caption."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from api.schemas.result import ResultsPublic, StageResultPublic
from api.web.stages import fourier_sensitivity as section
from certbench.figures import cell_outcomes, paired_cell_tests, unpaired_cell_tests
from certbench.fourier import SensitivityRecord, assemble_heatmap, summarize_heatmap
from certbench.fourier.grid import distinct_points
from certbench.fourier.records import write_sensitivity_records

SIZE, STRIDE, IMAGES, SIMULATIONS = 32, 1, 100, 200
POINTS = np.array(distinct_points(SIZE, STRIDE))
FREQS = np.arange(-SIZE // 2, SIZE // 2)


class Model:
    """A fixed classifier's outcomes at every (grid point, image) under each perturbation sign:
    which of the two a run sees is drawn from its seed, as in the stage (one sign per image and
    point). Low frequencies hurt more, and images differ in difficulty."""

    def __init__(self, rng: np.random.Generator, shift: np.ndarray | None = None) -> None:
        radius = np.hypot(POINTS[:, 0], POINTS[:, 1])[:, None]
        easy = rng.normal(0, 1.2, size=(1, IMAGES))
        logit = 0.4 + 0.12 * radius + easy + (0 if shift is None else shift[:, None])
        p = 1 / (1 + np.exp(-logit))
        self.correct = rng.random((2, *p.shape)) < p  # outcome under sign +, sign −
        self.radius = np.where(self.correct, rng.uniform(0.05, 0.9, self.correct.shape), 0.0)

    def run(self, seed: int, kind: str) -> np.ndarray:
        """A run's per-image values on the grid (K, K, images), mirrors filled."""
        sign = np.random.default_rng(seed).integers(0, 2, size=self.correct.shape[1:])
        chosen = self.correct if kind == "accuracy" else self.radius
        values = np.take_along_axis(chosen, sign[None], axis=0)[0]
        u = np.repeat(POINTS[:, 0], IMAGES)
        v = np.repeat(POINTS[:, 1], IMAGES)
        index = np.tile(np.arange(IMAGES), len(POINTS))
        grid, _ = cell_outcomes(u, v, index, values.ravel().astype(float), FREQS, SIZE)
        return grid


def _false_alarms(kind: str) -> float:
    rng = np.random.default_rng(2026)
    marked = 0
    for k in range(SIMULATIONS):
        model = Model(rng)
        a, b = model.run(2 * k, kind), model.run(2 * k + 1, kind)
        tests = paired_cell_tests(b, a, binary=kind == "accuracy")
        assert tests.cells == SIZE * SIZE and tests.level == 0.05
        marked += tests.marked > 0
    return marked / SIMULATIONS


@pytest.mark.parametrize("kind", ["accuracy", "acr"])
def test_two_seeds_of_one_model_show_no_significant_cell(kind: str) -> None:
    assert _false_alarms(kind) <= 0.05


def test_unpaired_maps_of_one_model_show_no_significant_cell() -> None:
    rng = np.random.default_rng(7)
    marked = 0
    for k in range(SIMULATIONS):
        model = Model(rng)
        maps = [model.run(k * 2 + i, "accuracy")[:, :, i * 50 : (i + 1) * 50].mean(axis=2)
                for i in (0, 1)]  # fmt: skip
        tests = unpaired_cell_tests(maps[0], 50, maps[1], 50)
        assert not tests.paired and "Clopper–Pearson" in tests.method
        marked += tests.marked > 0
    assert marked / SIMULATIONS <= 0.05


def test_a_real_difference_is_found() -> None:
    rng = np.random.default_rng(3)
    low = np.hypot(POINTS[:, 0], POINTS[:, 1]) < 3
    same = Model(rng)
    worse = Model(np.random.default_rng(3), shift=np.where(low, -4.0, 0.0))
    tests = paired_cell_tests(worse.run(1, "accuracy"), same.run(2, "accuracy"), binary=True)
    radius = np.hypot(*np.meshgrid(FREQS, FREQS, indexing="ij"))
    assert tests.significant[radius < 2].mean() > 0.8  # the hurt low frequencies are marked
    assert tests.significant[radius > 6].sum() == 0  # nothing else
    assert 0 < tests.floor < 0.5 and "±" in tests.sentence()


# ---- the compare page's difference maps --------------------------------------------------


def _entry(submission_id: int, seed: int, folder: Path) -> tuple[ResultsPublic, Path]:
    """An entry with a stored base-only Fourier map of 16 images on the stride-8 grid of
    32 × 32 images, and its merged records file."""
    rng = np.random.default_rng(seed)
    points = distinct_points(SIZE, 8)
    records = [
        SensitivityRecord(u=u, v=v, index=2 * i, label=i % 10, signs=(1, 1, 1), epsilon=4.0,
                          base_prediction=i % 10, base_correct=bool(rng.random() < 0.7))
        for (u, v) in points for i in range(16)
    ]  # fmt: skip
    path = write_sensitivity_records(records, folder / f"fourier-{submission_id}.parquet")
    heatmap = assemble_heatmap(records, size=SIZE, stride=8)
    summary: dict[str, Any] = {
        "label": "quick", "description": "quick protocol", "smoothed": False, "sigma": None,
        "protocol": {"epsilon": 4.0, "n0": 10, "n": 100, "alpha": 0.001}, "images": 16,
        "points": len(points), "forward_passes": 16 * len(points),
        "bands": summarize_heatmap(heatmap), "heatmap": heatmap.to_dict(),
    }  # fmt: skip
    stage = StageResultPublic(
        stage=section.STAGE, unit=section.MERGED, summary=summary, protocol={}, seeds={},
        data_hashes={}, count=len(records), seconds=1.0, evaluator_version="test",
    )  # fmt: skip
    results = ResultsPublic(
        submission_id=submission_id, benchmark="b", model_name=f"M{submission_id}",
        state="finished", protocol_version="v", manifest={}, summary=None, results=[],
        stages=[stage],
    )  # fmt: skip
    return results, path


def test_the_compare_page_marks_cells_and_states_the_noise_floor(tmp_path: Path) -> None:
    (a, path_a), (b, path_b) = _entry(1, 1, tmp_path), _entry(2, 2, tmp_path)
    paths = {1: path_a, 2: path_b}
    context = section.compare_context([a, b], lambda sid, stage: paths[sid])
    maps = context["maps"]
    (test,) = maps.tests
    assert test.paired and "16 images both runs share" in test.method and test.cells == 16
    (figure,) = maps.differences
    rows = figure.spec["data"]["values"]
    assert {"significant", "p"} <= set(rows[0])
    assert "family-wise error 5% over the 16 cells" in figure.description
    assert "Noise floor ≈ ±" in figure.description
    # without records: the binomial intervals of the two accuracy maps
    unpaired = section.compare_context([a, b], lambda sid, stage: None)["maps"].tests[0]
    assert not unpaired.paired and "Clopper–Pearson" in unpaired.method
