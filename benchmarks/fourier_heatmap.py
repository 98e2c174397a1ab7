"""Fourier-sensitivity heatmap throughput: grid points/s of ``sensitivity_records`` at a protocol.

A point of the quick protocol is 100 images × (100 + 10,000) = 1.01 M forward passes (paper:
200 × 100,100 = 20 M), far more than a short CPU run can finish, so the smoothed rate is timed
on ``--images`` images of one grid point at the protocol's n0/n and extrapolated to points/s
(the work per image is the same for every point). The reference is the released code's loop
(``certify_fourier.py`` of jiachens/FourierMix, the release of Sun et al., ECCV 2022: one image at
a time, x += r·basis, Cohen et al.'s sampling loop with a host sync per batch;
``certify_throughput.reference_certify``), run alternately in the same process on the same model,
images and protocol: the ratio is what we report. The base classifier's map (one forward per image,
no smoothing) is timed on whole points.

    # CPU, ResNet-20, quick protocol (under 2 minutes on 2 cores)
    uv run python benchmarks/fourier_heatmap.py --protocol quick --images 1 --n 4000
    # GPU (a lent device): whole quick points, bf16, compiled, the engine's large batches
    uv run python benchmarks/fourier_heatmap.py --protocol quick --device cuda --amp bf16 \\
        --compile --batch-size 4000 --images 100 --points 2 --skip-reference
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from certify_throughput import CIFAR_MEAN, CIFAR_STD, reference_certify, timed

from certbench.fourier import (
    PROTOCOLS,
    basis_image,
    perturb,
    perturbation_signs,
    sensitivity_records,
)
from certbench.nets import build_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--arch", default="cifar_resnet20")
    parser.add_argument("--protocol", default="quick", choices=sorted(PROTOCOLS))
    parser.add_argument("--images", type=int, default=1, help="images timed per point")
    parser.add_argument("--points", type=int, default=1, help="grid points timed (smoothed)")
    parser.add_argument("--base-points", type=int, default=5, help="points timed (base map)")
    parser.add_argument(
        "--n", type=int, default=None, help="n for the timed run (default: the protocol's)"
    )
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--batch-size", type=int, default=400)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", default=None, choices=[None, "bf16", "fp16"])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if args.smoke:
        args.images, args.points, args.base_points, args.n = 1, 1, 1, 50
        args.batch_size, args.rounds = 50, 1

    protocol = PROTOCOLS[args.protocol]
    # samples/s does not depend on n once a point spans many batches: a smaller n times faster
    timed_protocol = protocol.model_copy(update={"n": args.n or protocol.n})
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_classifier(args.arch, num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    model.eval().to(device)
    count = max(args.images, protocol.images)
    images = torch.rand(count, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 10, (count,), generator=torch.Generator().manual_seed(1))
    points = protocol.points()
    print(
        f"device={device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), "
        f"threads={torch.get_num_threads()}, arch={args.arch}, protocol={protocol.name} "
        f"(n0={protocol.n0}, n={protocol.n}, {protocol.images} images, {len(points)} points), "
        f"timed: {args.points} point(s) × {args.images} image(s) at n={timed_protocol.n}, "
        f"batch={args.batch_size}, "
        f"amp={args.amp}, compile={args.compile}"
    )
    common = dict(sigma=args.sigma, batch_size=args.batch_size,
                  certify_batch_size=args.batch_size, device=device, amp=args.amp)  # fmt: skip

    def ours() -> None:
        sensitivity_records(
            model, images[: args.images], labels[: args.images], range(args.images),
            points[: args.points], timed_protocol, compile=args.compile, **common,
        )  # fmt: skip

    def reference() -> None:
        # the released loop: per point, per image, x + r·ε·U then Cohen et al.'s CERTIFY
        for point in points[: args.points]:
            signs = perturbation_signs(point, range(args.images), channels=3, mode="shared", seed=0)
            x = perturb(images[: args.images], basis_image(point, 32), signs, protocol.epsilon)
            reference_certify(
                model, x.to(device), labels[: args.images], sigma=args.sigma, n0=protocol.n0,
                n=timed_protocol.n, alpha=protocol.alpha, batch_size=args.batch_size, classes=10,
            )  # fmt: skip

    # warm-up (compilation, allocator, cudnn autotuning) outside the timed runs
    sensitivity_records(
        model, images[:1], labels[:1], [0], points[:1],
        protocol.model_copy(update={"n": args.batch_size}), compile=args.compile, **common,
    )  # fmt: skip
    samples = args.points * args.images * (protocol.n0 + timed_protocol.n)
    ours_rates, ref_rates = [], []
    for round_ in range(args.rounds):
        ours_rates.append(samples / timed(ours)[1])
        line = f"round {round_}: certbench {ours_rates[-1]:,.0f} samples/s"
        if not args.skip_reference:
            model.to(memory_format=torch.contiguous_format)
            ref_rates.append(samples / timed(reference)[1])
            line += f", released loop {ref_rates[-1]:,.0f} samples/s"
        print(line)

    rate = float(np.median(ours_rates))
    per_point = protocol.samples_per_point()
    points_per_s = rate / per_point
    print(f"smoothed : {rate:,.0f} samples/s → {points_per_s:.3g} points/s at {protocol.name} "
          f"({per_point:,} passes per point)")  # fmt: skip
    paper_hours = PROTOCOLS["paper"].forward_passes() / rate / 3600
    print(f"           whole {protocol.name} heatmap ≈ {len(points) / points_per_s / 3600:,.1f} h; "
          f"paper protocol ≈ {paper_hours:,.0f} h")  # fmt: skip
    if ref_rates:
        ref = float(np.median(ref_rates))
        print(f"released : {ref:,.0f} samples/s; ratio {rate / ref:.2f}x")

    base_points = points[: args.base_points]
    start = time.perf_counter()
    sensitivity_records(
        model, images[: protocol.images], labels[: protocol.images], range(protocol.images),
        base_points, protocol, sigma=None, batch_size=args.batch_size, device=device,
    )  # fmt: skip
    base_rate = len(base_points) / (time.perf_counter() - start)
    print(f"base map : {base_rate:.2f} points/s ({protocol.images} images per point, no "
          f"smoothing) → whole {protocol.name} map ≈ {len(points) / base_rate:,.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
