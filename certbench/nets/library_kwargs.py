"""Which keyword arguments a manifest may pass to a library architecture, checked without torch.

A manifest may name an architecture of a pinned, well-kept library instead of a built-in one:
``timm/<model>`` (any model ``timm.list_models()`` registers) or ``torchvision/<model>`` (its
classification models). The upload stays data: certbench calls the library's constructor itself,
always without pretrained weights, with ``num_classes`` and ``in_chans`` taken from the manifest,
and with only the keyword arguments allowed here: sizes, depths, widths, rates and pooling, what
changes the network's shape or its regularisation. A keyword argument that names something to load
(a file, a URL, a checkpoint, a pretrained configuration or tag) is refused by name, whatever its
value, before any library is imported (:func:`refused_key`, applied by the manifest's schema).

torch-free, like :mod:`certbench.nets.manifest` which applies it: the API checks a manifest's keys
at start-up cost. Whether a given model accepts a given allowed key is the library's to say when
the network is built (``certbench.nets.libraries``), on the ``meta`` device at intake.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from certbench.errors import ManifestError, UnknownArchitectureError

__all__ = [
    "ALLOWED_KWARGS",
    "FROM_MANIFEST",
    "LIBRARIES",
    "MAX_SEQUENCE",
    "REFUSED_WORDS",
    "KwargRule",
    "check_library_kwargs",
    "refused_key",
    "split_library_name",
]

#: The libraries a manifest may take an architecture from, as the prefix of its name.
LIBRARIES = ("timm", "torchvision")
#: Words that mark a keyword argument naming something to load or download: refused by name.
REFUSED_WORDS = (
    "pretrained", "checkpoint", "ckpt", "weights", "state_dict", "file", "path", "dir", "url",
    "uri", "hub", "cache", "download", "load", "cfg", "config", "repo",
)  # fmt: skip
#: Keys whose value the manifest itself gives (``num_classes``, ``input_size``'s channels).
FROM_MANIFEST = {
    "num_classes": "num_classes",
    "in_chans": "input_size[0]",
    "in_channels": "input_size[0]",
}
#: Longest list a keyword argument may hold (stage depths and widths: a few stages).
MAX_SEQUENCE = 8
#: Bound of widths: wide enough that a network's size is judged by the benchmark's caps on
#: parameters and FLOPs (``certbench.nets.cost``), measured on the ``meta`` device, not here.
WIDTH = 1 << 20
#: Bound of depths: blocks are built one by one, so depth bounds the time a build takes even on
#: the ``meta`` device (64 blocks per stage or per network; ViT-g has 40).
DEPTH = 64


@dataclass(frozen=True)
class KwargRule:
    """One allowed keyword argument: its JSON type, closed range (numbers) or choices (strings),
    whether a list of up to MAX_SEQUENCE such values is taken too (per-stage settings) or only a
    list, and what it sets (for the docs)."""

    kind: type[int] | type[float] | type[bool] | type[str]
    low: float = 0.0
    high: float = 0.0
    choices: tuple[str, ...] = ()
    sequence: bool = False
    scalar: bool = True
    meaning: str = ""

    def coerce(self, key: str, value: Any) -> Any:
        """``value`` checked and normalised (a list becomes a tuple), or ManifestError naming
        ``key``."""
        if isinstance(value, list | tuple):
            if not self.sequence:
                raise ManifestError(f"architecture kwarg {key!r} takes one value, got a list")
            if not 1 <= len(value) <= MAX_SEQUENCE:
                raise ManifestError(
                    f"architecture kwarg {key!r} takes 1 to {MAX_SEQUENCE} values, got {len(value)}"
                )
            return tuple(self._one(key, item) for item in value)
        if not self.scalar:
            raise ManifestError(f"architecture kwarg {key!r} takes a list, got {value!r}")
        return self._one(key, value)

    def _one(self, key: str, value: Any) -> Any:
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ManifestError(f"architecture kwarg {key!r} must be true or false")
            return value
        if self.kind is str:
            if value not in self.choices:
                raise ManifestError(
                    f"architecture kwarg {key!r}={value!r} is not one of "
                    f"{', '.join(map(repr, self.choices))}"
                )
            return value
        accepted = (int, float) if self.kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise ManifestError(
                f"architecture kwarg {key!r} must be {self.kind.__name__}, got {value!r}"
            )
        number: int | float = float(value) if self.kind is float else int(value)
        if not self.low <= number <= self.high:
            raise ManifestError(
                f"architecture kwarg {key!r}={value!r} is outside [{self.low:g}, {self.high:g}]"
            )
        return number


def _size(high: float, meaning: str, *, sequence: bool = False, low: float = 1) -> KwargRule:
    return KwargRule(int, low, high, sequence=sequence, meaning=meaning)


def _list(high: float, meaning: str) -> KwargRule:
    return KwargRule(int, 1, high, sequence=True, scalar=False, meaning=meaning)


def _rate(meaning: str) -> KwargRule:
    return KwargRule(float, 0.0, 0.99, meaning=meaning)


def _flag(meaning: str) -> KwargRule:
    return KwargRule(bool, meaning=meaning)


#: The keyword arguments a library architecture may take, each checked by its rule; anything else
#: is refused. The library refuses those its model does not take, when it is built.
ALLOWED_KWARGS: Mapping[str, KwargRule] = {
    # input geometry
    "img_size": _size(1024, "input side the model is built for (timm)", sequence=True, low=8),
    "image_size": _size(1024, "input side the model is built for (torchvision ViT)", low=8),
    "patch_size": _size(64, "patch side (ViT, Swin, ...)", sequence=True),
    "window_size": _size(64, "attention window side (Swin, ...)", sequence=True),
    "output_stride": _size(32, "output stride of dilated ConvNets (8, 16 or 32)", low=8),
    # widths
    "embed_dim": _size(WIDTH, "token width (ViT, Swin, ...)", sequence=True),
    "embed_dims": _list(WIDTH, "token width per stage"),
    "dims": _list(WIDTH, "channels per stage (ConvNeXt, ...)"),
    "channels": _list(WIDTH, "channels per stage (timm ResNet)"),
    "stem_width": _size(WIDTH, "stem channels (timm ResNet)"),
    "base_width": _size(WIDTH, "bottleneck base width (timm ResNet / ResNeXt)"),
    "width_per_group": _size(WIDTH, "bottleneck width per group (torchvision ResNet)"),
    "hidden_dim": _size(WIDTH, "token width (torchvision ViT)"),
    "mlp_dim": _size(WIDTH, "MLP width (torchvision ViT)"),
    "mlp_ratio": KwargRule(float, 0.25, 16.0, sequence=True, meaning="MLP width / token width"),
    "num_heads": _size(4096, "attention heads (per stage for hierarchical models)", sequence=True),
    "cardinality": _size(4096, "groups of grouped convolutions (timm ResNeXt)"),
    "groups": _size(4096, "groups of grouped convolutions (torchvision ResNeXt)"),
    "reg_tokens": _size(64, "register tokens (ViT)", low=0),
    "down_kernel_size": _size(7, "kernel of the shortcut's downsampling convolution"),
    # depths
    "depth": _size(DEPTH, "blocks (ViT, ...)"),
    "depths": _list(DEPTH, "blocks per stage (Swin, ConvNeXt, ...)"),
    "layers": _list(DEPTH, "blocks per stage (timm ResNet)"),
    "num_layers": _size(DEPTH, "blocks (torchvision ViT)"),
    # regularisation
    "drop_rate": _rate("dropout before the classifier"),
    "drop_path_rate": _rate("stochastic depth, largest rate"),
    "drop_block_rate": _rate("DropBlock rate"),
    "attn_drop_rate": _rate("attention dropout"),
    "proj_drop_rate": _rate("projection dropout"),
    "pos_drop_rate": _rate("dropout after the position embedding"),
    "patch_drop_rate": _rate("fraction of patch tokens dropped in training"),
    "dropout": _rate("dropout (torchvision)"),
    "attention_dropout": _rate("attention dropout (torchvision ViT)"),
    "stochastic_depth_prob": _rate("stochastic depth (torchvision)"),
    "layer_scale_init_value": KwargRule(float, 0.0, 10.0, meaning="LayerScale initial value"),
    "init_values": KwargRule(float, 0.0, 10.0, meaning="LayerScale initial value (ViT)"),
    # pooling and token layout
    "global_pool": KwargRule(
        str,
        choices=("", "avg", "max", "avgmax", "catavgmax", "fast", "token", "map"),
        meaning="pooling before the classifier",
    ),
    "stem_type": KwargRule(str, choices=("", "deep", "deep_tiered"), meaning="timm ResNet stem"),
    "class_token": _flag("use a class token (ViT)"),
    "no_embed_class": _flag("no position embedding on the class token (ViT)"),
    "qkv_bias": _flag("bias of the attention's q, k, v projections"),
    "qk_norm": _flag("normalise q and k (ViT)"),
    "pre_norm": _flag("norm before the blocks (ViT, CLIP layout)"),
    "final_norm": _flag("norm after the blocks (ViT)"),
    "fc_norm": _flag("norm after pooling (ViT)"),
    "dynamic_img_size": _flag("accept other input sizes (ViT)"),
    "dynamic_img_pad": _flag("pad inputs to a multiple of the patch (ViT)"),
    "avg_down": _flag("average-pool shortcut downsampling (timm ResNet-D)"),
    "zero_init_last": _flag("zero-initialise each block's last norm (timm)"),
    "zero_init_residual": _flag("zero-initialise each block's last norm (torchvision)"),
}


def split_library_name(name: str) -> tuple[str, str] | None:
    """``("timm", "resnet18")`` for ``"timm/resnet18"``; None for a built-in name (no ``/``).

    Raises UnknownArchitectureError for a prefix that is not a library certbench builds from.
    """
    library, slash, model = name.partition("/")
    if not slash:
        return None
    if library not in LIBRARIES:
        raise UnknownArchitectureError(
            f"unknown architecture {name!r}: the part before '/' names the library, one of "
            f"{', '.join(LIBRARIES)} (e.g. timm/resnet18, torchvision/resnet18)"
        )
    return library, model


def refused_key(key: str) -> str | None:
    """Why ``key`` may never be an architecture keyword argument, or None when it may be one
    (whether it is allowed is :func:`check_library_kwargs`'s to say)."""
    lowered = key.lower()
    if key in ALLOWED_KWARGS:  # ``drop_path_rate`` holds "path" and loads nothing
        return None
    if lowered in FROM_MANIFEST:
        return (
            f"architecture kwarg {key!r} is set from the manifest's {FROM_MANIFEST[lowered]}; "
            "remove it from architecture.kwargs"
        )
    word = next((w for w in REFUSED_WORDS if w in lowered), None)
    if word is None:
        return None
    return (
        f"architecture kwarg {key!r} is refused: it names a file, URL, checkpoint or pretrained "
        "configuration, and certbench builds every network without pretrained weights and loads "
        "only the uploaded safetensors weights; remove it from architecture.kwargs"
    )


def check_library_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` of a library architecture checked against :data:`ALLOWED_KWARGS`, coerced
    (lists become tuples), or ManifestError naming the first refused key."""
    checked: dict[str, Any] = {}
    for key in sorted(kwargs):
        reason = refused_key(key)
        if reason is not None:
            raise ManifestError(reason)
        rule = ALLOWED_KWARGS.get(key)
        if rule is None:
            raise ManifestError(
                f"architecture kwarg {key!r} is not allowed; a library architecture takes sizes, "
                f"depths, rates and pooling only: {', '.join(sorted(ALLOWED_KWARGS))}"
            )
        checked[key] = rule.coerce(key, kwargs[key])
    return checked


def describe_kwargs(kwargs: Mapping[str, Any]) -> str:
    """``depth=2, embed_dim=48`` for a label (lists written as lists)."""
    return ", ".join(f"{k}={_text(v)}" for k, v in sorted(kwargs.items()))


def _text(value: Any) -> str:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value) if isinstance(value, str) else str(value)
