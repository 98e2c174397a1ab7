"""BibTeX for what a leaderboard result rests on: each entry's own paper (from its manifest)
and the benchmark's papers (the data sets' and the protocols' papers, by what the benchmark
runs). Facts (titles, authors, venues) are those of the papers themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    """A BibTeX entry: ``kind`` (article, inproceedings, misc, techreport), citation key and
    fields in order."""

    kind: str
    key: str
    fields: Mapping[str, str]

    def bibtex(self) -> str:
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in self.fields.items())
        return f"@{self.kind}{{{self.key},\n{body}\n}}\n"


PAPERS: dict[str, Reference] = {
    "smoothing": Reference("inproceedings", "cohen2019certified", {
        "title": "Certified Adversarial Robustness via Randomized Smoothing",
        "author": "Cohen, Jeremy and Rosenfeld, Elan and Kolter, J. Zico",
        "booktitle": "Proceedings of the 36th International Conference on Machine Learning",
        "series": "PMLR", "volume": "97", "year": "2019"}),
    "acr": Reference("inproceedings", "sun2025average", {
        "title": "Average Certified Radius is a Poor Metric for Randomized Smoothing",
        "author": "Sun, Chenhao and Mao, Yuhao and M{\\\"u}ller, Mark Niklas and Vechev, Martin",
        "booktitle": "Proceedings of the 42nd International Conference on Machine Learning",
        "series": "PMLR", "volume": "267", "pages": "57651--57666", "year": "2025"}),
    "cifar": Reference("techreport", "krizhevsky2009learning", {
        "title": "Learning Multiple Layers of Features from Tiny Images",
        "author": "Krizhevsky, Alex", "institution": "University of Toronto", "year": "2009"}),
    "corruptions": Reference("inproceedings", "hendrycks2019benchmarking", {
        "title": "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
        "author": "Hendrycks, Dan and Dietterich, Thomas",
        "booktitle": "International Conference on Learning Representations", "year": "2019"}),
    "corruptions_bar": Reference("inproceedings", "mintun2021interaction", {
        "title": "On Interaction Between Augmentations and Corruptions in Natural Corruption "
        "Robustness",
        "author": "Mintun, Eric and Kirillov, Alexander and Xie, Saining",
        "booktitle": "Advances in Neural Information Processing Systems", "year": "2021"}),
    "fourier": Reference("misc", "sun2022spectral", {
        "title": "A Spectral View of Randomized Smoothing under Common Corruptions: Benchmarking "
        "and Improving Certified Robustness",
        "author": "Sun, Jiachen and Mehra, Akshay and Kailkhura, Bhavya and Chen, Pin-Yu and "
        "Hendrycks, Dan and Hamm, Jihun and Mao, Z. Morley",
        "year": "2022"}),
    "pd": Reference("misc", "muthukumar2025disentangling", {
        "title": "Disentangling Safe and Unsafe Corruptions via Anisotropy and Locality",
        "author": "Muthukumar, Ramchandran and Pal, Ambar and Sulam, Jeremias and Vidal, Ren{\\'e}",
        "year": "2025"}),
    "lens": Reference("inproceedings", "fridovichkeil2022models", {
        "title": "Models Out of Line: A Fourier Lens on Distribution Shift Robustness",
        "author": "Fridovich-Keil, Sara and Bartoldson, Brian R. and Diffenderfer, James and "
        "Kailkhura, Bhavya and Bremer, Peer-Timo",
        "booktitle": "Advances in Neural Information Processing Systems", "year": "2022"}),
    "weather": Reference("inproceedings", "wang2022evaluating", {
        "title": "Evaluating Worst Case Adversarial Weather Perturbations Robustness",
        "author": "Wang and others",
        "booktitle": "NeurIPS 2022 Workshop on Machine Learning Safety",
        "url": "https://openreview.net/forum?id=Q69Aj3P0PtV", "year": "2022"}),
}  # fmt: skip
#: Stage name → the paper whose protocol it runs.
STAGE_PAPERS = {
    "fourier_sensitivity": "fourier",
    "pd_robustness": "pd",
    "fourier_lens": "lens",
    "weather_attack": "weather",
}


def benchmark_references(
    *, stages: Sequence[str], corruptions: bool, corruptions_bar: bool, fourier: bool, cifar: bool
) -> list[Reference]:
    """The papers behind a benchmark: randomized smoothing and the p_A view of ACR always, the
    source images (CIFAR), the corruption sets and each stage's protocol when it has them."""
    keys = ["smoothing", "acr"]
    keys += ["cifar"] if cifar else []
    keys += ["corruptions"] if corruptions else []
    keys += ["corruptions_bar"] if corruptions_bar else []
    keys += ["fourier"] if fourier else []
    keys += [STAGE_PAPERS[s] for s in stages if s in STAGE_PAPERS]
    return [PAPERS[k] for k in dict.fromkeys(keys)]


def _bib_text(text: str) -> str:
    return re.sub(r"[{}\\]", "", text)


def entry_reference(
    *,
    submission_id: int,
    name: str,
    authors: Sequence[str],
    paper_url: str | None,
    venue: str | None,
    year: int,
) -> Reference:
    """An entry's paper as the submitter described it (name, authors, link, venue)."""
    key = "certbench" + str(submission_id) + re.sub(r"[^a-z0-9]", "", name.lower())[:24]
    fields = {
        "title": _bib_text(name),
        "author": " and ".join(_bib_text(a) for a in authors) or "Anonymous",
        "year": str(year),
    }
    if venue:
        fields["note"] = _bib_text(venue)
    if paper_url:
        fields["url"] = paper_url
    return Reference("misc", key, fields)


def to_bibtex(references: Sequence[Reference]) -> str:
    """The references, one entry after another (keys unique)."""
    seen: dict[str, Reference] = {}
    for ref in references:
        seen.setdefault(ref.key, ref)
    return "\n".join(ref.bibtex() for ref in seen.values())
