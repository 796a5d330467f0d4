"""The web dashboard: server-rendered HTML shells and static assets.

The pages carry no data (always served, no token): their script reads everything from /v1 with the
bearer token the user pastes (the charts' data from `/v1/studies/{id}/insights`, the claim's words in
the study's `claim`), so the dashboard needs no session or cookie of its own. plotly.js comes from
the installed `plotly` package: clusters are often offline, so no CDN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from autotuner import __version__

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


# ---------------------------------------------------------------------------------- pages

pages = APIRouter(include_in_schema=False)


MAX_STUDY_ID = 2**31  # as the REST path's StudyId
# HEAD too (405 before; plotly's 404, the /static mount answering it): link checkers and proxies probe
# with it. Not in the schema, as the whole router.
GET_HEAD = ["GET", "HEAD"]


# The pages run our two scripts and nothing else: a stored string that ever slipped past the page's
# escaping could not run script, load anything from elsewhere or frame the page (the read token lives in
# sessionStorage). Inline styles stay allowed: plotly writes its own.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _page(request: Request, template: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, template, {"version": __version__, "page": template.removesuffix(".html"), **context},
        headers=PAGE_HEADERS,
    )  # fmt: skip


@pages.api_route("/", methods=GET_HEAD, response_class=HTMLResponse)
def studies_page(request: Request) -> HTMLResponse:
    return _page(request, "studies.html")


@pages.api_route("/studies/{study_id}", methods=GET_HEAD, response_class=HTMLResponse)
def study_page(request: Request, study_id: str) -> HTMLResponse:
    # A link that names no study (/studies/abc) is a page saying so with 404, not the API's JSON 422.
    page = _page(request, "study.html", study_id=study_id)
    if not _is_study_id(study_id):
        page.status_code = 404
    return page


def _is_study_id(text: str) -> bool:
    # int() refuses over 4,300 digits (a 500): the digits past the leading zeros are counted first.
    digits = text.lstrip("0")
    return (text.isascii() and text.isdecimal() and len(digits) <= len(str(MAX_STUDY_ID))
            and 1 <= int(digits or "0") <= MAX_STUDY_ID)  # fmt: skip


@pages.api_route("/configs", methods=GET_HEAD, response_class=HTMLResponse)
def configs_page(request: Request) -> HTMLResponse:
    return _page(request, "configs.html")


@pages.api_route("/static/plotly.min.js", methods=GET_HEAD)
def plotly_asset() -> FileResponse:
    # Listed before the /static mount, so this route wins; the file is versioned with the package.
    return FileResponse(
        plotly_js(),
        media_type="text/javascript; charset=utf-8",
        headers={"Cache-Control": "public, max-age=86400"},
    )


# ---------------------------------------------------------------------------------- mount


def mount(app: FastAPI) -> None:
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
