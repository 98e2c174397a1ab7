"""The simulation attack's search (Wang et al., NeurIPS 2022 ML Safety Workshop, §3–4): PGD on
the weather simulator's particles.

Wang et al.'s point is that random weather is over-optimistic: a classifier is *safe* on an image
only if no weather in the perturbation set Δ fools it (eq. 1, ``max_{z ∈ Δ} l(f(x'), y)`` with
``x' = o + x(1 − o)``), and the worst case is found by PGD on the particles' translations T_i and
rotations R_i through the differentiable simulator ("simulation attack", PGD-10 in §5.2).

This module holds the search for any objective (``certbench.weather.objectives``: the base
classifier's cross-entropy or SmoothAdv's): one PGD restart (:func:`pgd`) and all restarts on a
batch (:func:`search`). The evaluations that run it over a test set and record the outcome, and
the choice of seeds, are in ``certbench.weather.attack``.

Protocol (``AttackConfig``; Δ in ``certbench.weather.threat``):
- Each restart starts from a random draw of the generator; restart 0 is the published random
  test set's draw of that image (same seed), so the start point's accuracy *is* random-weather
  accuracy on the same images, and worst-case accuracy can never exceed it.
- ``steps`` sign-gradient ascent steps (10, as the paper) on (centres, fall direction, angle
  offsets), each followed by the exact projection onto Δ (a clamp) and a membership check.
  Step sizes: ``position_step`` pixels, and ``angle_step`` × each angle bound's half-width (the
  2.5·ε/steps rule of Madry et al. for 10 steps). The paper gives no step sizes or restarts.
- With ``stop_when_broken`` (the base classifier) an image leaves the search once misclassified
  and its first misclassified iterate is reported; otherwise (the smoothed classifier) every
  restart runs and the highest-loss iterate is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.weather.objectives import Objective
from certbench.weather.threat import TRUNCATION, Particles, WeatherSet


@dataclass(frozen=True)
class AttackConfig:
    """Simulation-attack protocol. ``steps=10`` is the paper's PGD-10; the rest are ours."""

    steps: int = 10
    restarts: int = 5
    position_step: float = 1.0
    angle_step: float = 0.25
    truncation: float = TRUNCATION
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ThreatModelError(f"steps={self.steps} must be ≥ 0 (the paper uses 10).")
        if self.restarts < 1:
            raise ThreatModelError(f"restarts={self.restarts} must be ≥ 1 (restart 0 = random).")
        if not (self.position_step >= 0 and self.angle_step >= 0):
            raise ThreatModelError(
                f"step sizes must be non-negative, got position_step={self.position_step}, "
                f"angle_step={self.angle_step}."
            )
        if self.seed < 0:
            raise ThreatModelError(f"seed={self.seed} must be a non-negative integer.")


@dataclass(frozen=True)
class RestartResult:
    """One PGD restart on a batch: the start's prediction, the first misclassified iterate
    (``broken_step`` −1 if none) and the highest-loss iterate, each with loss and prediction."""

    start_prediction: torch.Tensor
    broken_step: torch.Tensor
    broken: Particles
    broken_loss: torch.Tensor
    broken_prediction: torch.Tensor
    best: Particles
    best_loss: torch.Tensor
    best_prediction: torch.Tensor


@dataclass
class SearchResult:
    """Per-image outcome of the attack on one batch (all restarts)."""

    random: Particles
    random_prediction: torch.Tensor
    broken_restart: torch.Tensor
    broken_step: torch.Tensor
    attacked: Particles
    attacked_loss: torch.Tensor
    attacked_prediction: torch.Tensor
    restarts_run: torch.Tensor


# --------------------------------------------------------------------------- PGD


def _steps(wset: WeatherSet, config: AttackConfig) -> tuple[float, float, float]:
    return (
        config.position_step,
        config.angle_step * wset.base_limit,
        config.angle_step * wset.offset_limit,
    )


def pgd(
    objective: Objective,
    x: torch.Tensor,
    y: torch.Tensor,
    start: Particles,
    wset: WeatherSet,
    config: AttackConfig,
    *,
    noise: torch.Tensor | None = None,
    bank: torch.Tensor | None = None,
    slots: RowSlots | None = None,
) -> RestartResult:
    """One restart: ``config.steps`` projected sign-gradient ascent steps from ``start``.
    Every iterate (the start and the final one included) is classified and checked in Δ.
    ``slots`` name the images (``certbench.nets.batch_invariance``; default: their positions)."""
    sprites = wset.bank(x.device) if bank is None else bank
    p = wset.check(start.to(x.device), "attack start")
    b = x.shape[0]
    broken_step = torch.full((b,), -1, dtype=torch.long, device=x.device)
    broken, best = p, p
    broken_loss = torch.zeros(b, device=x.device)
    broken_pred = torch.zeros(b, dtype=torch.long, device=x.device)
    best_loss = torch.full((b,), -torch.inf, device=x.device)
    best_pred = torch.zeros(b, dtype=torch.long, device=x.device)
    start_pred = broken_pred
    step_pos, step_base, step_off = _steps(wset, config)
    for t in range(config.steps + 1):
        last = t == config.steps
        variables = [v.detach().requires_grad_(not last) for v in (p.centres, p.base, p.offsets)]
        current = Particles(p.ids, *variables)
        with torch.set_grad_enabled(not last):
            loss, pred = objective(wset.apply(x, current, sprites), y, noise, slots)
        value = loss.detach().float()
        if t == 0:
            start_pred = pred
        newly = (pred != y) & (broken_step < 0)
        broken_step = torch.where(newly, t, broken_step)
        broken = p.where(newly, broken)
        broken_loss = torch.where(newly, value, broken_loss)
        broken_pred = torch.where(newly, pred, broken_pred)
        better = value > best_loss
        best = p.where(better, best)
        best_loss = torch.where(better, value, best_loss)
        best_pred = torch.where(better, pred, best_pred)
        if last:
            break
        grads = torch.autograd.grad(loss.sum(), variables)
        moved = Particles(
            p.ids,
            variables[0].detach() + step_pos * grads[0].sign(),
            variables[1].detach() + step_base * grads[1].sign(),
            variables[2].detach() + step_off * grads[2].sign(),
        )
        p = wset.check(wset.project(moved), f"PGD step {t + 1}")
    return RestartResult(
        start_prediction=start_pred,
        broken_step=broken_step,
        broken=wset.check(broken, "attack output"),
        broken_loss=broken_loss,
        broken_prediction=broken_pred,
        best=wset.check(best, "attack output"),
        best_loss=best_loss,
        best_prediction=best_pred,
    )


