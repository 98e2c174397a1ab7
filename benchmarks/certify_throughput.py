"""Noisy samples/s of certbench's CERTIFY versus a faithful straightforward reference loop.

The reference is Cohen et al.'s sampling loop as usually written: one image per batch, fresh
`randn_like` noise per batch (400 samples), fp32 NCHW, class counts moved to the host after every
batch. Both run in this process on the same model, images and protocol; the ratio is what we
report. By default certbench runs with its *default arguments* (batch size, precision and
compile chosen per device, ``certbench.smoothing.defaults``); ``--batch-size``, ``--amp`` and
``--compile``/``--no-compile`` pin them. ``--threads`` sets torch's intra-op threads (the issue's
figures: 1); ``--smoke`` is a seconds-long run of every code path (CI-sized, no figure).

    uv run python benchmarks/certify_throughput.py --threads 1 --images 1 --n 100000 --rounds 2
    uv run python benchmarks/certify_throughput.py --smoke
    uv run python benchmarks/certify_throughput.py --arch cifar_resnet110 --device cuda --amp bf16 \
        --images 20 --n 100000 --batch-size 4000 --compile
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.stats import beta, norm

from certbench.nets import build_classifier
from certbench.smoothing import certify
from certbench.smoothing.defaults import EngineChoice, engine_choice

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


def reference_sample(model, x, num, batch_size, sigma, classes):
    """Counts of f(x + noise) over `num` samples; host sync after every batch."""
    counts = np.zeros(classes, dtype=np.int64)
    remaining = num
    while remaining > 0:
        this = min(batch_size, remaining)
        remaining -= this
        batch = x.unsqueeze(0).repeat(this, 1, 1, 1)
        noise = torch.randn_like(batch) * sigma
        predictions = model(batch + noise).argmax(1)
        counts += np.bincount(predictions.cpu().numpy(), minlength=classes)
    return counts


def reference_certify(model, images, labels, *, sigma, n0, n, alpha, batch_size, classes):
    """Cohen et al.'s CERTIFY, image by image."""
    out = []
    with torch.no_grad():
        for x, label in zip(images, labels, strict=True):
            selected = int(reference_sample(model, x, n0, batch_size, sigma, classes).argmax())
            n_a = int(reference_sample(model, x, n, batch_size, sigma, classes)[selected])
            pa = beta.ppf(alpha, n_a, n - n_a + 1) if n_a > 0 else 0.0
            radius = sigma * norm.ppf(pa) if pa >= 0.5 else 0.0
            out.append((selected if pa >= 0.5 else -1, radius, int(label)))
    return out


def chosen(device: torch.device, samples: int, args: argparse.Namespace) -> EngineChoice:
    """What certify will run with for this workload (explicit arguments or its defaults)."""
    amp = None if args.amp == "none" else args.amp
    return engine_choice(device, samples, batch_size=args.batch_size, amp=amp, compile=args.compile)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cifar_resnet20")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--n0", type=int, default=100)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the device's")
    parser.add_argument("--reference-batch-size", type=int, default=400)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", default="auto", choices=["auto", "none", "bf16", "fp16"])
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--no-channels-last", action="store_true")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--smoke", action="store_true", help="tiny run of every code path")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.smoke:
        args.images, args.n0, args.n, args.rounds = 2, 10, 100, 1
    amp = None if args.amp == "none" else args.amp
    engine = {
        k: v
        for k, v in (("batch_size", args.batch_size), ("amp", amp), ("compile", args.compile))
        if v is not None and v != "auto"
    }
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = build_classifier(args.arch, num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    model.eval().to(device)
    images = torch.rand(args.images, 3, 32, 32)
    labels = torch.randint(0, 10, (args.images,))
    samples = args.images * (args.n0 + args.n)
    protocol = dict(sigma=args.sigma, n0=args.n0, n=args.n, alpha=0.001)
    print(
        f"device={device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), "
        f"threads={torch.get_num_threads()}, arch={args.arch}, images={args.images}, "
        f"n0={args.n0}, n={args.n}, certbench engine={engine or 'default arguments'} -> "
        f"{chosen(device, samples, args)}, channels_last={not args.no_channels_last}, "
        f"reference batch={args.reference_batch_size} fp32"
    )

    def ours():
        return certify(
            model,
            images,
            labels,
            device=device,
            channels_last=not args.no_channels_last,
            **engine,
            **protocol,
        )

    # warm-up (compilation, cudnn autotuning) outside the timed run: the same engine choice
    warm = chosen(device, samples, args)
    certify(
        model,
        images[:1],
        labels[:1],
        device=device,
        channels_last=not args.no_channels_last,
        batch_size=warm.batch_size,
        amp=warm.amp,
        compile=warm.compile,
        **{**protocol, "n": 2 * warm.batch_size},
    )
    model.to(memory_format=torch.contiguous_format)
    ref_images = images.to(device)
    ref_batch = args.reference_batch_size

    def reference():
        return reference_certify(
            model, ref_images, labels, batch_size=ref_batch, classes=10, **protocol
        )

    # alternate the two so that load from other processes hits both alike
    ratios, ours_rates, ref_rates = [], [], []
    for round_ in range(args.rounds):
        ours_seconds = timed(ours)[1]
        ours_rates.append(samples / ours_seconds)
        if args.skip_reference:
            print(f"round {round_}: certbench {ours_rates[-1]:,.0f} samples/s")
            continue
        model.to(memory_format=torch.contiguous_format)
        ref_rates.append(samples / timed(reference)[1])
        ratios.append(ours_rates[-1] / ref_rates[-1])
        print(
            f"round {round_}: certbench {ours_rates[-1]:,.0f} samples/s, "
            f"reference {ref_rates[-1]:,.0f} samples/s, ratio {ratios[-1]:.2f}x"
        )
    print(f"certbench  : {np.median(ours_rates):12,.0f} noisy samples/s (median)")
    if ratios:
        print(f"reference  : {np.median(ref_rates):12,.0f} noisy samples/s (median)")
        print(f"ratio      : {np.median(ratios):.2f}x (median of {len(ratios)} rounds)")


if __name__ == "__main__":
    main()
