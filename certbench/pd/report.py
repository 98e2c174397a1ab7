"""Threat of every corruption set of a generated dataset under d_PD, d_∞ and d_2 (Muthukumar et al.
2025, arXiv:2501.18098, §4).

For each config (one corruption at one severity) the perturbation of an image is
(corrupted − clean) in [0, 1] pixel space, the clean image being the one of the source test split
with the same ``source_index``. The report holds the mean and quantiles of the three threats per
config, the same statistics for unsafe pairs (x̃ − x between clean images of different classes)
for reference, and a figure in the style of the paper's Fig. 5: mean d_∞ against mean d_PD, one
colour per corruption, marker size growing with severity.

The ``certbench threat-report`` and ``certbench anchors`` commands live in
``certbench.cli.pd``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from certbench.data import ImageSet, Subset, list_configs, load_images, public_name
from certbench.errors import ThreatModelError
from certbench.nets import RowSlots
from certbench.pd.anchors import AnchorBank
from certbench.pd.threat import PDThreat

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
REPORT_FILE = "pd_threat.json"
FIGURE_FILE = "images/pd_threat.png"
CARD_START = "<!-- certbench:pd-threat:start -->"
CARD_END = "<!-- certbench:pd-threat:end -->"
#: Quadrant thresholds of Muthukumar et al. 2025, arXiv:2501.18098, Fig. 5 (about half the mean
#: threat of unsafe pairs there).
PD_THRESHOLD = 1.0
LINF_THRESHOLD = 0.5


@dataclass(frozen=True)
class ThreatStats:
    """Mean and quantiles of one threat function over a set of perturbations."""

    mean: float
    quantiles: dict[str, float]

    @classmethod
    def of(cls, values: torch.Tensor) -> ThreatStats:
        data = values.double().cpu().numpy()
        return cls(
            mean=float(data.mean()),
            quantiles={f"q{round(q * 100):02d}": float(np.quantile(data, q)) for q in QUANTILES},
        )


@dataclass(frozen=True)
class SetThreat:
    """Threat statistics of one corruption set (or of the unsafe pairs)."""

    name: str
    corruption: str
    severity: int
    count: int
    d_pd: ThreatStats
    d_inf: ThreatStats
    d_2: ThreatStats


@dataclass(frozen=True)
class ThreatReport:
    dataset: str
    anchors: dict[str, str]
    beta: float
    sets: list[SetThreat]
    unsafe_pairs: SetThreat

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "input_space": "pixels in [0,1]; perturbation = corrupted - clean (same source_index)",
            "anchors": self.anchors,
            "beta": self.beta,
            "quantiles": list(QUANTILES),
            "sets": [asdict(s) for s in self.sets],
            "unsafe_pairs": asdict(self.unsafe_pairs),
        }


# --------------------------------------------------------------------------- statistics


def perturbation_threats(
    threat: PDThreat, x: torch.Tensor, delta: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d_PD, d_∞, d_2) per image, batched so memory stays bounded; each row keyed by its
    position in the set (``certbench.nets.batch_invariance``), so no value depends on
    ``batch_size``."""
    pd, inf, two = [], [], []
    slots = RowSlots.positional(x.shape[0])
    for start in range(0, x.shape[0], batch_size):
        part = slice(start, start + batch_size)
        xs, ds = x[part], delta[part]
        pd.append(threat(xs, ds, labels[part], slots.take(part)).double().cpu())
        flat = ds.reshape(ds.shape[0], -1).double()
        inf.append(flat.abs().amax(1))
        two.append(flat.norm(dim=1))
    return torch.cat(pd), torch.cat(inf), torch.cat(two)


def _severity(config: str, image_set: ImageSet) -> int:
    if "severity" in image_set.extra:
        return int(np.asarray(image_set.extra["severity"])[0])
    match = re.search(r"(\d+)$", config)
    return int(match.group(1)) if match else 1


def _corruption(config: str, image_set: ImageSet) -> str:
    if "corruption" in image_set.extra:
        return str(np.asarray(image_set.extra["corruption"])[0])
    return re.sub(r"[_-]?s?\d+$", "", config) or config


def set_threat(
    threat: PDThreat, clean: ImageSet, corrupted: ImageSet, *, config: str, batch_size: int
) -> SetThreat:
    """Threat statistics of (corrupted − clean) over one config, matched by source_index."""
    position = {int(i): row for row, i in enumerate(clean.indices.tolist())}
    missing = [int(i) for i in corrupted.indices.tolist() if int(i) not in position]
    if missing:
        raise ThreatModelError(
            f"config {config!r}: {len(missing)} source_index values (e.g. {missing[:3]}) are not "
            f"in the clean source ({len(clean)} images); pass the dataset's own source with "
            "--clean and no subset of it."
        )
    rows = torch.tensor([position[int(i)] for i in corrupted.indices.tolist()])
    if corrupted.images.shape[1:] != clean.images.shape[1:]:
        raise ThreatModelError(
            f"config {config!r} has images of shape {tuple(corrupted.images.shape[1:])}, the clean "
            f"source {tuple(clean.images.shape[1:])}; both must share one size."
        )
    x = clean.as_float()[rows]
    delta = corrupted.as_float() - x
    values = perturbation_threats(threat, x, delta, clean.labels[rows], batch_size)
    return SetThreat(
        name=config,
        corruption=_corruption(config, corrupted),
        severity=_severity(config, corrupted),
        count=len(corrupted),
        d_pd=ThreatStats.of(values[0]),
        d_inf=ThreatStats.of(values[1]),
        d_2=ThreatStats.of(values[2]),
    )


