"""Throughput of the simulation attack (Wang et al., NeurIPS 2022 ML Safety Workshop) on a CIFAR
classifier: attacked images/s.

    uv run python benchmarks/weather_attack.py [--arch cifar_resnet20] [--images 32]
        [--batch-size 32] [--steps 10] [--severity 3] [--noise-samples 0] [--repeats 2]
        [--threads N] [--device cpu]
    # GPU (the command to run where one is available):
    uv run python benchmarks/weather_attack.py --device cuda --images 1024 --batch-size 256 \\
        --noise-samples 8

Times one restart of PGD (``--steps`` steps) per weather at ``--severity`` and prints attacked
images/s per restart (a full run costs ``restarts`` times this per weather × severity set, less
for the base classifier, whose broken images stop early). Every image runs the whole restart
(``stop_when_broken=False``), the worst case. Reference in the same process: the model's own
forward + backward on the same inputs, ``steps + 1`` passes (what PGD needs), so the ratio
attack / reference is the simulator's overhead (rendering, projection, membership checks).
With ``--noise-samples m`` the SmoothAdv objective (m noisy copies per image) is timed too.
A random network stands in for a trained one: the cost of a step does not depend on the weights.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from certbench.nets import build_classifier
from certbench.weather import (
    AttackConfig,
    WeatherSet,
    base_objective,
    forward,
    search,
    smoothed_objective,
    smoothing_noise,
)

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _reference(model: torch.nn.Module, x: torch.Tensor, passes: int, batch: int) -> float:
    """Seconds for ``passes`` forward+backward passes (gradient w.r.t. the input) of x."""
    started = time.perf_counter()
    for _ in range(passes):
        for s in range(0, len(x), batch):
            xi = x[s : s + batch].clone().requires_grad_(True)
            torch.autograd.grad(forward(model, xi).logsumexp(1).sum(), xi)
    _sync(x.device)
    return time.perf_counter() - started


def _attack(model, x, y, wset, config, batch, noise) -> float:
    objective = base_objective(model) if noise is None else smoothed_objective(model)
    started = time.perf_counter()
    for s in range(0, len(x), batch):
        idx = torch.arange(s, min(s + batch, len(x)))
        part = None if noise is None else noise[s : s + batch]
        search(objective, x[idx], y[idx], idx, wset, config, noise=part, stop_when_broken=False)
    _sync(x.device)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--arch", default="cifar_resnet20")
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--noise-samples", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.steps, args.repeats = 4, 4, 1, 1
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_classifier(args.arch, num_classes=10, mean=MEAN, std=STD).eval().to(device)
    model = model.to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(args.images, 3, 32, 32, generator=g).to(device)
    with torch.no_grad():
        y = forward(model, x).argmax(1)
    config = AttackConfig(steps=args.steps, restarts=1)
    print(f"device {device}, {args.arch}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    sets = [WeatherSet.for_level(w, args.severity) for w in ("rain", "snow")]
    noise = {
        s.name: smoothing_noise(
            0, s, torch.arange(args.images), args.noise_samples, 0.25, (3, 32, 32)
        ).to(device)
        for s in sets
        if args.noise_samples
    }
    _attack(model, x[:2], y[:2], sets[0], AttackConfig(steps=1), 2, None)  # warm-up
    best: dict[str, float] = {}
    for _ in range(args.repeats):  # interleaved, best of repeats: robust to a shared machine
        timings = {"reference": _reference(model, x, args.steps + 1, args.batch_size)}
        for wset in sets:
            timings[wset.name] = _attack(model, x, y, wset, config, args.batch_size, None)
            if wset.name in noise:
                timings[f"{wset.name} smoothed"] = _attack(
                    model, x, y, wset, config, args.batch_size, noise[wset.name]
                )
        best = {k: min(v, best.get(k, v)) for k, v in timings.items()}
    reference = best["reference"]
    print(f"reference (model fwd+bwd x{args.steps + 1}): {args.images / reference:.2f} images/s")
    for wset in sets:
        seconds = best[wset.name]
        print(f"{wset.name} ({wset.count} particles), PGD-{args.steps}, 1 restart: "
              f"{args.images / seconds:.2f} attacked images/s; "
              f"attack / reference = {seconds / reference:.2f}")  # fmt: skip
        if wset.name in noise:
            seconds = best[f"{wset.name} smoothed"]
            print(f"  smoothed (m={args.noise_samples}): {args.images / seconds:.2f} images/s; "
                  f"attack / reference = {seconds / reference:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
