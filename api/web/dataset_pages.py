"""Pages of the data sets the benchmarks use: the list, one data set's configs with their
``load_dataset`` one-liners, and the sample grids, spectra and card figures of a local copy
(``api.web.datasets``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from api.deps import SessionDep, SettingsDep
from api.services import leaderboards as lb_service
from api.web.auth import WebViewer
from api.web.datasets import (
    card_figures,
    figure_file,
    local_configs,
    sample_grid_png,
    spectra_chart,
)
from api.web.rendering import HTMLRoute, render
from models.errors import NotFoundError

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
    repo = f"{owner}/{name}"
    dataset = _dataset(session, repo)
    local = local_configs(session, repo, settings=settings)
    spectra, problem = None, ""
    try:
        spectra = spectra_chart(local)
    except NotFoundError as err:  # a broken local copy: the page still lists configs and links
        problem = str(err)
    return render(
        request,
        "dataset.html",
        {
            "viewer": viewer,
            "dataset": dataset,
            "local": local,
            "figures": sorted(card_figures(local)),
            "spectra": spectra,
            "problem": problem,
        },
    )


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
