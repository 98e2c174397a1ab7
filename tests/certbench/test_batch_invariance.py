"""A row's result must not depend on which rows share its batch (certbench.nets.batch_invariance):
every row is evaluated in a fixed-shape chunk at a position named by its key, so a shard holding
one image reproduces an unsharded run bit for bit (end to end: the PD stage's worker test compares
one-image shards with a direct run). 32×32 float32 inputs and a ResNet-20 are the sizes where CPU
kernels switch code paths with the batch's size and a row's position (a 4×4 toy does not show it).

``test_batch_invariance_avx2.py`` runs these tests again in a process whose oneDNN, MKL and ATen
kernels are restricted to AVX2: CI runs on AMD and Intel machines alike, and what is promised must
hold on both."""

from __future__ import annotations

import pytest
import torch

from certbench.nets.architectures import create_architecture
from certbench.nets.batch_invariance import CHUNK_ROWS, RowSlots, packed_keys, stable_argmax
from certbench.pd.anchors import build_anchor_bank
from certbench.pd.exact_projection import halfspaces, project_exact
from certbench.pd.threat import PDThreat
from certbench.smoothing import certify, predict

NUM_CLASSES = 10


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_architecture("cifar_resnet20", num_classes=NUM_CLASSES).eval()


@pytest.fixture(scope="module")
def images() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (40, 3, 32, 32), generator=g, dtype=torch.uint8)
    return x, torch.arange(40) % NUM_CLASSES


def test_row_slots_evaluate_each_row_at_its_key_and_refuse_bad_keys():
    x = torch.arange(5.0)[:, None] * torch.ones(1, 3)
    seen: list[torch.Tensor] = []

    def row_wise(chunk: torch.Tensor) -> torch.Tensor:
        seen.append(chunk.clone())
        return 2 * chunk

    slots = RowSlots(torch.tensor([7, 3, 4, 20, 5]), rows=4)
    assert torch.equal(slots.apply(row_wise, x), 2 * x)
    assert [c.shape[0] for c in seen] == [4, 4, 4]  # chunks 0, 1 and 5, always four rows
    assert torch.equal(seen[0][3], x[1]) and not seen[0][:3].any()  # key 3: chunk 0, slot 3
    assert torch.equal(seen[1][0], x[2]) and torch.equal(seen[1][3], x[0])  # keys 4 and 7
    assert torch.equal(slots.take(torch.tensor([False, True, False, True, False])).keys,
                       torch.tensor([3, 20]))  # fmt: skip
    with pytest.raises(ValueError, match="distinct"):
        RowSlots(torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="non-negative"):
        RowSlots(torch.tensor([-1]))
    with pytest.raises(ValueError, match="take"):
        slots.apply(row_wise, x[:2])


def test_a_keyed_forward_of_one_image_equals_its_row_in_any_batch(resnet, images):
    x = images[0][:12].float() / 255
    rows = CHUNK_ROWS["cpu"]
    with torch.no_grad():
        together = RowSlots.of(range(12), "cpu").forward(resnet, x)
        for key in (0, 5, 11):
            alone = RowSlots.of([key], "cpu").forward(resnet, x[key : key + 1])
            assert alone.shape == (1, NUM_CLASSES)
            assert torch.equal(alone[0], together[key])
        for size in (3, 7):  # the same images in batches of other sizes
            parts = [
                RowSlots.of(range(a, min(a + size, 12)), "cpu").forward(resnet, x[a : a + size])
                for a in range(0, 12, size)
            ]
            assert torch.equal(torch.cat(parts), together)
    assert rows > 1


