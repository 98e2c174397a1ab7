"""What a certification record says about how it was computed, so that it can be traced and
reproduced without the database: the library (and version) that built the network, the denoiser
in front of it for a denoised smoothing entry (Carlini et al., ICLR 2023; Salman et al., NeurIPS
2020), the protocol, and the key of the per-image noise streams that ``certbench certify
--seed`` needs to give the same records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from models.benchmarks.sources import TestSetSpec

if TYPE_CHECKING:
    from models.stages.base import ShardSpec
    from models.stages.work import WorkItem


def built_by(metadata: Sequence[Mapping[str, Any]], test_set: str) -> dict[str, Any]:
    """``{"architecture": {name, library, version}}`` as the test set's shards recorded it (the
    code that built the network is part of what was certified), with ``denoiser`` ({kind,
    library, version}) for a denoised smoothing entry; empty for shards written before it was
    recorded. Raises StorageError when shards ran under different library versions."""
    from models.core.errors import StorageError

    built: dict[str, Any] = {}
    for key in ("architecture", "denoiser"):
        found = {json.dumps(m[key], sort_keys=True) for m in metadata if key in m}
        if len(found) > 1:
            raise StorageError(
                f"the shards of test set {test_set!r} were computed by networks built with "
                f"different library versions ({', '.join(sorted(found))}); install one version "
                "on every worker and re-run the submission fresh"
            )
        if found:
            built[key] = json.loads(found.pop())
    return built


def stream_key(item: WorkItem, test_set: TestSetSpec) -> str:
    """The test-set key of the per-image noise streams.

    ``certbench certify``'s key, ``<config>/<split>``, so that the CLI reproduces a run from its
    revealed seed with the options a user passes anyway (``--dataset --config --seed``). Runs
    with the benchmark's public seed (from before commit-reveal) keep the key they were computed
    with, the test set's name, so that resumed shards still match.
    """
    if item.seed_kind != "secret":
        return test_set.name
    return f"{test_set.config or 'default'}/{test_set.split}"


def records_metadata(item: WorkItem, test_set: TestSetSpec, shard: ShardSpec) -> dict[str, object]:
    """The certification fields of a shard file's metadata (``shard_metadata`` adds the
    submission, the seed's commitment and the data hashes), so it can be traced without the
    database; ``architecture`` says which library (and version) built the network that ran, and
    ``denoiser`` (denoised smoothing entries only) what built the denoiser in front of it."""
    from certbench.nets import architecture_provenance, denoiser_provenance

    denoiser = denoiser_provenance(item.manifest)
    return {
        "architecture": architecture_provenance(item.manifest["architecture"]["name"]),
        **({"denoiser": denoiser} if denoiser is not None else {}),
        "test_set": test_set.name,
        "shard_index": shard.shard_index,
        "start": shard.start,
        "stop": shard.stop,
        "protocol_version": item.protocol_version,
        "seed_kind": item.seed_kind,
        "noise_stream_key": stream_key(item, test_set),
        "n0": item.n0,
        "n": item.n,
        "alpha": item.alpha,
        "sigma": item.sigma,
    }
