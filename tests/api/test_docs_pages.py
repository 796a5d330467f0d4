"""The REST API's documentation pages work on an offline cluster: /docs and /redoc load every asset from
the service itself (FastAPI's own pages load them from a CDN: offline, the dashboard's "API" link opened
a blank page, `SwaggerUIBundle is not defined`)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from autotuner.store import Store
from tests.api.test_dashboard import browser, finished  # noqa: F401 - fixtures

WAIT_MS = 30_000


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('docs') / 'autotuner.db'}")
    with TestClient(create_app(Settings(database_url=store.url, scheduler=False), store=store)) as c:
        yield c
    store.dispose()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_a_docs_page_asks_nothing_of_another_host(client, page):
    html = client.get(page)
    assert html.status_code == 200
    wanted = re.findall(r"""(?:src|href)=["']([^"']+)""", html.text) + re.findall(
        r"url: *'([^']+)'", html.text
    )
    assert wanted, html.text
    assert [u for u in wanted if not u.startswith("/")] == []
    for url in wanted:
        answer = client.get(url)
        assert answer.status_code == 200, url
        assert len(answer.content) > 100, url


def test_only_the_known_assets_are_served(client):
    assert client.get("/docs-assets/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert (
        client.get("/docs-assets/swagger-ui-bundle.js").headers["content-type"].startswith("text/javascript")
    )
    missing = client.get("/docs-assets/..%2f..%2fcore.py")
    assert missing.status_code == 404
    assert client.get("/docs-assets/core.py").status_code == 404


@pytest.mark.browser
@pytest.mark.parametrize(("page", "rendered"), [("/docs", ".opblock"), ("/redoc", "[data-section-id]")])
def test_the_docs_render_with_no_network_beyond_the_service(browser, finished, page, rendered):  # noqa: F811
    srv = finished[0]
    context = browser.new_context()
    elsewhere: list[str] = []

    def only_the_service(route):
        if route.request.url.startswith(srv.url):
            route.continue_()
        else:  # an offline cluster: nothing beyond the service answers
            if route.request.resource_type != "image":  # ReDoc's "powered by" logo may be missing
                elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_service)
    errors: list[str] = []
    tab = context.new_page()
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        tab.goto(srv.url + page)
        tab.wait_for_selector(rendered, timeout=WAIT_MS)
        assert "/v1/studies" in tab.inner_text("body")
        assert elsewhere == []
        assert errors == []
    finally:
        context.close()