class _Counting(torch.nn.Module):
    """A linear classifier whose classes 0 and 1 tie to round-off on every input, counting the
    rows it is called on."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.linear = torch.nn.Linear(3 * 32 * 32, NUM_CLASSES)
        with torch.no_grad():
            self.linear.weight[1] = self.linear.weight[0] * (1 + 1e-7)
            self.linear.bias[1] = self.linear.bias[0]
            self.linear.bias[2:] -= 100.0  # classes 0 and 1 always lead
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.linear(x.flatten(1))


def test_stable_argmax_settles_near_ties_at_their_slots_and_leaves_clear_rows_alone(images):
    model = _Counting().eval()
    x = images[0][:12].float() / 255
    slots = RowSlots.of(range(12), "cpu")
    with torch.no_grad():
        together = stable_argmax(model, x, model(x), slots)
        model.rows = 0
        for key in (0, 7, 11):
            part = slice(key, key + 1)
            alone = stable_argmax(model, x[part], model(x[part]), slots.take(part))
            assert int(alone[0]) == int(together[key])
        assert model.rows == 3 + 3 * CHUNK_ROWS["cpu"]  # each tie was evaluated again, alone
        settled = RowSlots.of(range(12), "cpu").forward(model, x).argmax(1)
        assert torch.equal(together, settled)
        clear = model(x) + torch.nn.functional.one_hot(torch.full((12,), 5), NUM_CLASSES) * 500
        model.rows = 0
        assert torch.equal(stable_argmax(model, x, clear, slots), torch.full((12,), 5))
        assert model.rows == 0


@pytest.fixture(scope="module")
def threat(images) -> PDThreat:
    x, labels = images
    bank = build_anchor_bank(
        x, labels, class_names=[str(c) for c in range(NUM_CLASSES)], dataset="noise", k=3, seed=0
    )
    return PDThreat(bank)


def test_pd_threat_of_one_row_equals_its_value_in_a_batch(threat, images):
    x, labels = images
    flat = x[:12].float() / 255
    delta = torch.randn(flat.shape, generator=torch.Generator().manual_seed(2)) * 0.03
    together = threat.evaluate(flat, delta, labels[:12], RowSlots.positional(12))
    for row in (0, 5, 11):
        alone = threat.evaluate(
            flat[row : row + 1], delta[row : row + 1], labels[row : row + 1], RowSlots([row])
        )
        assert torch.equal(alone.value[0], together.value[row])
        assert int(alone.anchor[0]) == int(together.anchor[row])


def _towards_anchors(threat: PDThreat, x: torch.Tensor, eps: float, g: torch.Generator):
    """ℓ∞ perturbations of size ≤ eps pointing at a random anchor each: most break the PD bound,
    so the exact projection has work to do, for more dual steps on some rows than on others."""
    rows = torch.randint(threat.num_anchors, (x.shape[0],), generator=g)
    toward = (threat.anchors[rows] - x.reshape(x.shape[0], -1)).sign()
    return (eps * torch.rand(x.shape[0], 1, generator=g) * toward).reshape(x.shape)


def test_exact_projection_of_one_row_equals_its_row_in_a_batch(threat, images):
    """The PD-aware attack projects every step: a row's projection must not depend on its
    batch-mates (it once kept iterating until the whole batch had converged, and its dual GEMMs
    were not padded), or shards disagree with an unsharded run."""
    x, labels = images[0][:4].float() / 255, images[1][:4]
    g = torch.Generator().manual_seed(3)
    iterated = 0
    for eps in (8 / 255, 16 / 255):
        options = {"eps_pd": eps, "eps_inf": eps, "max_iter": 30, "tol": 1e-3}
        rows = [slice(row, row + 1) for row in range(4)]
        sets = [
            halfspaces(threat, x[part], labels[part], eps_pd=eps, eps_inf=eps,
                       slots=RowSlots([part.start]))
            for part in rows
        ]  # fmt: skip
        together_sets = halfspaces(threat, x, labels, eps_pd=eps, eps_inf=eps)
        for draw in range(4):
            delta = _towards_anchors(threat, x, eps, g)
            together = project_exact(threat, x, delta, labels, sets=together_sets, **options)
            iterated += together.iterations > 0
            for part, own in zip(rows, sets, strict=True):
                alone = project_exact(
                    threat, x[part], delta[part], labels[part], sets=own, **options
                )
                assert torch.equal(alone.delta, together.delta[part]), (eps, draw, part)
                assert torch.equal(alone.multipliers, together.multipliers[part]), (eps, draw, part)
    assert iterated >= 4  # the projections really iterated


def test_exact_projection_geometry_of_one_row_equals_its_row_in_a_batch(threat, images):
    x, labels = images[0][:6].float() / 255, images[1][:6]
    together = halfspaces(threat, x, labels, eps_pd=8 / 255, eps_inf=8 / 255)
    for row in (0, 3):
        part = slice(row, row + 1)
        alone = halfspaces(
            threat, x[part], labels[part], eps_pd=8 / 255, eps_inf=8 / 255, slots=RowSlots([row])
        )
        assert torch.equal(alone.step, together.step[part])  # 1 / ‖UUᵀ‖ by power iteration
        assert torch.equal(alone.bound, together.bound[part])


def test_packed_keys_keep_each_rows_slot_and_fill_few_chunks():
    positions = torch.tensor([3, 0, 3, 15, 3, 7])
    keys = packed_keys(positions, 16)
    assert torch.equal(keys % 16, positions)  # every row at its canonical slot
    assert keys.unique().numel() == len(keys)
    assert int((keys // 16).max()) + 1 == 3  # slot 3 is taken three times: three chunks
    with pytest.raises(ValueError, match="slot"):
        packed_keys(torch.tensor([16]), 16)


class _Tied(torch.nn.Module):
    """A small convolutional net whose classes 0 and 1 are the same function computed two ways
    (a GEMM, and a product summed elementwise), so every noisy sample's argmax between them is
    decided by round-off: the worst case for counts across batch sizes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(),
        )
        self.head = torch.nn.Linear(8 * 16, NUM_CLASSES)
        with torch.no_grad():
            self.head.bias[1:] -= 100.0  # classes 0 and 1 always lead

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        logits = self.head(h)
        twin = (h * self.head.weight[0]).sum(1) + self.head.bias[0]
        return torch.cat([logits[:, :1], twin[:, None].to(logits.dtype), logits[:, 2:]], 1)