def search(
    objective: Objective,
    x: torch.Tensor,
    y: torch.Tensor,
    indices: torch.Tensor,
    wset: WeatherSet,
    config: AttackConfig,
    *,
    noise: torch.Tensor | None = None,
    stop_when_broken: bool = True,
    run_seed: int | None = None,
) -> SearchResult:
    """All restarts on a batch. With ``stop_when_broken`` (base classifier) an image leaves the
    search once misclassified and its first misclassified iterate is reported; otherwise
    (smoothed) every restart runs and the highest-loss iterate is reported. Restart 0 starts at
    the random set's draw (``config.seed``), restarts r ≥ 1 at draws of ``run_seed``."""
    restarts_seed = evaluation_seed(config, run_seed)
    dev = x.device
    b = x.shape[0]
    sprites = wset.bank(dev)
    random = wset.random(config.seed, indices, 0)
    slots = RowSlots.of(torch.as_tensor(indices), dev)
    attacked = random.to(dev)
    out = SearchResult(
        random=random,
        random_prediction=torch.zeros(b, dtype=torch.long, device=dev),
        broken_restart=torch.full((b,), -1, dtype=torch.long, device=dev),
        broken_step=torch.full((b,), -1, dtype=torch.long, device=dev),
        attacked=Particles(
            *(t.clone() for t in (attacked.ids, attacked.centres, attacked.base, attacked.offsets))
        ),
        attacked_loss=torch.full((b,), -torch.inf, device=dev),
        attacked_prediction=torch.zeros(b, dtype=torch.long, device=dev),
        restarts_run=torch.zeros(b, dtype=torch.long, device=dev),
    )
    for restart in range(config.restarts):
        active = (
            (out.broken_restart < 0) if stop_when_broken else torch.ones_like(y, dtype=torch.bool)
        )
        rows = active.nonzero()[:, 0]
        if rows.numel() == 0:
            break
        start = (
            random.select(rows.cpu())
            if restart == 0
            else wset.random(restarts_seed, indices[rows.cpu()], restart)
        )
        found = pgd(
            objective, x[rows], y[rows], start, wset, config,
            noise=None if noise is None else noise[rows], bank=sprites, slots=slots.take(rows),
        )  # fmt: skip
        out.restarts_run[rows] += 1
        if restart == 0:
            out.random_prediction[rows] = found.start_prediction
        _merge(out, rows, found, restart, stop_when_broken)
    return out


def evaluation_seed(config: AttackConfig, run_seed: int | None) -> int:
    """The seed of the evaluation's own draws (``certbench.weather.attack`` docstring):
    ``run_seed``, else the sets'."""
    if run_seed is None:
        return config.seed
    if isinstance(run_seed, bool) or not isinstance(run_seed, int) or run_seed < 0:
        raise ThreatModelError(f"run_seed={run_seed!r} must be a non-negative integer.")
    return run_seed


def _merge(
    out: SearchResult, rows: torch.Tensor, found: RestartResult, restart: int, by_break: bool
) -> None:
    """Fold one restart's result into the per-image outcome."""
    broke = found.broken_step >= 0
    take = found.best_loss > out.attacked_loss[rows]
    chosen, loss, pred = found.best, found.best_loss, found.best_prediction
    if by_break:
        out.broken_restart[rows] = torch.where(broke, restart, out.broken_restart[rows])
        out.broken_step[rows] = torch.where(broke, found.broken_step, out.broken_step[rows])
        take = take | broke
        chosen = found.broken.where(broke, chosen)
        loss = torch.where(broke, found.broken_loss, loss)
        pred = torch.where(broke, found.broken_prediction, pred)
    updated = chosen.where(take, out.attacked.select(rows))
    out.attacked.ids[rows] = updated.ids
    out.attacked.centres[rows] = updated.centres
    out.attacked.base[rows] = updated.base
    out.attacked.offsets[rows] = updated.offsets
    out.attacked_loss[rows] = torch.where(take, loss, out.attacked_loss[rows])
    out.attacked_prediction[rows] = torch.where(take, pred, out.attacked_prediction[rows])
