"""Rendering of the HTML pages: the Jinja2 templates with the formatting filters every template
uses, and :class:`HTMLRoute`, which turns service errors and bad query strings into HTML error
pages with the status codes the REST API uses (``api.errors.status_for``).

Every page works without JavaScript (tables, forms and links are in the HTML; a figure is then
the SVG the server renders from its spec); ``static/certbench.js`` draws the figures
interactively with vega-embed and adds conveniences.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from api.errors import status_for
from api.web.auth import clear_token_cookie
from api.web.figure_files import BUNDLE_URL, spec_json
from certbench.errors import CertbenchError

WEB_DIR = Path(__file__).parent
templates = Jinja2Templates(directory=WEB_DIR / "templates")
MAX_COMPARE = 4


# ---- formatting helpers available in every template ------------------------------------------


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _fixed(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _date(value: Any) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def _datetime(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "–"


def _metric(value: float | None, kind: str) -> str:
    if kind == "percent":
        return _percent(value)
    if kind == "seconds":
        return _seconds(value)
    if kind == "flops":
        return _flops(value)
    return _fixed(value)


#: Between a figure and its unit, so that a narrow cell never breaks "59.3 GFLOP" in two.
NBSP = "\u00a0"


def _seconds(value: float | None) -> str:
    """A cost in seconds to three significant figures: "512 ms", "4.2 s", "1,250 s"."""
    if value is None:
        return "–"
    if 0 < value < 1:
        return f"{value * 1000:.3g}{NBSP}ms"
    return f"{value:,.0f}{NBSP}s" if value >= 1000 else f"{value:.3g}{NBSP}s"


#: SI prefixes of FLOP counts, largest first.
_FLOP_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def _flops(value: float | None) -> str:
    """A FLOP count with an SI prefix, three significant figures: "59.3 GFLOP"."""
    if value is None:
        return "–"
    for prefix, scale in _FLOP_PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g}{NBSP}{prefix}FLOP"
    return f"{value:.3g}{NBSP}FLOP"


def _count(value: float | None) -> str:
    """A count or rate with thousands separators ("1,900"); small rates keep a decimal."""
    if value is None:
        return "–"
    return f"{value:,.1f}" if 0 < abs(value) < 10 and value != int(value) else f"{value:,.0f}"


def _duration(seconds: float | None) -> str:
    """A time span as people say it: "about 3 min", "about 2 h 10 min", "about 3 days 4 h"."""
    if seconds is None:
        return "–"
    minutes = round(seconds / 60)
    if seconds < 60:
        return f"about {max(1, round(seconds))} s"
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"about {hours} h {minutes} min" if minutes else f"about {hours} h"
    days, hours = divmod(hours, 24)
    return f"about {days} day{'s' if days > 1 else ''} {hours} h"


def _figure(metrics: Any, key: str) -> float | None:
    """A figure of an entry's metrics, None when the entry has none (an entry finished before
    its benchmark gained the stage that measures it)."""
    return None if metrics is None else getattr(metrics, key, None)


templates.env.filters.update(
    percent=_percent,
    fixed=_fixed,
    date=_date,
    datetime=_datetime,
    metric=_metric,
    count=_count,
    duration=_duration,
    spec_json=spec_json,
)
templates.env.globals.update(max_compare=MAX_COMPARE, vega_bundle_url=BUNDLE_URL, figure=_figure)


# ---- errors as HTML ---------------------------------------------------------------------------


class HTMLRoute(APIRoute):
    """Service errors and bad query strings render the error page instead of JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def render_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except CertbenchError as err:
                if status_for(err) == 500:
                    raise  # not a client error: the app's handler logs it and answers 500
                return _error_page(request, status_for(err), str(err))
            except RequestValidationError as err:
                fields = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                    for e in err.errors()
                )
                return _error_page(request, 422, f"invalid request: {fields}")

        return render_errors


def _error_page(request: Request, status: int, message: str) -> Response:
    response = templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "message": message, "viewer": None},
        status_code=status,
    )
    if status == 401:
        clear_token_cookie(response)
    return response


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a page; drop a cookie whose token stopped working since sign-in."""
    response = templates.TemplateResponse(request, template, context, status_code=status_code)
    if getattr(request.state, "stale_cookie", False):
        clear_token_cookie(response)
    return response


def rendered(request: Request, html: str, *, status_code: int = 200) -> HTMLResponse:
    """A page rendered before (a kept page), answered like :func:`render`."""
    response = HTMLResponse(html, status_code=status_code)
    if getattr(request.state, "stale_cookie", False):
        clear_token_cookie(response)
    return response
