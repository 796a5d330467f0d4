"""The REST API's documentation pages, /docs (Swagger UI) and /redoc, served whole from this host.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, and clusters are often offline: there the
dashboard's "API" link opened a blank page. The assets come from the installed `fastapi-offline` package
(only its files are used), as plotly.js comes from plotly's.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS = "/docs-assets"
TYPES = {  # the files a page may ask for, and how they are served
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}

router = APIRouter(include_in_schema=False)


def asset_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


@router.get("/docs", response_class=HTMLResponse)
def swagger_page(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url, title=f"{request.app.title}: REST API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon.png",
    )  # fmt: skip


@router.get("/redoc", response_class=HTMLResponse)
def redoc_page(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=request.app.openapi_url, title=f"{request.app.title}: REST API",
        redoc_js_url=f"{ASSETS}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS}/favicon.png",
        with_google_fonts=False,
    )  # fmt: skip


@router.get(ASSETS + "/{name}")
def asset(name: str) -> FileResponse:
    if name not in TYPES:
        raise HTTPException(404, f"no documentation asset {name!r}")
    return FileResponse(
        asset_dir() / name, media_type=TYPES[name], headers={"Cache-Control": "public, max-age=86400"}
    )


def install(app: FastAPI) -> None:
    """/docs and /redoc from local assets; the app must be made with docs_url=None, redoc_url=None."""
    app.include_router(router)
