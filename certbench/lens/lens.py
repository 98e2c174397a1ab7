"""The Fourier lens of Fridovich-Keil et al., NeurIPS 2022 (§3): per-path records of a model.

A model is probed along interpolating image paths (:mod:`certbench.lens.interpolation`): Fourier
amplitude and phase paths between random test pairs (5,000 pairs on CIFAR-10, 100 images each)
and pixel-space paths within and between classes (Fridovich-Keil et al. 2021). From the
probability vectors along a path come two numbers:

* **HFF**, the high-frequency fraction (:func:`high_frequency_fraction`): how much of the path's
  prediction signal sits at high "function frequency" — lower is smoother;
* **CD**, the consistent distance (:func:`consistent_distance`): how far the top-1 prediction
  stays that of the path's first image — higher is more stable.

Plus the **Jacobian norm** of the logits w.r.t. the input pixels (Hoffman, Roberts & Yaida
2019, arXiv:1908.02729), per image.

One input space for every figure: pixels in [0, 1]. The paper and the released code work in the
normalised space z = (x − mean)/std of their own preprocessing; an entry here *declares* its
preprocessing, so a figure taken in that space would depend on what it declares, not on the
function it computes (the Jacobian norm scales with std, pixel paths hold 1/std as many images):
an entry could lower its Jacobian column by declaring a small std and rescaling its first layer.
So every path is built, and every derivative taken, in pixel space, where noise and
perturbations live too. Units: the Jacobian norm is per unit pixel on the [0, 1] scale. To
compare with a value published in a normalised space of per-channel std s_c (paper: CIFAR-10's
(0.247, 0.243, 0.261)): ‖J_z‖²_F = Σ_c s_c²·‖J_x^(c)‖²_F (J_x^(c): the columns of channel c), so
‖J_z‖ = s·‖J_x‖ for one std s, and min_c s_c·‖J_x‖ ≤ ‖J_z‖ ≤ max_c s_c·‖J_x‖ per channel
(:func:`normalised_jacobian_norm`).

Sharding: a :class:`LensPlan` lays every unit of work (one path, or one Jacobian image) on one
flat index 0 … ``plan.size``−1, kinds in the order of :data:`KINDS`. ``lens_records(…, units=
range(a, b))`` computes any range alone; the records of a unit depend only on (model, test set,
protocol, seeds, unit), never on the range, the batch size or the device batching (up to the
float round-off of the forward pass, which GEMM blocking may change with the batch shape).
``summarize`` turns the merged records into means with 95 % intervals.

Two seeds, because the draws play two roles (``lens_records``' ``pairs_seed`` and ``seed``):

* ``pairs_seed`` chooses *what is measured*: the Fourier pairs and the pixel pairs. Every entry of
  a benchmark must be measured on the same paths for their figures to be comparable (the
  service's fingerprint), so the service passes the benchmark's public seed.
* ``seed`` draws the *Monte Carlo noise of the estimators*: the smoothed classifier's Gaussian
  noise and the random Jacobian projections. Both estimate a figure of the model only if the
  draws are independent of it: a model fitted to known noise (or with its Jacobian hidden from
  known projection directions) would score what it is not. So the service passes the run's secret
  seed (commit-reveal, revealed when the run ends); it changes no path and no exact figure.

The paper defers "further computational details" to its Appendix A.3–A.4, not in the version
read here; every constant here is checked against the released code instead
(github.com/sarafridov/RobustNets: ``fourier_interpolation.py``, ``pixel_interpolation.py``,
``jacobian_norm.py``) and each docstring says where paper and code differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from certbench.errors import LensError
from certbench.lens.interpolation import (
    LOW_FREQUENCY_FRACTION,
    amplitude_path,
    between_class_pairs,
    fourier_pairs,
    path_lambdas,
    phase_path,
    pixel_path,
    pixel_path_length,
    within_class_pairs,
)
from certbench.lens.jacobian import jacobian_sq_norms, normalised_jacobian_norm
from certbench.lens.metrics import (
    HFF_THRESHOLD,
    KINDS,
    LensRecord,
    LensSummary,
    consistent_distance,
    high_frequency_fraction,
    read_lens_metadata,
    read_lens_records,
    summarize,
    write_lens_records,
)
from certbench.nets import RowSlots
from certbench.smoothing import derive_seed, seeded_generator

__all__ = [
    "KINDS",
    "LensPlan",
    "LensProtocol",
    "LensRecord",
    "LensSummary",
    "consistent_distance",
    "high_frequency_fraction",
    "jacobian_sq_norms",
    "lens_plan",
    "lens_records",
    "normalised_jacobian_norm",
    "read_lens_metadata",
    "read_lens_records",
    "summarize",
    "write_lens_records",
]

PROTOCOL_VERSION = 2
"""2: paths and Jacobian in pixel space (the figures no longer depend on the declared
preprocessing), pixel step 0.25 in [0, 1] units; 1: the entry's normalised space."""
PIXEL_STEP = 0.25
"""ℓ2 step of pixel paths in [0, 1] pixel units: the released code's 1.0 in CIFAR-10's normalised
units (std ≈ 0.25), so a CIFAR pixel path holds about as many images as in the paper."""


