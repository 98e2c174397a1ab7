"""Networks: the architecture registry, safe loading of submissions, batch-invariant evaluation.

- :mod:`~certbench.nets.architectures`: the registry of architectures a manifest may name;
- :mod:`~certbench.nets.libraries`: ``timm/<model>`` and ``torchvision/<model>`` architectures,
  built from the pinned library without pretrained weights; :mod:`~certbench.nets.library_kwargs`:
  their allowed keyword arguments (torch-free);
- :mod:`~certbench.nets.meta`: a manifest's network on the ``meta`` device (shapes, no memory);
- :mod:`~certbench.nets.cost`: parameters and FLOPs per sample (``FlopCounterMode`` on ``meta``);
- :mod:`~certbench.nets.manifest`: the JSON manifest, validated without torch;
- :mod:`~certbench.nets.loading`: manifest + safetensors weights → a model (never pickle);
- :mod:`~certbench.nets.header`: a safetensors header read and checked without its tensors;
- :mod:`~certbench.nets.fit`: whether a header's tensors fit an architecture (``meta`` device);
- :mod:`~certbench.nets.denoised`: a manifest's ``denoiser`` in front of its classifier (denoised
  smoothing), composed by ``load_model`` and counted by ``fit`` and ``cost``;
- :mod:`~certbench.nets.batch_invariance`: fixed-shape chunks keyed by row (``RowSlots``), so a
  row's result never depends on its batch.

Imports no other certbench package but ``certbench.denoising`` (the denoisers a manifest may put
in front of its classifier). Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.nets.architectures import (
        available_architectures,
        build_classifier,
        check_kwargs,
        is_library_architecture,
    )
    from certbench.nets.batch_invariance import (
        RowSlots,
        canonical_layout,
        chunk_rows,
        near_ties,
        packed_keys,
        stable_argmax,
    )
    from certbench.nets.cost import NetworkCost, manifest_cost, network_cost, parameters_of
    from certbench.nets.denoised import denoiser_provenance
    from certbench.nets.fit import check_fit, max_tensors
    from certbench.nets.folding import batchnorm_count, fold_batchnorm
    from certbench.nets.header import (
        FILES_SWAPPED,
        FLOAT_DTYPES,
        looks_like_json,
        looks_like_safetensors,
        read_header,
    )
    from certbench.nets.libraries import architecture_provenance
    from certbench.nets.loading import load_model, save_weights
    from certbench.nets.manifest import (
        ARCHITECTURE_NAMES,
        NAME_LENGTH,
        PRINTABLE_PATTERN,
        Architecture,
        Manifest,
        Metadata,
        Preprocessing,
        Smoothing,
        clean_text,
        load_manifest,
    )

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
