"""The simulation attack's evaluations (Wang et al., NeurIPS 2022 ML Safety Workshop, §3–4):
classifiers under adversarial weather.

The search (PGD on the particles' translations T_i and rotations R_i inside the set Δ, with
restarts; ``AttackConfig``) is ``certbench.weather.search``. This module runs it on a test set for
every weather set and records the outcome per image:
- Base classifier: cross-entropy (the paper's loss). An image is safe iff every iterate of every
  restart (start points included) is classified correctly; restarts stop for an image once it
  is broken. The reported attacked image is the first misclassified iterate, else the
  highest-loss one.
- Smoothed classifier g: PGD on SmoothAdv's objective (Salman et al. 2019), the cross-entropy
  of the soft smoothed classifier ``−log (1/m) Σ_j softmax(f(x' + δ_j))_y`` with m Gaussian
  noise vectors per image fixed for all steps and restarts (as SmoothAdv fixes them per attack).
  All restarts run; the highest-objective iterate is certified with
  ``certbench.smoothing.core.certify`` (Cohen et al.'s CERTIFY, fresh noise), giving certified
  accuracy and ACR under adversarial weather.

Randomness is per image, so records do not depend on the batch size or on how a test set is
sharded into image ranges (CPU; on CUDA the renderer's ``scatter_add`` and cuDNN add run-to-run
float noise). Two seeds, decided per draw. ``AttackConfig.seed`` (the random weather sets',
public) draws restart 0's start only: the published random test set's image, which defines
random-weather accuracy for every entry alike. ``run_seed`` (None: ``config.seed``) draws the
evaluation's own randomness: the starts of restarts r ≥ 1, SmoothAdv's fixed noise vectors and
CERTIFY's noise. The service passes the run's secret seed (commit-reveal): smoothing's
certificate assumes noise independent of the classifier, and starts and noise known in advance
could be defeated by a model fitted to exactly those points (the PD stage keeps its APGD starts
secret alike); ``certbench weather-attack --seed <revealed> --weather-seed <sets' seed>``
reproduces a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.smoothing import certify
from certbench.weather.objectives import (
    base_objective,
    forward,
    smoothed_objective,
    smoothing_noise,
)
from certbench.weather.records import SmoothedWeatherRecord, WeatherRecord
from certbench.weather.search import AttackConfig, SearchResult, evaluation_seed, search
from certbench.weather.threat import WeatherSet, all_sets

__all__ = ["AttackConfig", "attack_base", "attack_smoothed", "attacked_images"]


def _prepare(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    indices: torch.Tensor | Sequence[int] | None,
    device: torch.device | str | None,
    batch_size: int,
) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, torch.device]:
    if batch_size < 1:
        raise ThreatModelError(f"batch_size={batch_size} must be at least 1.")
    data = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    if data.ndim != 4 or data.shape[1:] != (3, 32, 32):
        raise ThreatModelError(
            f"images must be (N, 3, 32, 32) in [0, 1] or uint8, got {tuple(images.shape)}; "
            "the simulator's constants are defined for 32x32 RGB images."
        )
    y = torch.as_tensor(labels, dtype=torch.long)
    idx = torch.arange(len(data)) if indices is None else torch.as_tensor(indices).long()
    if not (len(y) == len(idx) == len(data)):
        raise ThreatModelError(
            f"images ({len(data)}), labels ({len(y)}) and indices ({len(idx)}) must match."
        )
    first = next(model.parameters(), None)
    dev = torch.device(device) if device is not None else (
        first.device if first is not None else torch.device("cpu")
    )  # fmt: skip
    # channels_last up front, as certify() leaves the weights: the attack then runs with the
    # same kernels before and after certifying (and oneDNN prefers it on CPU)
    model = model.eval().to(dev).to(memory_format=torch.channels_last)
    return model, data, y, idx, dev


def attack_base(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    weathers: Sequence[str] = ("rain", "snow"),
    severities: Sequence[int] = (1, 2, 3, 4, 5),
    config: AttackConfig | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    batch_size: int = 128,
    device: torch.device | str | None = None,
    progress: bool = False,
    on_batch: Callable[[int], None] | None = None,
    run_seed: int | None = None,
) -> list[WeatherRecord]:
    """Worst-case and random weather accuracy of a deterministic classifier, per image and set.

    ``images``: uint8 or [0, 1] float (N, 3, 32, 32); the model takes [0, 1] inputs.
    ``indices``: global image indices in the source split (default 0..N−1); with the seeds they
    fix each image's draws, so shards by image range reproduce the unsharded records.
    ``run_seed`` draws the starts of restarts r ≥ 1 (module docstring; None: ``config.seed``);
    random-weather accuracy (restart 0) never depends on it.
    ``on_batch(n)`` gets the (set, image) units done so far; it may raise to cancel.
    Records are ordered by (weather, severity, index).

    Raises:
        ThreatModelError: bad shapes or protocol; GeneratorError: unknown weather/severity.
    """
    config = config or AttackConfig()
    seed = evaluation_seed(config, run_seed)
    sets = [WeatherSet.for_level(w, s, config.truncation) for w, s in _grid(weathers, severities)]
    model, data, y_all, idx_all, dev = _prepare(model, images, labels, indices, device, batch_size)
    objective = base_objective(model)
    records: list[WeatherRecord] = []
    with tqdm(total=len(sets) * len(data), disable=not progress, desc="weather attack") as bar:
        for start in range(0, len(data), batch_size):
            x = data[start : start + batch_size].to(dev)
            y = y_all[start : start + batch_size].to(dev)
            idx = idx_all[start : start + batch_size]
            with torch.no_grad():
                clean = forward(model, x, RowSlots.of(idx, dev)).argmax(1)
            for wset in sets:
                found = search(objective, x, y, idx, wset, config, run_seed=seed)
                records += _base_records(wset, idx, y, clean, found)
                bar.update(len(x))
                if on_batch is not None:
                    on_batch(bar.n)
    return sorted(records, key=lambda r: (r.weather, r.severity, r.index))


def _grid(weathers: Sequence[str], severities: Sequence[int]) -> list[tuple[str, int]]:
    if not weathers or not severities:
        raise ThreatModelError(
            f"weathers={list(weathers)} and severities={list(severities)} must be non-empty; "
            "e.g. weathers=('rain', 'snow'), severities=(1, 2, 3, 4, 5)."
        )
    return [(s.weather, s.severity) for s in all_sets(weathers, severities)]


def _base_records(
    wset: WeatherSet, idx: torch.Tensor, y: torch.Tensor, clean: torch.Tensor, found: SearchResult
) -> list[WeatherRecord]:
    columns = {
        "label": y,
        "clean": clean,
        "random": found.random_prediction,
        "attacked": found.attacked_prediction,
        "restart": found.broken_restart,
        "step": found.broken_step,
        "loss": found.attacked_loss,
        "runs": found.restarts_run,
    }
    host = {k: v.cpu().tolist() for k, v in columns.items()}
    return [
        WeatherRecord(
            index=int(index),
            label=host["label"][j],
            weather=wset.weather,
            severity=wset.severity,
            clean_prediction=host["clean"][j],
            random_prediction=host["random"][j],
            attacked_prediction=host["attacked"][j],
            clean_correct=host["clean"][j] == host["label"][j],
            random_correct=host["random"][j] == host["label"][j],
            robust=host["restart"][j] < 0,
            broken_restart=host["restart"][j],
            broken_step=host["step"][j],
            attacked_loss=float(host["loss"][j]),
            restarts_run=host["runs"][j],
        )
        for j, index in enumerate(idx.tolist())
    ]


def attack_smoothed(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    *,
    sigma: float,
    weathers: Sequence[str] = ("rain", "snow"),
    severities: Sequence[int] = (1, 2, 3, 4, 5),
    config: AttackConfig | None = None,
    noise_samples: int = 8,
    n0: int = 100,
    n: int = 100_000,
    alpha: float = 0.001,
    indices: torch.Tensor | Sequence[int] | None = None,
    batch_size: int = 32,
    certify_batch_size: int | None = 1000,
    device: torch.device | str | None = None,
    amp: str | None = None,
    progress: bool = False,
    on_batch: Callable[[int], None] | None = None,
    run_seed: int | None = None,
) -> list[SmoothedWeatherRecord]:
    """Certified accuracy / ACR of the smoothed classifier under adversarial weather.

    Attacks SmoothAdv's objective with ``noise_samples`` fixed noise vectors per image (a
    forward batch holds ``batch_size × noise_samples`` inputs), then runs CERTIFY (n0, n, α,
    σ) on the attacked images with test set ``weather-attack/<weather>-<severity>``
    (``certify_batch_size`` None and ``amp="auto"``: the engine's device defaults).
    ``run_seed`` (None: ``config.seed``) draws the noise vectors, CERTIFY's noise and the starts
    of restarts r ≥ 1; restart 0 starts at the random set's draw (module docstring).

    Raises:
        ThreatModelError: bad shapes or protocol; CertificationError: bad CERTIFY parameters.
    """
    config = config or AttackConfig()
    seed = evaluation_seed(config, run_seed)
    if noise_samples < 1 or not sigma > 0:
        raise ThreatModelError(
            f"noise_samples={noise_samples} must be ≥ 1 and sigma={sigma} positive."
        )
    sets = [WeatherSet.for_level(w, s, config.truncation) for w, s in _grid(weathers, severities)]
    model, data, y_all, idx_all, dev = _prepare(model, images, labels, indices, device, batch_size)
    objective = smoothed_objective(model)
    records: list[SmoothedWeatherRecord] = []
    with tqdm(total=len(sets) * len(data), disable=not progress, desc="weather attack (g)") as bar:
        for start in range(0, len(data), batch_size):
            x = data[start : start + batch_size].to(dev)
            y = y_all[start : start + batch_size].to(dev)
            idx = idx_all[start : start + batch_size]
            for wset in sets:
                noise = smoothing_noise(seed, wset, idx, noise_samples, sigma, x.shape[1:]).to(dev)
                found = search(objective, x, y, idx, wset, config, noise=noise,
                               stop_when_broken=False, run_seed=seed)  # fmt: skip
                with torch.no_grad():
                    attacked = wset.apply(x, found.attacked).cpu()
                certified = certify(
                    model, attacked, y.cpu(), sigma=sigma, n0=n0, n=n, alpha=alpha,
                    batch_size=certify_batch_size, seed=seed, device=dev,
                    indices=idx, test_set=f"weather-attack/{wset.name}", amp=amp,
                )  # fmt: skip
                losses = found.attacked_loss.cpu().tolist()
                records += [
                    SmoothedWeatherRecord.from_certify(
                        record, weather=wset.weather, severity=wset.severity, objective=loss
                    )
                    for record, loss in zip(certified, losses, strict=True)
                ]
                bar.update(len(x))
                if on_batch is not None:
                    on_batch(bar.n)
    return sorted(records, key=lambda r: (r.weather, r.severity, r.index))


def attacked_images(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | Sequence[int],
    wset: WeatherSet,
    *,
    config: AttackConfig | None = None,
    indices: torch.Tensor | Sequence[int] | None = None,
    device: torch.device | str | None = None,
    run_seed: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, SearchResult]:
    """(clean, random, attacked) [0, 1] images on the CPU and the search, for figures
    (``run_seed`` as in :func:`attack_base`)."""
    config = config or AttackConfig()
    seed = evaluation_seed(config, run_seed)
    model, data, y, idx, dev = _prepare(model, images, labels, indices, device, 1)
    x = data.to(dev)
    found = search(base_objective(model), x, y.to(dev), idx, wset, config, run_seed=seed)
    with torch.no_grad():
        random = wset.apply(x, found.random.to(dev))
        attacked = wset.apply(x, found.attacked)
    return data, random.cpu(), attacked.cpu(), found
