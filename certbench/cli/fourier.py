"""``certbench fourier-heatmap`` (entry point ``fourier``): Fourier sensitivity heatmaps.

Only typer at import time: torch, the data loaders and the figures are imported inside the
command, so registering it costs nothing for ``certbench --help`` or any other command.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from certbench import __version__
from certbench.cli.app import Dataset, ManifestPath, Seed, Weights, console, user_errors
from certbench.cli.budget import (
    DEFAULT_MAX_HOURS,
    Limits,
    MaxHours,
    MaxMemory,
    Sampling,
    check_floor,
    check_smoothing,
)
from certbench.cli.checks import Sigma

if TYPE_CHECKING:
    from collections.abc import Callable

    from certbench.data import ImageSet, Subset
    from certbench.fourier import Heatmap, SensitivityProtocol


@user_errors
def fourier_heatmap_command(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Output folder: records, heatmaps, summary.")],
    protocol: Annotated[
        str,
        typer.Option(
            help="paper (Sun et al., 'A Spectral View of Randomized Smoothing under Common "
            "Corruptions', ECCV 2022: 200 images, n=100,000) or quick (cheaper)."
        ),
    ] = "paper",
    config: Annotated[str | None, typer.Option(help="Dataset config (test set).")] = None,
    split: str = "test",
    revision: Annotated[str | None, typer.Option(help="Hub revision (commit/tag).")] = None,
    sigma: Sigma = None,
    n: Annotated[
        int | None, typer.Option(help="Override n (labels the protocol custom).", min=1)
    ] = None,
    n0: Annotated[int | None, typer.Option(help="Override the protocol's n0.", min=1)] = None,
    images: Annotated[
        int | None, typer.Option(help="Override images per grid point.", min=1)
    ] = None,
    skip: Annotated[int | None, typer.Option(help="Override: every skip-th image.", min=1)] = None,
    stride: Annotated[int | None, typer.Option(help="Override the grid stride.", min=1)] = None,
    signs: Annotated[
        str,
        typer.Option(
            help="per-image: one random sign r per image for all channels (Sun et al.'s released "
            "certify_fourier.py, behind the paper's heatmaps; default); per-channel: an "
            "independent sign per channel (Yin et al. 2019).",
        ),
    ] = "per-image",
    base_only: Annotated[
        bool, typer.Option(help="Only the base classifier's accuracy map (no smoothing; cheap).")
    ] = False,
    batch_size: Annotated[int, typer.Option(help="Samples per forward batch.", min=1)] = 1000,
    amp: Annotated[str | None, typer.Option(help="bf16 or fp16 autocast of the forward.")] = None,
    seed: Seed = "0",
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ...")] = None,
    compile: Annotated[bool, typer.Option(help="torch.compile the model.")] = False,
    early_abstain: Annotated[
        bool, typer.Option(help="Stop sampling once abstention is certain (exact).")
    ] = False,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Fourier sensitivity heatmaps (Sun et al. 2022 §2.2 after Yin et al. 2019): ACR of the
    smoothed classifier and accuracy of the base classifier under x + r·ε·U_ij for every
    distinct Fourier basis image U_ij."""
    limits = Limits.of(max_hours, max_memory_gb)
    if not base_only:
        check_floor("fourier-heatmap", (n0 or 0, n or 0), limits)
    from tqdm.auto import tqdm

    from certbench.data import Subset, load_images
    from certbench.errors import SensitivityError
    from certbench.fourier import (
        SIGN_NAMES,
        assemble_heatmap,
        channel_signs_of,
        get_protocol,
        sensitivity_records,
        stream_key,
        summarize_heatmap,
        write_sensitivity_records,
    )
    from certbench.nets import load_manifest, load_model
    from certbench.smoothing import parse_seed

    run_seed = parse_seed(seed)
    chosen = get_protocol(
        protocol, n=n, n0=n0, images=images, skip=skip, stride=stride,
        channel_signs=channel_signs_of(signs),
    )  # fmt: skip
    spec = load_manifest(manifest)
    model = load_model(weights, spec, device=device)

    def load(subset: Subset) -> ImageSet:
        return load_images(dataset, config=config, split=split, revision=revision, subset=subset)

    test = load(Subset(chosen.skip, chosen.images))
    if len(test) < chosen.images and protocol == "quick" and skip is None:
        chosen, test = _fit_quick(chosen, load, n=n, n0=n0, images=images, stride=stride)
    size = int(test.images.shape[-1])
    if test.images.shape[-2] != size:
        raise SensitivityError(
            f"--dataset images are {tuple(test.images.shape[-2:])}; the heatmap needs square ones"
        )
    smoothing = None if base_only else (spec.smoothing.sigma if sigma is None else sigma)
    points = chosen.points(size)
    total = _print_cost(chosen, len(test), size, len(points), smoothed=smoothing is not None)
    smoothed = Sampling(len(test) * len(points) if smoothing is not None else 0,
                        (chosen.n0, chosen.n))  # fmt: skip
    check_smoothing(
        "fourier-heatmap", smoothed, limits, model=model,
        image_shape=tuple(test.images.shape[1:]), batch_size=batch_size, amp=amp,
        other_passes=total - smoothed.forward_passes,
    )  # fmt: skip
    test_set = stream_key(config, split)
    with tqdm(total=total, unit="pass", unit_scale=True, desc="fourier-heatmap") as bar:
        records = sensitivity_records(
            model,
            test.as_float(),
            test.labels,
            test.indices,
            points,
            chosen,
            run_seed,
            sigma=smoothing,
            test_set=test_set,
            batch_size=batch_size,
            certify_batch_size=batch_size,
            device=device,
            amp=amp,
            compile=compile,
            early_abstain=early_abstain,
            on_progress=bar.update,
        )
    metadata = {
        "dataset": dataset,
        "config": config,
        "split": split,
        "revision": revision,
        "test_set": test_set,
        "protocol": chosen.model_dump(mode="json"),
        "sigma": smoothing,
        "signs": SIGN_NAMES[chosen.channel_signs],
        "seed": str(run_seed),
        "grid_size": size,
        "certbench_version": __version__,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "manifest": spec.model_dump(mode="json"),
    }
    out.mkdir(parents=True, exist_ok=True)
    written = [write_sensitivity_records(records, out / "records.parquet", metadata)]
    heatmap = assemble_heatmap(records, size=size, stride=chosen.stride)
    summary = summarize_heatmap(heatmap)
    written += _figures(heatmap, out, f"{spec.metadata.name}, {chosen.name} protocol", chosen)
    document = {**metadata, "summary": summary, "heatmap": heatmap.to_dict()}
    (out / "summary.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    written.append(out / "summary.json")
    _print_bands(summary)
    console.print("wrote " + ", ".join(str(p) for p in written))


def _fit_quick(
    chosen: SensitivityProtocol,
    load: Callable[[Subset], ImageSet],
    **overrides: int | None,
) -> tuple[SensitivityProtocol, ImageSet]:
    """The quick protocol on a split too small for its every-100th image (the demo's 364 test
    images gave 4): take every k-th image with k = split size // images, so it measures
    min(images, split size) images spread over the split, and say so. The result is labelled
    ``quick+custom`` wherever it is shown, as any override is."""
    from certbench.data import Subset
    from certbench.fourier import get_protocol

    available = len(load(Subset(1)))
    skip = max(1, available // chosen.images)
    fitted = get_protocol("quick", **overrides, skip=skip)
    test = load(Subset(fitted.skip, fitted.images))
    console.print(
        f"[yellow]the split has {available} images, so one in {chosen.skip} would give only "
        f"{(available + chosen.skip - 1) // chosen.skip}: the quick protocol takes one in {skip} "
        f"instead ({len(test)} images, labelled {fitted.name}); --skip chooses[/]"
    )
    return fitted, test


def _print_cost(
    protocol: SensitivityProtocol, images: int, size: int, points: int, *, smoothed: bool
) -> int:
    """Print what the run costs before starting it; returns the forward passes for the bar."""
    per_point = protocol.samples_per_point(images) if smoothed else 0
    console.print(f"protocol [bold]{protocol.name}[/]: {protocol.description}")
    if images < protocol.images:
        console.print(
            f"[yellow]only {images} images available (protocol: {protocol.images} images, one in "
            f"{protocol.skip} of the split); --skip 1 --images N measures the first N[/]"
        )
    console.print(
        f"{points} distinct basis images (stride {protocol.stride} on the {size}×{size} grid, "
        f"mirror cells filled by symmetry) × {images} images, ε = {protocol.epsilon:g}"
    )
    from certbench.fourier import SIGN_NAMES, SIGN_TEXT

    signs = protocol.channel_signs
    console.print(f"signs: {SIGN_NAMES[signs]}: {SIGN_TEXT[signs]}")
    if smoothed:
        console.print(
            f"cost per point: {images} × ({protocol.n0:,} + {protocol.n:,}) = {per_point:,} "
            f"smoothed forward passes + {images} base-classifier passes"
        )
    else:
        console.print(f"cost per point: {images} base-classifier forward passes (no smoothing)")
    total = points * (per_point + images)
    console.print(f"total: {total:,} forward passes ({total:.3g})")
    return total


def _figures(heatmap: Heatmap, out: Path, name: str, protocol: SensitivityProtocol) -> list[Path]:
    """PNG and SVG of each map, from the specs the web pages draw (``certbench.figures``)."""
    from certbench.figures import fourier_heatmap_figure, save

    paths = save(
        fourier_heatmap_figure(heatmap, kind="base_accuracy", name=name, epsilon=protocol.epsilon),
        out / "base_accuracy_heatmap",
    )
    if heatmap.acr is not None:
        paths += save(
            fourier_heatmap_figure(heatmap, kind="acr", name=name, epsilon=protocol.epsilon),
            out / "acr_heatmap",
        )
    return paths


def _print_bands(summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="mean by radial band (cells)", show_header=True)
    table.add_column("map")
    for band in ("low", "mid", "high", "all"):
        table.add_column(band, justify="right")
    for name in ("acr", "base_accuracy"):
        entry = summary.get(name)
        if entry is None:
            continue
        bands = entry["bands"]
        table.add_row(name, *("—" if bands[b] is None else f"{bands[b]:.4f}" for b in bands))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:fourier``: the fourier-heatmap command."""
    app.command("fourier-heatmap")(fourier_heatmap_command)
