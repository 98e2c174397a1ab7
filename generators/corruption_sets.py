"""Corruption benchmarks (CIFAR-C, CIFAR-C-bar, weather) written as Hub-layout test sets.

One config per corruption x severity level, named ``{corruption}_s{level}`` (e.g.
``gaussian_noise_s3``), each with the 10,000 (or ``--limit``) corrupted test images and the columns
``corruption``, ``severity`` (level 1..5), ``severity_value`` (the benchmark's own scale), ``band``
(spectral band, see ``generators.bands``) and ``source_index``. Generation is resumable: a config
is skipped only when its checksum verifies and it was made with the same benchmark, dataset, seed
and source content (``hub.config_complete``). The mean perturbation spectrum of every config is
kept in ``spectra/<config>.npy`` for the card's spectra grid and band table; the card itself is
written by ``generators.corruption_card``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from certbench.data import ImageSet, Subset, load_images
from certbench.errors import GeneratorError
from generators import bands, hub
from generators.corruption_benchmark import CorruptionBenchmark

GENERATOR_VERSION = 1
NUM_CLASSES = {"cifar10": 10, "cifar100": 100}
SPECTRA_DIR = "spectra"
ProgressHook = Callable[[str, int, int], None]


def config_name(corruption: str, level: int) -> str:
    return hub.validate_config_name(f"{corruption}_s{level}")


def benchmark(key: str, *, frost_dir: str | Path | None = None) -> CorruptionBenchmark:
    """The registered benchmark ``key`` (cifar-c, cifar-c-bar, weather).

    ``frost_dir``: the official frost photographs for CIFAR-C's frost (``generators.frost``);
    without it frost uses the procedural stand-in and the card states how much weaker it is.
    """
    registry = _benchmarks()
    if key not in registry:
        raise GeneratorError(f"benchmark={key!r} is unknown; use one of {sorted(registry)}.")
    if frost_dir is None:
        return registry[key]
    if key != "cifar-c":
        raise GeneratorError(f"--frost-dir applies to cifar-c only, not {key}.")
    from generators import corruptions_c as cc
    from generators.frost import load_photographs

    bank = load_photographs(frost_dir)

    def apply_c(
        images: np.ndarray, name: str, level: int, seed: int, indices: np.ndarray
    ) -> np.ndarray:
        return cc.corrupt(images, name, level, seed=seed, indices=indices, frost_bank=bank)

    return replace(
        registry[key],
        apply=apply_c,
        config_metadata=lambda name: bank.metadata() if name == "frost" else {},
    )


CIFAR_C_CITATION = """@inproceedings{hendrycks2019benchmarking,
  title={Benchmarking Neural Network Robustness to Common Corruptions and Perturbations},
  author={Hendrycks, Dan and Dietterich, Thomas},
  booktitle={International Conference on Learning Representations},
  year={2019}
}"""
CIFAR_CBAR_CITATION = """@inproceedings{mintun2021interaction,
  title={On Interaction Between Augmentations and Corruptions in Natural Corruption Robustness},
  author={Mintun, Eric and Kirillov, Alexander and Xie, Saining},
  booktitle={Advances in Neural Information Processing Systems},
  year={2021}
}"""


def _cifar_c_protocol() -> str:
    from generators import corruptions_c as cc

    rows = "\n".join(
        f"| {name} | {'; '.join(map(str, spec.constants))} |" for name, spec in cc.CIFAR_C.items()
    )
    equivalents = "\n".join(
        f"- **{name}**: {text}" for name, text in cc.EQUIVALENTS.items() if name != "frost"
    )
    return f"""The 15 corruptions of Hendrycks & Dietterich (2019) with the CIFAR constants of
`make_cifar_c.py` (hendrycks/robustness), re-implemented batched (numpy/scipy) operation by
operation, outputs truncated to uint8 as in the original.

| corruption | constants per severity 1..5 |
|---|---|
{rows}

Documented equivalents where the original software cannot be used:

