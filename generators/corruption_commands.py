"""CLI: ``certbench generate cifar-c|cifar-c-bar|weather`` and ``certbench import cifar-c``.

The generate commands join the shared ``generators.commands.generate_app`` when this module is
imported (``generators.commands.register`` imports every ``*_commands`` module). The ``import``
group is mounted by :func:`register`, the ``corruptions`` entry point of ``certbench.commands``;
registering also imports this module, so the commands exist whichever plugin loads first (typer
reads a sub-app's commands when the CLI runs, not when it is mounted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli import user_errors
from generators.commands import REVISION_HELP, _parse_list, console, generate_app

import_app = typer.Typer(
    name="import",
    help="Convert published dataset releases into the Hub layout.",
    no_args_is_help=True,
)

DatasetOpt = Annotated[str, typer.Option(help="cifar10 or cifar100.")]
OutOpt = Annotated[Path, typer.Option(help="Output folder (Hub layout); resumable.")]
SourceOpt = Annotated[
    str | None,
    typer.Option(
        help="Clean test set: Hub id, Hub-layout folder or torchvision CIFAR folder "
        "(default: the Hub copy of --dataset)."
    ),
]
CorruptionsOpt = Annotated[
    str | None, typer.Option(help="Comma list of corruptions (default: all of the benchmark).")
]
SeveritiesOpt = Annotated[str | None, typer.Option(help="Comma list of levels, default 1..5.")]
LimitOpt = Annotated[int | None, typer.Option(help="Use only the first N test images.", min=1)]
SeedOpt = Annotated[int, typer.Option(help="Generator seed (0 to 2⁶³ − 1).", min=0, max=2**63 - 1)]


def _generate(
    key: str,
    *,
    dataset: str,
    out: Path,
    source: str | None,
    corruptions: str | None,
    severities: str | None,
    seed: int,
    limit: int | None,
    revision: str | None,
    batch_size: int,
    card: bool,
    frost_dir: Path | None = None,
) -> None:
    from certbench.data import default_revision, public_source
    from generators import corruption_card
    from generators import corruption_sets as cs

    bench = cs.benchmark(key, frost_dir=frost_dir)
    revision = default_revision(source if source is not None else dataset, revision)
    names = _parse_list(corruptions, str, "--corruptions")
    grid = cs.select(bench, names, _parse_list(severities, int, "--severities"))
    images = cs.load_source(dataset, source, revision=revision, limit=limit)
    console.print(
        f"{len(grid)} test sets x {len(images)} images from {images.name} -> {out} "
        f"({key}, seed {seed})"
    )
    from tqdm import tqdm  # here, not at import: every `certbench` start loads this module

    with (
        tqdm(total=len(grid), desc="test sets", unit="set", position=0) as sets_bar,
        tqdm(total=len(grid) * len(images), desc="images", unit="img", position=1) as img_bar,
    ):
        current: str | None = None  # the config the images bar counts
        counted = 0

        def hook(config: str, done: int, total: int) -> None:
            nonlocal current, counted
            if config != current:
                current, counted = config, 0
            img_bar.update(done - counted)
            counted = done
            if done == total:
                sets_bar.update(1)
                sets_bar.set_postfix_str(config)

        report = cs.generate_sets(
            images,
            out,
            bench,
            grid,
            dataset=dataset,
            seed=seed,
            batch_size=batch_size,
            progress=hook,
        )
    if card:
        source_info = {  # never a local path: the card is published
            **public_source(source if source is not None else dataset, revision),
            "source_sha256": cs.source_fingerprint(images),
        }
        readme = corruption_card.write_card(
            out,
            bench,
            grid,
            dataset=dataset,
            num_images=len(images),
            provenance=corruption_card.generated_provenance(seed, source_info),
            clean_example=images.images[0].permute(1, 2, 0).numpy(),
            coarse=images.coarse_labels is not None,
        )
        console.print(f"card: {readme}")
    console.print(
        f"wrote {len(report.written)} test sets ({report.images_written} images), skipped "
        f"{len(report.skipped)} already complete, in {report.seconds:.1f} s"
    )


def _make_generate_command(key: str, doc: str) -> None:
    @generate_app.command(key, help=doc)
    @user_errors
    def command(
        dataset: DatasetOpt,
        out: OutOpt,
        source: SourceOpt = None,
        corruptions: CorruptionsOpt = None,
        severities: SeveritiesOpt = None,
        seed: SeedOpt = 0,
        limit: LimitOpt = None,
        revision: Annotated[str | None, typer.Option(help=REVISION_HELP)] = None,
        batch_size: Annotated[int, typer.Option(help="Images per batch.", min=1)] = 1000,
        card: Annotated[bool, typer.Option(help="Write README.md and figures at the end.")] = True,
    ) -> None:
        _generate(
            key,
            dataset=dataset,
            out=out,
            source=source,
            corruptions=corruptions,
            severities=severities,
            seed=seed,
            limit=limit,
            revision=revision,
            batch_size=batch_size,
            card=card,
        )


@generate_app.command("cifar-c")
@user_errors
def cifar_c_command(
    dataset: DatasetOpt,
    out: OutOpt,
    source: SourceOpt = None,
    corruptions: CorruptionsOpt = None,
    severities: SeveritiesOpt = None,
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    revision: Annotated[str | None, typer.Option(help=REVISION_HELP)] = None,
    batch_size: Annotated[int, typer.Option(help="Images per batch.", min=1)] = 1000,
    card: Annotated[bool, typer.Option(help="Write README.md and figures at the end.")] = True,
    frost_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder with the official frost photographs (frost1.png ... frost5.jpg of "
            "hendrycks/robustness). Without it frost uses a procedural stand-in that is 21-32 % "
            "weaker; the card says so."
        ),
    ] = None,
) -> None:
    """Generate CIFAR-10-C / CIFAR-100-C: 15 corruptions x 5 severities (Hendrycks 2019)."""
    _generate(
        "cifar-c",
        dataset=dataset,
        out=out,
        source=source,
        corruptions=corruptions,
        severities=severities,
        seed=seed,
        limit=limit,
        revision=revision,
        batch_size=batch_size,
        card=card,
        frost_dir=frost_dir,
    )


_make_generate_command(
    "cifar-c-bar", "Generate CIFAR-10/100-C-bar: 10 corruptions x 5 severities (Mintun 2021)."
)
_make_generate_command("weather", "Generate random rain and snow test sets at 5 severities.")


@import_app.command("cifar-c")
@user_errors
def import_cifar_c_command(
    src: Annotated[Path, typer.Option(help="Folder of the official release (labels.npy, ...).")],
    out: OutOpt,
    dataset: DatasetOpt = "cifar10",
    corruptions: CorruptionsOpt = None,
    severities: SeveritiesOpt = None,
    clean: Annotated[
        str | None,
        typer.Option(help="Clean test set (any --source form) to compute spectral bands."),
    ] = None,
) -> None:
    """Convert the official CIFAR-10-C / CIFAR-100-C numpy release into the Hub layout."""
    from generators import corruption_sets as cs
    from generators.cifar_c_import import import_cifar_c

    clean_images = (
        None if clean is None else cs.load_source(dataset, clean, revision=None, limit=None)
    )
    report = import_cifar_c(
        src,
        out,
        dataset=dataset,
        corruptions=_parse_list(corruptions, str, "--corruptions"),
        severities=_parse_list(severities, int, "--severities"),
        clean=clean_images,
        progress=lambda config: console.print(f"imported {config}"),
    )
    console.print(
        f"imported {len(report.written)} test sets ({report.images_written} images), skipped "
        f"{len(report.skipped)} already complete, in {report.seconds:.1f} s; card: {out}/README.md"
    )


def register(app: typer.Typer) -> None:
    """Entry point (``certbench.commands``): mount ``import``; generate commands are already on
    the shared ``generate_app`` because importing this module added them."""
    app.add_typer(import_app, name="import")