@dataclass(frozen=True)
class LensProtocol:
    """What to measure; the defaults are the paper's CIFAR-10 protocol.

    ``paths``: Fourier pairs (each gives one amplitude and one phase path), 5,000 in §3.
    ``steps``: images per Fourier path (100 evenly spaced λ). ``low_frequency_fraction``: 0.4,
    see :func:`certbench.lens.interpolation.low_frequency_half_width`. ``hff_threshold``: 0.1.
    ``pixel_pairs``: within-class pairs per class and between-class pairs per class pair (200
    in the released ``pixel_interpolation.py``); ``pixel_step``: ℓ2 step in [0, 1] pixel units
    (:data:`PIXEL_STEP`).
    ``jacobian_images``: the first N test images (400 in ``jacobian_norm.py``);
    ``jacobian_projections``: 0 = exact (one backward pass per class, what the released code
    runs, ``JacobianReg(n=-1)``), k > 0 = k random unit projections per image (Hoffman et al.'s
    unbiased estimator, cheaper for many classes). ``sigma``/``noise_samples``: when ``sigma``
    is set, paths are scored with the *smoothed* classifier's vote fractions instead of the base
    classifier's softmax (see :func:`lens_records`); the Jacobian stays the base classifier's.
    """

    paths: int = 5000
    steps: int = 100
    low_frequency_fraction: float = LOW_FREQUENCY_FRACTION
    hff_threshold: float = HFF_THRESHOLD
    pixel_pairs: int = 200
    pixel_step: float = PIXEL_STEP
    jacobian_images: int = 400
    jacobian_projections: int = 0
    kinds: tuple[str, ...] = KINDS
    sigma: float | None = None
    noise_samples: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds or len(set(self.kinds)) != len(self.kinds):
            raise LensError(f"kinds {list(self.kinds)}: give distinct names among {list(KINDS)}")
        for name in ("paths", "steps", "pixel_pairs", "jacobian_images", "noise_samples"):
            if getattr(self, name) < 1:
                raise LensError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.steps < 2:
            raise LensError(f"steps must be >= 2, got {self.steps}")
        if not 0 < self.hff_threshold < 1:
            raise LensError(f"hff_threshold must be in (0, 1), got {self.hff_threshold!r}")
        if self.jacobian_projections < 0:
            raise LensError(
                f"jacobian_projections must be 0 (exact) or >= 1, got {self.jacobian_projections}"
            )
        if self.sigma is not None and not self.sigma > 0:
            raise LensError(f"sigma must be > 0 or None (base classifier), got {self.sigma!r}")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form, with the protocol version, for records metadata and dedup keys."""
        return {"version": PROTOCOL_VERSION, **asdict(self), "kinds": list(self.kinds)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LensProtocol:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class LensPlan:
    """Every unit of work on one flat index: ``pairs[kind]`` holds (count, 2) test-set positions
    (x₀, x₁) of each path, or (count, 1) image positions for ``jacobian``."""

    kinds: tuple[str, ...]
    pairs: dict[str, np.ndarray]
    offsets: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        starts = np.cumsum([0] + [len(self.pairs[k]) for k in self.kinds]).tolist()
        object.__setattr__(self, "offsets", tuple(int(s) for s in starts))

    @property
    def size(self) -> int:
        return self.offsets[-1]

    def locate(self, unit: int) -> tuple[str, int]:
        """(kind, index within the kind) of a flat unit index."""
        if not 0 <= unit < self.size:
            raise LensError(f"unit {unit} is outside the plan's 0 … {self.size - 1}")
        slot = int(np.searchsorted(self.offsets, unit, side="right")) - 1
        return self.kinds[slot], unit - self.offsets[slot]


def lens_plan(labels: np.ndarray | torch.Tensor, protocol: LensProtocol, seed: int) -> LensPlan:
    """The plan for a clean test set with these labels; ``seed`` draws the pairs (see
    :mod:`certbench.lens.interpolation`): ``lens_records``' ``pairs_seed``."""
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64)
    make = {
        "amplitude": lambda: fourier_pairs(len(y), protocol.paths, seed),
        "phase": lambda: fourier_pairs(len(y), protocol.paths, seed),
        "pixel_within": lambda: within_class_pairs(y, protocol.pixel_pairs, seed),
        "pixel_between": lambda: between_class_pairs(y, protocol.pixel_pairs, seed),
        "jacobian": lambda: _jacobian_positions(len(y), protocol.jacobian_images),
    }
    kinds = tuple(k for k in KINDS if k in protocol.kinds)
    return LensPlan(kinds=kinds, pairs={k: make[k]() for k in kinds})


