"""What a manifest may say about a denoiser: allow-listed configurations, validated without torch.

A submission's denoiser is data, never code: the network comes from a pinned library
(``diffusers``' ``UNet2DModel``) or from certbench (:class:`~certbench.denoising.dncnn.DnCNN`),
built from a configuration whose every key is on an allow-list and bounded, so that a manifest
can neither name a file, a URL, a pretrained checkpoint nor a network too large to build. The
models embed in a manifest as ``"denoiser": {"kind": "diffusion" | "dncnn", ...}`` (the
``kind`` field picks the model, :data:`DenoiserConfig`).

- :class:`UNetConfig`: the keys of ``UNet2DModel`` that shape the network (widths, depths, block
  types from an allow-listed set, attention, normalisation, dropout, time embedding); any other
  key is refused naming it. :data:`DDPM_CIFAR10_UNET` is the network of Ho et al.'s CIFAR-10
  model as diffusers publishes it (``google/ddpm-cifar10-32``: 35.7M parameters, self-attention
  at 16×16).
- :class:`DiffusionDenoiserConfig`: the U-Net plus its β schedule (``linear`` or ``cosine``,
  T steps; :mod:`certbench.denoising.schedule`).
- :class:`DnCNNConfig`: Salman et al.'s one-step denoiser (depth, features).
- :data:`ManifestDenoiser`: the manifest's ``denoiser`` field (:class:`certbench.nets.Manifest`),
  refusals worded as the manifest's; :func:`check_denoiser` whether a configuration fits the
  manifest's images and σ.

torch-free, like :mod:`certbench.nets.manifest`, which imports it: the API validates manifests
at start-up cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from certbench.denoising.schedule import NoiseSchedule
from certbench.errors import ManifestError

__all__ = [
    "DDPM_CIFAR10_UNET",
    "DENOISER_FILTERS",
    "DENOISER_PRESETS",
    "DOWN_BLOCK_TYPES",
    "LABEL_LENGTH",
    "LABEL_SEPARATOR",
    "MAX_TIMESTEPS",
    "MAX_WIDTH",
    "UP_BLOCK_TYPES",
    "DenoiserConfig",
    "DenoiserConfigError",
    "DiffusionDenoiserConfig",
    "DnCNNConfig",
    "ManifestDenoiser",
    "UNetConfig",
    "check_denoiser",
    "composition_label",
    "denoiser_of",
    "describe_errors",
    "parse_denoiser_config",
]


class DenoiserConfigError(ManifestError):
    """A denoiser configuration names a key outside its allow-list or a value out of bounds."""


DOWN_BLOCK_TYPES = ("DownBlock2D", "AttnDownBlock2D")
UP_BLOCK_TYPES = ("UpBlock2D", "AttnUpBlock2D")
"""The U-Net blocks of DDPM's networks: residual blocks with or without self-attention."""

MAX_WIDTH = 1024
"""Channels of any one level (DDPM's CIFAR-10 model: 256; guided diffusion's ImageNet: 1024)."""
MAX_LEVELS = 6
MAX_LAYERS = 4
MAX_TIMESTEPS = 10_000
MAX_DNCNN_DEPTH = 64
MAX_DNCNN_FEATURES = 512

Width = Annotated[StrictInt, Field(ge=1, le=MAX_WIDTH)]
Unit = Annotated[StrictFloat | StrictInt, Field(ge=0, lt=1)]


