"""``certbench weather-attack`` (entry point ``weather``): the simulation attack from the CLI.

Only typer and rich at import time; torch and the science are imported inside the command, so
registering it costs nothing for ``certbench --help``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

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
from certbench.cli.checks import (
    POSITIVE,
    SEED_MAX,
    Alpha,
    Bounds,
    Samples,
    SelectSamples,
    Sigma,
)
from certbench.errors import ThreatModelError

STEP_FRACTION = Bounds(0, 1, low_open=True, meaning="a fraction of the angle bound")
RECORDS = {"base": "weather_attack.parquet", "smoothed": "weather_attack_smoothed.parquet"}
SUMMARY = "summary.json"


def parse_weathers(text: str) -> tuple[str, ...]:
    """``rain,snow`` -> ('rain', 'snow'); names are checked by the simulator."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ThreatModelError(f"--weather {text!r} names no weather; use e.g. rain,snow.")
    return names


def parse_severities(text: str) -> tuple[int, ...]:
    """``1..5``, ``2,4`` or ``1..3,5`` -> sorted distinct levels."""
    levels: set[int] = set()
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            low, _, high = part.partition("..")
            levels.update(range(int(low), int(high or low) + 1))
    except ValueError as err:
        raise ThreatModelError(
            f"--severities {text!r} is not a list of levels; use e.g. 1..5 or 1,3,5."
        ) from err
    if not levels or not levels <= {1, 2, 3, 4, 5}:
        raise ThreatModelError(f"--severities {text!r}: levels are 1..5, e.g. 1..5 or 2,4.")
    return tuple(sorted(levels))


