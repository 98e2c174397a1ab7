"""``certbench threat-report`` and ``certbench anchors build|k-min|info`` (entry point ``pd``).

Only typer at import time: the science (torch, the data loaders) is imported inside each command,
so registering these commands costs nothing for ``certbench --help`` or any other command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli.app import user_errors
from certbench.cli.checks import SEED_MAX

ANCHORS_PER_CLASS = 50
"""``certbench.pd.anchors.DEFAULT_K`` (the k of Muthukumar et al. 2025, arXiv:2501.18098), repeated
so that this module stays light; a test keeps the two equal."""

Source = Annotated[str, typer.Argument(help="Training source: cifar10, cifar100, a path.")]


@user_errors
def threat_report_command(
    dataset_dir: Annotated[Path, typer.Argument(help="Generated dataset folder (Hub layout).")],
    clean: Annotated[str, typer.Option(help="Clean source: cifar10, cifar100, a path.")],
    anchors: Annotated[Path, typer.Option(help="Anchor bank (.safetensors).")],
    config: Annotated[list[str] | None, typer.Option(help="Only these configs.")] = None,
    limit: Annotated[int | None, typer.Option(help="First N images per config.", min=1)] = None,
    pairs: Annotated[int, typer.Option(help="Unsafe pairs for reference.", min=1)] = 1000,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX)] = 0,
    batch_size: Annotated[int, typer.Option(min=1)] = 500,
    device: Annotated[str | None, typer.Option(help="e.g. cuda; default cpu.")] = None,
    card: Annotated[bool, typer.Option(help="Add the table and figure to README.md.")] = True,
) -> None:
    """Mean and quantiles of d_PD, d_∞, d_2 of every config; JSON, figure and card section."""
    from certbench.figures import render, threat_figure
    from certbench.pd import AnchorBank, threat_points, threat_report, write_threat_report

    report = threat_report(
        dataset_dir,
        clean_source=clean,
        anchors=AnchorBank.load(anchors),
        configs=config,
        limit=limit,
        pairs=pairs,
        seed=seed,
        batch_size=batch_size,
        device=device,
        progress=True,
    )
    figure = render(threat_figure(*threat_points(report)), "png")
    written = write_threat_report(report, dataset_dir, card=card, figure_png=figure)
    for s in report.sets:
        typer.echo(
            f"{s.name}: d_PD {s.d_pd.mean:.3f}  d_inf {s.d_inf.mean:.3f}  d_2 {s.d_2.mean:.3f}"
        )
    u = report.unsafe_pairs
    typer.echo(f"unsafe pairs: d_PD {u.d_pd.mean:.3f}  d_inf {u.d_inf.mean:.3f}")
    typer.echo("wrote " + ", ".join(str(p) for p in written))


anchors_app = typer.Typer(
    help="PD-threat anchor banks (Algorithm 1 of Muthukumar, Pal, Sulam & Vidal 2025, "
    "arXiv:2501.18098).",
    no_args_is_help=True,
)


@anchors_app.command("build")
@user_errors
def anchors_build(
    source: Source,
    out: Annotated[Path, typer.Option(help="Where to write the .safetensors bank.")],
    k: Annotated[int, typer.Option(help="Anchors per class.", min=1)] = ANCHORS_PER_CLASS,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX)] = 0,
    split: Annotated[str, typer.Option()] = "train",
    revision: Annotated[str | None, typer.Option(help="Hub revision of the source.")] = None,
) -> None:
    """Select k anchors per class from the training split and save them with provenance."""
    from certbench.data import load_images
    from certbench.pd import bank_from_image_set

    images = load_images(source, split=split, revision=revision)
    bank = bank_from_image_set(
        images, dataset=source, k=k, seed=seed, revision=revision, split=split
    )
    path = bank.save(out)
    typer.echo(f"wrote {path}: {bank.images.shape[0]} anchors, k={k}, seed={seed}")


@anchors_app.command("k-min")
@user_errors
def anchors_k_min(
    source: Source,
    k_max: Annotated[int, typer.Option(help="Largest k tried.", min=1)] = ANCHORS_PER_CLASS,
    pairs: Annotated[int, typer.Option(help="Sampled different-class pairs.", min=1)] = 2000,
    limit: Annotated[int | None, typer.Option(help="First N training images only.", min=1)] = None,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX)] = 0,
    split: Annotated[str, typer.Option()] = "train",
) -> None:
    """Smallest k whose PD threat rates every sampled unsafe training pair above 1."""
    from certbench.data import Subset, load_images
    from certbench.pd import find_k_min

    images = load_images(source, split=split, subset=Subset(limit=limit) if limit else None)
    result = find_k_min(
        images.images,
        images.labels,
        class_names=images.class_names,
        k_max=k_max,
        seed=seed,
        pairs=pairs,
    )
    for k, value in result.min_threat_by_k.items():
        typer.echo(f"k={k}: min d_PD over {result.pairs} unsafe pairs = {value:.4f}")
    typer.echo(f"k_min = {result.k_min if result.k_min is not None else f'> {k_max}'}")


@anchors_app.command("info")
@user_errors
def anchors_info(path: Annotated[Path, typer.Argument(help="Anchor bank file.")]) -> None:
    """Print a bank's provenance."""
    from certbench.pd import AnchorBank

    bank = AnchorBank.load(path)
    for key, value in bank.metadata().items():
        if key != "class_names":
            typer.echo(f"{key}: {value}")
    typer.echo(f"anchors: {bank.images.shape[0]} of shape {tuple(bank.images.shape[1:])}")


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:pd``: threat-report and anchors sub-commands."""
    app.command("threat-report")(threat_report_command)
    app.add_typer(anchors_app, name="anchors")