def unsafe_pair_threat(
    threat: PDThreat, clean: ImageSet, *, pairs: int, seed: int, batch_size: int
) -> SetThreat:
    """Threat of x̃ − x for random clean pairs of different classes: what should be refused."""
    rng = np.random.default_rng([seed, 2])
    first = rng.integers(len(clean), size=4 * pairs)
    second = rng.integers(len(clean), size=4 * pairs)
    keep = (clean.labels[first] != clean.labels[second]).numpy()
    first, second = first[keep][:pairs], second[keep][:pairs]
    if len(first) == 0:
        raise ThreatModelError("unsafe pairs need clean images of at least two classes.")
    images = clean.as_float()
    x = images[first]
    values = perturbation_threats(threat, x, images[second] - x, clean.labels[first], batch_size)
    return SetThreat(
        name="unsafe_pairs",
        corruption="unsafe pairs (other class)",
        severity=0,
        count=len(first),
        d_pd=ThreatStats.of(values[0]),
        d_inf=ThreatStats.of(values[1]),
        d_2=ThreatStats.of(values[2]),
    )


def threat_report(
    dataset_dir: str | Path,
    *,
    clean_source: str | Path,
    anchors: AnchorBank,
    clean_split: str = "test",
    configs: Sequence[str] | None = None,
    limit: int | None = None,
    pairs: int = 1000,
    seed: int = 0,
    batch_size: int = 500,
    device: str | None = None,
    progress: bool = False,
) -> ThreatReport:
    """Measure every config of a generated dataset against its clean source."""
    threat = PDThreat(anchors, device=device)
    clean = load_images(clean_source, split=clean_split)
    names = list(configs) if configs else list_configs(dataset_dir)
    subset = Subset(limit=limit) if limit else None
    sets = []
    for config in tqdm(names, disable=not progress, desc="threat report"):
        corrupted = load_images(dataset_dir, config=config, subset=subset)
        sets.append(set_threat(threat, clean, corrupted, config=config, batch_size=batch_size))
    return ThreatReport(
        dataset=Path(dataset_dir).name,  # the report sits next to the card: no local path
        anchors={
            **anchors.metadata(),
            "dataset": public_name(anchors.dataset),
            "count": str(anchors.images.shape[0]),
        },
        beta=threat.beta,
        sets=sets,
        unsafe_pairs=unsafe_pair_threat(
            threat, clean, pairs=pairs, seed=seed, batch_size=batch_size
        ),
    )


# --------------------------------------------------------------------------- outputs


def threat_points(report: ThreatReport) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """What Muthukumar et al. 2025, arXiv:2501.18098, Fig. 5 plots: per corruption set its
    corruption, severity, mean d_∞ and mean d_PD, and the unsafe pairs' means (drawn by
    ``certbench.figures.threat_figure``)."""
    sets = [
        {
            "corruption": s.corruption,
            "severity": max(s.severity, 1),
            "d_inf": s.d_inf.mean,
            "d_pd": s.d_pd.mean,
        }
        for s in report.sets
    ]
    unsafe = report.unsafe_pairs
    return sets, {"d_inf": unsafe.d_inf.mean, "d_pd": unsafe.d_pd.mean}


def card_section(report: ThreatReport) -> str:
    """Markdown table of the report, framed by markers so it can be replaced in place."""
    lines = [
        CARD_START,
        "## PD threat of the corruption sets",
        "",
        f"Perturbation = corrupted − clean in [0, 1] pixels; d_PD with β = {report.beta}, "
        f"k = {report.anchors.get('k')} anchors per class from {report.anchors.get('dataset')} "
        f"({report.anchors.get('split')}, seed {report.anchors.get('seed')}), "
        "Muthukumar, Pal, Sulam & Vidal 2025 "
        f"([arXiv:2501.18098](https://arxiv.org/abs/2501.18098)) §3.2. "
        f"Full statistics in `{REPORT_FILE}`.",
        "",
        "| config | corruption | severity | mean d_PD | median d_PD | mean d_∞ | mean d_2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in [*report.sets, report.unsafe_pairs]:
        lines.append(
            f"| {s.name} | {s.corruption} | {s.severity} | {s.d_pd.mean:.3f} | "
            f"{s.d_pd.quantiles['q50']:.3f} | {s.d_inf.mean:.3f} | {s.d_2.mean:.3f} |"
        )
    lines += ["", f"![d_inf vs d_PD per corruption]({FIGURE_FILE})", CARD_END]
    return "\n".join(lines)


def update_card(readme: Path, section: str) -> None:
    """Insert or replace the PD-threat section of a dataset card."""
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if CARD_START in text and CARD_END in text:
        before, rest = text.split(CARD_START, 1)
        after = rest.split(CARD_END, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    _atomic_write(readme, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_threat_report(
    report: ThreatReport,
    dataset_dir: str | Path,
    *,
    card: bool = True,
    figure_png: bytes | None = None,
) -> list[Path]:
    """Write pd_threat.json and, given its PNG (``certbench.figures.threat_figure`` of
    :func:`threat_points`), the figure next to the card; optionally update README.md."""
    out = Path(dataset_dir)
    json_path = out / REPORT_FILE
    payload = json.dumps(report.to_json(), indent=2, sort_keys=True)
    _atomic_write(json_path, lambda tmp: Path(tmp).write_text(payload, encoding="utf-8"))
    written = [json_path]
    if figure_png is not None:
        figure = out / FIGURE_FILE
        _atomic_write(figure, lambda tmp: Path(tmp).write_bytes(figure_png))
        written.append(figure)
    if card:
        update_card(out / "README.md", card_section(report))
        written.append(out / "README.md")
    return written


def _atomic_write(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
