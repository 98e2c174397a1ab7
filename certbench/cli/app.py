"""The ``certbench`` command.

The core package owns only the science commands (certify, metrics). Generators, the API server
and the workers live above ``certbench/`` in the layering, so they plug their own sub-commands in
through the ``certbench.commands`` entry-point group: each entry point names a callable
``register(app: typer.Typer) -> None``. The core never imports them by name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar, cast

import typer

from certbench import __version__
from certbench.cli.budget import (
    DEFAULT_MAX_HOURS,
    Limits,
    MaxHours,
    MaxMemory,
    Sampling,
    check_floor,
    check_run,
    check_smoothing,
)
from certbench.cli.checks import (
    EPS,
    LEVEL,
    Alpha,
    Limit,
    OptionalBatchSize,
    Samples,
    SelectSamples,
    Sigma,
    Skip,
    check_alpha,
    warn_if_never_certifies,
)
from certbench.errors import CertbenchError, ManifestError

P = ParamSpec("P")
R = TypeVar("R")
if TYPE_CHECKING:
    from rich.console import Console


class _LazyConsole:
    """A rich Console made on first use: importing rich costs a tenth of a second that
    ``certbench --help`` and a refused command line need not pay (issue 34 §6)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def _made(self) -> Console:
        if self._console is None:
            from certbench.cli.output import make_console

            self._console = make_console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    # Special methods skip __getattr__: rich's Live (a Progress bar) enters its console.
    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._made().__exit__(*exc)


def lazy_console(**options: Any) -> Console:
    """A ``rich.console.Console(**options)`` made on first use (for module-level consoles);
    plain when not a terminal (``certbench.cli.output``)."""
    return cast("Console", _LazyConsole(**options))


console = lazy_console()
errors = lazy_console(stderr=True, soft_wrap=True)  # keep paths unbroken

PLUGIN_GROUP = "certbench.commands"

app = typer.Typer(
    name="certbench",
    help="Certified-robustness benchmarks: certify models, build datasets, run the leaderboard.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    # Plain help and usage errors (click's formatter): rich's help renderer costs a third of
    # ``certbench --help`` on a busy machine (typer.rich_utils loads rich.markdown, pygments,
    # rich.traceback), and the help must answer in under a second (issue 34 §6).
    rich_markup_mode=None,
)


def user_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Show a CertbenchError as one clear line and exit 2, never as a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except CertbenchError as err:
            errors.print(f"[bold red]error:[/] {err}", highlight=False)
            raise typer.Exit(2) from err

    return wrapper


Weights = Annotated[Path, typer.Option(help="Model weights (safetensors only).")]
ManifestPath = Annotated[Path, typer.Option(help="JSON manifest: architecture, classes, mean/std.")]


def dataset_name(value: str | None) -> str | None:
    """Option callback: a misspelt dataset name is a usage error at once (with a suggestion),
    not a Hub lookup that fails after retries (``certbench.data.names``)."""
    from certbench.data import check_name

    if value is not None:
        try:
            check_name(value)
        except CertbenchError as err:
            raise typer.BadParameter(str(err)) from err
    return value


CLEAN = "clean"
"""What the service calls a benchmark's uncorrupted test set, whatever its data set's config is
called (the demo's digits: their folder's one config, ``default``)."""


def clean_config(dataset: str, config: str | None) -> str | None:
    """``--config clean`` on a local data set that has exactly one config, of another name:
    that config, read as the service reads a test set without a config (issue 34 §8: the docs'
    ``--config clean`` was refused on the demo's digits, "available: ['default']", although the
    service names that test set ``clean``). The records are keyed ``default/<split>`` as the
    service keys it, and a line on stderr says so. Any other ``config`` as given."""
    if config != CLEAN or not Path(dataset).exists():
        return config
    from certbench.data import list_configs

    configs = list_configs(dataset)
    if CLEAN in configs or len(configs) != 1:
        return config
    errors.print(
        f"--config clean: {dataset} has one config, {configs[0]!r}, which holds its clean "
        "images; reading it as the service reads its test set 'clean'",
        highlight=False,
    )
    return None


