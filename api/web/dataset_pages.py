"""Pages of the data sets the benchmarks use: the list, one data set's configs with their
``load_dataset`` one-liners, and the sample grids, spectra and card figures of a local copy
(``api.web.datasets``).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from api.deps import SessionDep, SettingsDep
from api.services import leaderboards as lb_service
from api.web import figure_files
from api.web.auth import WebViewer
from api.web.datasets import (
    card_figures,
    figure_file,
    local_configs,
    sample_grid_png,
    spectra_chart,
)
from api.web.rendering import HTMLRoute, render
from models.core.errors import NotFoundError

router = APIRouter(route_class=HTMLRoute, include_in_schema=False)


@router.get("/datasets", response_class=HTMLResponse, name="web_datasets")
def datasets_page(request: Request, session: SessionDep, viewer: WebViewer) -> HTMLResponse:
    return render(
        request, "datasets.html", {"viewer": viewer, "datasets": lb_service.datasets(session)}
    )


def _dataset(session: SessionDep, repo: str) -> Any:
    for dataset in lb_service.datasets(session):
        if dataset.repo == repo:
            return dataset
    raise NotFoundError(f"dataset {repo!r} is not used by any benchmark")


@router.get("/datasets/{owner}/{name}", response_class=HTMLResponse, name="web_dataset")
def dataset_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    owner: str,
    name: str,
) -> HTMLResponse:
    """Configs with their ``load_dataset`` one-liners; sample grids and spectra when local."""
    context = _context(session, settings, viewer, owner, name)
    context["figure_base"] = f"/datasets/{owner}/{name}/charts"
    return render(request, "dataset.html", context)


@router.get("/datasets/{owner}/{name}/charts/{chart}.{fmt}", name="web_dataset_chart")
def dataset_chart(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    owner: str,
    name: str,
    chart: figure_files.FigureName,
    fmt: figure_files.FigureFormat,
) -> Response:
    """The dataset page's spectrum figure as SVG, PNG or PDF."""
    context = _context(session, settings, viewer, owner, name)
    return figure_files.figure_response(figure_files.collect(context["spectra"]), chart, fmt)


def _context(
    session: SessionDep, settings: SettingsDep, viewer: WebViewer, owner: str, name: str
) -> dict[str, Any]:
    repo = f"{owner}/{name}"
    dataset = _dataset(session, repo)
    local = local_configs(session, repo, settings=settings)
    spectra, problem = None, ""
    try:
        spectra = spectra_chart(local)
    except NotFoundError as err:  # a broken local copy: the page still lists configs and links
        problem = str(err)
    return {
        "viewer": viewer,
        "dataset": dataset,
        "configs": config_rows(session, repo, dataset.configs),
        "config_table": fourier_config_table(dataset.configs),
        "local": local,
        "figures": sorted(card_figures(local)),
        "spectra": spectra,
        "problem": problem,
    }


#: CIFAR-10/100-F config names (Sun et al., ECCV 2022, §5):
#: fc<f_c>_a<α with p for the point>_s<severity>.
FOURIER_CONFIG = re.compile(r"^fc(\d+)_a(\d+(?:p\d+)?)_s(\d)$")
#: ε of each severity (ℓ2 norm over the 3,072 values of a [0, 1] image; Sun et al., ECCV 2022, §5).
SEVERITY_EPSILON = {1: 8, 2: 10, 3: 12}


def fourier_config_table(configs: list[str]) -> list[dict[str, Any]]:
    """One row per CIFAR-F config (f_c, α, severity, ε), or [] when any config is not one."""
    rows = []
    for config in configs:
        match = FOURIER_CONFIG.match(config)
        if match is None:
            return []
        f_c, alpha, severity = int(match[1]), float(match[2].replace("p", ".")), int(match[3])
        rows.append(
            {"config": config, "f_c": f_c, "alpha": f"{alpha:g}", "severity": severity,
             "epsilon": SEVERITY_EPSILON.get(severity, "–")}
        )  # fmt: skip
    return sorted(rows, key=lambda r: (r["severity"], float(r["alpha"]), r["f_c"]))


def config_rows(session: SessionDep, repo: str, configs: list[str]) -> list[dict[str, Any]]:
    """Each config with the leaderboard's test sets that read it ("default": a repository
    without named configs, e.g. uoft-cs/cifar10, whose test set is called "clean")."""
    used: dict[str, list[str]] = {}
    for bench in lb_service.benchmarks(session, viewer=None):
        for test_set in bench.test_sets:
            if test_set.dataset_repo == repo:
                name = f"{bench.name}/{test_set.name}"
                used.setdefault(test_set.config or "default", []).append(name)
    return [{"config": c, "test_sets": used.get(c, [])} for c in (configs or ["default"])]


@router.get("/datasets/{owner}/{name}/samples/{config}.png", name="web_dataset_samples")
def dataset_samples(
    session: SessionDep, settings: SettingsDep, owner: str, name: str, config: str
) -> Response:
    local = local_configs(session, f"{owner}/{name}", settings=settings)
    if config not in local:
        raise NotFoundError(f"config {config!r} of {owner}/{name} has no local copy")
    return Response(
        sample_grid_png(local[config]),
        media_type="image/png",
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("/datasets/{owner}/{name}/figures/{filename}", name="web_dataset_figure")
def dataset_figure(
    session: SessionDep, settings: SettingsDep, owner: str, name: str, filename: str
) -> FileResponse:
    local = local_configs(session, f"{owner}/{name}", settings=settings)
    return FileResponse(figure_file(local, filename))
