"""CLI plugin: ``certbench generate ...`` and ``certbench publish DIR --repo ORG/NAME``.

Registered through the ``certbench.commands`` entry point (``generators.commands:register``).
``generate`` is one typer sub-app, :data:`generate_app`, shared by every generator: modules named
``generators/*_commands.py`` add their sub-commands to it (``@generate_app.command("name")``)
and :func:`register` imports them all before mounting ``generate`` once.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from certbench.cli import lazy_console, user_errors
from certbench.errors import GeneratorError

console = lazy_console(soft_wrap=True)

REVISION_HELP = (
    "Hub revision of the source (default for cifar10/cifar100 on the Hub: the commit "
    "certbench pins, certbench.data.pins)."
)

generate_app = typer.Typer(
    name="generate",
    help="Build benchmark datasets (CIFAR-F, corruption sets) in the Hugging Face Hub layout.",
    no_args_is_help=True,
)


def _parse_list(text: str | None, cast: Callable[[str], Any], flag: str) -> list[Any] | None:
    if text is None:
        return None
    try:
        return [cast(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as err:
        raise GeneratorError(
            f"{flag}={text!r} is not a comma-separated list of numbers, e.g. {flag} 0.5,1,2"
        ) from err


@generate_app.command("cifar-f")
@user_errors
def cifar_f_command(
    dataset: Annotated[str, typer.Option(help="cifar10 or cifar100.")],
    out: Annotated[Path, typer.Option(help="Output folder (Hub layout); resumable.")],
    source: Annotated[
        str | None,
        typer.Option(
            help="Clean test set: Hub id, Hub-layout folder or torchvision CIFAR folder "
            "(default: the Hub copy of --dataset)."
        ),
    ] = None,
    protocol: Annotated[str, typer.Option(help="paper (the equations) or reference.")] = "paper",
    seed: Annotated[
        int, typer.Option(help="Generator seed (0 to 2⁶³ − 1).", min=0, max=2**63 - 1)
    ] = 0,
    alphas: Annotated[str | None, typer.Option(help="Comma list, default 0.5,1,2,3.")] = None,
    fcs: Annotated[str | None, typer.Option(help="Comma list of f_c, default 1..16.")] = None,
    severities: Annotated[str | None, typer.Option(help="Comma list, default 1,2,3.")] = None,
    extra_alphas: Annotated[
        bool, typer.Option("--extra-alphas", help="Also allow/add α = 0.1 and 0.3.")
    ] = False,
    limit: Annotated[
        int | None, typer.Option(help="Use only the first N test images.", min=1)
    ] = None,
    revision: Annotated[str | None, typer.Option(help=REVISION_HELP)] = None,
    batch_size: Annotated[int, typer.Option(help="Images per FFT batch.", min=1)] = 1000,
    card: Annotated[bool, typer.Option(help="Write README.md and figures at the end.")] = True,
    threads: Annotated[
        int | None,
        typer.Option(
            help="Torch compute threads (default: CPUs - 1; PNG writing runs beside).", min=1
        ),
    ] = None,
) -> None:
    """Generate CIFAR-10-F / CIFAR-100-F: 192 power-law Fourier test sets (Sun et al. 2022)."""
    from certbench.data import default_revision, public_source
    from generators import cifar_f, cifar_f_build

    try:
        chosen_protocol = cifar_f.Protocol(protocol)
    except ValueError as err:
        raise GeneratorError(
            f"--protocol {protocol!r} is unknown; use paper or reference."
        ) from err
    alpha_list = _parse_list(alphas, float, "--alphas")
    if alpha_list is None:
        alpha_list = list(cifar_f.ALPHAS) + (list(cifar_f.EXTRA_ALPHAS) if extra_alphas else [])
    specs = cifar_f.grid(
        alpha_list,
        _parse_list(fcs, int, "--fcs") or cifar_f.FCS,
        _parse_list(severities, int, "--severities") or cifar_f.SEVERITIES,
        extra_alphas=extra_alphas,
    )
    revision = default_revision(source if source is not None else dataset, revision)
    images = cifar_f_build.load_source(dataset, source, revision=revision, limit=limit)
    # Hub id + revision, or the kind of local folder: never a path (cards and checksums are
    # published); the builder adds the source's content hash (source_sha256)
    source_info = public_source(source if source is not None else dataset, revision)
    console.print(
        f"{len(specs)} test sets × {len(images)} images from {images.name} → {out} "
        f"(protocol {chosen_protocol.value}, seed {seed})"
    )
    from tqdm import tqdm  # here, not at import: every `certbench` start loads this module

    with (
        tqdm(total=len(specs), desc="test sets", unit="set", position=0) as sets_bar,
        tqdm(total=len(specs) * len(images), desc="images", unit="img", position=1) as img_bar,
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

        report = cifar_f_build.generate(
            images,
            out,
            specs,
            dataset=dataset,
            protocol=chosen_protocol,
            seed=seed,
            batch_size=batch_size,
            source_info=source_info,
            progress=hook,
            card=card,
            threads=threads or max(1, (os.cpu_count() or 2) - 1),
        )
    if card:
        console.print(f"card: {out / 'README.md'}")
    console.print(
        f"wrote {len(report.written)} test sets ({report.images_written} images), skipped "
        f"{len(report.skipped)} already complete, in {report.seconds:.1f} s"
    )


@user_errors
def publish_command(
    folder: Annotated[Path, typer.Argument(help="A generated Hub-layout folder.")],
    repo: Annotated[str, typer.Option(help="Target dataset repo, ORG/NAME.")],
    private: Annotated[bool, typer.Option("--private", help="Create the repo as private.")] = False,
    revision: Annotated[str | None, typer.Option(help="Branch to push to (default main).")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the plan without any network access.")
    ] = False,
    max_commit_mb: Annotated[
        int, typer.Option(help="Upper bound on the bytes of one commit, in MB.", min=1)
    ] = 1024,
) -> None:
    """Upload a dataset folder to the Hugging Face Hub, skipping files already identical there."""
    from generators import hub_publish

    result = hub_publish.publish(
        folder,
        repo,
        private=private,
        revision=revision,
        dry_run=dry_run,
        max_commit_bytes=max_commit_mb * 1024 * 1024,
        log=console.print,
    )
    console.print(result.summary())


def _import_generator_commands() -> None:
    """Import every ``generators/*_commands.py`` so their commands join :data:`generate_app`."""
    import generators

    for module in sorted(pkgutil.iter_modules(generators.__path__), key=lambda m: m.name):
        if module.name.endswith("_commands"):
            importlib.import_module(f"generators.{module.name}")


def register(app: typer.Typer) -> None:
    """Entry point of the ``certbench.commands`` group: mount ``generate`` and ``publish``."""
    _import_generator_commands()
    app.add_typer(generate_app, name="generate")
    app.command("publish")(publish_command)
