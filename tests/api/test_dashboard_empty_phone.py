"""The studies listing of an empty store on a phone: the table keeps its 900px minimum width inside its
scroll box, so its one row, the empty state's explanation, was centred out of view ("No studies yet.
Start" and the rest past the screen's edge)."""

from __future__ import annotations

import pytest

from tests.api.service import TOKENS
from tests.api.test_dashboard import browser, enter_token  # noqa: F401


@pytest.mark.browser
def test_the_empty_state_is_read_whole_on_a_phone(browser, module_server):  # noqa: F811
    srv = module_server
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=1, is_mobile=True, bypass_csp=True
    )  # wait_for_function evaluates a string
    page = context.new_page()
    page.goto(srv.url + "/")
    enter_token(page, TOKENS["read"])
    cell = page.locator("#studies tr.placeholder td")
    page.wait_for_function("document.querySelector('#studies tr.placeholder td').textContent.includes('No studies')",
                           timeout=15_000)  # fmt: skip
    text = page.evaluate("""() => {
        const td = document.querySelector('#studies tr.placeholder td');
        const range = document.createRange(); range.selectNodeContents(td);
        const box = range.getBoundingClientRect();
        return { left: box.left, right: box.right, width: window.innerWidth };
    }""")
    assert "autotuner tune" in cell.inner_text()
    assert text["left"] >= 0, text  # all of it on screen, no sideways scroll
    assert text["right"] <= text["width"], text
    context.close()
