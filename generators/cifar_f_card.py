"""Dataset card and figures of a generated CIFAR-10-F / CIFAR-100-F folder.

Figures are drawn with matplotlib's object API on an Agg canvas (no pyplot, no global backend
switch) so card generation works headless and never touches other users of matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from certbench.data import ImageSet
from certbench.fourier import radial_spectrum
from generators import hub, streams
from generators.cifar_f import (
    AMPLITUDE_CLIP,
    AMPLITUDE_JITTER,
    EPS_BY_SEVERITY,
    CifarFSpec,
    Protocol,
    draw_paper,
    draw_reference,
    paper_mask_rfft,
    paper_perturb,
    perturb_batch,
    reference_mask,
    reference_perturb,
    set_stream_key,
)

DISPLAY_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
GRID_FIGURE = "sample_grid.png"
SPECTRUM_FIGURE = "radial_spectrum.png"
SPECTRUM_SAMPLE = 64

CITATION = """\
@inproceedings{sun2022spectral,
  title     = {A Spectral View of Randomized Smoothing under Common Corruptions:
               Benchmarking and Improving Certified Robustness},
  author    = {Sun, Jiachen and Mehra, Akshay and Kailkhura, Bhavya and Chen, Pin-Yu and
               Hendrycks, Dan and Hamm, Jihun and Mao, Z. Morley},
  booktitle = {European Conference on Computer Vision (ECCV)},
  year      = {2022}
}
@techreport{krizhevsky2009learning,
  title       = {Learning Multiple Layers of Features from Tiny Images},
  author      = {Krizhevsky, Alex},
  institution = {University of Toronto},
  year        = {2009}
}"""

PROTOCOL_TEXT = {
    Protocol.PAPER: """\
**Protocol `paper`** (the equations of Sun et al. 2022, §5). Per image x ∈ [0,1]^(3×32×32) and
per channel, F = fftshift(FFT(x)) with the DC term at index (16, 16) and azimuthal frequency
f = √(u² + v²) in centred coordinates. The noise spectrum δ has

- amplitude |δ(u,v)| = clip(|F(u,v)|, {lo}, {hi}) / (|f − f_c| + 1)^α · U({jlo}, {jhi}),
- phase ∠δ(u,v) ~ U(0, 2π), independently per element,

and is made Hermitian (δ(−u,−v) = conj δ(u,v); self-conjugate bins keep their real part) so
IFFT(δ) is real. Then x_F = x + γ·IFFT(δ) with γ = ε / ‖IFFT(δ)‖₂ (ℓ2 over all 3072 values),
clipped to [0, 1] and rounded to uint8.""",
    Protocol.REFERENCE: """\