def _jacobian_positions(count: int, images: int) -> np.ndarray:
    if images > count:
        raise LensError(f"jacobian_images={images} exceeds the test set's {count} images")
    return np.arange(images, dtype=np.int64)[:, None]


# --------------------------------------------------------------------------- records


def lens_records(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | np.ndarray,
    *,
    protocol: LensProtocol | None = None,
    seed: int = 0,
    pairs_seed: int | None = None,
    units: range | None = None,
    indices: torch.Tensor | np.ndarray | None = None,
    batch_size: int = 1000,
    device: torch.device | str | None = None,
    channels_last: bool = True,
    progress: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> list[LensRecord]:
    """Records of the plan's ``units`` (all by default) for a model on a clean test set.

    ``images`` are pixels in [0, 1], (N, C, H, W), the whole clean test set (pairs are drawn
    from all of it). Paths are built in that pixel space and the Jacobian is taken w.r.t. it,
    whatever preprocessing the model applies inside (module docstring). ``batch_size`` bounds
    the images per forward pass, but a path is never split: all its images go through one
    forward.

    Base classifier: the path's probabilities are softmax(logits). Smoothed classifier
    (``protocol.sigma``): each image's probability vector is the vote fraction of f(x + ε) over
    ``noise_samples`` Gaussian draws ε (pixel space, as in certification); the same draws are
    used for every image of a path (common random numbers, seeded by (seed, kind, index)), so
    HFF measures how g's votes change along the path rather than re-drawn Monte Carlo noise.

    Seeds (module docstring): ``pairs_seed`` draws the pairs (default: ``seed``), ``seed`` the
    smoothed classifier's noise and the random Jacobian projections; any non-negative integer
    (a revealed 128-bit service seed included).

    ``channels_last`` converts the model (in place, as ``certify`` does) and its inputs to the
    channels-last layout, about twice as fast for CIFAR ResNets on CPU.

    ``on_progress(units_done)`` is called after every forward batch with the number of units of
    ``units`` finished so far (a service worker's lease heartbeat and cancel check; it may raise
    to stop the computation).
    """
    protocol = protocol or LensProtocol()
    pairs_seed = seed if pairs_seed is None else pairs_seed
    if seed < 0 or pairs_seed < 0:
        raise LensError(f"seeds must be non-negative integers, got {seed} and {pairs_seed}")
    plan = lens_plan(labels, protocol, pairs_seed)
    units = range(plan.size) if units is None else units
    if units.step != 1 or units.start < 0 or units.stop > plan.size:
        raise LensError(f"units {units} must be a contiguous range inside 0 … {plan.size}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    if channels_last:
        model.to(memory_format=torch.channels_last)
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels, dtype=np.int64)
    ids = np.arange(len(y)) if indices is None else np.asarray(indices, dtype=np.int64)
    if len(images) != len(y) or len(ids) != len(y):
        raise LensError(
            f"images ({len(images)}), labels ({len(y)}) and indices ({len(ids)}) differ in length"
        )
    context = _Context(model, images, y, ids, protocol, seed, device, channels_last)
    out: list[LensRecord] = []
    bar = tqdm(total=len(units), desc="fourier lens", unit="path", disable=not progress)
    with bar:
        for kind, chunk in _kind_chunks(plan, units):
            for batch in _batches(context, kind, plan.pairs[kind], chunk, batch_size):
                out += context.run(kind, batch, plan.offsets[plan.kinds.index(kind)])
                bar.update(len(batch))
                if on_progress is not None:
                    on_progress(len(out))
    return out


@dataclass
class _Context:
    model: nn.Module
    images: torch.Tensor
    labels: np.ndarray
    ids: np.ndarray
    protocol: LensProtocol
    seed: int
    """The noise seed (smoothed noise, Jacobian projections); the plan holds the pairs."""
    device: torch.device
    channels_last: bool

    def z(self, positions: np.ndarray) -> torch.Tensor:
        x = self.images[torch.as_tensor(positions, dtype=torch.long)].to(self.device)
        return x.to(torch.float64)

    def path_images(self, kind: str, pairs: np.ndarray) -> list[torch.Tensor]:
        """Float64 pixel images of each path (L, C, H, W), not clipped to [0, 1]."""
        z0, z1 = self.z(pairs[:, 0]), self.z(pairs[:, 1])
        p = self.protocol
        if kind in ("amplitude", "phase"):
            build = amplitude_path if kind == "amplitude" else phase_path
            lam = path_lambdas(p.steps).to(self.device)
            return list(build(z0, z1, lam, p.low_frequency_fraction).unbind(0))
        return [pixel_path(a, b, p.pixel_step) for a, b in zip(z0, z1, strict=True)]

    def run(self, kind: str, batch: list[tuple[int, np.ndarray]], offset: int) -> list[LensRecord]:
        """Records of one batch of units of one kind (``offset``: the kind's first unit)."""
        index = np.array([i for i, _ in batch])
        pairs = np.stack([pair for _, pair in batch])
        if kind == "jacobian":
            positions = pairs[:, 0]
            seeds = [derive_seed(self.seed, "fourier-lens", "jacobian", int(p)) for p in positions]
            x = self.images[torch.as_tensor(positions)].to(self.device)
            projections = self.protocol.jacobian_projections
            squares = jacobian_sq_norms(
                self.model, x, projections, seeds, keys=torch.as_tensor(positions)
            )
            return [
                self._record(kind, offset + int(i), int(i), pair, None, float(sq))
                for i, pair, sq in zip(index, pairs, squares, strict=True)
            ]
        probabilities = self.probabilities(kind, index, self.path_images(kind, pairs))
        return [
            self._record(kind, offset + int(i), int(i), pair, prob, math.nan)
            for i, pair, prob in zip(index, pairs, probabilities, strict=True)
        ]

    def probabilities(
        self, kind: str, index: np.ndarray, paths: list[torch.Tensor]
    ) -> list[np.ndarray]:
        """(L, K) float64 probabilities of every path, all paths in one forward pass."""
        pixels = [z.to(torch.float32) for z in paths]
        sigma = self.protocol.sigma
        if sigma is not None:
            noisy = []
            for i, x in zip(index, pixels, strict=True):
                g = seeded_generator(
                    derive_seed(self.seed, "fourier-lens", "noise", kind, int(i)), self.device
                )
                eps = torch.randn(
                    (self.protocol.noise_samples, *x.shape[1:]), generator=g, device=self.device
                )
                noisy.append((x[None] + sigma * eps[:, None]).flatten(0, 1))
            pixels = noisy
        with torch.inference_mode():
            logits = torch.cat([self._path_logits(path) for path in pixels])
        if logits.ndim != 2 or logits.shape[1] < 2:
            raise LensError(f"model must return (batch, classes >= 2), got {tuple(logits.shape)}")
        if sigma is None:
            chunks = logits.float().softmax(dim=1).split([len(x) for x in pixels])
            return [c.double().cpu().numpy() for c in chunks]
        votes = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1]).double()
        s = self.protocol.noise_samples
        return [
            c.view(s, -1, logits.shape[1]).mean(0).cpu().numpy()
            for c in votes.split([len(x) for x in pixels])
        ]

    def _path_logits(self, path: torch.Tensor) -> torch.Tensor:
        """Logits of one path's images, keyed by their place in the path
        (``certbench.nets.batch_invariance``): the same bits whichever paths share the batch."""
        if self.channels_last:
            path = path.contiguous(memory_format=torch.channels_last)
        return RowSlots.of(range(len(path)), path.device).forward(self.model, path)

    def _record(
        self,
        kind: str,
        unit: int,
        index: int,
        pair: np.ndarray,
        probabilities: np.ndarray | None,
        jacobian_sq: float,
    ) -> LensRecord:
        source = int(pair[0])
        target = int(pair[1]) if len(pair) > 1 else None
        hff = hff_released = math.nan
        cd, changed, first, length = -1, False, -1, 0
        if probabilities is not None:
            hff, hff_released = high_frequency_fraction(probabilities, self.protocol.hff_threshold)
            top = probabilities.argmax(axis=1)
            cd, changed = consistent_distance(top)
            first, length = int(top[0]), len(top)
        return LensRecord(
            unit=unit,
            kind=kind,
            index=index,
            source=int(self.ids[source]),
            target=-1 if target is None else int(self.ids[target]),
            source_label=int(self.labels[source]),
            target_label=-1 if target is None else int(self.labels[target]),
            length=length,
            first_prediction=first,
            hff=hff,
            hff_released=hff_released,
            cd=cd,
            changed=changed,
            jacobian_sq=jacobian_sq,
        )


