"""Pages of a signed-in submitter: sign-in and sign-out with an API token (kept in an HttpOnly
cookie, see ``api.web.auth``), their submissions, a submission's status and its cancellation.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.deps import RowId, SessionDep, SettingsDep
from api.services import submissions as sub_service
from api.web.auth import WebViewer, check_same_origin, clear_token_cookie, set_token_cookie
from api.web.leaderboard_view import DEFAULT_PAGE_SIZE, Pager
from api.web.rendering import HTMLRoute, render
from models.core.errors import AuthenticationError
from models.db.accounts import authenticate
from models.db.states import ACTIVE_STATES

router = APIRouter(route_class=HTMLRoute, include_in_schema=False)


def _safe_next(target: str) -> str:
    """Only same-site paths are followed after sign-in (no open redirect)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/submissions"


@router.get("/login", response_class=HTMLResponse, name="web_login")
def login_form(
    request: Request, viewer: WebViewer, next: Annotated[str, Query(max_length=500)] = ""
) -> HTMLResponse:
    return render(request, "login.html", {"viewer": viewer, "next": _safe_next(next), "error": ""})


@router.post("/login", name="web_login_post")
def login(
    request: Request,
    session: SessionDep,
    token: Annotated[str, Form(max_length=200)],
    next: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """Check the API token and keep it in an HttpOnly cookie (see ``api.web.auth``)."""
    check_same_origin(request)
    try:
        authenticate(session, token.strip())
    except AuthenticationError as err:
        return render(
            request,
            "login.html",
            {"viewer": None, "next": _safe_next(next), "error": str(err)},
            status_code=401,
        )
    response = RedirectResponse(_safe_next(next), status_code=303)
    set_token_cookie(request, response, token.strip())
    return response


@router.post("/logout", name="web_logout")
def logout(request: Request) -> Response:
    check_same_origin(request)
    response = RedirectResponse("/", status_code=303)
    clear_token_cookie(response)
    return response


def _sign_in_first(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={request.url.path}", status_code=303)


@router.get("/submissions", response_class=HTMLResponse, name="web_submissions")
def my_submissions(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> Response:
    """The signed-in user's submissions, newest first."""
    if viewer is None:
        return _sign_in_first(request)
    listing = sub_service.list_own(
        session, user=viewer, state=None, offset=(page - 1) * DEFAULT_PAGE_SIZE,
        limit=DEFAULT_PAGE_SIZE, settings=settings,
    )  # fmt: skip
    pager = Pager.of(total=listing.total, page=page, per_page=DEFAULT_PAGE_SIZE)
    return render(
        request, "submissions.html", {"viewer": viewer, "listing": listing, "pager": pager}
    )


@router.get("/submissions/{submission_id}", response_class=HTMLResponse, name="web_status")
def submission_status(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
) -> Response:
    """State, reason, progress of every stage and unit, throughput, ETA, the estimated work and
    the queue position; refreshes while active. The figures are ``/progress``'s."""
    if viewer is None:
        return _sign_in_first(request)
    status, report = sub_service.status_with_progress(
        session, submission_id, viewer=viewer, settings=settings
    )
    return render(
        request,
        "status.html",
        {
            "viewer": viewer,
            "s": status,
            "p": report,
            "active": status.state in ACTIVE_STATES,
        },
    )


@router.post("/submissions/{submission_id}/cancel", name="web_cancel")
def cancel_submission(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
) -> Response:
    check_same_origin(request)
    if viewer is None:
        return _sign_in_first(request)
    sub_service.cancel(session, submission_id, user=viewer, settings=settings)
    return RedirectResponse(f"/submissions/{submission_id}", status_code=303)