Dataset = Annotated[
    str,
    typer.Option(
        help="Hub id (cifar10, org/name), Hub-layout folder, or torchvision CIFAR folder.",
        callback=dataset_name,
    ),
]
Seed = Annotated[
    str,
    typer.Option(
        help="Run seed: a decimal integer or 0x-prefixed hex, any size up to 256 bits "
        "(e.g. a revealed 128-bit service seed); records reproduce bit for bit per device type."
    ),
]


@app.command()
@user_errors
def certify(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Per-image records (parquet).")],
    arch: Annotated[
        str | None, typer.Option(help="Must match the manifest's architecture.")
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            help="Dataset config (test set); 'clean' also names a local data set's one config."
        ),
    ] = None,
    split: str = "test",
    revision: Annotated[str | None, typer.Option(help="Hub revision (commit/tag).")] = None,
    sigma: Sigma = None,
    n0: SelectSamples = 100,
    n: Samples = 100_000,
    alpha: Alpha = 0.001,
    skip: Skip = 1,
    limit: Limit = None,
    batch_size: OptionalBatchSize = None,
    amp: Annotated[
        str | None,
        typer.Option(help="bf16 or fp16 autocast of the forward; 'auto': the device's default."),
    ] = "auto",
    seed: Seed = "0",
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ...")] = None,
    compile: Annotated[
        bool | None,
        typer.Option(help="torch.compile the model; if unset, for runs long enough to repay it."),
    ] = None,
    channels_last: bool = True,
    early_abstain: Annotated[
        bool, typer.Option(help="Stop sampling once abstention is certain (exact).")
    ] = False,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Certify a model with randomized smoothing (Cohen et al. CERTIFY) on a test set."""
    warn_if_never_certifies(n, alpha)
    limits = Limits.of(max_hours, max_memory_gb)
    check_floor("certify", (n0, n), limits)
    from certbench.data import Subset, load_images
    from certbench.nets import (
        architecture_provenance,
        denoiser_provenance,
        load_manifest,
        load_model,
    )
    from certbench.smoothing import certify as run_certify
    from certbench.smoothing import fallback_metadata, parse_seed, summarize, write_records

    run_seed = parse_seed(seed)
    config = clean_config(dataset, config)
    spec = load_manifest(manifest)
    if arch is not None and arch != spec.architecture.name:
        raise ManifestError(
            f"--arch {arch!r} contradicts the manifest's architecture {spec.architecture.name!r}"
        )
    model = load_model(weights, spec, device=device)
    images = load_images(
        dataset, config=config, split=split, revision=revision, subset=Subset(skip, limit)
    )
    sigma = spec.smoothing.sigma if sigma is None else sigma
    test_set = f"{config or 'default'}/{split}"
    _estimate("certify", Sampling(len(images), (n0, n)), limits, model, images, batch_size, amp)
    records = run_certify(
        model,
        images.as_float(),
        images.labels,
        sigma=sigma,
        n0=n0,
        n=n,
        alpha=alpha,
        batch_size=batch_size,
        seed=run_seed,
        device=device,
        indices=images.indices,
        test_set=test_set,
        amp=amp,
        channels_last=channels_last,
        compile=compile,
        early_abstain=early_abstain,
        progress=True,
    )
    metadata = {
        "dataset": dataset,
        "config": config,
        "split": split,
        "revision": revision,
        "test_set": test_set,
        "protocol": {"sigma": sigma, "n0": n0, "n": n, "alpha": alpha, "skip": skip},
        "seed": str(run_seed),
        "device_type": _device_type(model),
        "certbench_version": __version__,
        "architecture": architecture_provenance(spec.architecture.name),
        **({"denoiser": built} if (built := denoiser_provenance(spec.model_dump())) else {}),
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "manifest": spec.model_dump(mode="json"),
        **fallback_metadata(model),
    }
    write_records(records, out, metadata)
    _print_summary(
        summarize(records),
        title=f"{test_set}: σ={sigma}, n={n}, α={alpha}",
        intervals=_intervals(records, 0.95),
    )
    console.print(f"records: {out}")


@app.command()
@user_errors
def predict(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    config: str | None = None,
    split: str = "test",
    revision: str | None = None,
    sigma: Sigma = None,
    n: Samples = 100_000,
    alpha: Alpha = 0.001,
    skip: Skip = 1,
    limit: Limit = None,
    batch_size: OptionalBatchSize = None,
    seed: Seed = "0",
    device: str | None = None,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Smoothed prediction (Cohen et al. PREDICT): accuracy and abstain rate."""
    limits = Limits.of(max_hours, max_memory_gb)
    check_floor("predict", (n,), limits)
    from certbench.data import Subset, load_images
    from certbench.nets import load_manifest, load_model
    from certbench.smoothing import ABSTAIN, parse_seed
    from certbench.smoothing import predict as run_predict

    run_seed = parse_seed(seed)
    config = clean_config(dataset, config)
    spec = load_manifest(manifest)
    model = load_model(weights, spec, device=device)
    images = load_images(
        dataset, config=config, split=split, revision=revision, subset=Subset(skip, limit)
    )
    _estimate("predict", Sampling(len(images), (n,)), limits, model, images, batch_size, "auto")
    records = run_predict(
        model,
        images.as_float(),
        images.labels,
        sigma=spec.smoothing.sigma if sigma is None else sigma,
        n=n,
        alpha=alpha,
        batch_size=batch_size,
        seed=run_seed,
        device=device,
        indices=images.indices,
        test_set=f"{config or 'default'}/{split}",
        progress=True,
    )
    accuracy = sum(r.correct for r in records) / len(records)
    abstain = sum(r.prediction == ABSTAIN for r in records) / len(records)
    console.print(f"images {len(records)}  accuracy {accuracy:.4f}  abstain rate {abstain:.4f}")


