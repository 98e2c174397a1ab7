"""The JSON manifest that accompanies a weights file (DESIGN.md §6), validated without torch.

Every field is bounded so that whatever validates can be stored (PostgreSQL and SQLite) and run.
Names and keys are normalised (NFKC) and refused when they hold characters that do not show as
themselves: controls, format characters (bidi overrides such as U+202E, zero-width spaces and
joiners), private-use or unassigned code points, and words that mix look-alike scripts
(a Cyrillic ``е`` inside a Latin ``ResNet``), so a model name cannot impersonate another on the
leaderboard (Unicode TR #36, "Unicode Security Considerations"; TR #39 for mixed scripts).

torch-free: the API imports this module at start-up (the OpenAPI schema, intake); the architecture
registry, which needs torch, is consulted only when a manifest is loaded.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    StrictFloat,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from certbench.denoising import ManifestDenoiser, check_denoiser
from certbench.errors import ManifestError, PreprocessingError
from certbench.nets.library_kwargs import MAX_SEQUENCE, refused_key
from certbench.nets.preprocessing import preprocessing_problem

__all__ = [
    "ARCHITECTURE_NAMES",
    "KEY_LENGTH",
    "MAX_CHANNELS",
    "MAX_INPUT_SIDE",
    "NAME_LENGTH",
    "PRINTABLE_PATTERN",
    "Architecture",
    "Manifest",
    "Metadata",
    "Preprocessing",
    "Smoothing",
    "clean_text",
    "load_manifest",
    "preprocessing_problem",
]

#: The names of the architecture registry (``certbench.nets.architectures``), for readers that
#: list them without building a network (the leaderboard's filter): the registry needs torch.
#: ``tests/certbench/test_architectures.py`` checks that the two agree.
ARCHITECTURE_NAMES = ("cifar_resnet110", "cifar_resnet20", "cifar_resnet56", "lenet5", "wrn")
#: Input bounds every manifest obeys (a benchmark narrows them to its own image shape): the dummy
#: forward pass of validation allocates batch × C × H × W floats, so an unbounded input_size is a
#: memory bomb for the worker that runs it.
MAX_CHANNELS = 4
MAX_INPUT_SIDE = 1024
#: Lengths of the manifest strings that are stored in bounded database columns.
NAME_LENGTH = 128
KEY_LENGTH = 64


#: Code points that render as nothing although their category is a letter (Hangul fillers, the
#: braille blank): used to pad a name into looking like another.
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
#: Categories refused: controls, format characters (bidi controls, zero-width space/joiners,
#: soft hyphen, BOM), surrogates, private use, unassigned; line/paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: Scripts whose letters are confused with each other; one word mixing them is refused.
_CONFUSABLE_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "CHEROKEE", "COPTIC")


def clean_text(value: str) -> str:
    """``value`` normalised to NFKC (full-width and compatibility forms folded: ``ＲｅｓＮｅｔ``
    reads ``ResNet``), or ValueError naming the first character that does not show as itself
    (control, format, invisible, unassigned) or the word that mixes look-alike scripts."""
    text = unicodedata.normalize("NFKC", value)
    for position, char in enumerate(text):
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES or char in _INVISIBLE_LETTERS:
            kind = "control" if category == "Cc" else "invisible or formatting"
            name = unicodedata.name(char, "")
            raise ValueError(
                f"must not contain {kind} characters; found U+{ord(char):04X}"
                f"{f' ({name})' if name else ''} at position {position}"
            )
    for word in "".join(c if c.isalpha() else " " for c in text).split():
        scripts = {_script(c) for c in word} & set(_CONFUSABLE_SCRIPTS)
        if len(scripts) > 1:
            raise ValueError(
                f"the word {word!r} mixes {' and '.join(sorted(scripts))} letters that look "
                "alike; write each word in one script"
            )
    return text


def _within(text: str, limit: int) -> str:
    """NFKC may lengthen a string (``ﷺ`` becomes 18 letters): check the column's bound again."""
    if len(text) > limit:
        raise ValueError(f"is {len(text)} characters once normalised (NFKC), above {limit}")
    return text


def _script(char: str) -> str:
    """The script of a letter, from its Unicode name (``CYRILLIC SMALL LETTER IE``)."""
    return unicodedata.name(char, "").split(" ", 1)[0]


