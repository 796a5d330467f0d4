"""The web dashboard: server-rendered HTML shells and static assets.

The pages carry no data (always served, no token): their script reads everything from /v1 with the
bearer token the user pastes (the charts' data from `/v1/studies/{id}/insights`, the claim's words in
the study's `claim`), so the dashboard needs no session or cookie of its own. plotly.js comes from
the installed `plotly` package: clusters are often offline, so no CDN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.params import Path as PathParam
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from autotuner import __version__

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
StudyId = Annotated[int, PathParam(ge=1, le=2**31)]


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


# ---------------------------------------------------------------------------------- pages

pages = APIRouter(include_in_schema=False)


def _page(request: Request, template: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, template, {"version": __version__, "page": template.removesuffix(".html"), **context}
    )


@pages.get("/", response_class=HTMLResponse)
def studies_page(request: Request) -> HTMLResponse:
    return _page(request, "studies.html")


@pages.get("/studies/{study_id}", response_class=HTMLResponse)
def study_page(request: Request, study_id: StudyId) -> HTMLResponse:
    return _page(request, "study.html", study_id=study_id)


@pages.get("/configs", response_class=HTMLResponse)
def configs_page(request: Request) -> HTMLResponse:
    return _page(request, "configs.html")


@pages.get("/static/plotly.min.js")
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
