"""The dataset card of a corruption benchmark folder (``generators.corruption_sets``).

README.md with the configs, the benchmark's protocol (its frost paragraph naming the textures the
configs on disk used), the spectral band of every set with the mean perturbation spectra, a sample
grid, licence and citation; and the provenance paragraph of generated sets (seed and source).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from certbench.errors import GeneratorError
from generators import bands, hub
from generators.corruption_benchmark import CorruptionBenchmark
from generators.corruption_sets import FROST_NOTE, config_name, spectrum_path

GRID_FIGURE = "sample_grid.png"
SPECTRA_FIGURE = "spectra_grid.png"


def _first_image(out_dir: Path, config: str) -> np.ndarray:
    table = pq.read_table(hub.shard_path(out_dir, config), columns=["image"])
    blob = table.column("image")[0].as_py()["bytes"]
    with Image.open(io.BytesIO(blob)) as image:
        return np.asarray(image.convert("RGB"))


def _sample_grid(out_dir: Path, grid: Sequence[tuple[str, int]], clean: np.ndarray) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(n for n, _ in grid))
    levels = sorted({s for _, s in grid})
    fig, axes = plt.subplots(
        len(names),
        len(levels) + 1,
        figsize=(1.3 * (len(levels) + 1), 1.3 * len(names)),
        squeeze=False,
    )
    for r, name in enumerate(names):
        axes[r][0].imshow(clean)
        axes[r][0].set_ylabel(name, fontsize=6)
        for c, level in enumerate(levels, start=1):
            if (name, level) in grid:
                axes[r][c].imshow(_first_image(out_dir, config_name(name, level)))
        for ax in axes[r]:
            ax.set_xticks([])
            ax.set_yticks([])
    for c, title in enumerate(["clean", *[f"s{level}" for level in levels]]):
        axes[0][c].set_title(title, fontsize=7)
    fig.tight_layout()
    path = hub.figure_path(out_dir, GRID_FIGURE)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def band_summary(
    out_dir: str | Path, grid: Sequence[tuple[str, int]]
) -> tuple[dict[tuple[str, int], np.ndarray], dict[tuple[str, int], str]]:
    """Saved spectra and their bands for every generated (corruption, level)."""
    spectra = {
        key: np.load(spectrum_path(out_dir, config_name(*key)))
        for key in grid
        if spectrum_path(out_dir, config_name(*key)).is_file()
    }
    return spectra, {key: bands.assign_band(s) for key, s in spectra.items()}


def _band_section(
    spectra: dict[tuple[str, int], np.ndarray], set_bands: dict[tuple[str, int], str]
) -> str:
    per_corruption = bands.corruption_bands(set_bands)
    lines = [
        "| corruption | " + " | ".join(f"s{s}" for s in range(1, 6)) + " | band |",
        "|---|" + "---|" * 6,
    ]
    for name, band in per_corruption.items():
        cells = []
        for level in range(1, 6):
            key = (name, level)
            cells.append(
                f"{set_bands[key]} ({bands.spectral_centroid(spectra[key]):.1f})"
                if key in spectra
                else "–"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | **{band}** |")
    agree, compared, misses = bands.paper_agreement(per_corruption)
    text = "\n".join(lines)
    if compared:
        text += (
            f"\n\nAgreement with the hand grouping of Sun et al. (2022, Sec. 2): **{agree} of "
            f"{compared}** corruptions."
        )
        if misses:
            text += " Differences: " + "; ".join(misses) + "."
    return text


def write_card(
    out_dir: str | Path,
    bench: CorruptionBenchmark,
    grid: Sequence[tuple[str, int]],
    *,
    dataset: str,
    num_images: int,
    provenance: str,
    clean_example: np.ndarray | None = None,
    coarse: bool = False,
) -> Path:
    """README.md with the configs, protocol, bands, figures, licence and citation.

    ``provenance`` is the markdown paragraph saying how the sets were made (seed and source for
    generated sets, the release files for imported ones).
    """
    out = Path(out_dir)
    done = [key for key in grid if hub.config_complete(out, config_name(*key), verify=False)]
    if not done:
        raise GeneratorError(f"no complete configs under {out}; generate the sets first.")
    if clean_example is None:
        clean_example = np.zeros((32, 32, 3), np.uint8)
    _sample_grid(out, done, clean_example)
    spectra, set_bands = band_summary(out, done)
    if spectra:
        bands.spectra_figure(spectra, set_bands, hub.figure_path(out, SPECTRA_FIGURE))
        band_text = f"""Band of each set by the rule of `generators/bands.py`: the energy-weighted