#: The same rule, as far as a JSON Schema pattern can say it, for OpenAPI clients and
#: property-based testers: no controls, no bidi/zero-width/format characters, no private use
#: (surrogates, unassigned code points, NFKC and mixed scripts are left to the server: a lone
#: surrogate in a pattern is not a valid ECMA-262 regular expression for schema readers).
PRINTABLE_PATTERN = (
    r"^[^\u0000-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u115f\u1160\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u206f\u2800\u3164\ue000-\uf8ff\ufeff\uffa0\ufff9-\ufffb]*$"
)
_SCHEMA = Field(json_schema_extra={"pattern": PRINTABLE_PATTERN})
#: Non-empty printable strings within their database columns (names, keys; display names).
Key = Annotated[
    str,
    StringConstraints(min_length=1, max_length=KEY_LENGTH),
    AfterValidator(lambda value: _within(clean_text(value), KEY_LENGTH)),
    _SCHEMA,
]
Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NAME_LENGTH),
    AfterValidator(lambda value: _within(clean_text(value), NAME_LENGTH)),
    _SCHEMA,
]


#: JSON numbers only: NaN and ±Infinity (accepted by Python's JSON reader, refused by
#: PostgreSQL's JSON type and meaningless as a normalisation constant or a noise level).
Finite = Annotated[float, Field(allow_inf_nan=False)]
FiniteStrictFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Side = Annotated[int, Field(ge=1, le=MAX_INPUT_SIDE)]
Channels = Annotated[int, Field(ge=1, le=MAX_CHANNELS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: An architecture keyword argument's value: a number, a flag, a short word (a pooling's name)
#: or a short list of numbers (per-stage depths and widths); what each key takes is its rule's
#: (``certbench.nets.library_kwargs``, or the built-in architecture's allow-list).
WORD_LENGTH = 32


def _kwarg_value(value: Any) -> Any:
    """``value`` if it is one of the JSON values a keyword argument may hold, else ValueError
    (one message, rather than one per member of a union)."""
    if isinstance(value, bool | int | str):
        if isinstance(value, str):
            return _within(clean_text(value), WORD_LENGTH)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        return value
    if isinstance(value, list):
        if not 1 <= len(value) <= MAX_SEQUENCE or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in value
        ):
            raise ValueError(f"a list must hold 1 to {MAX_SEQUENCE} finite numbers, got {value!r}")
        return value
    raise ValueError(
        f"must be a number, true/false, a word or a list of numbers, got {type(value).__name__}"
    )


KwargValue = Annotated[
    Any,
    AfterValidator(_kwarg_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "boolean"},
                {"type": "number"},
                {"type": "string", "maxLength": WORD_LENGTH, "pattern": PRINTABLE_PATTERN},
                {"type": "array", "items": {"type": "number"}, "minItems": 1,
                 "maxItems": MAX_SEQUENCE},
            ]
        }
    ),
]  # fmt: skip


class Architecture(_Strict):
    """Registry name (a built-in one, or ``timm/<model>`` / ``torchvision/<model>``) plus
    kwargs; the kwargs are checked against the architecture's allow-list on load, and a key that
    names a file, URL, checkpoint or pretrained configuration is refused here, by its name."""

    name: Key
    kwargs: dict[Key, KwargValue] = Field(default_factory=dict, max_length=16)

    @model_validator(mode="before")
    @classmethod
    def _refuse_loading_keys(cls, data: Any) -> Any:
        """Refuse ``pretrained``, ``checkpoint_path``, ``pretrained_cfg_overlay``, ``file``,
        ``url``, ... whatever their value (before it is type-checked), naming the key."""
        kwargs = data.get("kwargs") if isinstance(data, Mapping) else None
        for key in kwargs if isinstance(kwargs, Mapping) else ():
            reason = refused_key(key) if isinstance(key, str) else None
            if reason is not None:
                raise ValueError(reason)
        return data


class Preprocessing(_Strict):
    """Per-channel mean/std of the NormalizeLayer placed in front of the network."""

    mean: tuple[Finite, ...] = Field(min_length=1, max_length=MAX_CHANNELS)
    std: tuple[Finite, ...] = Field(min_length=1, max_length=MAX_CHANNELS)

    @model_validator(mode="after")
    def _positive_std(self) -> Preprocessing:
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std values must be > 0, got {list(self.std)}")
        return self


