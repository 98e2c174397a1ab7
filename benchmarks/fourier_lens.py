"""Fourier-lens paths/s for a CIFAR ResNet-20: batched paths versus a released-code port.

    uv run python benchmarks/fourier_lens.py [--paths 6] [--ref-paths 2] [--batch-size 1000]
        [--device cpu] [--threads N] [--rounds 2]
    # GPU:
    uv run python benchmarks/fourier_lens.py --device cuda --paths 200 --ref-paths 20 \
        --batch-size 10000

Both run in this process on the same random CIFAR-shaped images (3×32×32 in [0, 1]), the same
randomly initialised ResNet-20 (a path's cost does not depend on the weights) and the same pairs.
Ours: ``lens_records`` on the amplitude and phase kinds (float64 batched FFT paths, whole paths
per forward, channels-last; also shown without channels-last). Reference: a literal per-image
port of the released ``fourier_interpolation.py`` (numpy; for each of the 100 λ it recomputes
both images' FFTs and builds one image; one forward per path of 100 images; ``process_path`` and
``measure_path_consistency`` per path). The results are checked to agree (HFF as the released
code computes it, and CD). Prints paths/s for both, the ratio, and the full protocol's
extrapolated time (5,000 pairs × 2 path types). Best of ``--rounds``; the load average is
printed because the machine may be shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time

import numpy as np
import torch

from certbench.lens import LensProtocol, lens_plan, lens_records
from certbench.nets import build_classifier

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def released_amplitude_image(src: np.ndarray, trg: np.ndarray, weight: float, part: str):
    """One image of the released ``amplitude_interpolation``/``phase_interpolation`` (window
    0.2): ``weight`` is the released code's L, the share of the source."""
    f_src, f_trg = np.fft.fft2(src, axes=(-2, -1)), np.fft.fft2(trg, axes=(-2, -1))
    a_src, p_src = np.abs(f_src), np.angle(f_src)
    a_trg, p_trg = np.abs(f_trg), np.angle(f_trg)
    s, t = (a_src, a_trg) if part == "amplitude" else (p_src, p_trg)
    s = np.fft.fftshift(s, axes=(-2, -1))
    t = np.fft.fftshift(t, axes=(-2, -1))
    _, h, w = s.shape
    b = int(np.floor(min(h, w) * 0.2))
    ch, cw = h // 2, w // 2
    window = (slice(None), slice(ch - b, ch + b + 1), slice(cw - b, cw + b + 1))
    s[window] = weight * s[window] + (1.0 - weight) * t[window]
    s = np.fft.ifftshift(s, axes=(-2, -1))
    spectrum = s * np.exp(1j * p_src) if part == "amplitude" else a_src * np.exp(1j * s)
    return np.real(np.fft.ifft2(spectrum, axes=(-2, -1)))


def reference(model, images: np.ndarray, pairs: np.ndarray, part: str, device) -> list:
    """Released-code port: per path, 100 images built one by one, one forward, HFF and CD."""
    data = (images.transpose(0, 2, 3, 1) - np.array(MEAN)) / np.array(STD)  # (N, H, W, C)
    out = []
    for i0, i1 in pairs:
        ts = list(reversed(np.linspace(0, 1, 100)))
        path = np.stack([released_amplitude_image(data[i0].T, data[i1].T, t, part).T for t in ts])
        x = torch.from_numpy(path).permute(0, 3, 1, 2).float().to(device)
        x = x * torch.tensor(STD, device=device).view(1, 3, 1, 1)
        x = x + torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        with torch.inference_mode():
            probabilities = model(x).softmax(dim=1).double().cpu().numpy()
        amplitude = np.abs(np.fft.rfft(probabilities, axis=0)).mean(axis=1)
        k_t = math.ceil(0.1 * len(amplitude))
        hff = amplitude[k_t:-1].sum() / amplitude.sum()
        top = probabilities.argmax(axis=1)
        changed = np.flatnonzero(top != top[0])
        out.append((float(hff), int(changed[0]) if len(changed) else len(top)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--paths", type=int, default=6, help="Fourier pairs for ours")
    parser.add_argument("--ref-paths", type=int, default=2, help="Fourier pairs for the port")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.smoke:
        args.paths, args.ref_paths, args.batch_size, args.rounds = 1, 1, 100, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD)
    model = model.eval().to(device)
    count = 2 * max(args.paths, args.ref_paths)
    g = torch.Generator().manual_seed(0)
    images = torch.rand((count, 3, 32, 32), generator=g)
    labels = torch.arange(count) % 10
    protocol = LensProtocol(paths=args.paths, kinds=("amplitude", "phase"))
    kwargs = dict(protocol=protocol, batch_size=args.batch_size)

    with torch.inference_mode():  # warm-up: oneDNN kernels, CUDA context
        model(images[:100].to(device).contiguous(memory_format=torch.channels_last))
    ours_best, plain_best, ref_best = math.inf, math.inf, math.inf
    for _ in range(args.rounds):
        started = time.perf_counter()
        records = lens_records(model, images, labels, **kwargs)
        ours_best = min(ours_best, time.perf_counter() - started)
        model.to(memory_format=torch.contiguous_format)
        started = time.perf_counter()
        lens_records(model, images, labels, channels_last=False, **kwargs)
        plain_best = min(plain_best, time.perf_counter() - started)
        started = time.perf_counter()
        plan = lens_plan(labels, dataclasses.replace(protocol, paths=args.ref_paths), seed=0)
        ref = [
            r
            for part in ("amplitude", "phase")
            for r in reference(model, images.numpy(), plan.pairs[part], part, device)
        ]
        ref_best = min(ref_best, time.perf_counter() - started)

    by_kind = {(r.kind, r.index): r for r in records}
    keys = [(p, i) for p in ("amplitude", "phase") for i in range(args.ref_paths)]
    hff_gap = max(abs(by_kind[k].hff_released - h) for k, (h, _) in zip(keys, ref, strict=True))
    cd_same = all(by_kind[k].cd == cd for k, (_, cd) in zip(keys, ref, strict=True))
    ours_rate = 2 * args.paths / ours_best
    plain_rate = 2 * args.paths / plain_best
    ref_rate = 2 * args.ref_paths / ref_best
    full = 2 * 5000
    print(f"device {device}, torch threads {torch.get_num_threads()}, load {os.getloadavg()}")
    print(f"agreement: max |ΔHFF (released)| = {hff_gap:.2e}, CD identical: {cd_same}")
    print(f"ours      {ours_rate:8.2f} paths/s  ({100 * ours_rate:,.0f} images/s)")
    print(f"ours, NCHW {plain_rate:7.2f} paths/s  (channels_last=False)")
    print(f"reference {ref_rate:8.2f} paths/s  ({100 * ref_rate:,.0f} images/s)")
    print(f"ratio     {ours_rate / ref_rate:8.2f}×")
    print(
        f"full protocol ({full:,} Fourier paths): ours {full / ours_rate / 60:.1f} min, "
        f"reference {full / ref_rate / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