@user_errors
def weather_attack_command(
    weights: Weights,
    manifest: ManifestPath,
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Output folder: records parquet, summary.json, PNGs.")],
    weather: Annotated[str, typer.Option(help="Comma-separated: rain, snow.")] = "rain,snow",
    severities: Annotated[str, typer.Option(help="Levels, e.g. 1..5 or 1,3,5.")] = "1..5",
    steps: Annotated[int, typer.Option(help="PGD steps per restart (the paper: 10).", min=1)] = 10,
    restarts: Annotated[int, typer.Option(help="Restarts; restart 0 = random weather.", min=1)] = 5,
    position_step: Annotated[float, typer.Option(help="Pixels per step.", callback=POSITIVE)] = 1.0,
    angle_step: Annotated[
        float, typer.Option(help="Fraction of each angle bound.", callback=STEP_FRACTION)
    ] = 0.25,
    smoothed: Annotated[
        bool, typer.Option(help="Attack the smoothed classifier, then certify.")
    ] = False,
    sigma: Sigma = None,
    n0: SelectSamples = 100,
    n: Samples = 100_000,
    alpha: Alpha = 0.001,
    noise_samples: Annotated[
        int, typer.Option(help="SmoothAdv noise vectors per image.", min=1)
    ] = 8,
    config: Annotated[str | None, typer.Option(help="Dataset config (clean test set).")] = None,
    split: str = "test",
    revision: Annotated[str | None, typer.Option(help="Hub revision (commit/tag).")] = None,
    skip: Annotated[int, typer.Option(help="Attack every skip-th image.", min=1)] = 1,
    limit: Annotated[
        int | None, typer.Option(help="Attack at most this many images.", min=1)
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Images per attack batch (128; smoothed 32).", min=1)
    ] = None,
    certify_batch_size: Annotated[
        int, typer.Option(help="Samples per CERTIFY batch.", min=1)
    ] = 1000,
    amp: Annotated[str | None, typer.Option(help="bf16/fp16 autocast of CERTIFY.")] = None,
    seed: Seed = "0",
    weather_seed: Annotated[
        int,
        typer.Option(
            help="The random weather sets' seed (`certbench generate weather --seed`; the "
            "packaged benchmarks' 0): restart 0 is their random image. --seed draws the rest "
            "(restarts 1+, SmoothAdv and CERTIFY noise): a run's revealed seed reproduces the "
            "leaderboard's records.",
            min=0,
            max=SEED_MAX,
        ),
    ] = 0,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ...")] = None,
    examples: Annotated[
        int, typer.Option(help="Write a clean/random/attacked/difference PNG of N images.", min=0)
    ] = 0,
    max_hours: MaxHours = DEFAULT_MAX_HOURS,
    max_memory_gb: MaxMemory = None,
) -> None:
    """Worst-case rain and snow: the simulation attack of Wang, Ba, Zhang, Zhang, Kadambi,
    Soatto, Wong & Hsieh, "Evaluating Worst Case Adversarial Weather Perturbations Robustness"
    (NeurIPS 2022 ML Safety Workshop, https://openreview.net/forum?id=Q69Aj3P0PtV). Worst-case
    and random-weather accuracy of the base classifier, or with --smoothed the certified
    accuracy and ACR of the smoothed classifier on attacked images (SmoothAdv-style attack,
    then CERTIFY). Use --skip 20 for the 500-image protocol subset."""
    limits = Limits.of(max_hours, max_memory_gb)
    if smoothed:
        check_floor("weather-attack --smoothed", (n0, n), limits)
    from certbench.data import Subset, load_images
    from certbench.nets import load_manifest, load_model
    from certbench.smoothing import parse_seed
    from certbench.weather import (
        AttackConfig,
        all_sets,
        attack_base,
        attack_smoothed,
        summarize_weather,
        write_weather_records,
    )

    weathers, levels = parse_weathers(weather), parse_severities(severities)
    run_seed = parse_seed(seed)
    protocol = AttackConfig(
        steps=steps, restarts=restarts, position_step=position_step, angle_step=angle_step,
        seed=weather_seed,
    )  # fmt: skip
    sets = all_sets(weathers, levels)
    spec = load_manifest(manifest)
    model = load_model(weights, spec, device=device)
    images = load_images(
        dataset, config=config, split=split, revision=revision, subset=Subset(skip, limit)
    )
    attacked = len(images) * len(sets)
    attack_passes = attacked * restarts * (steps + 1) * (noise_samples if smoothed else 1)
    check_smoothing(
        "weather-attack", Sampling(attacked if smoothed else 0, (n0, n)), limits, model=model,
        image_shape=tuple(images.images.shape[1:]), batch_size=certify_batch_size, amp=amp,
        other_passes=attack_passes,
    )  # fmt: skip
    common: dict[str, Any] = {
        "weathers": weathers, "severities": levels, "config": protocol,
        "indices": images.indices, "device": device, "progress": True, "run_seed": run_seed,
    }  # fmt: skip
    kind = "smoothed" if smoothed else "base"
    details: dict[str, Any] = {}
    if smoothed:
        sigma = spec.smoothing.sigma if sigma is None else sigma
        details = {"sigma": sigma, "n0": n0, "n": n, "alpha": alpha, "noise_samples": noise_samples}
        records: list[Any] = attack_smoothed(
            model, images.images, images.labels, **details, batch_size=batch_size or 32,
            certify_batch_size=certify_batch_size, amp=amp, **common,
        )  # fmt: skip
    else:
        records = attack_base(
            model, images.images, images.labels, batch_size=batch_size or 128, **common
        )
    metadata = {
        "dataset": dataset, "config": config, "split": split, "revision": revision,
        "skip": skip, "limit": limit, "seed": str(run_seed), "weather_seed": weather_seed,
        "protocol": {**protocol.__dict__, **details},
        "perturbation_sets": [s.describe() for s in sets],
        "certbench_version": __version__,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "manifest": spec.model_dump(mode="json"),
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = write_weather_records(records, out / RECORDS[kind], metadata, kind=kind)
    summary = summarize_weather(records)
    (out / SUMMARY).write_text(json.dumps({"kind": kind, **summary.figures}, indent=2) + "\n")
    _print_table(summary.rows, title=f"{dataset} ({split}): accuracy under the simulation attack")
    console.print(f"records: {path}")
    if examples > 0:
        _write_examples(
            model, images, examples, weathers, max(levels), protocol, run_seed, device, out
        )


HEADERS = {
    "images": "n",
    "clean_accuracy": "clean",
    "random_accuracy": "random",
    "worst_case_accuracy": "worst",
    "abstain_rate": "abstain",
    "acr": "ACR",
}


def _print_table(rows: list[dict[str, Any]], title: str) -> None:
    """Accuracies per weather-severity set; for the base classifier with the gap random −
    worst, the over-optimism of random-weather evaluation that Wang et al. (NeurIPS 2022
    ML Safety Workshop) report. Compact headers (``@r``: certified accuracy at radius r) so
    the table fits 80 columns."""
    from rich.table import Table

    table = Table(title=title, show_header=True)
    table.add_column("set", no_wrap=True)
    shown = []
    for row in rows:
        values = {k: v for k, v in row.items() if k not in ("weather", "severity")}
        if "worst_case_accuracy" in values:
            values["gap"] = values["random_accuracy"] - values["worst_case_accuracy"]
        shown.append((f"{row['weather']}-{row['severity']}", values))
    for name in shown[0][1]:
        header = HEADERS.get(name, name.replace("certified_accuracy_", "@"))
        table.add_column(header, justify="right", no_wrap=True)
    for label, values in shown:
        cells = (f"{v:.3f}" if isinstance(v, float) else str(v) for v in values.values())
        table.add_row(label, *cells)
    console.print(table)
    console.print("worst: safe under every restart; @r: certified accuracy at radius r")


def _write_examples(
    model: Any,
    images: Any,
    count: int,
    weathers: tuple[str, ...],
    severity: int,
    protocol: Any,
    run_seed: int,
    device: str | None,
    out: Path,
) -> None:
    """One Fig. 1-style panel per weather at the highest requested severity."""
    from certbench.figures import write_weather_panel
    from certbench.weather import weather_examples

    for name in weathers:
        rows = weather_examples(
            model, images.images[:count], images.labels[:count], weather=name,
            severity=severity, config=protocol, indices=images.indices[:count], device=device,
            run_seed=run_seed,
        )  # fmt: skip
        positions = list(range(len(rows)))  # the images' positions in the loaded test subset
        path = write_weather_panel(
            rows, out / f"examples_{name}_{severity}.png", positions=positions
        )
        console.print(f"examples: {path}")


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:weather``: the weather-attack command."""
    app.command("weather-attack")(weather_attack_command)
