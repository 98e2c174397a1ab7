"""Training images/s of each `certbench train` recipe versus plain cross-entropy training.

Both run in this process on the same model, the same synthetic CIFAR-shaped uint8 images and
the same batch size, alternating, best of ``--rounds``. "Plain CE" is the textbook step: random
crop + flip, one forward/backward of the clean batch, one SGD step. A recipe's step is what
`certbench train` does: seeded crop + flip, its views (AugMix / FourierMix), its noise copies,
its loss (JSD / Jeong & Shin / HCR), backward, SGD. Images/s counts distinct training images.
Augmentation ("aug") and model work ("model") are timed separately: with DataLoader workers
(`certbench train` on CUDA) the two overlap, so a run goes at about the slower of the two;
in one process (CPU default, ``--workers 0``) they add up ("serial").

    uv run python benchmarks/train_throughput.py --steps 4 --batch-size 64
    uv run python benchmarks/train_throughput.py --smoke   # seconds: every code path, no figure
    uv run python benchmarks/train_throughput.py --device cuda --amp bf16 --channels-last \
        --arch cifar_resnet110 --batch-size 256 --steps 30 --rounds 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from certbench.augment import RandomStream, crop_flip
from certbench.nets import build_classifier
from certbench.training import (
    RECIPES,
    Recipe,
    Schedule,
    TrainBatches,
    build_optimizer,
    make_views,
    recipe_loss,
)

CIFAR_IMAGES, PAPER_EPOCHS = 50_000, 200


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], object]) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def autocast(device: torch.device, amp: str | None):
    if amp is None:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[amp])


def make_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_classifier(args.arch, num_classes=10, mean=[0.5] * 3, std=[1.0] * 3)
    model = model.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def forward_of(
    model: torch.nn.Module, channels_last: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    if not channels_last:
        return model
    return lambda x: model(x.contiguous(memory_format=torch.channels_last))


def plain_ce(args, device, images, labels) -> tuple[float, float, float]:
    """(aug seconds, model seconds, images) of plain cross-entropy training."""
    model = make_model(args, device)
    optimizer, _ = build_optimizer(model, Schedule())
    forward = forward_of(model, args.channels_last)
    b = args.batch_size
    batches = []
    aug = timed(
        device,
        lambda: batches.extend(
            crop_flip(images[i * b : (i + 1) * b], list(range(i * b, (i + 1) * b)))
            for i in range(args.steps)
        ),
    )

    def steps() -> None:
        for i, x in enumerate(batches):
            x = x.to(device).float().div_(255.0)
            with autocast(device, args.amp):
                loss = F.cross_entropy(forward(x).float(), labels[i * b : (i + 1) * b].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return aug, timed(device, steps), args.steps * b


def recipe_run(args, device, recipe: Recipe, images, labels) -> tuple[float, float, float]:
    """(aug seconds, model seconds, images) of one recipe's training steps."""
    model = make_model(args, device)
    optimizer, _ = build_optimizer(model, Schedule())
    forward = forward_of(model, args.channels_last)
    gpu_views = device.type == "cuda" and recipe.views == "fouriermix"
    data = TrainBatches(
        images, labels, torch.arange(len(images)), recipe, seed=0, gpu_views=gpu_views
    )
    b = args.batch_size
    batches: list[dict] = []
    aug = timed(
        device,
        lambda: batches.extend(
            data[(0, list(range(i * b, (i + 1) * b)))] for i in range(args.steps)
        ),
    )
    lbd, eta = recipe.default_weights("cifar10")

    def steps() -> None:
        for i, batch in enumerate(batches):
            if "views" in batch:
                views = batch["views"].to(device)
            else:  # FourierMix on the GPU: part of the model-side time
                views = make_views(recipe, batch["base"].to(device), batch["seeds"])
            with autocast(device, args.amp):
                result = recipe_loss(
                    recipe,
                    forward,
                    views,
                    batch["labels"].to(device),
                    sigma=0.25,
                    stream=RandomStream(i, device),
                    lbd=lbd,
                    eta=eta,
                )
            optimizer.zero_grad(set_to_none=True)
            result.loss.backward()
            optimizer.step()

    return aug, timed(device, steps), args.steps * b


def best(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Fastest aug and fastest model time over rounds (each measured on the same work)."""
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cifar_resnet20")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", default=None, choices=[None, "bf16", "fp16"])
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--smoke", action="store_true", help="one tiny step of everything (seconds, no figure)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.arch, args.batch_size, args.steps, args.rounds = "lenet5", 4, 1, 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    count = args.batch_size * args.steps
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (count, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (count,), generator=g)
    names = [n for n in args.recipes.split(",") if n]

    # warm-up (allocator, kernels, lazy imports) on both sides
    warm = argparse.Namespace(**{**vars(args), "steps": 1})
    plain_ce(warm, device, images, labels)
    recipe_run(warm, device, RECIPES["fouriermix-hcr"], images, labels)

    reference: list[tuple[float, float, float]] = []
    results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    for _ in range(args.rounds):
        reference.append(plain_ce(args, device, images, labels))
        for name in names:
            results[name].append(recipe_run(args, device, RECIPES[name], images, labels))

    ref_aug, ref_model, n = best(reference)
    ref_rate = n / (ref_aug + ref_model)
    print(
        f"{args.arch} on {device} (threads {args.threads}, amp {args.amp}, batch "
        f"{args.batch_size}, {args.steps} steps, best of {args.rounds})"
    )
    print(
        f"{'recipe':<16}{'passes/img':>11}{'aug img/s':>11}{'model img/s':>12}"
        f"{'serial img/s':>13}{'vs plain CE':>12}{'200 ep CIFAR-10':>17}"
    )

    def row(name: str, passes: int, aug: float, model: float) -> None:
        serial = n / (aug + model)
        hours = PAPER_EPOCHS * CIFAR_IMAGES / serial / 3600
        print(
            f"{name:<16}{passes:>11}{n / aug:>11.0f}{n / model:>12.1f}{serial:>13.1f}"
            f"{serial / ref_rate:>11.2f}x{hours:>15.1f} h"
        )

    row("plain CE", 1, ref_aug, ref_model)
    for name in names:
        aug, model, _ = best(results[name])
        recipe = RECIPES[name]
        row(name, recipe.num_views * recipe.noise_samples, aug, model)
    print(
        "\nGPU (one CUDA device; FourierMix views on the GPU, AugMix in the loader workers):\n"
        "  uv run python benchmarks/train_throughput.py --device cuda --amp bf16 "
        "--channels-last --arch cifar_resnet110 --batch-size 256 --steps 30 --rounds 2\n"
        "  uv run certbench train --recipe fouriermix-hcr --dataset cifar10 "
        "--arch cifar_resnet110 --sigma 0.25 --out runs/fouriermix-hcr --device cuda"
    )


if __name__ == "__main__":
    main()
