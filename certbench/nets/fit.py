"""Whether a weights file fits its manifest's architecture, judged from the header alone.

The expected state dict (names and shapes) is built on PyTorch's ``meta`` device: modules are
constructed with shape-only tensors, so no parameter memory is allocated and nothing is
initialised (a WRN-40-12 costs ~0.1 s and no memory instead of ~4 s and 300 MB on the CPU). That
keeps intake cheap however large the declared network, and lets the API refuse LeNet-5 weights
declared as a ResNet-20 with one line instead of the worker's key-by-key report a second later.

torch is imported inside the functions that build networks, so importing this module (and
``certbench.nets``'s face) costs nothing until an upload is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from certbench.errors import StateDictMismatchError

if TYPE_CHECKING:
    from certbench.nets.manifest import Manifest
    from certbench.nets.meta import MetaKey

__all__ = [
    "NET_PREFIX",
    "check_fit",
    "expected_shapes",
    "expected_tensor_count",
    "max_tensors",
    "with_prefix",
]

#: Prefix of the network inside ``nn.Sequential(NormalizeLayer, net)``.
NET_PREFIX = "1."
#: BatchNorm's step counters: absent from older checkpoints, filled in by BatchNorm itself.
COUNTER_SUFFIX = "num_batches_tracked"

Shapes = Mapping[str, tuple[int, ...]]


def expected_shapes(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    """Names (with the ``1.`` prefix) and shapes of the state dict of the manifest's network,
    built on the ``meta`` device (``certbench.nets.meta``)."""
    from certbench.nets.meta import meta_key

    return dict(_shapes(meta_key(manifest)))


@lru_cache(maxsize=64)
def _shapes(key: MetaKey) -> tuple[tuple[str, tuple[int, ...]], ...]:
    from certbench.nets.meta import build_meta

    return tuple((name, tuple(t.shape)) for name, t in build_meta(key).state_dict().items())


#: Slack of :func:`max_tensors`: a file for another architecture (ResNet-56 weights declared as a
#: ResNet-20) still gets the key-by-key mismatch report, while a header listing a million tensors
#: is refused before it is parsed.
TENSOR_FACTOR = 4
TENSOR_SLACK = 64


def expected_tensor_count(manifest: Manifest) -> int:
    """Tensors in the state dict of the manifest's architecture (BatchNorm counters included),
    and of its denoiser if it has one, counted on the ``meta`` device (``certbench.nets.fit``):
    no parameter is allocated."""
    from certbench.nets.denoised import denoiser_tensor_count

    return len(expected_shapes(manifest)) + denoiser_tensor_count(manifest)


def max_tensors(manifest: Manifest) -> int:
    """The most tensors a weights file for ``manifest`` may list (bounds its header too)."""
    return TENSOR_FACTOR * expected_tensor_count(manifest) + TENSOR_SLACK


def with_prefix(names: Mapping[str, Any]) -> dict[str, Any]:
    """Add the ``1.`` prefix to bare network keys; a file that uses it anywhere is kept as is
    (a mixed file then fails the key check)."""
    if any(key.startswith(NET_PREFIX) for key in names):
        return dict(names)
    return {NET_PREFIX + key: value for key, value in names.items()}


def check_fit(shapes: Shapes, manifest: Manifest) -> None:
    """Refuse weights (tensor names → shapes, as the header lists them) that do not fit the
    manifest's architecture, with a one-line summary naming the architecture they belong to
    when it is a registered one. A denoised submission's ``denoiser.*`` tensors are checked
    against its denoiser and its ``classifier.*`` ones as a plain file's
    (``certbench.nets.denoised``). Raises StateDictMismatchError."""
    from certbench.nets.denoised import check_denoiser_fit

    got = with_prefix(check_denoiser_fit(shapes, manifest))
    expected = expected_shapes(manifest)
    missing = _names(expected) - _names(got)
    unexpected = set(got) - set(expected)
    if missing or unexpected:
        raise StateDictMismatchError(_names_summary(got, expected, manifest, missing, unexpected))
    wrong = sorted(k for k in got if got[k] != expected[k])
    if wrong:
        first, total = wrong[0], len(_names(expected))
        raise StateDictMismatchError(
            f"weights have the tensors of {_label(manifest)} but {len(wrong)} of {total} have "
            f"other shapes, e.g. {first}: weights {tuple(got[first])} vs expected "
            f"{expected[first]}; check the manifest's architecture.kwargs and num_classes "
            f"({manifest.num_classes})"
        )


def _names(shapes: Shapes) -> set[str]:
    """Names that a file must hold (BatchNorm counters are optional)."""
    return {key for key in shapes if not key.endswith(COUNTER_SUFFIX)}


def _names_summary(
    got: Shapes, expected: Shapes, manifest: Manifest, missing: set[str], unexpected: set[str]
) -> str:
    # counted without BatchNorm's optional step counters, as a submitter counts weights
    label, count = _label(manifest), len(_names(expected))
    owner = _owner(got, manifest)
    if owner is not None and owner != manifest.architecture.name:
        return (
            f"weights have {len(_names(got))} tensors of {owner}, {label} expects {count}; set the "
            f"manifest's architecture.name to {owner!r} (or upload {label} weights)"
        )
    example = sorted(missing)[:1] or sorted(unexpected)[:1]
    which = "missing" if missing else "unexpected"
    return (
        f"weights have {len(_names(got))} tensors, {label} expects {count} ({len(missing)} "
        f"missing, {len(unexpected)} unexpected, e.g. {which} {example[0]!r}); check the "
        "manifest's architecture and its kwargs"
    )


def _label(manifest: Manifest) -> str:
    arch = manifest.architecture
    if not arch.kwargs:
        return arch.name
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted(arch.kwargs.items()))
    return f"{arch.name}({kwargs})"


def _owner(got: Shapes, manifest: Manifest) -> str | None:
    """The registered architecture (default kwargs, the manifest's class count) whose tensor
    names the file holds exactly, if any."""
    from certbench.nets.architectures import available_architectures

    names = _names(got)
    for name in available_architectures():
        candidate = dict(_shapes((name, manifest.num_classes, manifest.input_size[0], ())))
        if _names(candidate) == names and set(got) <= set(candidate):
            return name
    return None