class _Strict(BaseModel):
    """Frozen; an unknown key is refused with the allow-list in the message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: What the refusal calls this configuration.
    label: ClassVar[str] = "configuration"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in cls.model_fields)
            if unknown:
                raise ValueError(
                    f"{', '.join(map(repr, unknown))} "
                    f"{'is' if len(unknown) == 1 else 'are'} not allowed in a "
                    f"{cls.label}; allowed keys: {', '.join(cls.model_fields)}"
                )
        return data


class UNetConfig(_Strict):
    """The allow-listed keyword arguments of ``diffusers.UNet2DModel`` (defaults: the library's,
    except ``sample_size`` and the widths, which every denoiser states).

    Left out on purpose: class conditioning (``class_embed_type``, ``num_class_embeds``: one-shot
    denoising is unconditional), Fourier/learned time embeddings and ``num_train_timesteps`` (the
    schedule is the denoiser's own), and anything that is not a shape or a rate.
    """

    label: ClassVar[str] = "UNet2DModel configuration"

    sample_size: Annotated[StrictInt, Field(ge=8, le=1024)]
    in_channels: Annotated[StrictInt, Field(ge=1, le=4)] = 3
    out_channels: Annotated[StrictInt, Field(ge=1, le=8)] = 3
    block_out_channels: tuple[Width, ...] = Field(min_length=1, max_length=MAX_LEVELS)
    layers_per_block: Annotated[StrictInt, Field(ge=1, le=MAX_LAYERS)] = 2
    down_block_types: tuple[Literal["DownBlock2D", "AttnDownBlock2D"], ...] = Field(
        min_length=1, max_length=MAX_LEVELS
    )
    up_block_types: tuple[Literal["UpBlock2D", "AttnUpBlock2D"], ...] = Field(
        min_length=1, max_length=MAX_LEVELS
    )
    mid_block_type: Literal["UNetMidBlock2D"] | None = "UNetMidBlock2D"
    attention_head_dim: Annotated[StrictInt, Field(ge=1, le=MAX_WIDTH)] | None = 8
    add_attention: StrictBool = True
    norm_num_groups: Annotated[StrictInt, Field(ge=1, le=MAX_WIDTH)] = 32
    attn_norm_num_groups: Annotated[StrictInt, Field(ge=1, le=MAX_WIDTH)] | None = None
    norm_eps: Annotated[StrictFloat, Field(gt=0, le=0.1)] = 1e-5
    dropout: Unit = 0.0
    act_fn: Literal["silu", "swish", "mish", "gelu"] = "silu"
    center_input_sample: StrictBool = False
    time_embedding_type: Literal["positional"] = "positional"
    flip_sin_to_cos: StrictBool = True
    freq_shift: Annotated[StrictInt, Field(ge=0, le=1)] = 0
    downsample_padding: Annotated[StrictInt, Field(ge=0, le=1)] = 1
    downsample_type: Literal["conv", "resnet"] = "conv"
    upsample_type: Literal["conv", "resnet"] = "conv"
    mid_block_scale_factor: Annotated[StrictFloat | StrictInt, Field(gt=0, le=10)] = 1.0
    resnet_time_scale_shift: Literal["default", "scale_shift"] = "default"

    @model_validator(mode="after")
    def _consistent(self) -> UNetConfig:
        levels = len(self.block_out_channels)
        if len(self.down_block_types) != levels or len(self.up_block_types) != levels:
            raise ValueError(
                f"block_out_channels, down_block_types and up_block_types need one entry per "
                f"level; got {levels}, {len(self.down_block_types)} and "
                f"{len(self.up_block_types)}"
            )
        if self.sample_size % 2 ** (levels - 1):
            raise ValueError(
                f"sample_size {self.sample_size} cannot be halved {levels - 1} times evenly; "
                "use a multiple of 2^(levels − 1)"
            )
        if self.out_channels not in (self.in_channels, 2 * self.in_channels):
            raise ValueError(
                f"out_channels must be in_channels ({self.in_channels}: the predicted noise) or "
                f"twice that ({2 * self.in_channels}: noise and learned variance), got "
                f"{self.out_channels}"
            )
        groups = [self.norm_num_groups, self.attn_norm_num_groups or self.norm_num_groups]
        for width in self.block_out_channels:
            for group in groups:
                if width % group:
                    raise ValueError(
                        f"block_out_channels entry {width} is not divisible by the "
                        f"normalisation's {group} groups"
                    )
        return self


DDPM_CIFAR10_UNET = UNetConfig(
    sample_size=32,
    block_out_channels=(128, 256, 256, 256),
    layers_per_block=2,
    down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    attention_head_dim=None,
    norm_eps=1e-6,
    dropout=0.1,
    flip_sin_to_cos=False,
    freq_shift=1,
    downsample_padding=0,
)
"""Ho et al.'s CIFAR-10 network (NeurIPS 2020, Appendix B: 35.7M parameters, channel multipliers
(1, 2, 2, 2) of 128, two residual blocks per level, self-attention at 16×16, dropout 0.1) in
diffusers' configuration of ``google/ddpm-cifar10-32``."""