def _counts(records) -> list[tuple[int, ...]]:
    return [(r.selected, r.n_a, r.n_y, r.n, r.n0, r.prediction) for r in records]


def test_certification_counts_are_identical_for_batch_sizes_1_7_and_250(images):
    """Class counts of noisy predictions: a near tie of the top two logits is settled by a
    canonical evaluation of that sample alone (its own fixed-shape chunk), so the counts do not
    depend on which samples shared its forward batch. Without it the tied classes' counts move
    with the batch size."""
    model = _Tied().eval()
    x, labels = images[0][:3].float() / 255, images[1][:3]
    kwargs = dict(sigma=0.25, n0=20, n=260, seed=11, channels_last=False)
    runs = {b: _counts(certify(model, x, labels, batch_size=b, **kwargs)) for b in (250, 7, 1)}
    assert runs[7] == runs[250] and runs[1] == runs[250]
    assert all(0 < n_a < 260 for _, n_a, *_ in runs[250])  # both tied classes drew samples
    sharded = certify(model, x[1:], labels[1:], indices=[1, 2], batch_size=7, **kwargs)
    assert _counts(sharded) == runs[250][1:]


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_certification_counts_of_a_resnet_are_identical_across_batch_sizes(resnet, images, amp):
    x, labels = images[0][:2].float() / 255, images[1][:2]
    kwargs = dict(sigma=0.5, n0=10, n=120, seed=3, amp=amp)
    runs = [_counts(certify(resnet, x, labels, batch_size=b, **kwargs)) for b in (250, 7, 1)]
    assert runs[0] == runs[1] == runs[2]
    predicted = predict(resnet, x, labels, sigma=0.5, n=130, seed=3, batch_size=7)
    assert [(r.count1, r.count2) for r in predicted] == [
        (r.count1, r.count2) for r in predict(resnet, x, labels, sigma=0.5, n=130, seed=3,
                                              batch_size=250)
    ]  # fmt: skip