{equivalents}
- {FROST_NOTE}
- skimage/OpenCV primitives are replaced by scipy.ndimage/numpy/torch with the same border
  modes; pixelate (BOX resize) and JPEG use PIL/libjpeg itself, as the original.

Quirks of the original reproduced on purpose: glass blur's pixel "swap" is a copy (numpy views
alias), fog's plasma uses wibble·U(−wibble, wibble), frost picks among the first 5 textures."""


def _cifar_cbar_protocol() -> str:
    from generators import corruptions_cbar as cb

    rows = "\n".join(
        f"| {name} | {', '.join(map(str, values))} |" for name, values in cb.CBAR_SEVERITIES.items()
    )
    return f"""The 10 corruptions of CIFAR-10-C-bar (Mintun et al., 2021) at the severities of the
released `cifar10_c_bar.csv` (the paper's 0–10 scale, `severity_value`), implemented from the
released transforms for 32x32 images and vectorised over the batch (anti-aliased lines in
lockstep, the scipy rotate/zoom maps as precomputed linear operators).

| corruption | severity values for levels 1..5 |
|---|---|
{rows}"""


def _benchmarks() -> dict[str, CorruptionBenchmark]:
    from generators import corruptions_c as cc
    from generators import corruptions_cbar as cb
    from generators import weather

    def apply_c(
        images: np.ndarray, name: str, level: int, seed: int, indices: np.ndarray
    ) -> np.ndarray:
        return cc.corrupt(images, name, level, seed=seed, indices=indices)

    def apply_cbar(
        images: np.ndarray, name: str, level: int, seed: int, indices: np.ndarray
    ) -> np.ndarray:
        return cb.corrupt_bar(images, name, level, seed=seed, indices=indices)

    return {
        "cifar-c": CorruptionBenchmark(
            key="cifar-c",
            suffix="-C",
            names=tuple(cc.CIFAR_C),
            apply=apply_c,
            severity_value=lambda name, level: float(level),
            protocol=_cifar_c_protocol(),
            citation=CIFAR_C_CITATION,
            tags=("cifar-c",),
        ),
        "cifar-c-bar": CorruptionBenchmark(
            key="cifar-c-bar",
            suffix="-C-bar",
            names=tuple(cb.CIFAR_CBAR),
            apply=apply_cbar,
            severity_value=lambda name, level: cb.CBAR_SEVERITIES[name][level - 1],
            protocol=_cifar_cbar_protocol(),
            citation=CIFAR_CBAR_CITATION,
            tags=("cifar-c-bar",),
        ),
        "weather": weather.benchmark_spec(),
    }


def select(
    bench: CorruptionBenchmark,
    corruptions: Sequence[str] | None,
    severities: Sequence[int] | None,
) -> list[tuple[str, int]]:
    """The (corruption, level) grid to generate, validated."""
    names = list(corruptions) if corruptions else list(bench.names)
    unknown = [n for n in names if n not in bench.names]
    if unknown:
        raise GeneratorError(
            f"--corruptions {','.join(unknown)} not in {bench.key}; choose from "
            f"{', '.join(bench.names)}."
        )
    levels = list(severities) if severities else [1, 2, 3, 4, 5]
    bad = [s for s in levels if s not in (1, 2, 3, 4, 5)]
    if bad:
        raise GeneratorError(f"--severities {bad} invalid; severity levels are 1..5.")
    return [(n, s) for n in names for s in levels]


def load_source(
    dataset: str, source: str | Path | None, *, revision: str | None, limit: int | None
) -> ImageSet:
    """The clean CIFAR test split (default: the Hub copy of ``dataset``), checked for 32x32."""
    if dataset not in NUM_CLASSES:
        raise GeneratorError(f"--dataset {dataset!r} is unknown; use cifar10 or cifar100.")
    images = load_images(
        source if source is not None else dataset,
        split="test",
        revision=revision,
        subset=Subset(limit=limit),
    )
    if tuple(images.images.shape[1:]) != (3, 32, 32):
        raise GeneratorError(
            f"source images have shape {tuple(images.images.shape[1:])}; the corruption "
            "constants are defined for (3, 32, 32) CIFAR images."
        )
    if len(images.class_names) != NUM_CLASSES[dataset]:
        raise GeneratorError(
            f"source {images.name!r} has {len(images.class_names)} classes but --dataset "
            f"{dataset} needs {NUM_CLASSES[dataset]}; pass the matching --dataset or --source."
        )
    return images


