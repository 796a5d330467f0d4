"""Pages while the service answers 503 (its store away): the banner said so, but "Loading…" stayed
under it for ever, in the studies list, the trials table, the failed launches and the configs page, and
the study page's charts were blank boxes. What was never loaded says it was not, and why."""

from __future__ import annotations

import json

import pytest

from tests.api.test_dashboard import browser, open_page  # noqa: F401

AWAY = json.dumps({"detail": "the store did not answer: connection refused"})


@pytest.mark.browser
def test_what_was_not_loaded_says_so_under_a_503(browser, module_server):  # noqa: F811
    srv = module_server
    errors: list[str] = []
    page = open_page(browser, errors)
    page.route("**/v1/**", lambda route: route.fulfill(status=503, body=AWAY, content_type="application/json",
                                                        headers={"Retry-After": "5"}))  # fmt: skip
    for path, placeholders in (("/", ["#studies tbody td"]), ("/configs", ["#configs p"]),
                               ("/studies/1", ["#trials tbody td", "#failed-list p"])):  # fmt: skip
        page.goto(srv.url + path)
        page.wait_for_selector("#page-error:not([hidden])", timeout=15_000)
        assert "503" in page.inner_text("#page-error")
        for selector in placeholders:
            said = page.inner_text(selector)
            assert "Loading" not in said, (path, said)
            assert said.startswith("Not loaded: the service answered 503"), (path, said)
        if path.startswith("/studies/"):
            for chart in ("chart-history", "chart-matrix", "chart-speedup", "chart-breakdown"):
                assert page.inner_text(f"#{chart} .chart-empty").startswith("Not loaded"), chart
    page.context.close()
