"""A benchmark's caps on the networks it accepts, checked at intake before anything is stored.

A definition may cap a submitted network's parameters and FLOPs per noise sample (``limits``:
``models.benchmarks.definitions.CostLimits``); both are counted on the network built on the
``meta`` device (``certbench.nets.cost``), so a refusal costs well under a second whatever the
network's size and no weight is ever materialised. Here rather than with the submissions: the API
calls it before the upload enters ``models.submissions`` (once, through ``intake.submit``).
"""

from __future__ import annotations

from certbench.denoising import composition_label
from certbench.errors import InputSizeError, ModelLoadError
from certbench.nets import Manifest, NetworkCost, manifest_cost, parameters_of
from models.benchmarks.definitions import CostLimits
from models.core.errors import IntakeError
from models.db.entities import Benchmark
from models.db.states import Reason

#: The code of a 422 for a network above its benchmark's caps on parameters or FLOPs per sample.
COST_LIMIT_CODE = "over_cost_limit"


def cost_limits(benchmark: Benchmark) -> CostLimits:
    """The caps of ``benchmark`` (the defaults for one loaded before caps existed)."""
    return CostLimits.model_validate(benchmark.limits or {})


def check_cost(benchmark: Benchmark, manifest: Manifest) -> NetworkCost:
    """The cost of ``manifest``'s network, measured on the ``meta`` device
    (``certbench.nets.cost``), if it is within ``benchmark``'s caps.

    Parameters are counted first, so a network far too large is refused without running it;
    FLOPs per sample then come from one forward pass on shape-only tensors. Raises IntakeError:
    over_cost_limit (naming the figure and the limit), bad_manifest (the library cannot build
    the network with these kwargs), input_size (it cannot take the manifest's input_size).
    """
    limits = cost_limits(benchmark)
    try:
        parameters = parameters_of(manifest)
        _within(parameters, limits.max_parameters, "parameters", benchmark, manifest)
        cost = manifest_cost(manifest)
    except InputSizeError as err:
        raise IntakeError(str(err), code=Reason.INPUT_SIZE.value) from err
    except ModelLoadError as err:  # ManifestError, UnknownArchitectureError
        raise IntakeError(str(err), code=Reason.BAD_MANIFEST.value) from err
    _within(cost.flops_per_sample, limits.max_flops_per_sample, "FLOPs per sample", benchmark,
            manifest)  # fmt: skip
    return cost


def _within(value: int, limit: int, what: str, benchmark: Benchmark, manifest: Manifest) -> None:
    if value > limit:
        raise IntakeError(
            f"{composition_label(manifest.denoiser, manifest.architecture.name)} has {value:,} "
            f"{what} (counted on the meta device), "
            f"above benchmark {benchmark.name!r}'s limit of {limit:,}; submit a smaller network "
            "(architecture.kwargs: widths, depths, img_size)",
            code=COST_LIMIT_CODE,
        )
