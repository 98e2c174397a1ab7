"""Cost of the leaderboard's robustness stage per image, and of exact versus lazy PD projection.

    uv run python benchmarks/robustness_stage.py [--arch cifar_resnet20] [--images 16]
        [--n-iter 10] [--device cpu]

Runs ``robust_accuracy`` exactly as a robustness shard does (ε ∈ {8, 16}/255, APGD-CE + 9 APGD-T
targets, each followed by the lazy projection, plus PD-aware APGD; k = 50 anchors per class) on
random CIFAR-shaped images labelled with the model's own predictions, so every image is attacked.
It prints seconds per image at ``--n-iter`` steps, the linear extrapolation to the protocol's 100
steps and to the 500-image subset, and the ratio of the whole stage's cost with the exact
projection to that with the lazy one (same process, same data). A random network stands in for a
trained one: the cost of an APGD step does not depend on the weights.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from certbench.nets import build_classifier
from certbench.pd import PDThreat, build_anchor_bank, robust_accuracy

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--arch", default="cifar_resnet20")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--n-iter", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.n_iter = 2, 1
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_classifier(args.arch, num_classes=10, mean=MEAN, std=STD).eval().to(device)
    g = torch.Generator().manual_seed(0)
    bank_images = 200 if args.smoke else 5000
    train = torch.randint(0, 256, (bank_images, 3, 32, 32), dtype=torch.uint8, generator=g)
    names = [f"c{i}" for i in range(10)]
    labels = torch.arange(bank_images) % 10
    bank = build_anchor_bank(train, labels, class_names=names, dataset="random")
    threat = PDThreat(bank, device=device)
    x = torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8, generator=g)
    with torch.no_grad():
        y = model(x.float().div(255).to(device)).argmax(1).cpu()
    seconds = {}
    for projection in ("lazy", "exact"):
        started = time.perf_counter()
        robust_accuracy(
            model, x, y, anchors=threat, n_iter=args.n_iter, n_target_classes=9,
            batch_size=args.images, device=device, pd_projection=projection,
        )  # fmt: skip
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds[projection] = time.perf_counter() - started
    per_image = seconds["exact"] / args.images
    at_100 = per_image * 100 / args.n_iter
    print(f"device {device}, {args.arch}, load average {os.getloadavg()[0]:.1f}")
    print(
        f"{args.images} images, n_iter={args.n_iter}: exact {seconds['exact']:.1f} s, "
        f"lazy {seconds['lazy']:.1f} s (exact/lazy = {seconds['exact'] / seconds['lazy']:.2f})"
    )
    print(f"exact projection: {per_image:.2f} s/image; at n_iter=100 ≈ {at_100:.1f} s/image, "
          f"500-image subset ≈ {at_100 * 500 / 3600:.2f} h")  # fmt: skip


if __name__ == "__main__":
    main()