class Smoothing(_Strict):
    """Noise level the model was trained for; certification runs at this sigma."""

    sigma: Finite = Field(gt=0)


class Metadata(_Strict):
    """Who made the model and where to read about it (shown on the leaderboard)."""

    name: Name
    authors: list[Name] = Field(default_factory=list, max_length=100)
    paper_url: HttpUrl | None = None
    code_url: HttpUrl | None = None
    licence: Key | None = None


class Manifest(_Strict):
    """The JSON document accompanying a weights file (DESIGN.md §6).

    Every field is bounded so that whatever validates can be stored (PostgreSQL and SQLite) and
    run: finite numbers, strings within their database columns and free of control characters,
    ``input_size`` within (MAX_CHANNELS, MAX_INPUT_SIDE, MAX_INPUT_SIDE).
    """

    benchmark: Key
    architecture: Architecture
    num_classes: int = Field(ge=2, le=100_000)
    preprocessing: Preprocessing
    smoothing: Smoothing
    metadata: Metadata
    input_size: tuple[Channels, Side, Side] = (3, 32, 32)
    #: Denoised smoothing: a denoiser in front of the classifier (``certbench.nets.denoised``);
    #: absent from a plain manifest's JSON (and from its canonical form) when not given.
    denoiser: ManifestDenoiser | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _channels_match(self) -> Manifest:
        channels = self.input_size[0]
        for field_name in ("mean", "std"):
            values = getattr(self.preprocessing, field_name)
            if len(values) != channels:
                raise ValueError(
                    f"preprocessing.{field_name} has {len(values)} values but input_size has "
                    f"{channels} channels; give one value per channel"
                )
        return self

    def canonical_json(self) -> str:
        """Sorted-key compact JSON: equal manifests give equal strings (for dedup hashing)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def load_manifest(src: Path | str | bytes | Mapping[str, Any]) -> Manifest:
    """Parse and validate a manifest from a file path, JSON text/bytes or a mapping.

    Also checks the architecture name and kwargs against the registry, so a bad submission is
    refused before its weights are read. Raises ManifestError (or UnknownArchitectureError).
    """
    try:
        if isinstance(src, Mapping):
            manifest = Manifest.model_validate(dict(src))
        else:
            manifest = Manifest.model_validate_json(_manifest_text(src))
    except ValidationError as err:
        raise ManifestError(f"invalid manifest: {_describe(err)}") from err
    # The registry builds torch modules: imported on the first manifest, not with this module.
    from certbench.nets.architectures import check_kwargs

    check_kwargs(manifest.architecture.name, manifest.architecture.kwargs)
    if manifest.denoiser is not None:  # its images, σ and label (torch-free: nothing is built)
        size, name = manifest.input_size, manifest.architecture.name
        check_denoiser(
            manifest.denoiser, input_size=size, sigma=manifest.smoothing.sigma, architecture=name
        )
    problem = preprocessing_problem(manifest.preprocessing.mean, manifest.preprocessing.std)
    if problem is not None:
        raise PreprocessingError(f"invalid manifest: {problem}")
    return manifest


UTF8_BOM = b"\xef\xbb\xbf"


def _manifest_text(src: Path | str | bytes) -> str | bytes:
    """JSON text of ``src``: a Path is read; a str is JSON if it looks like it, else a path.

    A leading UTF-8 byte-order mark (as some Windows editors write) is dropped: JSON forbids it,
    but it carries no meaning.
    """
    if isinstance(src, bytes):
        return src.removeprefix(UTF8_BOM)
    if isinstance(src, str) and src.lstrip("\ufeff \t\r\n").startswith("{"):
        return src.lstrip("\ufeff")
    path = Path(src)
    try:
        return path.read_bytes().removeprefix(UTF8_BOM)
    except OSError as err:
        raise ManifestError(f"cannot read manifest file {str(path)!r}: {err.strerror}") from err


def _describe(err: ValidationError) -> str:
    """pydantic's per-field messages on one line: 'smoothing.sigma: Input should be ...'."""
    parts = []
    for item in err.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "manifest"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