@app.command()
@user_errors
def metrics(
    records: Annotated[Path, typer.Argument(help="Records parquet written by `certify`.")],
    alpha: Annotated[
        float | None,
        typer.Option(
            help="Recompute bounds and radii at this α from the counts.", callback=check_alpha
        ),
    ] = None,
    level: Annotated[
        float, typer.Option(help="Confidence level of the intervals.", callback=LEVEL)
    ] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Metrics of a records file with their intervals over images: ACR (bootstrap), certified
    accuracy (Clopper-Pearson), abstain rate, p_A distribution and its simultaneous band."""
    from certbench.smoothing import read_records, recompute_at_alpha, summarize

    loaded = read_records(records)
    if alpha is not None:
        loaded = recompute_at_alpha(loaded, alpha)
    summary = summarize(loaded)
    intervals = _intervals(loaded, level)
    if as_json:
        console.print_json(json.dumps({**summary.to_dict(), "intervals": intervals}))
    else:
        _print_summary(summary, title=str(records), intervals=intervals)


def _intervals(records: Any, level: float) -> dict[str, Any]:
    """JSON-ready intervals of one test set's figures (certbench.stats.intervals)."""
    from certbench.stats import acr_interval, certified_accuracy_intervals, pa_band

    band = pa_band(records, level=level)
    return {
        "acr": acr_interval(records, level=level).to_dict(),
        "certified_accuracy": {
            f"{r:g}": i.to_dict()
            for r, i in certified_accuracy_intervals(records, level=level).items()
        },
        "pa_band": {"half_width": band.half_width, "level": level, "method": band.method},
    }


@app.command("robust-accuracy")
@user_errors
def robust_accuracy(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    anchors: Annotated[Path, typer.Option(help="PD anchor bank (`certbench anchors build`).")],
    out: Annotated[Path, typer.Option(help="Per-image robustness records (parquet).")],
    config: Annotated[str | None, typer.Option(help="Dataset config.")] = None,
    split: str = "test",
    revision: Annotated[str | None, typer.Option(help="Hub revision (commit/tag).")] = None,
    eps: Annotated[
        list[int] | None,
        typer.Option(help="ε in units of 1/255 (1 to 255); repeat for several.", callback=EPS),
    ] = None,
    n_iter: Annotated[int, typer.Option(help="APGD steps per run.", min=1)] = 100,
    n_target_classes: Annotated[int, typer.Option(help="APGD-T target classes.", min=1)] = 9,
    projection: Annotated[str, typer.Option(help="exact or lazy PD projection.")] = "exact",
    weighting: Annotated[str, typer.Option(help="pd, or pdw (CIFAR-100 superclasses).")] = "pd",
    k: Annotated[int | None, typer.Option(help="Use the first k anchors per class.", min=1)] = None,
    skip: Annotated[int, typer.Option(help="Attack every skip-th image.", min=1)] = 1,
    limit: Annotated[
        int | None, typer.Option(help="Attack at most this many images.", min=1)
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Images per attack batch.", min=1)] = 256,
    seed: Annotated[
        str,
        typer.Option(
            help="Run seed (decimal or 0x-hex, up to 256 bits): the benchmark's public seed or "
            "a run's revealed seed reproduces the leaderboard's figure."
        ),
    ] = "0",
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ...")] = None,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Clean, ℓ∞ and ℓ∞ ∩ PD robust accuracy of the base classifier (Muthukumar, Pal, Sulam &
    Vidal 2025, arXiv:2501.18098), as the leaderboard's robustness stage measures it (``--skip 20``
    for the 500-image subset)."""
    from certbench.data import Subset, load_images
    from certbench.errors import ThreatModelError
    from certbench.nets import load_manifest, load_model
    from certbench.pd import AnchorBank, weighted_threat
    from certbench.pd import robust_accuracy as run_attacks
    from certbench.smoothing import derive_seed, parse_seed

    run_seed = parse_seed(seed)
    if projection not in ("exact", "lazy"):
        raise ThreatModelError(f"--projection {projection!r}: use exact or lazy")
    spec = load_manifest(manifest)
    model = load_model(weights, spec, device=device)
    images = load_images(
        dataset, config=config, split=split, revision=revision, subset=Subset(skip, limit)
    )
    bank = AnchorBank.load(anchors)
    bank = bank.truncated(k) if k is not None else bank
    _attack_budget(model, images, spec.num_classes, len(eps or [8, 16]), n_iter,
                   n_target_classes, batch_size, Limits.of(max_hours, max_memory_gb))  # fmt: skip
    first = next(model.parameters())
    threat = weighted_threat(bank, weighting, device=first.device)
    report = run_attacks(
        model,
        images.images,
        images.labels,
        anchors=threat,
        eps_list=[e / 255 for e in (eps or [8, 16])],
        n_iter=n_iter,
        n_target_classes=n_target_classes,
        seed=derive_seed(run_seed, "pd"),
        batch_size=batch_size,
        device=first.device,
        indices=images.indices,
        pd_projection="exact" if projection == "exact" else "lazy",
        progress=True,
    )
    report.write(
        out,
        metadata={
            "dataset": dataset,
            "config": config or "",
            "split": split,
            "anchors_sha256": hashlib.sha256(anchors.read_bytes()).hexdigest(),
            "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
            "seed": str(run_seed),
            "certbench_version": __version__,
        },
    )
    from rich.table import Table

    table = Table(title=f"{dataset} {config or ''} ({split}): base classifier", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in report.summary().items():
        table.add_row(name, "—" if value is None else f"{value:.4f}")
    console.print(table)
    console.print(f"records: {out}")


def _attack_budget(
    model: Any,
    images: Any,
    classes: int,
    eps: int,
    n_iter: int,
    n_target_classes: int,
    batch_size: int,
    limits: Limits,
) -> None:
    """Refuse the attacks past their limits (``certbench.cli.budget``), counted as the
    leaderboard's robustness stage counts them: at most one clean pass per image, then for
    every ε and attack plan (APGD-CE, plus APGD-T on min(n_target_classes, classes − 1) targets
    from 4 classes on) ℓ∞ APGD and PD-aware APGD of n_iter + 1 passes each and one check."""
    plans = 1 + (min(n_target_classes, classes - 1) if classes >= 4 else 0)
    passes = len(images) * (1 + eps * plans * (2 * (n_iter + 1) + 1))
    shape = tuple(images.images.shape[1:])
    estimate = check_run(
        "robust-accuracy", forward_passes=passes, limits=limits, model=model,
        image_shape=shape, batch_size=batch_size,
        peak_bytes=(len(images) + 4 * batch_size) * math.prod(shape) * 4,
    )  # fmt: skip
    if estimate.seconds is not None:
        errors.print(f"robust-accuracy: estimated at most {estimate.describe()}", highlight=False)


def _estimate(
    what: str,
    sampling: Sampling,
    limits: Limits,
    model: Any,
    images: Any,
    batch_size: int | None,
    amp: str | None,
) -> None:
    """Refuse the run past its limits (``certbench.cli.budget``); say the estimate of a long
    one before it starts."""
    estimate = check_smoothing(
        what,
        sampling,
        limits,
        model=model,
        image_shape=tuple(images.images.shape[1:]),
        batch_size=batch_size,
        amp=amp,
    )
    if estimate.seconds is not None:
        errors.print(f"{what}: estimated {estimate.describe()}", highlight=False)


def _device_type(model: Any) -> str:
    """cpu or cuda: records reproduce per device type (the generators differ, see
    certbench.smoothing.streams)."""
    first = next(model.parameters(), None)
    return first.device.type if first is not None else "cpu"


def _print_summary(summary: Any, title: str, intervals: dict[str, Any] | None = None) -> None:
    """The summary as a table; with `intervals`, a column of their bounds."""
    found = intervals or {}
    rows: list[tuple[str, str, dict[str, Any] | None]] = [
        ("images", str(summary.count), None),
        ("ACR", f"{summary.acr:.4f}", found.get("acr")),
    ]
    for radius, value in summary.certified_accuracy.items():
        interval = found.get("certified_accuracy", {}).get(f"{radius:g}")
        rows.append((f"certified accuracy @ {radius:g}", f"{value:.4f}", interval))
    rows.append(("abstain rate", f"{summary.abstain_rate:.4f}", None))
    rows.append(("p_A median (n_y/n)", f"{summary.pa_median:.4f}", None))
    if "pa_band" in found:
        rows.append(("p_A curve: band half-width", f"±{found['pa_band']['half_width']:.4f}", None))
    rows.append(("seconds", f"{summary.seconds:.1f}", None))
    from rich.table import Table

    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    if intervals is not None:
        table.add_column(f"{found['acr']['level']:.0%} interval over images", justify="right")
    for name, value, interval in rows:
        cells = [name, value]
        if intervals is not None:
            cells.append("" if interval is None else _bounds(interval))
        table.add_row(*cells)
    console.print(table)


def _bounds(interval: dict[str, Any]) -> str:
    return f"[{interval['ci_low']:.4f}, {interval['ci_high']:.4f}]"


def register_plugins(target: typer.Typer) -> None:
    """Attach the sub-commands that installed packages declare under PLUGIN_GROUP."""
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            register = entry.load()
        except ImportError as err:
            raise RuntimeError(
                f"certbench plugin {entry.name!r} ({entry.value}) cannot be imported: {err}. "
                "Reinstall the project with `uv sync`."
            ) from err
        register(target)


def main() -> None:
    """Console-script entry point."""
    register_plugins(app)
    app()
