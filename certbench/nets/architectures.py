"""Registry of the classifier architectures a submission may name.

Submissions are data, never code: a user picks a registered name plus keyword arguments from that
entry's allow-list, and we build the network ourselves. Every classifier is
``nn.Sequential(NormalizeLayer(mean, std), net)`` so that inputs stay in [0, 1] pixel space and the
Gaussian noise of randomized smoothing is added *before* normalization (Cohen et al. 2019). Index 0
holds no state-dict entries, index 1 is the network, so the keys read ``1.conv1.weight``, ...
exactly like the published checkpoints of locuslab/smoothing.

Besides these, a manifest may name an architecture of a pinned library, ``timm/<model>`` or
``torchvision/<model>`` (:mod:`certbench.nets.libraries`, keyword arguments from
:mod:`certbench.nets.library_kwargs`): :func:`check_kwargs`, :func:`create_architecture` and
:func:`build_classifier` take both kinds of name.

Registered: ``cifar_resnet20/56/110`` (He et al. 2016, CIFAR variant with 1x1 projection shortcuts,
as used by Cohen et al.), ``wrn`` (Zagoruyko & Komodakis 2016, pre-activation wide ResNet) and
``lenet5`` (LeCun et al. 1998: small enough to certify the CPU demo benchmark in seconds).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from certbench.errors import ManifestError, PreprocessingError, UnknownArchitectureError
from certbench.nets.library_kwargs import check_library_kwargs, split_library_name
from certbench.nets.preprocessing import preprocessing_problem

__all__ = [
    "ArchitectureSpec",
    "KwargSpec",
    "NormalizeLayer",
    "available_architectures",
    "build_classifier",
    "check_kwargs",
    "create_architecture",
    "get_spec",
    "is_library_architecture",
    "register_architecture",
]


@dataclass(frozen=True)
class KwargSpec:
    """One allowed keyword argument: its type, closed range and an optional extra rule."""

    kind: type[int] | type[float]
    low: float
    high: float
    rule: Callable[[Any], bool] | None = None
    rule_text: str = ""

    def coerce(self, name: str, value: Any) -> int | float:
        """Return ``value`` as ``kind`` or raise ManifestError naming ``name``."""
        # bool is an int subclass; JSON ints are fine for float kwargs, floats never for int ones.
        accepted = (int, float) if self.kind is float else (int,)
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise ManifestError(
                f"architecture kwarg {name!r} must be {self.kind.__name__}, got {value!r}"
            )
        value = self.kind(value)
        if not self.low <= value <= self.high:
            raise ManifestError(
                f"architecture kwarg {name!r}={value!r} is outside [{self.low}, {self.high}]"
            )
        if self.rule is not None and not self.rule(value):
            raise ManifestError(f"architecture kwarg {name!r}={value!r} invalid: {self.rule_text}")
        return value


@dataclass(frozen=True)
class ArchitectureSpec:
    """A registered builder with its kwarg allow-list (anything else is refused)."""

    name: str
    builder: Callable[..., nn.Module]
    kwargs: Mapping[str, KwargSpec] = field(default_factory=dict)
    doc: str = ""


_REGISTRY: dict[str, ArchitectureSpec] = {}


def register_architecture(
    name: str, *, kwargs: Mapping[str, KwargSpec] | None = None
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: register ``builder(num_classes=..., **allowed_kwargs)`` as ``name``."""

    def decorate(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _REGISTRY:
            raise ValueError(f"architecture {name!r} is already registered")
        doc = (builder.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = ArchitectureSpec(name, builder, dict(kwargs or {}), doc[0] if doc else "")
        return builder

    return decorate


def available_architectures() -> list[str]:
    """Sorted built-in names accepted by :func:`create_architecture` and manifests (library
    architectures, ``timm/<model>`` and ``torchvision/<model>``, are the libraries' to list)."""
    return sorted(_REGISTRY)


def get_spec(name: str) -> ArchitectureSpec:
    """The registry entry for ``name``; raises UnknownArchitectureError listing the known names
    (the closest first) and the library prefixes."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, available_architectures(), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise UnknownArchitectureError(
            f"unknown architecture {name!r}; {hint}choose one of: "
            f"{', '.join(available_architectures())}, or a library architecture "
            "timm/<model> or torchvision/<model>"
        ) from None


def is_library_architecture(name: str) -> bool:
    """Whether ``name`` names a library architecture (``timm/...``, ``torchvision/...``)."""
    return split_library_name(name) is not None


def check_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``kwargs`` against the allow-list of ``name``; return them coerced to their types
    (a library architecture's name is checked against the library's registry too)."""
    if is_library_architecture(name):
        from certbench.nets.libraries import check_library_name

        check_library_name(name)
        return check_library_kwargs(kwargs)
    spec = get_spec(name)
    unknown = sorted(set(kwargs) - set(spec.kwargs))
    if unknown:
        allowed = ", ".join(sorted(spec.kwargs)) or "none"
        raise ManifestError(
            f"architecture {name!r} does not accept kwarg(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {allowed}"
        )
    return {key: spec.kwargs[key].coerce(key, value) for key, value in kwargs.items()}


def create_architecture(
    name: str, *, num_classes: int, in_chans: int = 3, **kwargs: Any
) -> nn.Module:
    """Build the bare network ``name`` (randomly initialised) after checking its kwargs.

    ``in_chans`` (the manifest's ``input_size[0]``) reaches library architectures; the built-in
    ones take 3 channels, and a forward pass on other inputs says so (``check_model``).
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ManifestError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    checked = check_kwargs(name, kwargs)
    if is_library_architecture(name):
        from certbench.nets.libraries import create_library_model

        return create_library_model(
            name, num_classes=num_classes, in_chans=in_chans, kwargs=checked
        )
    return get_spec(name).builder(num_classes=num_classes, **checked)


class NormalizeLayer(nn.Module):
    """Per-channel standardisation as the first layer, so noise is added in [0,1] pixel space.

    mean/std are non-persistent buffers: they follow ``.to(device)`` but stay out of the state dict,
    so weights files hold only the network's tensors (as in Cohen et al.'s checkpoints).
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != len(std) or len(mean) == 0:
            raise ManifestError(
                f"mean and std need one value per channel and equal lengths, got {mean} / {std}"
            )
        if any(s <= 0 for s in std):
            raise ManifestError(f"std values must be > 0, got {list(std)}")
        problem = preprocessing_problem(mean, std)
        if problem is not None:
            raise PreprocessingError(problem)
        shape = (1, len(mean), 1, 1)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(shape), False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(shape), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"


def build_classifier(
    name: str,
    *,
    num_classes: int,
    mean: Sequence[float],
    std: Sequence[float],
    **kwargs: Any,
) -> nn.Sequential:
    """``nn.Sequential(NormalizeLayer(mean, std), net)``: the base classifier f on [0,1] inputs
    (a library network takes one input channel per value of ``mean``)."""
    net = create_architecture(name, num_classes=num_classes, in_chans=len(mean), **kwargs)
    return nn.Sequential(NormalizeLayer(mean, std), net)


# --- CIFAR ResNet (He et al. 2016) with projection shortcuts, the layout of Cohen et al. ---------


def _conv3x3(in_planes: int, planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers plus identity, or a 1x1 conv-BN ``downsample`` when shapes change."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class CifarResNet(nn.Module):
    """ResNet of depth 6n+2 for 32x32 inputs: stages of width 16/32/64, global 8x8 average pool."""

    def __init__(self, depth: int, num_classes: int) -> None:
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ManifestError(f"CIFAR ResNet depth must be 6n+2 (20, 56, 110), got {depth}")
        blocks = (depth - 2) // 6
        self.conv1 = _conv3x3(3, 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._stage(16, 16, blocks, stride=1)
        self.layer2 = self._stage(16, 32, blocks, stride=2)
        self.layer3 = self._stage(32, 64, blocks, stride=2)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64, num_classes)
        _he_init(self)

    @staticmethod
    def _stage(in_planes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
        first = BasicBlock(in_planes, planes, stride)
        return nn.Sequential(first, *(BasicBlock(planes, planes) for _ in range(blocks - 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _he_init(module: nn.Module) -> None:
    """He-normal convs (fan-out), unit/zero BatchNorm: the usual CIFAR ResNet initialisation.

    Skipped on the ``meta`` device, where a network is built for its shapes only
    (``certbench.nets.fit``): a random fill there has no values to write yet loads torch's
    decomposition machinery, several seconds on the first call of a process.
    """
    if any(p.is_meta for p in module.parameters()):
        return
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


@register_architecture("cifar_resnet20")
def cifar_resnet20(*, num_classes: int) -> nn.Module:
    """CIFAR ResNet-20 (0.27M parameters for 10 classes)."""
    return CifarResNet(20, num_classes)


@register_architecture("cifar_resnet56")
def cifar_resnet56(*, num_classes: int) -> nn.Module:
    """CIFAR ResNet-56 (0.86M parameters for 10 classes)."""
    return CifarResNet(56, num_classes)


@register_architecture("cifar_resnet110")
def cifar_resnet110(*, num_classes: int) -> nn.Module:
    """CIFAR ResNet-110, Cohen et al.'s base classifier (1.73M parameters for 10 classes)."""
    return CifarResNet(110, num_classes)


# --- Wide ResNet (Zagoruyko & Komodakis 2016), pre-activation blocks ---------------------------


class WideBlock(nn.Module):
    """BN-ReLU-conv3x3 twice with dropout between; a 1x1 ``shortcut`` conv when shapes change.

    As in the paper's code, a projecting block feeds the *activated* input to its shortcut.
    """

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = _conv3x3(in_planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.relu = nn.ReLU(inplace=False)
        self.dropout = nn.Dropout(dropout)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        out = self.relu(self.bn2(self.conv1(activated)))
        out = self.conv2(self.dropout(out))
        return out + shortcut


class WideResNet(nn.Module):
    """WRN-depth-k: stages of width 16k/32k/64k, (depth-4)/6 blocks each, then BN-ReLU-pool-fc."""

    def __init__(self, depth: int, widen_factor: int, dropout: float, num_classes: int) -> None:
        super().__init__()
        blocks = (depth - 4) // 6
        widths = (16 * widen_factor, 32 * widen_factor, 64 * widen_factor)
        self.conv1 = _conv3x3(3, 16)
        self.layer1 = self._stage(16, widths[0], blocks, 1, dropout)
        self.layer2 = self._stage(widths[0], widths[1], blocks, 2, dropout)
        self.layer3 = self._stage(widths[1], widths[2], blocks, 2, dropout)
        self.bn = nn.BatchNorm2d(widths[2])
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(widths[2], num_classes)
        _he_init(self)
        nn.init.zeros_(self.fc.bias)

    @staticmethod
    def _stage(in_planes: int, planes: int, blocks: int, stride: int, p: float) -> nn.Sequential:
        first = WideBlock(in_planes, planes, stride, p)
        return nn.Sequential(first, *(WideBlock(planes, planes, 1, p) for _ in range(blocks - 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        x = self.relu(self.bn(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@register_architecture(
    "wrn",
    kwargs={
        "depth": KwargSpec(int, 10, 40, lambda d: (d - 4) % 6 == 0, "depth must be 6n+4"),
        "widen_factor": KwargSpec(int, 1, 12),
        "dropout": KwargSpec(float, 0.0, 0.9),
    },
)
def wrn(
    *, num_classes: int, depth: int = 28, widen_factor: int = 10, dropout: float = 0.0
) -> nn.Module:
    """Wide ResNet, default WRN-28-10 (36.5M parameters for 10 classes)."""
    return WideResNet(depth, widen_factor, dropout, num_classes)


# --- LeNet-5 (LeCun, Bottou, Bengio & Haffner 1998) -------------------------------------------


class LeNet5(nn.Module):
    """LeNet-5's layer layout on 3×32×32 inputs, with ReLU and max pooling in place of the
    original scaled tanh and trainable subsampling, and every C3 map connected to every S2 map.

    C1 conv 5×5 → 6×28×28, S2 pool → 6×14×14, C3 conv 5×5 → 16×10×10, S4 pool → 16×5×5,
    C5 conv 5×5 → 120, F6 → 84, output. About 1/20 of the multiply-adds of the smallest ``wrn``
    (depth 10, width 1): the network the demo benchmark's reference entries use, so that a CPU
    certifies an entry (n = 1,000 samples on 91 images) in seconds.
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, kernel_size=5)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)
        self.conv3 = nn.Conv2d(16, 120, kernel_size=5)
        self.fc1 = nn.Linear(120, 84)
        self.fc2 = nn.Linear(84, num_classes)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        _he_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = torch.flatten(self.relu(self.conv3(x)), 1)
        return self.fc2(self.relu(self.fc1(x)))


@register_architecture("lenet5")
def lenet5(*, num_classes: int) -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling (62k parameters for 10 classes)."""
    return LeNet5(num_classes)
