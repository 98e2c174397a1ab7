"""What the service's stages run (certbench's Fourier sensitivity, Fourier lens and weather
attack; the PD stage's robust accuracy is in test_cuda_attacks) on CUDA: records independent of
batch size and sharding. Skipped with "CUDA not available" where there is no GPU."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from certbench.fourier import sensitivity_records
from certbench.lens import LensProtocol, lens_records
from certbench.weather import AttackConfig, attack_base, attack_smoothed
from tests.support.cuda import CUDA, DEVICE, cifar_like, small_resnet

pytestmark = CUDA


@pytest.fixture(scope="module")
def model():
    return small_resnet().to(DEVICE)


@pytest.fixture(scope="module")
def data():
    return cifar_like(20)


def _quick_protocol(**changes) -> SimpleNamespace:
    """The fields sensitivity_records reads of a SensitivityProtocol (pydantic, absent on the
    GPU image): ε, n0, n, α and the channel signs."""
    fields = dict(name="quick", epsilon=4.0, n0=10, n=200, alpha=0.001,
                  channel_signs="independent")  # fmt: skip
    return SimpleNamespace(**{**fields, **changes})


def _without_time(records):
    out = []
    for r in records:
        certified = r.certified and dataclasses.replace(r.certified, seconds=0.0)
        out.append(dataclasses.replace(r, certified=certified))
    return out


def test_fourier_sensitivity_records_do_not_depend_on_batch_size_or_sharding(model, data):
    x, y = data
    points = [(0, 1), (3, 4), (15, 15)]
    kwargs = dict(protocol=_quick_protocol(), seed=5, sigma=0.25, device=DEVICE, amp=None)
    whole = sensitivity_records(model, x[:4], y[:4], list(range(4)), points, batch_size=512,
                                **kwargs)  # fmt: skip
    small = sensitivity_records(model, x[:4], y[:4], list(range(4)), points, batch_size=37,
                                **kwargs)  # fmt: skip
    assert _without_time(small) == _without_time(whole)
    shard = sensitivity_records(model, x[2:4], y[2:4], [2, 3], points, batch_size=64, **kwargs)
    assert _without_time(shard) == [r for r in _without_time(whole) if r.index in (2, 3)]


def test_fourier_sensitivity_base_map_runs_without_smoothing(model, data):
    x, y = data
    records = sensitivity_records(
        model,
        x[:4],
        y[:4],
        list(range(4)),
        [(1, 2)],
        protocol=_quick_protocol(),
        sigma=None,
        device=DEVICE,
    )
    assert len(records) == 4 and all(r.certified is None for r in records)


def test_lens_records_do_not_depend_on_batch_size(model, data):
    x, y = data
    protocol = LensProtocol(paths=3, steps=8, pixel_pairs=1, jacobian_images=3)
    kwargs = dict(protocol=protocol, seed=1, device=DEVICE)
    whole = lens_records(model, x, y, batch_size=10_000, **kwargs)
    small = lens_records(model, x, y, batch_size=40, **kwargs)
    assert [dataclasses.asdict(r) for r in whole] == [dataclasses.asdict(r) for r in small]


def test_weather_attack_records_do_not_depend_on_batch_size_or_sharding(model, data):
    x, y = data
    kwargs = dict(weathers=("rain", "snow"), severities=(2,), device=DEVICE,
                  config=AttackConfig(steps=3, restarts=2))  # fmt: skip
    full = attack_base(model, x[:6], y[:6], batch_size=6, **kwargs)
    assert full == attack_base(model, x[:6], y[:6], batch_size=4, **kwargs)
    shard = attack_base(model, x[3:6], y[3:6], indices=range(3, 6), batch_size=2, **kwargs)
    assert shard == [r for r in full if r.index in (3, 4, 5)]


def test_smoothed_weather_attack_records_do_not_depend_on_batch_size(model, data):
    x, y = data
    kwargs = dict(sigma=0.25, weathers=("snow",), severities=(3,), noise_samples=4, n0=10,
                  n=200, device=DEVICE, config=AttackConfig(steps=2, restarts=2))  # fmt: skip
    a = attack_smoothed(model, x[:3], y[:3], batch_size=3, **kwargs)
    b = attack_smoothed(model, x[:3], y[:3], batch_size=2, **kwargs)
    assert [dataclasses.replace(r, seconds=0) for r in a] == [
        dataclasses.replace(r, seconds=0) for r in b
    ]
