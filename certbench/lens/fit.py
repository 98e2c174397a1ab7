"""Fit a Fourier-lens protocol to a test set that is too small for it, saying what changed.

The paper's counts (Fridovich-Keil et al., "Models Out of Line: A Fourier Lens on Distribution
Shift Robustness", NeurIPS 2022: 5,000 Fourier pairs of distinct images, 200 pixel pairs per
class and per class pair, the Jacobian of the first 400 images) assume CIFAR's 10,000 test
images; the demo's 364 cannot hold them (issue 25 §3: ``--paths 200`` failed on it). Each count
becomes the largest the test set allows, so a quick look runs, and every change is reported and
recorded in the protocol written with the records.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from certbench.lens.lens import LensProtocol

__all__ = ["fit_to_test_set"]


def fit_to_test_set(protocol: LensProtocol, labels: np.ndarray) -> tuple[LensProtocol, list[str]]:
    """(protocol with its counts capped to what ``labels``' test set allows, one note per
    change). Counts the set cannot support at all (a class with one image) are left for
    :func:`certbench.lens.lens_plan` to refuse with its message."""
    y = np.asarray(labels)
    count = len(y)
    smallest = min(int((y == c).sum()) for c in np.unique(y)) if count else 0
    changes: dict[str, tuple[int, str]] = {}
    kinds = set(protocol.kinds)
    if kinds & {"amplitude", "phase"} and 2 * protocol.paths > count >= 2:
        changes["paths"] = (count // 2, f"each path needs 2 distinct of the {count} images")
    if "pixel_within" in kinds:
        if 2 * protocol.pixel_pairs > smallest >= 2:
            changes["pixel_pairs"] = (
                smallest // 2,
                f"a within-class pair needs 2 distinct images; the smallest class has {smallest}",
            )
    elif "pixel_between" in kinds and protocol.pixel_pairs > smallest >= 1:
        changes["pixel_pairs"] = (
            smallest,
            f"between-class pairs use distinct images; the smallest class has {smallest}",
        )
    if "jacobian" in kinds and protocol.jacobian_images > count >= 1:
        changes["jacobian_images"] = (count, f"the test set has {count} images")
    value = {name: capped for name, (capped, _) in changes.items()}
    fitted = replace(
        protocol,
        paths=value.get("paths", protocol.paths),
        pixel_pairs=value.get("pixel_pairs", protocol.pixel_pairs),
        jacobian_images=value.get("jacobian_images", protocol.jacobian_images),
    )
    notes = [
        f"{name} {getattr(protocol, name)} → {capped}: {why}"
        for name, (capped, why) in changes.items()
    ]
    return fitted, notes