class DiffusionDenoiserConfig(_Strict):
    """A noise-prediction U-Net and its β schedule: Carlini et al.'s one-shot denoiser."""

    label: ClassVar[str] = "diffusion denoiser configuration"

    kind: Literal["diffusion"] = "diffusion"
    unet: UNetConfig
    beta_schedule: Literal["linear", "cosine"] = "linear"
    num_train_timesteps: Annotated[StrictInt, Field(ge=2, le=MAX_TIMESTEPS)] = 1000


class DnCNNConfig(_Strict):
    """Salman et al.'s DnCNN one-step denoiser (microsoft/denoised-smoothing,
    ``code/architectures.py``: ``cifar_dncnn`` is depth 17 with 64 features, ``cifar_dncnn_wide``
    128)."""

    label: ClassVar[str] = "DnCNN configuration"

    kind: Literal["dncnn"] = "dncnn"
    depth: Annotated[StrictInt, Field(ge=3, le=MAX_DNCNN_DEPTH)] = 17
    features: Annotated[StrictInt, Field(ge=1, le=MAX_DNCNN_FEATURES)] = 64


DenoiserConfig = Annotated[DiffusionDenoiserConfig | DnCNNConfig, Field(discriminator="kind")]
"""A manifest's ``denoiser`` block: ``kind`` picks :class:`DiffusionDenoiserConfig` or
:class:`DnCNNConfig`."""

_ADAPTER: TypeAdapter[DiffusionDenoiserConfig | DnCNNConfig] = TypeAdapter(DenoiserConfig)

DENOISER_PRESETS: dict[str, DiffusionDenoiserConfig | DnCNNConfig] = {
    "ddpm-cifar10-32": DiffusionDenoiserConfig(unet=DDPM_CIFAR10_UNET),
    "dncnn": DnCNNConfig(depth=17, features=64),
    "dncnn-wide": DnCNNConfig(depth=17, features=128),
    "unet-demo": DiffusionDenoiserConfig(
        unet=UNetConfig(
            sample_size=32,
            block_out_channels=(16, 32, 64),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "DownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "UpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
        )
    ),
    "unet-tiny": DiffusionDenoiserConfig(
        unet=UNetConfig(
            sample_size=32,
            block_out_channels=(16, 32),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
        )
    ),
    "dncnn-demo": DnCNNConfig(depth=6, features=32),
}
"""Named configurations: the published networks (Ho et al.'s CIFAR-10 U-Net; Salman et al.'s
``cifar_dncnn`` and ``cifar_dncnn_wide``) and small ones that train on a laptop CPU for the
demo data: ``unet-demo`` (0.64M parameters, minutes), ``unet-tiny`` (two levels of 16 and 32
channels: one epoch in seconds, what the tests and the documentation's example train) and
``dncnn-demo``."""


KINDS = ("diffusion", "dncnn")


def parse_denoiser_config(data: Mapping[str, Any]) -> DiffusionDenoiserConfig | DnCNNConfig:
    """Validate a ``denoiser`` block; DenoiserConfigError names each offending key and why."""
    if not isinstance(data, Mapping):
        raise DenoiserConfigError(
            f"a denoiser is a JSON object with a 'kind' ({' or '.join(KINDS)}), got "
            f"{type(data).__name__}"
        )
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as err:
        raise DenoiserConfigError(f"invalid denoiser: {describe_errors(err)}") from err


