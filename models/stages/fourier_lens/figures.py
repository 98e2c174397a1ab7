"""The Fourier-lens stage's figures: every metric it stores, its leaderboard columns and REST
fields, and their help texts (``models.stages.fourier_lens.stage``; the web section reads
``figure_specs``). Texts cite Fridovich-Keil et al., NeurIPS 2022 (``PAPER``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.stages.base import MetricSpec
from models.stages.fourier_lens.block import (
    KINDS,
    METRICS,
    NYQUIST_METRICS,
    PAPER,
    SMOOTHED_SUFFIX,
)


def metric_keys(protocol: Mapping[str, Any]) -> list[str]:
    """Every figure a benchmark with this protocol stores (None where a kind is not run)."""
    keys = list(METRICS) + list(NYQUIST_METRICS)
    if protocol.get("smoothed"):
        keys += [f"{k}{SMOOTHED_SUFFIX}" for k, kind in METRICS.items() if kind != "jacobian"]
    return keys


def lens_metric_specs(protocol: Mapping[str, Any]) -> list[MetricSpec]:
    """The base classifier's seven lens figures as columns (kinds the benchmark runs); the
    smoothed classifier's as REST fields and sort keys only."""
    kinds = set(protocol.get("run_kinds", KINDS))
    label = protocol.get("label", "paper")
    specs = [spec for key, spec in figure_specs(label).items() if METRICS[key] in kinds]
    specs += [spec for key, spec in nyquist_specs(label).items() if NYQUIST_METRICS[key] in kinds]
    if protocol.get("smoothed"):
        specs += [
            MetricSpec(
                f"{spec.key}{SMOOTHED_SUFFIX}",
                f"{spec.label} (smoothed)",
                f"{spec.help}; scored with the smoothed classifier's vote fractions at the "
                "entry's σ",
                spec.kind,
                spec.higher_is_better,
                group="lens",
                column=False,
            )
            for key, spec in figure_specs(label).items()
            if METRICS[key] in kinds and METRICS[key] != "jacobian"
        ]
    return specs


def nyquist_specs(label: str) -> dict[str, MetricSpec]:
    """The secondary HFF figures (REST fields and sort keys, no column): the paper's equation as
    written, the Nyquist bin kept in the numerator."""
    out = {}
    for key, spec in figure_specs(label).items():
        name = f"{key}_nyquist"
        if name in NYQUIST_METRICS:
            out[name] = MetricSpec(
                name,
                f"{spec.label} (Nyquist kept)",
                f"{spec.help}; here as the paper's equation reads, the Nyquist bin kept in the "
                "numerator (the headline column leaves it out, as the released code behind the "
                "published values does)",
                spec.kind,
                spec.higher_is_better,
                group="lens",
                column=False,
            )
    return out


def figure_specs(label: str) -> dict[str, MetricSpec]:
    """The base classifier's lens figures; ``label`` names the protocol in every help text."""
    where = f"base classifier, {label} protocol; {PAPER}"

    def spec(key: str, header: str, text: str, higher: bool) -> MetricSpec:
        return MetricSpec(key, header, f"{text} ({where})", "number", higher, group="lens")

    hff = (
        "mean high-frequency fraction of the class probabilities along Fourier {what} "
        "interpolation paths between clean test images, the Nyquist bin left out as in the "
        "released RobustNets code behind the paper's published values: lower is smoother"
    )
    cd = (
        "mean consistent distance along Fourier {what} interpolation paths: how many of the "
        "100 images keep the first image's prediction (100 = never changes)"
    )
    return {
        "hff_amplitude": spec("hff_amplitude", "HFF amp", hff.format(what="amplitude"), False),
        "hff_phase": spec("hff_phase", "HFF phase", hff.format(what="phase"), False),
        "cd_amplitude": spec("cd_amplitude", "CD amp", cd.format(what="amplitude"), True),
        "cd_phase": spec("cd_phase", "CD phase", cd.format(what="phase"), True),
        "hff_pixel_within": spec(
            "hff_pixel_within",
            "HFF pixel within",
            "mean high-frequency fraction along pixel-space paths between images of the same "
            "class (Fridovich-Keil, Gontijo Lopes & Roelofs 2021), Nyquist bin left out as in "
            "the released code: lower is smoother",
            False,
        ),
        "hff_pixel_between": spec(
            "hff_pixel_between",
            "HFF pixel between",
            "mean high-frequency fraction along pixel-space paths between images of different "
            "classes, Nyquist bin left out as in the released code; sharp class boundaries "
            "score higher, and Fridovich-Keil et al. 2021 found higher values in models that "
            "generalise better",
            True,
        ),
        "jacobian_norm": spec(
            "jacobian_norm",
            "‖J‖",
            "root-mean-square Frobenius norm of the Jacobian of the logits w.r.t. the input "
            "pixels, per unit pixel, [0,1] scale (Hoffman, Roberts & Yaida 2019): lower is "
            "locally smoother; the paper's normalised-space value is this × the std s of a "
            "scalar normalisation (between min_c s_c and max_c s_c times it per channel)",
            False,
        ),
    }