mean radial frequency (centroid, cycles/image, in brackets) of the mean amplitude spectrum of the
perturbation (corrupted − clean); low < 16/3 <= mid < 32/3 <= high. A corruption's band is that
of its severity-3 set.

{_band_section(spectra, set_bands)}

![Mean perturbation spectra (log10): rows corruptions, columns levels](images/{SPECTRA_FIGURE})"""
    else:
        band_text = "Not computed: the clean images were not available (column `band` is empty)."
    title = dataset.upper().replace("CIFAR", "CIFAR-") + bench.suffix
    protocol = bench.protocol.replace(FROST_NOTE, frost_card_note(out, done))
    body = f"""# {title}

{title}: {len(done)} test sets ({len({n for n, _ in done})} corruptions x severity levels) of
{num_images} {dataset.upper()} test images, built by certbench for the certified-robustness
leaderboard. Config `<corruption>_s<level>` holds one test set (`test` split). Columns: `image`,
`label`{", `coarse_label`" if coarse else ""}, `corruption`,
`severity` (level 1..5), `severity_value` (the benchmark's own severity scale), `band`
(spectral band of the perturbation), `source_index` (position in the source test split).

## Protocol

{protocol}

{provenance}

## Spectral bands

{band_text}

## Samples

![Sample grid: rows corruptions, columns clean and severities](images/{GRID_FIGURE})

## Licence

The corrupted images are derived from {dataset.upper()} (Krizhevsky, 2009), distributed without
an explicit licence; use them under the same terms as the original dataset. The generator
(certbench) is Apache-2.0.

## Citation

```bibtex
{bench.citation}
```
"""
    card = hub.build_card(
        configs=[config_name(*key) for key in done],
        pretty_name=title,
        body=body,
        license="other",
        tags=["certified-robustness", "corruptions", *bench.tags],
        source_datasets=[f"extended|{dataset}"],
    )
    return hub.write_card(out, card)


def frost_card_note(out_dir: Path, done: Sequence[tuple[str, int]]) -> str:
    """The frost paragraph for the configs on disk: photographs (with their hash) or the
    procedural stand-in and its measured gap; both when the severities were made differently."""
    from generators.frost import card_note

    kinds: dict[tuple[str, str], list[int]] = {}
    for name, level in done:
        if name != "frost":
            continue
        meta = (hub.read_checksum(out_dir, config_name(name, level)) or {}).get("metadata", {})
        key = (meta.get("frost_textures", "procedural"), meta.get("frost_sha256", ""))
        kinds.setdefault(key, []).append(level)
    if not kinds:
        return "**frost**: not among these sets."
    if len(kinds) == 1:
        return card_note(*next(iter(kinds)))
    return " ".join(
        f"Severities {', '.join(map(str, levels))}: {card_note(*key)}"
        for key, levels in sorted(kinds.items())
    )


def generated_provenance(seed: int, source: dict[str, Any]) -> str:
    """The card paragraph for generated sets: seed and source content."""
    return f"""Seeded: every image's random draws come from its own stream keyed by (seed={seed},
benchmark, corruption, severity level, source index), so any image can be regenerated alone and
results do not depend on batch size.

Source: {_source_text(source)}."""


def _source_text(source: dict[str, Any]) -> str:
    """Hub id and revision, or the kind of local folder; always the content sha256."""
    revision = source.get("source_revision")
    where = f"`{source.get('source')}`" + (f" (revision `{revision}`)" if revision else "")
    return f"{where}, content sha256 `{source.get('source_sha256', '')}`"