def describe_errors(err: ValidationError, root: str = "denoiser") -> str:
    """pydantic's per-field messages on one line: 'denoiser.unet.dropout: Input should be ...'
    (the union's tag, which pydantic puts first in each location, left out; with ``root`` empty
    the locations start below the block: 'unet.dropout: ...')."""
    parts = []
    for item in err.errors(include_url=False):
        loc = list(item["loc"])
        if loc and loc[0] in KINDS:
            loc = loc[1:]
        where = ".".join(str(p) for p in [root, *loc] if p != "")
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def _manifest_block(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """The ``denoiser`` field: a configuration, or one custom error listing every problem of the
    block (without pydantic's union tags), so the manifest's refusal names keys as written."""
    if isinstance(value, DiffusionDenoiserConfig | DnCNNConfig):
        return value
    if not isinstance(value, Mapping):
        raise PydanticCustomError(
            "denoiser_type",
            "a denoiser is a JSON object with a 'kind' (diffusion or dncnn), got {got}",
            {"got": type(value).__name__},
        )
    try:
        return handler(dict(value))
    except ValidationError as err:
        raise PydanticCustomError(
            "denoiser", "{reason}", {"reason": describe_errors(err, root="")}
        ) from None


ManifestDenoiser = Annotated[DenoiserConfig, WrapValidator(_manifest_block)]
"""A manifest's ``denoiser``: :data:`DenoiserConfig`, its refusals one line per problem."""


LABEL_LENGTH = 64
"""The longest :func:`composition_label` (the leaderboard's architecture column)."""
LABEL_SEPARATOR = " · "


def composition_label(
    denoiser: DiffusionDenoiserConfig | DnCNNConfig | None, architecture: str
) -> str:
    """How the leaderboard names an entry's network: the architecture alone, or
    ``denoiser · classifier`` (``diffusion · wrn``, ``dncnn · timm/resnet18``)."""
    return architecture if denoiser is None else f"{denoiser.kind}{LABEL_SEPARATOR}{architecture}"


DENOISER_FILTERS = ("none", "any", "diffusion", "dncnn")
"""The leaderboard's denoiser filter: plain classifiers, any denoiser, or one kind."""


def denoiser_of(label: str) -> str | None:
    """The denoiser kind of a :func:`composition_label` (None for a plain architecture)."""
    kind, separator, _ = label.partition(LABEL_SEPARATOR)
    return kind if separator and kind in KINDS else None


def check_denoiser(
    config: DiffusionDenoiserConfig | DnCNNConfig,
    *,
    input_size: Sequence[int],
    sigma: float,
    architecture: str = "",
) -> None:
    """Whether ``config`` fits images of ``input_size`` (C, H, W) smoothed at ``sigma``, without
    building it: a U-Net takes the images' channels at its ``sample_size`` (square), and σ is
    within its β schedule (:func:`certbench.denoising.schedule.carlini_timestep`); a DnCNN takes
    any image. With the classifier's ``architecture`` name, the entry's
    :func:`composition_label` must fit the leaderboard's column. Raises DenoiserConfigError
    naming the key."""
    label = composition_label(config, architecture)
    if len(label) > LABEL_LENGTH:
        raise DenoiserConfigError(
            f"architecture.name {architecture!r} is too long for a denoised entry, shown as "
            f"{label!r}: at most {LABEL_LENGTH - len(label) + len(architecture)} characters"
        )
    if isinstance(config, DnCNNConfig):
        return
    channels, height, width = (int(v) for v in input_size)
    unet = config.unet
    if unet.in_channels != channels:
        raise DenoiserConfigError(
            f"denoiser.unet.in_channels is {unet.in_channels} but the images have {channels} "
            "channels"
        )
    if (height, width) != (unet.sample_size, unet.sample_size):
        raise DenoiserConfigError(
            f"denoiser.unet.sample_size is {unet.sample_size} but the images are "
            f"{height}×{width}; the U-Net denoises images of its own size"
        )
    try:
        NoiseSchedule.named(config.beta_schedule, config.num_train_timesteps).timestep(sigma)
    except ValueError as err:
        raise DenoiserConfigError(f"denoiser: {err}") from err
