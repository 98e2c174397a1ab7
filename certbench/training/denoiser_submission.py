"""A denoised submission from two ``certbench train`` runs: a classifier and a denoiser.

:func:`compose_submission` writes ``model.safetensors`` (the denoiser's tensors as
``denoiser.*``, the classifier's as ``classifier.*``: the state dict of
:class:`certbench.denoising.DenoisedClassifier`) and ``manifest.json`` (the classifier's manifest
with the denoiser's ``denoiser`` block and σ, named after both, with the paper and code of the
method: Carlini et al., ICLR 2023, arXiv:2206.10550, for a diffusion denoiser; Salman et al.,
NeurIPS 2020, arXiv:2003.01908, for a DnCNN), and loads the pair back as a submission, so
``certbench certify`` and ``certbench submit`` take the folder as it is. ``certbench train
--recipe ddpm | denoiser-mse --classifier FOLDER`` calls it after training.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from certbench.denoising import DenoisedClassifier, load_denoiser, parse_denoiser_config
from certbench.errors import CertbenchError, TrainingError
from certbench.nets import NAME_LENGTH, load_manifest, load_model
from certbench.training.denoiser_trainer import DENOISER_CARD, DENOISER_WEIGHTS
from certbench.training.submission import MANIFEST_FILE, WEIGHTS_FILE, write_submission

__all__ = ["METHODS", "check_classifier_folder", "compose_submission"]


METHODS = {
    "diffusion": (
        "https://arxiv.org/abs/2206.10550",
        "https://github.com/ethz-spylab/diffusion_denoised_smoothing",
    ),
    "dncnn": (
        "https://arxiv.org/abs/2003.01908",
        "https://github.com/microsoft/denoised-smoothing",
    ),
}
"""Paper and code of the method a composed entry uses: Carlini et al. (ICLR 2023) for a
diffusion denoiser, Salman et al. (NeurIPS 2020) for a DnCNN."""


def check_classifier_folder(folder: Path | str) -> tuple[Path, Path]:
    """(weights, manifest) of a ``certbench train`` output folder, loaded once as a submission
    (so a wrong folder is refused before a denoiser is trained for it); TrainingError naming
    what is missing or wrong."""
    folder = Path(folder)
    weights, manifest = folder / WEIGHTS_FILE, folder / MANIFEST_FILE
    missing = [p.name for p in (weights, manifest) if not p.is_file()]
    if missing:
        raise TrainingError(
            f"--classifier {str(folder)!r} holds no {' or '.join(missing)}; give the --out "
            "folder of a certbench train run of a classifier recipe"
        )
    try:
        spec = load_manifest(manifest)
        if spec.denoiser is not None:
            raise TrainingError(f"--classifier {str(folder)!r} already has a denoiser")
        load_model(weights, spec)
    except TrainingError:
        raise
    except CertbenchError as err:
        raise TrainingError(f"--classifier {str(folder)!r} does not load: {err}") from err
    return weights, manifest


def compose_submission(
    classifier: Path | str, denoiser: Path | str, out: Path | str | None = None
) -> tuple[Path, Path]:
    """Write denoiser · classifier as one submission into ``out`` (default: the denoiser's
    folder): ``model.safetensors`` (``denoiser.*`` and ``classifier.*``) and ``manifest.json``
    (the classifier's, with the denoiser's block and σ; named after both, paper and code of
    the method), loaded back as a submission before returning its paths. ``classifier`` is a
    ``certbench train`` output folder, ``denoiser`` a :func:`train_denoiser` one. Raises
    TrainingError."""
    weights_path, manifest_path = check_classifier_folder(classifier)
    folder = Path(denoiser)
    try:
        card = json.loads((folder / DENOISER_CARD).read_text(encoding="utf-8"))
        config = parse_denoiser_config(card["denoiser"])
        sigma = float(card["smoothing"]["sigma"])
        size = tuple(int(v) for v in card["input_size"])
        tensors = load_file(str(folder / DENOISER_WEIGHTS))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TrainingError(
            f"{str(folder)!r} is not a denoiser folder of certbench train --recipe ddpm or "
            f"denoiser-mse ({type(err).__name__}: {err})"
        ) from err
    spec = load_manifest(manifest_path)
    if size != tuple(spec.input_size):
        raise TrainingError(
            f"the denoiser was trained on images of {size}, the classifier takes "
            f"{tuple(spec.input_size)}"
        )
    part = {k.removeprefix("denoiser."): v for k, v in tensors.items()}
    model = DenoisedClassifier(
        load_denoiser(part, config, sigma=sigma, input_size=size),
        load_model(weights_path, spec),
    )
    paper, code = METHODS[config.kind]
    name = f"{config.kind} · {spec.metadata.name}"[:NAME_LENGTH]
    document = spec.model_dump(mode="json")
    document.update(
        denoiser=config.model_dump(mode="json"),
        smoothing={"sigma": sigma},
        metadata={**document["metadata"], "name": name, "paper_url": paper, "code_url": code},
    )
    target = Path(out) if out is not None else folder
    target.mkdir(parents=True, exist_ok=True)
    try:
        composed = load_manifest(document)
    except CertbenchError as err:
        raise TrainingError(f"the composed manifest is refused: {err}") from err
    return write_submission(target, model, composed)