**Protocol `reference`** (what the released `generate_fft.py` computed, to reproduce published
numbers). Mask m(i,j) = 1/(g+1)^α with centre (15, 15) (one bin off the DC term): for the nine
sub-points i', j' ∈ {{i−½, i, i+½}}, d = √((i'−15)² + (j'−15)²) − f_c and g = 0 if
min(d)·max(d) ≤ 0, else min |d|. n_abs = clip(|F|, {lo}, {hi}) · m · U({jlo}, {jhi}) per channel
and element; the phase is `uniform(3, 32, 32)·2π`: 32 values in [6π, 64π), one per column,
shared by rows and channels. F ← F + n_abs·e^(i·phase); x_r = clip(|IFFT(F)|, 0, 1);
δ = (x_r − x)/‖x_r − x‖₂ · ε; x_F = x + δ (no clip); uint8 = clip(trunc(255·x_F), 0, 255).
The original was unseeded; here it is seeded. Note that |IFFT| and the [0, 1] clip add a strong
low-frequency component to the perturbation (see the radial-spectrum figure), on top of the
ring at f_c.""",
}


def _render(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def sample_grid(
    image: ImageSet,
    specs: Sequence[CifarFSpec],
    *,
    dataset: str,
    protocol: Protocol,
    seed: int,
    path: Path,
) -> Path:
    """Fig. 12-style grid of the first source image: rows α, columns f_c, at the largest ε."""
    severity = max(s.severity for s in specs)
    alphas = sorted({s.alpha for s in specs})
    fcs = sorted({s.f_c for s in specs})
    x, idx = image.images[:1], image.indices[:1]
    fig = Figure(figsize=(1.0 * len(fcs) + 1, 1.0 * len(alphas) + 0.8))
    axes = fig.subplots(len(alphas), len(fcs), squeeze=False)
    for r, alpha in enumerate(alphas):
        for c, f_c in enumerate(fcs):
            spec = CifarFSpec(f_c=f_c, alpha=alpha, severity=severity)
            key = set_stream_key(seed, dataset, protocol, spec)
            out = perturb_batch(x, idx, spec, protocol=protocol, key=key)[0]
            ax = axes[r][c]
            ax.imshow(out.permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"f_c={f_c}", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"α={alpha:g}", fontsize=8)
    name = DISPLAY_NAMES.get(dataset, dataset)
    fig.suptitle(f"{name}-F ({protocol.value}), ε = {EPS_BY_SEVERITY[severity]:g}", fontsize=9)
    return _render(fig, path)


def mean_radial_spectra(
    images: torch.Tensor, indices: torch.Tensor, spec: CifarFSpec, *, protocol: Protocol, key: int
) -> torch.Tensor:
    """Mean |FFT| of the float perturbation x_F − x per integer frequency, over images/channels."""
    keys = streams.image_keys(key, indices.numpy())
    if protocol is Protocol.PAPER:
        draws = draw_paper(keys, images.shape[-1])
        x_f = paper_perturb(images, paper_mask_rfft(spec.f_c, spec.alpha), draws, spec.eps)
        x = images.to(torch.float64) / 255.0
    else:
        x_f = reference_perturb(
            images, reference_mask(spec.f_c, spec.alpha), draw_reference(keys), spec.eps
        )
        x = (images.to(torch.float32) / 255.0).to(torch.float64)
    return radial_spectrum(x_f - x).mean(dim=(0, 1))


def spectrum_figure(
    images: ImageSet,
    specs: Sequence[CifarFSpec],
    *,
    dataset: str,
    protocol: Protocol,
    seed: int,
    path: Path,
) -> Path:
    """One panel per α: the perturbation's mean radial amplitude spectrum for each f_c."""
    severity = max(s.severity for s in specs)
    alphas = sorted({s.alpha for s in specs})
    fcs = sorted({s.f_c for s in specs})
    x, idx = images.images[:SPECTRUM_SAMPLE], images.indices[:SPECTRUM_SAMPLE]
    fig = Figure(figsize=(3.2 * len(alphas), 2.8))
    axes = fig.subplots(1, len(alphas), squeeze=False)[0]
    colours = [
        (0.1 + 0.8 * i / max(len(fcs) - 1, 1), 0.3, 0.9 - 0.8 * i / max(len(fcs) - 1, 1))
        for i in range(len(fcs))
    ]
    for ax, alpha in zip(axes, alphas, strict=True):
        for colour, f_c in zip(colours, fcs, strict=True):
            spec = CifarFSpec(f_c=f_c, alpha=alpha, severity=severity)
            key = set_stream_key(seed, dataset, protocol, spec)
            profile = mean_radial_spectra(x, idx, spec, protocol=protocol, key=key)
            ax.plot(np.arange(len(profile)), profile.numpy(), color=colour, lw=1, label=f"{f_c}")
        ax.set_title(f"α = {alpha:g}", fontsize=9)
        ax.set_xlabel("azimuthal frequency f", fontsize=8)
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("mean |FFT(x_F − x)|", fontsize=8)
    axes[-1].legend(title="f_c", fontsize=5, title_fontsize=6, ncol=2, loc="upper right")
    fig.suptitle(
        f"Radial spectrum of the perturbation ({DISPLAY_NAMES.get(dataset, dataset)}-F, "
        f"{protocol.value}, "
        f"ε = {EPS_BY_SEVERITY[severity]:g}, {len(x)} images)",
        fontsize=9,
        y=1.03,
    )
    return _render(fig, path)


