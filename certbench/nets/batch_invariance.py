"""Per-row results that do not depend on which rows share a batch, by construction.

Why: CPU kernels (oneDNN convolutions, MKL GEMMs) choose their code path from a batch's shape,
and a micro-kernel treats the rows at the edge of a tile differently from the rows inside it, so
the last float bits of a row's output change with the batch's size *and* with the row's position
in it. Attacks amplify such bits: a sign step (APGD, the weather search) or a ReLU near zero (a
Jacobian) turns a round-off difference into another trajectory. Padding every batch to a minimum
size was not enough: on an Intel Xeon with AVX-512 a d_PD value differed between a row alone and
the same row in a batch of 12, and with the instruction set restricted to AVX2 the weather search
differed between batches of 7 and 3 padded to the same 8 rows (the row sat at another position).

The construction: every row carries a *key*, an integer that names it independently of the batch
(its global image index, or its place in a path or noise stream). A row with key ``k`` is always
evaluated in a chunk of exactly ``rows`` rows, at position ``k % rows``, together with the rows
whose keys share ``k // rows``; missing rows are zeros. So a row goes through the same kernels,
with the same shape, at the same position, whatever the batch, shard or batch size around it;
only the *values* of its neighbours change, and no kernel branches on those. :class:`RowSlots`
does this for any row-wise function (a model's forward and backward, a GEMM with a fixed matrix).

Certification counts use the same construction for the rare samples that need it: a noisy
sample whose top two logits nearly tie (:func:`near_ties`) is classified again at its own slot
(:func:`packed_keys`) of a fixed-shape chunk (``certbench.smoothing.sampling``).

What is promised: records are bit-identical for any batch size and sharding on one device type,
instruction set, library build and thread count; across those, statistically consistent (the
same protocol; low float bits differ). The suite checks it at the machine's best instruction set
and with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``.

The memory layout of the weights selects kernels too: channels-last and contiguous convolutions
differ in the last bits of the logits. :func:`canonical_layout` gives an attack one layout
whatever an earlier computation left its model in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = [
    "CHUNK_ROWS",
    "GEMM_CHUNK_ROWS",
    "TIE_RTOL",
    "RowSlots",
    "canonical_layout",
    "chunk_rows",
    "near_ties",
    "packed_keys",
    "stable_argmax",
]

CHUNK_ROWS = {"cpu": 16, "cuda": 256}
"""Rows of every fixed-shape chunk of a model evaluation, per device type (other types: cuda's).
Part of what makes records reproducible: changing it changes the last bits of attack records."""

GEMM_CHUNK_ROWS = 64
"""Rows of a fixed-shape chunk of a product with a fixed matrix (the PD anchors): larger than a
model's chunk because each chunk reads the whole matrix once."""


def chunk_rows(device: torch.device | str) -> int:
    """The chunk size of model evaluations on ``device``."""
    return CHUNK_ROWS.get(torch.device(device).type, CHUNK_ROWS["cuda"])


@dataclass(frozen=True, eq=False)
class RowSlots:
    """Where each row of a batch is evaluated: chunk ``key // rows``, position ``key % rows``.

    ``keys`` are distinct non-negative integers, one per row, that name the row whatever the
    batch (global image indices; path steps; image × noise-sample). Build it once per batch and
    :meth:`take` the rows an algorithm keeps working on; :meth:`apply` evaluates a row-wise
    function (gradients flow to the real rows only).
    """

    keys: torch.Tensor
    rows: int = CHUNK_ROWS["cpu"]
    _groups: list[tuple[torch.Tensor, torch.Tensor]] = field(init=False, repr=False)
    _order: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keys = torch.as_tensor(self.keys, dtype=torch.int64).detach().cpu().reshape(-1)
        if self.rows < 1:
            raise ValueError(f"rows={self.rows} must be at least 1.")
        if keys.numel() and int(keys.min()) < 0:
            raise ValueError(f"row keys must be non-negative, got {int(keys.min())}.")
        if keys.unique().numel() != keys.numel():
            raise ValueError("row keys must be distinct: two rows cannot share a chunk position.")
        chunk = keys // self.rows
        order = torch.argsort(chunk, stable=True)
        groups = []
        for ident in chunk[order].unique_consecutive():
            members = order[chunk[order] == ident]
            groups.append((members, keys[members] % self.rows))
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "_groups", groups)
        object.__setattr__(
            self,
            "_order",
            torch.argsort(torch.cat([m for m, _ in groups]))
            if groups
            else torch.zeros(0, dtype=torch.int64),
        )

    @classmethod
    def of(cls, keys: torch.Tensor | list[int] | range, device: torch.device | str) -> RowSlots:
        """Slots for ``keys`` with the model chunk size of ``device``."""
        return cls(
            torch.as_tensor(list(keys) if isinstance(keys, range) else keys), chunk_rows(device)
        )

    @classmethod
    def positional(cls, count: int, rows: int = CHUNK_ROWS["cpu"]) -> RowSlots:
        """Keys 0..count−1: for a batch that is always evaluated whole (not sharded)."""
        return cls(torch.arange(count), rows)

    def __len__(self) -> int:
        return int(self.keys.numel())

    def take(self, members: torch.Tensor | slice) -> RowSlots:
        """The slots of a subset of the rows (a boolean mask, indices or a slice)."""
        if isinstance(members, torch.Tensor):
            members = members.detach().cpu()
        return RowSlots(self.keys[members], self.rows)

    def with_rows(self, rows: int) -> RowSlots:
        """The same keys in chunks of ``rows`` rows."""
        return self if rows == self.rows else RowSlots(self.keys, rows)

    def apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor
    ) -> torch.Tensor:
        """``fn(inputs)`` row by row, each row evaluated at its own slot of a fixed-shape chunk.

        ``fn`` must be row-wise: row i of its output depends on row i of its input only (a model
        in eval mode, a product with a fixed matrix)."""
        if inputs.shape[0] != len(self):
            raise ValueError(
                f"the batch has {inputs.shape[0]} rows but its slots name {len(self)}; "
                "take() the slots of the rows you evaluate."
            )
        if not len(self):
            return fn(inputs.new_zeros((self.rows, *inputs.shape[1:])))[:0]
        outputs = []
        for members, positions in self._groups:
            members_d = members.to(inputs.device)
            positions_d = positions.to(inputs.device)
            chunk = inputs.new_zeros((self.rows, *inputs.shape[1:]))
            chunk = chunk.index_copy(0, positions_d, inputs.index_select(0, members_d))
            outputs.append(fn(chunk).index_select(0, positions_d))
        return torch.cat(outputs).index_select(0, self._order.to(inputs.device))

    def forward(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """``model(inputs)`` evaluated in fixed-shape chunks."""
        return self.apply(model, inputs)

    def matmul(self, rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        """``rows @ matrix`` in fixed-shape chunks of :data:`GEMM_CHUNK_ROWS` rows."""
        gemm = self.__dict__.get("_gemm")
        if gemm is None:
            gemm = self.with_rows(GEMM_CHUNK_ROWS)
            object.__setattr__(self, "_gemm", gemm)
        return gemm.apply(lambda chunk: chunk @ matrix, rows)


TIE_RTOL = 1e-3
"""A row's top two fp32 logits closer than this, relative to its largest logit magnitude (at
least 1), are a near tie that :func:`stable_argmax` settles canonically. Kernel paths move fp32
logits by about 1e-6 relative, so a margin above the tolerance cannot flip between batches."""


def stable_argmax(
    model: nn.Module, inputs: torch.Tensor, logits: torch.Tensor, slots: RowSlots
) -> torch.Tensor:
    """argmax of ``logits = model(inputs)`` (computed in any batch shape), with near ties settled
    by re-evaluating those rows alone at their slots.

    Why: a prediction (not its logits) is what records keep, and it can change with the batch
    only where the top two logits nearly tie. Those rows are evaluated again in fixed-shape
    chunks keyed by ``slots`` (:meth:`RowSlots.forward`), whose result does not depend on the
    batch; every other row's argmax is the same whatever kernel computed it. Rare rows, so the
    batch itself runs at full speed. Returns the classes on ``logits``' device.
    """
    near = near_ties(logits)
    classes = logits.argmax(dim=1)
    rows = near.nonzero()[:, 0]
    if rows.numel():
        settled = slots.take(rows.cpu()).forward(model, inputs.index_select(0, rows))
        classes = classes.index_copy(0, rows, settled.argmax(dim=1))
    return classes


def near_ties(logits: torch.Tensor, rtol: float = TIE_RTOL) -> torch.Tensor:
    """Rows whose top two logits are within ``rtol`` of their largest logit magnitude (at least
    1): the rows whose argmax another kernel path could flip. A boolean mask on ``logits``'
    device, computed without a host sync."""
    values = logits.float()
    top = values.topk(2, dim=1).values
    scale = values.abs().amax(dim=1).clamp_min(1.0)
    return (top[:, 0] - top[:, 1]) <= rtol * scale


def packed_keys(positions: torch.Tensor, rows: int) -> torch.Tensor:
    """Keys that put row i at slot ``positions[i]`` (< rows) of as few chunks as possible.

    For sparse rows (the near ties of a large batch) whose canonical key names a slot but whose
    chunk-mates do not matter (no kernel branches on the *values* of other rows): the j-th row
    with slot p goes to chunk j, so N rows spread over the slots fill about N / rows chunks
    instead of one chunk each."""
    positions = torch.as_tensor(positions, dtype=torch.int64).cpu()
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= rows):
        raise ValueError(f"slot positions must lie in [0, {rows}).")
    order = torch.argsort(positions, stable=True)
    sorted_positions = positions[order]
    first = torch.searchsorted(sorted_positions, sorted_positions, side="left")
    occurrence = torch.empty_like(positions)
    occurrence[order] = torch.arange(len(positions)) - first
    return occurrence * rows + positions


def canonical_layout(model: nn.Module) -> nn.Module:
    """``model`` with its 4-D weights converted in place to channels-last, and returned.

    ``certify`` converts a model's weights to channels-last in place (so do the weather, lens and
    Fourier computations), and a service worker caches one model object per process for all its
    shards. oneDNN runs other convolution kernels for the two layouts (the tests' ResNet-20: logits
    3e-6 apart), so without this an attack's records would depend on whether a certification
    shard ran before it in the same process, and a direct run from the revealed seed could
    disagree with the service's records. Models without convolutions are unchanged.
    """
    return model.to(memory_format=torch.channels_last)