def _kind_chunks(plan: LensPlan, units: range) -> Iterator[tuple[str, range]]:
    """The part of ``units`` inside each kind, as indices within that kind."""
    for slot, kind in enumerate(plan.kinds):
        start = max(units.start, plan.offsets[slot])
        stop = min(units.stop, plan.offsets[slot + 1])
        if start < stop:
            yield kind, range(start - plan.offsets[slot], stop - plan.offsets[slot])


def _batches(
    context: _Context, kind: str, pairs: np.ndarray, chunk: range, batch_size: int
) -> Iterator[list[tuple[int, np.ndarray]]]:
    """Whole paths per batch, at most ``batch_size`` images (a longer path goes alone)."""
    if batch_size < 1:
        raise LensError(f"batch_size must be >= 1, got {batch_size}")
    p = context.protocol
    noise = p.noise_samples if p.sigma is not None and kind != "jacobian" else 1
    batch: list[tuple[int, np.ndarray]] = []
    filled = 0
    for i in chunk:
        cost = noise * _path_length(context, kind, pairs[i])
        if batch and filled + cost > batch_size:
            yield batch
            batch, filled = [], 0
        batch.append((i, pairs[i]))
        filled += cost
    if batch:
        yield batch


def _path_length(context: _Context, kind: str, pair: np.ndarray) -> int:
    if kind == "jacobian":
        return 1
    if kind in ("amplitude", "phase"):
        return context.protocol.steps
    z = context.z(pair)
    return pixel_path_length(float((z[1] - z[0]).norm()), context.protocol.pixel_step)
