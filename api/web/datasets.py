"""Dataset pages: which Hub repo each benchmark uses, its configs, sample grids and spectra.

Hub links and configs come from ``api.services.leaderboards.datasets``. Pictures need the images,
and the service works offline, so they are drawn only from a local copy in the Hub layout
(``generators.hub`` writes ``data/<config>/test-*.parquet`` and card figures under ``images/``):
the test set's ``folder`` in the benchmark definition, resolved by ``models.submissions.lifecycle.
dataset_source`` exactly as the workers resolve it. Without a local copy the page says so.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image
from sqlalchemy.orm import Session

from certbench.errors import DataSourceError
from certbench.figures import Axis, Curve, Figure, line_chart
from models.benchmarks.sources import locate_test_set
from models.catalog.benchmarks import list_benchmarks
from models.core.errors import NotFoundError
from models.core.settings import Settings

GRID_SIDE = 4
GRID_SCALE = 3
SPECTRUM_IMAGES = 64
SPECTRUM_MAX_CONFIGS = 8
_FIGURE_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.(png|jpg|jpeg|svg)$")


@dataclass(frozen=True)
class LocalConfig:
    """A config of a dataset repo that is available in a local Hub-layout folder."""

    config: str
    folder: Path
    split: str


def local_configs(session: Session, repo: str, *, settings: Settings) -> dict[str, LocalConfig]:
    """Configs of ``repo`` whose test set names a local folder that exists on this machine."""
    found: dict[str, LocalConfig] = {}
    for benchmark in list_benchmarks(session):
        for test_set in benchmark.test_sets:
            if test_set.dataset_repo != repo or not test_set.dataset_folder:
                continue
            located = locate_test_set(test_set, settings)
            if located.refused is not None:  # out of CERTBENCH_DATASETS_DIR: never read
                continue
            folder = Path(located.source)
            config = test_set.config or "default"
            if folder.is_dir() and config not in found:
                found[config] = LocalConfig(config, folder, test_set.split)
    return found


def card_figures(configs: dict[str, LocalConfig]) -> dict[str, Path]:
    """Dataset-card figures (``images/*.png``: sample grid, radial spectra) of the local copies."""
    figures: dict[str, Path] = {}
    for local in configs.values():
        folder = local.folder / "images"
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if _FIGURE_NAME.match(path.name) and path.name not in figures:
                    figures[path.name] = path
    return figures


def figure_file(configs: dict[str, LocalConfig], name: str) -> Path:
    """A card figure by file name; only names listed by ``card_figures`` are served."""
    figures = card_figures(configs)
    if name not in figures:
        raise NotFoundError(f"dataset figure {name!r} does not exist; known: {sorted(figures)}")
    return figures[name]


def _load(local: LocalConfig, limit: int) -> np.ndarray:
    """The first ``limit`` images (N, C, H, W). Raises NotFoundError for an unreadable copy."""
    # The image readers decode into torch tensors: loaded by the first dataset figure, not with
    # the API (an idle API process then holds no torch).
    from certbench.data import Subset, load_images

    try:
        images = load_images(
            local.folder,
            config=None if local.config == "default" else local.config,
            split=local.split,
            subset=Subset(limit=limit),
        )
    except DataSourceError as err:
        raise NotFoundError(
            f"the local copy of config {local.config!r} cannot be read: {err}",
            code="dataset_unavailable",
        ) from err
    return images.images.numpy()


@lru_cache(maxsize=512)
def _grid_png(folder: str, config: str, split: str, mtime_ns: int) -> bytes:
    images = _load(LocalConfig(config, Path(folder), split), GRID_SIDE * GRID_SIDE)
    n, _, h, w = images.shape
    canvas = np.full((GRID_SIDE * (h + 2), GRID_SIDE * (w + 2), 3), 255, dtype=np.uint8)
    for i in range(n):
        r, c = divmod(i, GRID_SIDE)
        top, left = r * (h + 2) + 1, c * (w + 2) + 1
        canvas[top : top + h, left : left + w] = images[i].transpose(1, 2, 0)
    picture = Image.fromarray(canvas).resize(
        (canvas.shape[1] * GRID_SCALE, canvas.shape[0] * GRID_SCALE), Image.Resampling.NEAREST
    )
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def sample_grid_png(local: LocalConfig) -> bytes:
    """A 4×4 grid of the config's first images, upscaled 3× without smoothing (cached)."""
    return _grid_png(str(local.folder), local.config, local.split, _mtime(local))


def _mtime(local: LocalConfig) -> int:
    data = local.folder / "data" / local.config
    return data.stat().st_mtime_ns if data.exists() else local.folder.stat().st_mtime_ns


@lru_cache(maxsize=512)
def _spectrum(folder: str, config: str, split: str, mtime_ns: int) -> np.ndarray:
    import torch

    from certbench.fourier import radial_spectrum

    images = _load(LocalConfig(config, Path(folder), split), SPECTRUM_IMAGES)
    x = torch.from_numpy(images).to(torch.float64) / 255.0
    return radial_spectrum(x).mean(dim=(0, 1)).numpy()


#: A spectrum value this many decades below the median is a frequency the images hold (almost)
#: no energy at, e.g. a symmetric bin of generated digits: it is left off the plot (and said so)
#: instead of squashing every other value against the top of the axis.
SPECTRUM_DECADES = 4.0


def spectra_chart(configs: dict[str, LocalConfig], *, chart_id: str = "spectra") -> Figure | None:
    """Mean radial amplitude spectrum of the images, one line per config (first few configs)."""
    if not configs:
        return None
    chosen = list(configs.values())[:SPECTRUM_MAX_CONFIGS]
    profiles = {
        local.config: np.log10(
            np.maximum(
                _spectrum(str(local.folder), local.config, local.split, _mtime(local)), 1e-12
            )
        )
        for local in chosen
    }
    values = np.concatenate(list(profiles.values()))
    floor = float(np.median(values)) - SPECTRUM_DECADES
    dropped = int((values < floor).sum())
    curves = []
    for name, profile in profiles.items():
        shown = np.where(profile < floor, np.nan, profile)
        curves.append(Curve(name, np.arange(len(profile)), shown))
    kept = values[values >= floor]
    lo, hi = float(np.floor(kept.min())), float(np.ceil(kept.max()))
    shown_configs = f"{len(chosen)} of {len(configs)} configs" if len(configs) > len(chosen) else ""
    note = (
        f" {dropped} value(s) more than {SPECTRUM_DECADES:g} decades below the median (no energy "
        "at that frequency) are left out."
        if dropped
        else ""
    )
    description = (
        f"Mean |FFT| per integer radial frequency over the first {SPECTRUM_IMAGES} images and "
        f"the three channels, log10 scale.{note}"
    )
    spec = line_chart(
        curves,
        title="Radial amplitude spectrum of the images"
        + (f" ({shown_configs})" if shown_configs else ""),
        description=description,
        x=Axis("radial frequency f (cycles per image)", 0.0, float(len(curves[0].x) - 1)),
        y=Axis("log10 mean |FFT| amplitude", lo, hi),
    )
    return Figure(chart_id, spec, description)