def card_body(
    *,
    dataset: str,
    specs: Sequence[CifarFSpec],
    protocol: Protocol,
    seed: int,
    source: dict[str, Any],
    num_images: int,
) -> str:
    """Markdown text of the card (everything below the YAML header)."""
    alphas = ", ".join(f"{a:g}" for a in sorted({s.alpha for s in specs}))
    fcs = sorted({s.f_c for s in specs})
    fc_text = (
        f"{fcs[0]}..{fcs[-1]}"
        if fcs == list(range(fcs[0], fcs[-1] + 1))
        else (", ".join(map(str, fcs)))
    )
    sevs = sorted({s.severity for s in specs})
    base = DISPLAY_NAMES.get(dataset, dataset)
    title = f"{base}-F"
    lo, hi = AMPLITUDE_CLIP
    jlo, jhi = AMPLITUDE_JITTER
    protocol_text = PROTOCOL_TEXT[protocol].format(lo=lo, hi=hi, jlo=jlo, jhi=jhi)
    source_lines = "\n".join(f"- {k}: `{v}`" for k, v in source.items())
    example = specs[0].name
    return f"""
# {title}

{title} is a benchmark of **power-law Fourier corruptions** of the {base} test set,
introduced by Sun et al., *A Spectral View of Randomized Smoothing under Common Corruptions*
(ECCV 2022, §5). Each test set concentrates its noise around one azimuthal frequency f_c of the
2-D spectrum, so together the sets cover the whole spectrum and reveal a model's spectral bias
(e.g. certified robustness that collapses for low-to-mid-frequency corruptions).

This copy contains **{len(specs)} test sets** of {num_images} images each: α ∈ {{{alphas}}} ×
f_c ∈ {{{fc_text}}} × severity ∈ {{{", ".join(map(str, sevs))}}} with
ε = {{{", ".join(f"{EPS_BY_SEVERITY[s]:g}" for s in sevs)}}} (ℓ2 norm on the [0,1] pixel scale).
α controls the spread around f_c: α = 0.5 spreads noise over all frequencies, α = 3
concentrates it on the ring f ≈ f_c.

## Configs

One config per test set, named `fc<f_c, two digits>_a<α without dots>_s<severity>`, e.g.
`{example}`; each has one `test` split. Columns: `image` (PNG), `label` (ClassLabel with the
{base} class names){", `coarse_label`" if dataset == "cifar100" else ""}, `f_c`,
`alpha`, `eps`, `severity`, `source_index` (position of the clean image in the source test split).

```python
from datasets import load_dataset
ds = load_dataset("ORG/NAME", "{example}", split="test")
```

Certify a model on it with certbench: `certbench certify ... --dataset ORG/NAME --config {example}`.

## Generation protocol

{protocol_text}

Randomness is seeded: image i of test set T uses a counter-based stream keyed by
(seed, dataset, protocol, T, source index i), so any subset or shard regenerates identically.

- protocol: `{protocol.value}`
- seed: `{seed}`
{source_lines}

## Samples

![Sample grid: rows α, columns f_c](images/{GRID_FIGURE})

![Radial spectrum of the perturbation per α](images/{SPECTRUM_FIGURE})

## Licence

The corrupted images are derived from {base} (Krizhevsky, 2009), which is distributed
without an explicit licence; use them under the same terms as the original dataset. The
generator (certbench) is Apache-2.0.

## Citation

```bibtex
{CITATION}
```
"""


def write_cifar_f_card(
    out_dir: str | Path,
    images: ImageSet,
    specs: Sequence[CifarFSpec],
    *,
    dataset: str,
    protocol: Protocol,
    seed: int,
    source: dict[str, Any],
) -> Path:
    """Draw both figures and write README.md listing every config in ``specs``."""
    grid_path = hub.figure_path(out_dir, GRID_FIGURE)
    sample_grid(images, specs, dataset=dataset, protocol=protocol, seed=seed, path=grid_path)
    spectrum_path = hub.figure_path(out_dir, SPECTRUM_FIGURE)
    spectrum_figure(
        images, specs, dataset=dataset, protocol=protocol, seed=seed, path=spectrum_path
    )
    title = f"{DISPLAY_NAMES.get(dataset, dataset)}-F"
    body = card_body(
        dataset=dataset,
        specs=specs,
        protocol=protocol,
        seed=seed,
        source=source,
        num_images=len(images),
    )
    card = hub.build_card(
        configs=[s.name for s in specs],
        pretty_name=title,
        body=body,
        license="other",
        tags=["certified-robustness", "randomized-smoothing", "corruptions", "fourier", "cifar-f"],
        source_datasets=[f"extended|{dataset}"],
        include_all=False,
    )
    return hub.write_card(out_dir, card)