def source_fingerprint(images: ImageSet) -> str:
    """sha256 over pixels, labels and indices: resumed runs only reuse sets of the same source."""
    digest = hashlib.sha256()
    for tensor in (images.images, images.labels, images.indices):
        digest.update(tensor.contiguous().numpy().tobytes())
    digest.update("\x1f".join(images.class_names).encode())
    return digest.hexdigest()


def spectrum_path(out_dir: str | Path, config: str) -> Path:
    return Path(out_dir) / SPECTRA_DIR / f"{config}.npy"


def _save_spectrum(out_dir: Path, config: str, spectrum: np.ndarray) -> None:
    """Write ``spectra/<config>.npy`` via a temporary file and an atomic rename."""
    path = spectrum_path(out_dir, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, spectrum)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def generate_sets(
    images: ImageSet,
    out_dir: str | Path,
    bench: CorruptionBenchmark,
    grid: Sequence[tuple[str, int]],
    *,
    dataset: str,
    seed: int = 0,
    batch_size: int = 1000,
    progress: ProgressHook | None = None,
) -> hub.GenerationReport:
    """Write every (corruption, level) of ``grid`` as a config under ``out_dir``; skip verified
    configs made with the same parameters. Returns what was written and skipped."""
    if batch_size < 1:
        raise GeneratorError(f"--batch-size must be >= 1, got {batch_size}.")
    out = Path(out_dir)
    report = hub.GenerationReport(out_dir=out)
    started = time.perf_counter()
    fingerprint = source_fingerprint(images)
    clean = images.images.permute(0, 2, 3, 1).contiguous().numpy()
    indices = images.indices.numpy()
    n = len(clean)
    for name, level in grid:
        config = config_name(name, level)
        metadata = {
            "benchmark": bench.key,
            "dataset": dataset,
            "corruption": name,
            "severity": level,
            "seed": seed,
            "source_sha256": fingerprint,
            "generator_version": GENERATOR_VERSION,
            **bench.config_metadata(name),
        }
        if (
            hub.config_complete(out, config, metadata=metadata)
            and spectrum_path(out, config).is_file()
        ):
            report.skipped.append(config)
            if progress:
                progress(config, n, n)
            continue
        corrupted = np.empty_like(clean)
        acc = bands.SpectrumAccumulator()
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            batch = bench.apply(clean[start:stop], name, level, seed, indices[start:stop])
            corrupted[start:stop] = batch
            acc.add(clean[start:stop], batch)
            if progress:
                progress(config, stop, n)
        spectrum = acc.mean()
        _save_spectrum(out, config, spectrum)
        hub.write_config(
            out,
            config,
            images=corrupted,
            labels=images.labels.numpy(),
            class_names=images.class_names,
            columns={
                "corruption": np.full(n, name),
                "severity": np.full(n, level, dtype=np.int64),
                "severity_value": np.full(n, bench.severity_value(name, level), dtype=np.float64),
                "band": np.full(n, bands.assign_band(spectrum)),
            },
            source_index=indices,
            coarse_labels=None if images.coarse_labels is None else images.coarse_labels.numpy(),
            coarse_class_names=images.coarse_class_names,
            metadata=metadata,
        )
        report.written.append(config)
        report.images_written += n
    report.seconds = time.perf_counter() - started
    return report


FROST_NOTE = "{frost}"
"""Placeholder in the CIFAR-C protocol text, replaced by what the frost configs on disk used."""
