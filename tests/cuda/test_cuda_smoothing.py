"""CERTIFY/PREDICT and the noise streams on CUDA: records identical across batch sizes,
shardings, padded (compiled) batches; statistically consistent with CPU records; no host sync
in the sampling loop. Skipped with "CUDA not available" where there is no GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from certbench.smoothing import certify, predict, sampling
from certbench.smoothing.streams import normal_blocks, seeded_generator
from tests.support.cuda import CUDA, DEVICE, ON_CUDA, cifar_like, no_host_sync, small_resnet

pytestmark = CUDA

PROTOCOL = dict(sigma=0.25, n0=50, n=1200, alpha=0.001, seed=7)


def counts(records) -> list[tuple]:
    return [dataclasses.replace(r, seconds=0.0) for r in records]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return small_resnet().to(DEVICE)


@pytest.fixture(scope="module")
def data():
    return cifar_like(6)


@pytest.fixture(scope="module")
def reference(model, data):
    x, y = data
    return certify(model, x, y, device=DEVICE, batch_size=512, amp=None, compile=False, **PROTOCOL)


@pytest.mark.parametrize("batch_size", [1, 7, 250, 4096])
def test_certify_records_do_not_depend_on_the_batch_size(model, data, reference, batch_size):
    x, y = data
    run = certify(
        model, x, y, device=DEVICE, batch_size=batch_size, amp=None, compile=False, **PROTOCOL
    )
    assert counts(run) == counts(reference)


def test_certify_records_do_not_depend_on_sharding(model, data, reference):
    x, y = data
    shards = []
    for part in (slice(0, 1), slice(1, 4), slice(4, 6)):
        idx = list(range(6))[part]
        shards += certify(model, x[part], y[part], device=DEVICE, indices=idx, batch_size=300,
                          amp=None, compile=False, **PROTOCOL)  # fmt: skip
    assert counts(shards) == counts(reference)


@pytest.mark.parametrize("batch_size", [96, 1000])
def test_bf16_certify_records_do_not_depend_on_the_batch_size(model, data, batch_size):
    x, y = data
    kwargs = dict(device=DEVICE, amp="bf16", compile=False, **PROTOCOL)
    assert counts(certify(model, x, y, batch_size=batch_size, **kwargs)) == counts(
        certify(model, x, y, batch_size=333, **kwargs)
    )


def test_compiled_padded_batches_give_the_eager_records(model, data, reference):
    """Compiled runs pad the last batch to the compiled shape; the padding must not count and
    compiled logits agree with eager ones outside near ties (settled by the eager model)."""
    x, y = data
    compiled = certify(model, x, y, device=DEVICE, batch_size=512, amp=None, compile=True,
                       **PROTOCOL)  # fmt: skip
    assert counts(compiled) == counts(reference)
    assert all(r.n == PROTOCOL["n"] and r.n0 == PROTOCOL["n0"] for r in compiled)


def test_early_abstention_stops_only_images_that_cannot_certify(data):
    x, y = data
    torch.manual_seed(3)
    noisy = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10)).to(DEVICE)
    with torch.no_grad():
        noisy[1].bias.zero_()  # σ = 1 noise dominates the logits: votes spread, none certifies
    kwargs = dict(device=DEVICE, batch_size=256, amp=None, sigma=1.0, n0=50, n=20_000, seed=1)
    early = certify(noisy, x, y, early_abstain=True, **kwargs)
    assert all(r.early_abstain and r.n < 20_000 and r.prediction == -1 for r in early)
    full = certify(noisy, x, y, **kwargs)
    assert all(r.prediction == -1 for r in full)  # the full runs abstain too


def test_predict_records_do_not_depend_on_the_batch_size(model, data):
    x, y = data
    kwargs = dict(device=DEVICE, sigma=0.25, n=1500, seed=2, amp=None, compile=False)
    a = predict(model, x, y, batch_size=64, **kwargs)
    b = predict(model, x, y, batch_size=1024, **kwargs)
    assert [dataclasses.replace(r, seconds=0.0) for r in a] == [
        dataclasses.replace(r, seconds=0.0) for r in b
    ]


def test_cuda_records_are_statistically_consistent_with_cpu_records(model, data, reference):
    """CPU and CUDA draw different noise (MT19937 vs Philox): the counts are two independent
    binomial samples of the same p_A, so they must agree within binomial noise, and the
    selected classes must agree where the top class is clear."""
    x, y = data
    cpu_model = small_resnet().to("cpu")
    on_cpu = certify(cpu_model, x, y, device="cpu", batch_size=512, amp=None, compile=False,
                     **PROTOCOL)  # fmt: skip
    agree = np.mean([a.selected == b.selected for a, b in zip(on_cpu, reference, strict=True)])
    assert agree >= 5 / 6
    for a, b in zip(on_cpu, reference, strict=True):
        if a.selected != b.selected:
            continue
        n = PROTOCOL["n"]
        # two-sample test of the same proportion via the conditional binomial test
        p = binomtest(a.n_a, a.n_a + b.n_a, 0.5).pvalue if a.n_a + b.n_a else 1.0
        assert p > 1e-4 or abs(a.n_a - b.n_a) <= 4 * np.sqrt(n), (a, b)


def test_the_sampling_loop_never_syncs_with_the_host(model, data, monkeypatch):
    if not ON_CUDA:
        pytest.skip("the sync debug mode exists on CUDA only")
    x, y = data
    loop = sampling._draw_and_count
    calls = []

    def strict(*args, **kwargs):
        calls.append(1)
        with no_host_sync():
            return loop(*args, **kwargs)

    monkeypatch.setattr(sampling, "_draw_and_count", strict)
    certify(model, x[:2], y[:2], device=DEVICE, batch_size=256, amp="bf16", **PROTOCOL)
    assert calls


def test_noise_blocks_use_all_64_bits_of_their_seed_on_cuda():
    """Philox takes a 64-bit key: seeds that differ only above bit 32 give other noise."""
    low, high = 12345, 12345 + (1 << 40)
    a = next(normal_blocks([low], [4], (3, 8, 8), DEVICE))
    b = next(normal_blocks([high], [4], (3, 8, 8), DEVICE))
    assert not torch.equal(a, b)
    again = torch.randn((4, 3, 8, 8), generator=seeded_generator(low, DEVICE), device=DEVICE)
    assert torch.equal(a, again)


def test_noise_blocks_are_standard_normal_and_independent_of_their_neighbours():
    seeds = list(range(1000, 1040))
    blocks = torch.cat(list(normal_blocks(seeds, [500] * 40, (3, 4, 4), DEVICE))).double()
    assert abs(float(blocks.mean())) < 0.01 and abs(float(blocks.std()) - 1) < 0.01
    alone = next(normal_blocks(seeds[7:8], [500], (3, 4, 4), DEVICE)).double()
    assert torch.equal(alone, blocks[7 * 500 : 8 * 500])
