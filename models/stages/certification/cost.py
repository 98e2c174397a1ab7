"""The cost of certifying an entry (issue 33 §3): what one certified image costs at the
benchmark's n, in FLOPs and in measured device-seconds.

CERTIFY (Cohen, Rosenfeld & Kolter, ICML 2019, arXiv:1902.02918) classifies every image n0 + n
times under noise, one forward pass of the base classifier each, so

- FLOPs per certified image = (n0 + n) × the network's FLOPs per sample, counted by
  ``torch.utils.flop_counter`` on the ``meta`` device (``certbench.nets.cost``; a denoiser in
  front counts in its sample);
- device-seconds per certified image = the seconds the stage's shards recorded over the images
  they certified, on the devices they ran on (their records name the device type).

Each test set's stored protocol holds the network's figures and its shards' measured
throughput; the leaderboard holds both costs per image (sortable, lower is better).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from models.stages.base import MetricSpec

if TYPE_CHECKING:
    from models.stages.base import UnitResult
    from models.stages.work import WorkItem

__all__ = [
    "COST_GROUP",
    "cost_metric_specs",
    "cost_metrics",
    "device_types",
    "network_figures",
    "throughput",
]

COST_GROUP = "cost"


def network_figures(
    manifest: Mapping[str, Any], flops_per_sample: int | None = None
) -> dict[str, int]:
    """``{"parameters", "flops_per_sample"}`` of the manifest's network, built on ``meta``.

    ``flops_per_sample``: the figure intake counted and stored (``WorkItem.flops_per_sample``),
    reused rather than counted again; counted here (``torch.utils.flop_counter``, whose import
    of ``torch._dynamo`` costs a fresh worker 1.4-4 s) only for a submission made before intake
    counted it. Raises the ``certbench.errors.ModelLoadError`` of a manifest whose network
    cannot be built (intake refused those already)."""
    from certbench.nets import load_manifest, manifest_cost, parameters_of

    loaded = load_manifest(dict(manifest))
    if flops_per_sample is None:
        return manifest_cost(loaded).to_dict()
    return {"parameters": parameters_of(loaded), "flops_per_sample": flops_per_sample}


def device_types(metadata: Sequence[Mapping[str, Any]]) -> list[str]:
    """The device types the shards ran on, sorted (empty for shards written before they said)."""
    return sorted({str(m["device_type"]) for m in metadata if m.get("device_type")})


def throughput(
    *, count: int, seconds: float, samples_per_image: int, devices: Sequence[str]
) -> dict[str, Any]:
    """A test set's measured throughput: noise samples per second over its shards' recorded
    seconds (None when they recorded none), and the devices they ran on."""
    rate = count * samples_per_image / seconds if seconds > 0 else None
    return {"samples_per_second": rate, "devices": list(devices)}


def cost_metrics(
    item: WorkItem, results: Sequence[UnitResult], flops_per_sample: int
) -> dict[str, float | None]:
    """The leaderboard's cost figures: device-seconds and FLOPs per certified image."""
    images = sum(r.count for r in results)
    seconds = sum(r.seconds for r in results)
    return {
        "seconds_per_image": seconds / images if images and seconds > 0 else None,
        "flops_per_image": float(flops_per_sample * (item.n0 + item.n)),
    }


def cost_metric_specs() -> list[MetricSpec]:
    """The cost columns: sortable, lower is better, after the certified figures."""
    return [
        MetricSpec(
            "seconds_per_image",
            "device-s / image",
            "device-seconds per certified image at the benchmark's n0 + n noise samples, as "
            "measured by the shards on the devices they ran on (the test sets' protocols name "
            "them)",
            "seconds",
            higher_is_better=False,
            group=COST_GROUP,
        ),
        MetricSpec(
            "flops_per_image",
            "FLOPs / image",
            "FLOPs per certified image: (n0 + n) × the network's FLOPs per noise sample, counted "
            "by torch.utils.flop_counter on the meta device (2 per multiply-add)",
            "flops",
            higher_is_better=False,
            group=COST_GROUP,
        ),
    ]
