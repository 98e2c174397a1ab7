"""``certbench fourier-lens`` and ``certbench effective-robustness`` (entry point ``lens``).

Only typer and rich at import time; torch, scipy and the science modules are imported inside the
commands, so registering them costs nothing for ``certbench --help``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from certbench import __version__
from certbench.cli.app import Dataset, ManifestPath, Seed, Weights, console, user_errors
from certbench.cli.budget import DEFAULT_MAX_HOURS, Limits, MaxHours, MaxMemory, check_run
from certbench.cli.checks import LEVEL, SEED_MAX


@user_errors
def fourier_lens_command(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Output folder: records.parquet + summary.json.")],
    config: Annotated[str | None, typer.Option(help="Dataset config (clean test set).")] = None,
    split: str = "test",
    revision: Annotated[str | None, typer.Option(help="Hub revision (commit/tag).")] = None,
    paths: Annotated[
        int, typer.Option(help="Fourier pairs (amplitude + phase path each).", min=1)
    ] = 5000,
    steps: Annotated[
        int, typer.Option(help="Images per Fourier path (the paper: 100).", min=2)
    ] = 100,
    pixel_pairs: Annotated[
        int,
        typer.Option(help="Pixel paths per class (within) and per class pair (between).", min=1),
    ] = 200,
    jacobian_images: Annotated[int, typer.Option(help="First N test images.", min=1)] = 400,
    jacobian_projections: Annotated[
        int,
        typer.Option(help="0 = exact Jacobian norm; k = k random projections per image.", min=0),
    ] = 0,
    kind: Annotated[
        list[str] | None,
        typer.Option(help="Only these: amplitude, phase, pixel_within, pixel_between, jacobian."),
    ] = None,
    smoothed: Annotated[
        bool, typer.Option(help="Score paths with the smoothed classifier's votes (manifest σ).")
    ] = False,
    noise_samples: Annotated[
        int, typer.Option(help="Noise draws per image if --smoothed.", min=1)
    ] = 16,
    seed: Seed = "0",
    pairs_seed: Annotated[
        int,
        typer.Option(
            help="Seed of the Fourier and pixel pairs (public: a benchmark's lens seed; the "
            "packaged benchmarks' 0). --seed draws only the smoothed noise and the random "
            "Jacobian projections: a run's revealed seed reproduces the leaderboard's records.",
            min=0,
            max=SEED_MAX,
        ),
    ] = 0,
    batch_size: Annotated[
        int, typer.Option(help="Images per forward (whole paths).", min=1)
    ] = 1000,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ...")] = None,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Fourier-lens metrics of a model: HFF and CD on Fourier paths, pixel HFF, Jacobian norm."""
    from certbench.data import load_images
    from certbench.lens import (
        JACOBIAN_UNIT,
        KINDS,
        LensProtocol,
        fit_to_test_set,
        lens_records,
        summarize,
    )
    from certbench.lens import write_lens_records as write
    from certbench.nets import load_manifest, load_model
    from certbench.smoothing import parse_seed

    run_seed = parse_seed(seed)
    spec = load_manifest(manifest)
    protocol = LensProtocol(
        paths=paths,
        steps=steps,
        pixel_pairs=pixel_pairs,
        jacobian_images=jacobian_images,
        jacobian_projections=jacobian_projections,
        kinds=tuple(kind) if kind else KINDS,
        sigma=spec.smoothing.sigma if smoothed else None,
        noise_samples=noise_samples,
    )
    images = load_images(dataset, config=config, split=split, revision=revision)
    protocol, notes = fit_to_test_set(protocol, images.labels.numpy())
    for note in notes:
        console.print(f"[yellow]fitted to the test set: {note}[/]")
    model = load_model(weights, spec, device=device)
    _estimate(model, images, protocol, pairs_seed, batch_size, Limits.of(max_hours, max_memory_gb))
    records = lens_records(
        model,
        images.as_float(),
        images.labels,
        protocol=protocol,
        seed=run_seed,
        pairs_seed=pairs_seed,
        indices=images.indices,
        batch_size=batch_size,
        progress=True,
    )
    metadata: dict[str, Any] = {
        "name": spec.metadata.name,
        "sigma": spec.smoothing.sigma,
        "dataset": dataset,
        "config": config,
        "split": split,
        "revision": revision,
        "protocol": protocol.to_dict(),
        "seed": str(run_seed),
        "pairs_seed": pairs_seed,
        "certbench_version": __version__,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "manifest": spec.model_dump(mode="json"),
    }
    write(records, out / "records.parquet", metadata)
    summary = summarize(records)
    document = {k: metadata[k] for k in ("name", "sigma", "protocol", "seed", "pairs_seed")}
    document.update(summary.to_dict())
    document["units"] = {"jacobian_norm": JACOBIAN_UNIT, "input_space": "pixels in [0, 1]"}
    text = json.dumps(_finite(document), indent=2, sort_keys=True)
    (out / "summary.json").write_text(text + "\n")
    from rich.table import Table

    table = Table(title=f"Fourier lens: {spec.metadata.name}")
    for column in ("metric", "mean", "95 % interval", "n"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, estimate in summary.metrics.items():
        table.add_row(
            name,
            f"{estimate.mean:.4f}",
            _interval(estimate.low, estimate.high),
            str(estimate.count),
        )
    console.print(table)
    _print_units(summary.metrics.get("jacobian_norm"), list(spec.preprocessing.std))
    console.print(f"records: {out / 'records.parquet'}  summary: {out / 'summary.json'}")


def _estimate(
    model: Any, images: Any, protocol: Any, pairs_seed: int, batch_size: int, limits: Limits
) -> None:
    """Refuse the run past its limits (``certbench.cli.budget``): at least its Fourier paths'
    images (``steps`` each), one image per pixel path and Jacobian image, each on
    ``noise_samples`` noisy copies when smoothed (a lower bound: a pixel path is longer)."""
    from certbench.lens import lens_plan

    plan = lens_plan(images.labels, protocol, pairs_seed)
    per_kind = {"amplitude": protocol.steps, "phase": protocol.steps}
    noise = protocol.noise_samples if protocol.sigma is not None else 1
    passes = sum(len(plan.pairs[k]) * per_kind.get(k, 1) for k in plan.kinds) * noise
    shape = tuple(images.images.shape[1:])
    numel = math.prod(shape)
    estimate = check_run(
        "fourier-lens", forward_passes=passes, limits=limits, model=model, image_shape=shape,
        batch_size=batch_size, peak_bytes=(len(images) + batch_size * noise) * numel * 4,
    )  # fmt: skip
    if estimate.seconds is not None:
        console.print(f"fourier-lens: estimated at least {estimate.describe()}")


def _print_units(jacobian: Any, std: list[float]) -> None:
    """The input space and the Jacobian's unit, with the factor to the paper's normalised space
    (here: the manifest's declared std) so a published value can be compared."""
    from certbench.lens import JACOBIAN_UNIT, normalised_jacobian_norm

    console.print(
        "Every path and derivative is taken in pixel space [0, 1], whatever the manifest's "
        f"normalisation; jacobian_norm is {JACOBIAN_UNIT}."
    )
    if jacobian is None:
        return
    low, high = normalised_jacobian_norm(jacobian.mean, std)
    value = f"{low:.4f}" if math.isclose(low, high) else f"between {low:.4f} and {high:.4f}"
    console.print(
        f"In the manifest's normalised space (std {std}; the paper's convention) it would be "
        f"{value}: ‖J_z‖² = Σ_c std_c²·‖J_x, channel c‖²."
    )


PAPER = (
    'Paper: Fridovich-Keil, Bartoldson, Diffenderfer, Kailkhura & Bremer, "Models Out of Line: '
    'A Fourier Lens on Distribution Shift Robustness", NeurIPS 2022, '
    "https://arxiv.org/abs/2207.04075."
)
LENS_HELP = (
    "Fourier-lens metrics of a model (Fridovich-Keil et al. 2022): high-frequency fraction (HFF) "
    "and consistent distance (CD) on Fourier amplitude and phase interpolation paths, pixel-path "
    "HFF within and between classes (Fridovich-Keil et al. 2021), and the Jacobian norm "
    "(Hoffman et al. 2019).\n\n"
    "Writes OUT/records.parquet (one row per path or Jacobian image) and OUT/summary.json "
    "(means with 95 % intervals; usable as lens_summary in effective-robustness inputs). "
    "The defaults are the paper's CIFAR-10 protocol (5,000 pairs × 100 images per path type); "
    "use --paths, --pixel-pairs and --kind for a quicker look. Counts a small test set cannot "
    "hold (the demo's 364 images) are lowered to the most it allows, with a note.\n\n" + PAPER
)
ER_HELP = (
    "Per σ and OOD test set: the probit-domain linear trend of OOD accuracy against ID accuracy "
    "across entries (slope, intercept, R², n), each entry's effective robustness (probit OOD "
    "accuracy minus the trend) with an interval, and each metric's slope and R² as a predictor "
    "of probit OOD accuracy, fitted per architecture and averaged over architectures as in the "
    'paper\'s Tables 1–3 (give each entry an "architecture"), then pooled over every entry '
    "as a second view.\n\n" + PAPER
)
FORMAT_HELP = (
    'Each RESULTS file is JSON: one entry object, a list of them, or {"entries": [...]}. '
    "An entry:\n\n"
    '{"name": "resnet110-gauss", "sigma": 0.25, "id": {"correct": 383, "total": 500}, '
    '"ood": {"gaussian_noise-5": {"correct": 201, "total": 500}}, '
    '"metrics": {"hff_amplitude": 0.21, "cd_amplitude": 63.0}, '
    '"lens_summary": "lens/summary.json", "architecture": "cifar_resnet110"}\n\n'
    "id and ood hold counts (certified accuracy at r = 0, or the base classifier's accuracy). "
    "metrics and lens_summary (a fourier-lens summary.json, path relative to the file) are "
    "optional; explicit metrics win. architecture groups the predictor fits (optional: entries "
    "without one form one group). Entries are grouped by sigma: every fit uses one σ only. "
    "Sets with fewer than 3 entries are listed as not fitted."
)


@user_errors
def effective_robustness_command(
    results: Annotated[list[Path], typer.Argument(help="Entry JSON files (format below).")],
    ood: Annotated[list[str] | None, typer.Option(help="Only these OOD sets.")] = None,
    metric: Annotated[list[str] | None, typer.Option(help="Only these predictors.")] = None,
    level: Annotated[float, typer.Option(help="Interval level.", callback=LEVEL)] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Effective robustness per entry and which metric explains OOD accuracy (per σ)."""
    from certbench.lens import (
        effective_robustness,
        entries_from_json,
        group_by_sigma,
        metric_predictors,
        ood_sets,
        per_architecture_predictors,
    )

    entries = [e for path in results for e in entries_from_json(path)]
    report: list[dict[str, Any]] = []
    for sigma, group in group_by_sigma(entries).items():
        sets = [s for s in ood_sets(group) if not ood or s in ood]
        fitted = [s for s in sets if sum(s in e.ood for e in group) >= 3]
        trends = [effective_robustness(group, s, level) for s in fitted]
        predictors = [p for s in fitted for p in per_architecture_predictors(group, s, metric)]
        pooled = [p for s in fitted for p in metric_predictors(group, s, metric)]
        report.append(
            {
                "sigma": sigma,
                "entries": len(group),
                "skipped": [s for s in sets if s not in fitted],
                "trends": [_trend_dict(tr) for tr in trends],
                "predictors": [_architecture_dict(p) for p in predictors],
                "pooled": [p.__dict__ for p in pooled],
            }
        )
        if not as_json:
            _print_group(sigma, group, trends, report[-1]["skipped"])
            _print_predictors(predictors, "per architecture, averaged (the paper's view)")
            _print_predictors(pooled, "pooled over every entry (second view, not the paper's)")
    if as_json:
        console.print_json(json.dumps(_finite(report)))


def _trend_dict(trend: Any) -> dict[str, Any]:
    return {
        "ood_set": trend.ood_set,
        "fit": trend.fit.to_dict(),
        "entries": [{**v.__dict__, "accuracy_gain": v.accuracy_gain} for v in trend.entries],
    }


def _architecture_dict(fit: Any) -> dict[str, Any]:
    return {**fit.__dict__, "fits": {a: f.__dict__ for a, f in fit.fits.items()}}


def _print_group(sigma: float, group: list[Any], trends: list[Any], skipped: list[str]) -> None:
    console.print(f"[bold]σ = {sigma:g}[/]: {len(group)} entries")
    from rich.table import Table

    for trend in trends:
        fit = trend.fit
        table = Table(
            title=f"{trend.ood_set}: probit(OOD) = {fit.intercept:.3f} + {fit.slope:.3f}·"
            f"probit(ID), R² = {fit.r2:.3f}, n = {fit.n}"
        )
        for column in ("entry", "ID acc", "OOD acc", "trend acc", "ER (probit)", "interval"):
            table.add_column(column, justify="left" if column == "entry" else "right")
        for v in trend.entries:
            table.add_row(
                v.name,
                f"{v.id_accuracy:.4f}",
                f"{v.ood_accuracy:.4f}",
                f"{v.expected_accuracy:.4f}",
                f"{v.value:+.4f}",
                _interval(v.low, v.high),
            )
        console.print(table)
    if skipped:
        console.print(f"not fitted (fewer than 3 entries): {', '.join(skipped)}")


def _print_predictors(predictors: list[Any], view: str) -> None:
    if not predictors:
        return
    from rich.table import Table

    table = Table(title=f"Which metric explains OOD accuracy (slope m / R²), {view}")
    table.add_column("OOD set")
    names = list(dict.fromkeys(p.metric for p in predictors))
    for name in names:
        table.add_column(name, justify="right")
    for ood_set in dict.fromkeys(p.ood_set for p in predictors):
        cells = {p.metric: p for p in predictors if p.ood_set == ood_set}
        table.add_row(ood_set, *(_m_r2(cells.get(name)) for name in names))
    console.print(table)
    counts = getattr(predictors[0], "counts", None)
    if counts is not None:
        console.print(
            "entries per architecture: " + ", ".join(f"{a} {n}" for a, n in counts.items())
        )


def _m_r2(fit: Any) -> str:
    if fit is None or math.isnan(fit.r2):
        return "—"
    return f"{fit.slope:.3g} / {fit.r2:.2f}"


def _interval(low: float, high: float) -> str:
    return "—" if math.isnan(low) else f"[{low:.4f}, {high:.4f}]"


def _finite(value: Any) -> Any:
    """NaN/inf → null, recursively: strict JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:lens``: fourier-lens and effective-robustness."""
    app.command("fourier-lens", help=LENS_HELP)(fourier_lens_command)
    app.command("effective-robustness", help=ER_HELP, epilog=FORMAT_HELP)(
        effective_robustness_command
    )
